#!/usr/bin/env bash
# Puts `map-gateway` on PATH: builds it as run.sh does (so after run.sh it
# builds nothing) and links it into a folder on PATH, by default cargo's
# own bin folder (where rustup put `cargo`, so it is on PATH already).
#
#   scripts/install.sh              # link into ${CARGO_HOME:-~/.cargo}/bin
#   scripts/install.sh --bin DIR    # link into DIR instead
#   scripts/install.sh --release    # an optimised build, copied (not linked)
#
# The link follows the checkout: a later run.sh or build updates it, and
# `map-gateway plugin new` finds the plugin SDK in this checkout.
set -euo pipefail
cd "$(dirname "$0")/.."

bin_dir="${CARGO_HOME:-$HOME/.cargo}/bin"
release=0
while [ $# -gt 0 ]; do
    case "$1" in
        --bin) bin_dir="$2"; shift 2 ;;
        --release) release=1; shift ;;
        *) echo "usage: scripts/install.sh [--bin DIR] [--release]" >&2; exit 2 ;;
    esac
done

scripts/setup.sh
mkdir -p "$bin_dir"
target_dir="$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')"
if [ "$release" = 1 ]; then
    echo "==> building the gateway (release)"
    cargo build --locked --release -p map-gateway
    # A copy: a release build is meant to outlive the checkout's target folder.
    install -m 0755 "$target_dir/release/map-gateway" "$bin_dir/map-gateway"
else
    echo "==> building the gateway"
    cargo build --locked -p map-gateway
    ln -sf "$target_dir/debug/map-gateway" "$bin_dir/map-gateway"
fi
echo "==> installed $bin_dir/map-gateway"
case ":$PATH:" in
    *":$bin_dir:"*) map-gateway --version ;;
    *) echo "note: $bin_dir is not on PATH; add it: export PATH=\"$bin_dir:\$PATH\"" ;;
esac
