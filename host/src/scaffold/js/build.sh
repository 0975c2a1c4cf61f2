#!/usr/bin/env bash
# Builds plugin.js into @NAME@.wasm (installs componentize-js on first use). One command: ./build.sh
set -euo pipefail
cd "$(dirname "$0")"
[ -d node_modules/@bytecodealliance/componentize-js ] || npm install --ignore-scripts --no-audit --no-fund --loglevel=error
node build.mjs
