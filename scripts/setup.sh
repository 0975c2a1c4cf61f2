#!/usr/bin/env bash
# Installs what the build needs beyond rustup and cargo: the wasm32-wasip2
# target for plugins; with --tests, the npm packages of the interop suite, the
# Python gRPC client (grpcio) in target/pyenv, and Chromium for the dashboard's
# browser test.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! rustup target list --installed 2>/dev/null | grep -qx wasm32-wasip2; then
    echo "==> installing the wasm32-wasip2 target"
    rustup target add wasm32-wasip2
fi

if [ "${1:-}" = "--tests" ]; then
    echo "==> installing the interop suite's npm packages"
    (cd tests/interop && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error)
    if ! cmp -s tests/grpc/requirements.txt target/pyenv/requirements.txt; then
        echo "==> installing the Python gRPC client (target/pyenv)"
        rm -rf target/pyenv
        if ! python3 -m venv target/pyenv 2>/dev/null; then
            # Debian's python3 keeps venv in a package of its own.
            apt-get install -y -q python3-venv >/dev/null || sudo apt-get install -y -q python3-venv >/dev/null
            python3 -m venv target/pyenv
        fi
        target/pyenv/bin/pip install --quiet --disable-pip-version-check -r tests/grpc/requirements.txt
        cp tests/grpc/requirements.txt target/pyenv/requirements.txt
    fi
    if [ ! -x /usr/bin/chromium ]; then
        echo "==> installing Chromium (the dashboard's browser test)"
        apt_install() {
            apt-get install -y -q "$@" >/dev/null || sudo apt-get install -y -q "$@" >/dev/null
        }
        apt_update() {
            apt-get update -q >/dev/null || sudo apt-get update -q >/dev/null
        }
        # Without package lists (a fresh system), update them and try again.
        apt_install chromium chromium-driver || { apt_update && apt_install chromium chromium-driver; }
    fi
fi
