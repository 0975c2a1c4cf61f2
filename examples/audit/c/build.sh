#!/usr/bin/env bash
# Builds the C audit extension into audit.wasm next to this script. Works
# from any directory. Tools (scripts/setup.sh --tests installs them):
#   clang-14, wasm-ld, wasi-libc   Debian: clang-14 lld-14 wasi-libc libclang-rt-14-dev-wasm32
#   wit-bindgen 0.57.1             crates.io wit-bindgen-cli, in ~/.cache/map-gateway/tools
#   wasm-tools 1.258.3             crates.io wasm-tools, in ~/.cache/map-gateway/tools
# Each may be overridden: CC=..., WIT_BINDGEN=..., WASM_TOOLS=...
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../../.." && pwd)"
tools="${XDG_CACHE_HOME:-$HOME/.cache}/map-gateway/tools/bin"
out="$repo/target/c-audit" # generated bindings and objects
cc="${CC:-clang-14}"
wit_bindgen="${WIT_BINDGEN:-$tools/wit-bindgen}"
wasm_tools="${WASM_TOOLS:-$tools/wasm-tools}"

for tool in "$cc" "$wit_bindgen" "$wasm_tools"; do
    if ! command -v "$tool" >/dev/null; then
        echo "build.sh: $tool is missing: run scripts/setup.sh --tests" >&2
        exit 1
    fi
done

echo "==> C audit: $here -> audit.wasm"
start=$(date +%s.%N)
rm -rf "$out"
mkdir -p "$out"

# 1. C bindings of the world: intercepting_extension.{h,c} (types, import
#    wrappers, export glue) and intercepting_extension_component_type.o,
#    which carries the world's type into the module for step 4.
if ! log=$("$wit_bindgen" c "$repo/wit" --world intercepting-extension --out-dir "$out" 2>&1); then
    echo "$log" >&2
    exit 1
fi

# 2. Compile: a reactor (a library with exports, no main). -mexec-model=reactor
#    links wasi-libc's crt1-reactor.o, whose `_initialize` runs constructors.
cflags=(--target=wasm32-wasi -O2 -std=c11 -Wall -Wextra -Werror -I"$out" -I"$here")
"$cc" "${cflags[@]}" -Wno-unused-parameter -c "$out/intercepting_extension.c" -o "$out/bindings.o"
"$cc" "${cflags[@]}" -c "$here/json.c" -o "$out/json.o"
"$cc" "${cflags[@]}" -c "$here/call.c" -o "$out/call.o"
"$cc" "${cflags[@]}" -c "$here/audit.c" -o "$out/audit.o"

# 3. Link a core module. The plugin uses only wasi-libc's memory and string
#    functions, none of which import WASI, so the module needs no preview1
#    adapter: the check below keeps it that way.
"$cc" --target=wasm32-wasi -mexec-model=reactor -Wl,--strip-all -o "$out/audit.core.wasm" \
    "$out/audit.o" "$out/call.o" "$out/json.o" "$out/bindings.o" "$out/intercepting_extension_component_type.o"
if "$wasm_tools" print "$out/audit.core.wasm" | grep -q '(import "wasi_snapshot_preview1"'; then
    echo "build.sh: the module imports wasi_snapshot_preview1 (a libc call that needs WASI crept in):" >&2
    "$wasm_tools" print "$out/audit.core.wasm" | grep '(import "wasi_snapshot_preview1"' >&2
    exit 1
fi

# 4. Wrap the core module as a component of the world embedded in step 1.
"$wasm_tools" component new "$out/audit.core.wasm" -o "$here/audit.wasm"
"$wasm_tools" validate "$here/audit.wasm"

end=$(date +%s.%N)
size=$(wc -c < "$here/audit.wasm")
awk -v s="$start" -v e="$end" -v b="$size" -v f="$here/audit.wasm" \
    'BEGIN { printf "built %s: %.1f KB (%d bytes) in %.1f s\n", f, b / 1024, b, e - s }'
