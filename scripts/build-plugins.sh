#!/usr/bin/env bash
# Builds the Wasm components: the standard plugins into plugins/dist/, and
# (with --fixtures) the test fixtures into target/fixtures/.
set -euo pipefail
cd "$(dirname "$0")/.."
guests=target/guests

build() { # workspace-dir [cargo args...]
    local dir=$1; shift
    # Cargo shows its progress: the first build takes minutes.
    (cd "$dir" && cargo build --release --target wasm32-wasip2 --target-dir "$OLDPWD/$guests" "$@")
}

if [ -f plugins/Cargo.toml ]; then
    echo "==> building the standard plugins"
    build plugins
    mkdir -p plugins/dist
    for crate in $(sed -n 's/^members = \[\(.*\)\]/\1/p' plugins/Cargo.toml | tr -d '" ' | tr ',' ' '); do
        # Components are cdylibs; library crates (the SDK) have no .wasm.
        grep -q '"cdylib"' "plugins/$crate/Cargo.toml" || continue
        cp "$guests/wasm32-wasip2/release/${crate//-/_}.wasm" "plugins/dist/$crate.wasm"
        # Settings the plugin needs when loaded from plugin_dir (e.g. mode = "singleton").
        if [ -f "plugins/$crate/plugin.toml" ]; then
            cp "plugins/$crate/plugin.toml" "plugins/dist/$crate.toml"
        fi
    done
fi

if [ "${1:-}" = "--fixtures" ]; then
    echo "==> building the test fixtures"
    mkdir -p target/fixtures
    build tests/fixtures
    cp "$guests/wasm32-wasip2/release/misbehave.wasm" target/fixtures/misbehave.wasm
    for fixture in webhook legacy stateful; do
        cp "$guests/wasm32-wasip2/release/$fixture.wasm" "target/fixtures/$fixture.wasm"
    done
    cp "$guests/wasm32-wasip2/release/echo.wasm" target/fixtures/echo-v1.wasm
    cp "$guests/wasm32-wasip2/release/streamer.wasm" target/fixtures/streamer-v1.wasm
    build tests/fixtures -p echo -p streamer --features echo/v2,streamer/v2
    cp "$guests/wasm32-wasip2/release/echo.wasm" target/fixtures/echo-v2.wasm
    cp "$guests/wasm32-wasip2/release/streamer.wasm" target/fixtures/streamer-v2.wasm
    # Leave echo.wasm and streamer.wasm as v1 so incremental builds stay consistent.
    build tests/fixtures -p echo -p streamer
    echo "==> building the example JavaScript plugin (examples/plugin-js/notes.wasm)"
    (cd examples/plugin-js && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error && node build.mjs)
    echo "==> building the audit example in Rust, Python, JavaScript and C (examples/audit)"
    build examples/audit/rust
    examples/audit/python/build.sh
    (cd examples/audit/js && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error && node build.mjs)
    examples/audit/c/build.sh
fi
