#!/usr/bin/env bash
# Builds app.py into @NAME@.wasm with componentize-py (installed in .venv on
# first use) and the plugin SDK (the package map-gateway-plugin-sdk: its
# module map_plugin in the folder below, installed on first use). One command: ./build.sh
set -euo pipefail
cd "$(dirname "$0")"
sdk=@SDK_PYTHON_PATH@
if [ ! -x .venv/bin/componentize-py ]; then
    python3 -m venv .venv
    .venv/bin/pip install --quiet --disable-pip-version-check componentize-py==0.25.1
fi
if [ ! -d "$sdk/map_plugin" ]; then
    .venv/bin/pip install --quiet --disable-pip-version-check --no-deps --target "$sdk" @SDK_PYTHON@
fi
.venv/bin/componentize-py -d wit -w extension componentize app -p . -p "$sdk" -o @NAME@.wasm
rm -rf __pycache__
echo "built $(pwd)/@NAME@.wasm ($(($(wc -c < @NAME@.wasm) / 1048576)) MiB)"
