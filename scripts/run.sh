#!/usr/bin/env bash
# Builds the gateway and its standard plugins, then runs it on the embedded
# defaults: ws://127.0.0.1:4700, SQLite under ./data, tenant "default".
# Extra arguments go to `map-gateway serve` (e.g. --config gateway.toml).
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh
scripts/build-plugins.sh
cargo build --locked --release -p map-gateway
exec target/release/map-gateway serve "$@"
