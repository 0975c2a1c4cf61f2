#!/usr/bin/env bash
# Installs what the build needs beyond rustup and cargo: the wasm32-wasip2
# target for plugins; with --tests, the npm packages of the interop suite, the
# Python gRPC client (grpcio) in target/pyenv, the A2A SDK (a2a-sdk) in
# target/a2a-pyenv, kubernetes-validate in target/k8s-pyenv, Chromium for the dashboard's
# browser test, Debian's docker-registry for the OCI tests, Podman, runc and
# mmdebstrap for the container image's tests, the C audit
# example's tools (clang, wasi-libc, wit-bindgen, wasm-tools), and mdBook for
# the book; the tools built with cargo once per machine, in
# ${XDG_CACHE_HOME:-~/.cache}/map-gateway/tools/bin (test.sh puts it on PATH).
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
    # The A2A bridge's tests drive it with the official A2A SDK (a2a-sdk), in a venv of its own.
    if ! cmp -s tests/a2a/requirements.txt target/a2a-pyenv/requirements.txt; then
        echo "==> installing the A2A SDK for Python (target/a2a-pyenv)"
        rm -rf target/a2a-pyenv
        python3 -m venv target/a2a-pyenv 2>/dev/null || {
            apt-get install -y -q python3-venv >/dev/null || sudo apt-get install -y -q python3-venv >/dev/null
            python3 -m venv target/a2a-pyenv
        }
        target/a2a-pyenv/bin/pip install --quiet --disable-pip-version-check -r tests/a2a/requirements.txt
        cp tests/a2a/requirements.txt target/a2a-pyenv/requirements.txt
    fi
    # The Kubernetes manifests (deploy/kubernetes) are checked against the
    # API's schemas, which kubernetes-validate carries, in a venv of its own.
    if ! cmp -s tests/deploy/requirements.txt target/k8s-pyenv/requirements.txt; then
        echo "==> installing kubernetes-validate (target/k8s-pyenv)"
        rm -rf target/k8s-pyenv
        python3 -m venv target/k8s-pyenv
        target/k8s-pyenv/bin/pip install --quiet --disable-pip-version-check -r tests/deploy/requirements.txt
        cp tests/deploy/requirements.txt target/k8s-pyenv/requirements.txt
    fi
    apt_install() {
        apt-get install -y -q "$@" >/dev/null || sudo apt-get install -y -q "$@" >/dev/null
    }
    apt_update() {
        apt-get update -q >/dev/null || sudo apt-get update -q >/dev/null
    }
    if [ ! -x /usr/bin/chromium ]; then
        echo "==> installing Chromium (the dashboard's browser test)"
        # Without package lists (a fresh system), update them and try again.
        apt_install chromium chromium-driver || { apt_update && apt_install chromium chromium-driver; }
    fi
    if [ ! -x /usr/bin/docker-registry ]; then
        echo "==> installing docker-registry (the OCI registry the plugin-distribution tests push to)"
        apt_install docker-registry || { apt_update && apt_install docker-registry; }
    fi
    # The container tests (tests/interop/container.test.mjs): Podman with runc,
    # and mmdebstrap, which makes their base image from Debian's packages.
    container_packages=(podman runc mmdebstrap)
    for package in "${container_packages[@]}"; do
        if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q ' installed$'; then
            echo "==> installing podman, runc and mmdebstrap (the container tests)"
            apt_install --no-install-recommends "${container_packages[@]}" || { apt_update && apt_install --no-install-recommends "${container_packages[@]}"; }
            break
        fi
    done
    # The C audit example (examples/audit/c): clang and wasm-ld for wasm32,
    # wasi-libc, and the compiler-rt builtins clang links into every wasm32 module.
    c_packages=(clang-14 lld-14 wasi-libc libclang-rt-14-dev-wasm32)
    for package in "${c_packages[@]}"; do
        if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q ' installed$'; then
            echo "==> installing clang, lld and wasi-libc (the C audit example)"
            apt_install "${c_packages[@]}" || { apt_update && apt_install "${c_packages[@]}"; }
            break
        fi
    done
    # Tools built with cargo, pinned, with only the features the build uses:
    # wit-bindgen (C bindings of wit/), wasm-tools (core module to component)
    # and mdBook (test.sh builds the book in docs/), once per machine outside
    # the checkout, so every clone shares them.
    cargo_tool() { # root crate version binary [cargo install args...]
        local root=$1 crate=$2 version=$3 bin=$4
        shift 4
        if ! "$root/bin/$bin" --version 2>/dev/null | grep -qF -e " $version" -e " v$version"; then
            echo "==> installing $crate $version ($root)"
            cargo install --locked --root "$root" "$crate@$version" "$@"
        fi
    }
    tools="${XDG_CACHE_HOME:-$HOME/.cache}/map-gateway/tools"
    cargo_tool "$tools" wit-bindgen-cli 0.57.1 wit-bindgen --no-default-features --features c
    cargo_tool "$tools" wasm-tools 1.258.3 wasm-tools --no-default-features --features component,validate,print
    # `mdbook build` only: no serve or watch (a web server and a file watcher).
    cargo_tool "$tools" mdbook 0.5.4 mdbook --no-default-features --features search
fi
