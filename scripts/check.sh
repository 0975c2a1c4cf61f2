#!/usr/bin/env bash
# The quick loop beside the full test command: formatting, clippy (warnings
# are errors) on the host's and the plugins' workspaces, and the unit tests
# of the host's crates that need no built gateway (nor PostgreSQL or NATS).
# A minute or two on a tree already built; test.sh runs everything.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "==> format"
cargo fmt --all -- --check
(cd plugins && cargo fmt --all -- --check)

echo "==> clippy: the host"
cargo clippy --locked --workspace --all-targets -- -D warnings
echo "==> clippy: the plugins and their SDK"
(cd plugins && cargo clippy --locked --workspace --all-targets --target-dir ../target/plugins-host -- -D warnings)

echo "==> unit tests: protocol, config, observe, core"
cargo test --locked -p map-protocol -p map-config -p map-observe -p map-core
