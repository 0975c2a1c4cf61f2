#!/usr/bin/env bash
# Builds app.py and the SDK in map_plugin/ into @NAME@.wasm with
# componentize-py, installed in .venv (made on first use). One command: ./build.sh
set -euo pipefail
cd "$(dirname "$0")"
if [ ! -x .venv/bin/componentize-py ]; then
    python3 -m venv .venv
    .venv/bin/pip install --quiet --disable-pip-version-check componentize-py==0.25.1
fi
.venv/bin/componentize-py -d wit -w extension componentize app -o @NAME@.wasm
rm -rf __pycache__ map_plugin/__pycache__
echo "built $(pwd)/@NAME@.wasm ($(($(wc -c < @NAME@.wasm) / 1048576)) MiB)"
