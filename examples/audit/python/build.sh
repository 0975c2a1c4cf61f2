#!/usr/bin/env bash
# Builds the Python audit extension into audit.wasm next to this script, on
# the plugin SDK in <repo>/plugins/sdk-python, with componentize-py from a
# venv at <repo>/target/componentize-py (made, or remade when
# requirements.txt changed). Works from any directory.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../../.." && pwd)"
venv="$repo/target/componentize-py"
sdk="$repo/plugins/sdk-python"

if ! cmp -s "$here/requirements.txt" "$venv/requirements.txt"; then
    echo "==> installing componentize-py ($venv)"
    rm -rf "$venv"
    mkdir -p "$repo/target"
    if ! python3 -m venv "$venv" 2>/dev/null; then
        # Debian's python3 keeps venv in a package of its own.
        rm -rf "$venv"
        apt-get install -y -q python3-venv >/dev/null || sudo apt-get install -y -q python3-venv >/dev/null
        python3 -m venv "$venv"
    fi
    "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$here/requirements.txt"
    cp "$here/requirements.txt" "$venv/requirements.txt"
fi

echo "==> componentize-py: $here/app.py -> audit.wasm"
start=$(date +%s.%N)
cd "$here"
"$venv/bin/componentize-py" -d "$repo/wit" -w intercepting-extension componentize app \
    -p "$here" -p "$sdk" -o "$here/audit.wasm"
# componentize-py imports the sources with its own Python, which leaves bytecode behind.
rm -rf "$here/__pycache__" "$sdk/map_plugin/__pycache__"
end=$(date +%s.%N)
size=$(wc -c < "$here/audit.wasm")
awk -v s="$start" -v e="$end" -v b="$size" -v f="$here/audit.wasm" \
    'BEGIN { printf "built %s: %.1f MB (%d bytes) in %.1f s\n", f, b / 1048576, b, e - s }'
