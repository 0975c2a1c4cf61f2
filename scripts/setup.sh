#!/usr/bin/env bash
# Installs what the build needs beyond rustup and cargo: the wasm32-wasip2
# target for plugins, and the npm packages of the interop suite.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! rustup target list --installed 2>/dev/null | grep -qx wasm32-wasip2; then
    echo "==> installing the wasm32-wasip2 target"
    rustup target add wasm32-wasip2
fi

if [ "${1:-}" = "--tests" ]; then
    echo "==> installing the interop suite's npm packages"
    (cd tests/interop && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error)
fi
