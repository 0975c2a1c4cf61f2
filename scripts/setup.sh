#!/usr/bin/env bash
# Installs what the build needs beyond rustup and cargo: the wasm32-wasip2
# target for plugins; with --tests, the npm packages of the interop suite,
# the tests' Python clients (grpcio, the A2A SDK a2a-sdk, kubernetes-validate;
# target/pyenv, target/a2a-pyenv, target/k8s-pyenv), Chromium for the
# dashboard's browser test, Debian's docker-registry for the OCI tests,
# Podman, runc and mmdebstrap for the container image's tests, the C audit
# example's tools (clang, wasi-libc, wit-bindgen, wasm-tools), and mdBook for
# the book. What is not Debian's or npm's is made once per machine, in
# ${XDG_CACHE_HOME:-~/.cache}/map-gateway: the venvs (target/ links to them)
# and the tools built with cargo (tools/bin, which test.sh puts on PATH).
set -euo pipefail
cd "$(dirname "$0")/.."

if ! rustup target list --installed 2>/dev/null | grep -qx wasm32-wasip2; then
    echo "==> installing the wasm32-wasip2 target"
    rustup target add wasm32-wasip2
fi

if [ "${1:-}" = "--tests" ]; then
    echo "==> installing the interop suite's npm packages"
    (cd tests/interop && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error)
    # Python clients of the tests, each in a venv of its own made once per
    # machine for each version of its requirements file (in the tools cache,
    # keyed by the file's hash) and linked into target/ under a fixed name.
    venv() { # NAME REQUIREMENTS WHAT
        local name=$1 requirements=$2 what=$3 dir
        dir="$cache/venvs/$name-$(sha256sum "$requirements" | cut -c1-16)"
        if [ ! -x "$dir/bin/python" ] || ! cmp -s "$requirements" "$dir/requirements.txt"; then
            echo "==> installing $what ($dir)"
            rm -rf "$dir"
            if ! python3 -m venv "$dir" 2>/dev/null; then
                # Debian's python3 keeps venv in a package of its own.
                apt-get install -y -q python3-venv >/dev/null || sudo apt-get install -y -q python3-venv >/dev/null
                python3 -m venv "$dir"
            fi
            "$dir/bin/pip" install --quiet --disable-pip-version-check -r "$requirements"
            cp "$requirements" "$dir/requirements.txt"
        fi
        mkdir -p target
        if [ "$(readlink "target/$name" 2>/dev/null)" != "$dir" ]; then
            rm -rf "target/$name"
            ln -s "$dir" "target/$name"
        fi
    }
    cache="${XDG_CACHE_HOME:-$HOME/.cache}/map-gateway"
    venv pyenv tests/grpc/requirements.txt "the Python gRPC client (grpcio)"
    # The A2A bridge's tests drive it with the official A2A SDK (a2a-sdk).
    venv a2a-pyenv tests/a2a/requirements.txt "the A2A SDK for Python"
    # The Kubernetes manifests (deploy/kubernetes) are checked against the
    # API's schemas, which kubernetes-validate carries.
    venv k8s-pyenv tests/deploy/requirements.txt "kubernetes-validate"
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
