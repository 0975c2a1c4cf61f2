#!/usr/bin/env bash
# Builds the gateway and its standard plugins, then runs it on the embedded
# defaults: ws://127.0.0.1:4700, SQLite under ./data, tenant "default".
# Extra arguments go to `map-gateway serve` (e.g. --config gateway.toml).
#
# It builds the same profile as scripts/test.sh (dependencies optimised, the
# gateway's own crate not), so the two commands share one build. For
# production and benchmarks build `cargo build --release -p map-gateway`.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh
scripts/build-plugins.sh
echo "==> building the gateway"
cargo build --locked -p map-gateway
echo "==> starting $PWD/target/debug/map-gateway (the README's map-gateway commands: export PATH=\"$PWD/target/debug:\$PATH\")"
exec target/debug/map-gateway serve "$@"
