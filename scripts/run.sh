#!/usr/bin/env bash
# Builds the gateway and its standard plugins, then runs it on the embedded
# defaults: ws://127.0.0.1:4700, SQLite under ./data, tenant "default".
# Extra arguments go to `map-gateway serve` (e.g. --config gateway.toml).
#
# It builds the same profile as scripts/test.sh (dependencies optimised at
# opt-level 1, the gateway's own crate not), so the two commands share one build. For
# production and benchmarks build `cargo build --release -p map-gateway`.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh
# The plugins build beside the gateway (another target folder, so another
# cargo lock): the gateway's build leaves a core idle for long stretches.
mkdir -p target
echo "==> building the standard plugins (log: target/build-plugins.log) and the gateway"
scripts/build-plugins.sh >target/build-plugins.log 2>&1 &
plugins=$!
cargo build --locked -p map-gateway
if ! wait "$plugins"; then
    cat target/build-plugins.log >&2
    echo "building the plugins failed (above)" >&2
    exit 1
fi
echo "==> starting $PWD/target/debug/map-gateway (scripts/install.sh puts it on PATH for the book's map-gateway commands)"
exec target/debug/map-gateway serve "$@"
