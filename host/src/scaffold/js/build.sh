#!/usr/bin/env bash
# Builds plugin.js into @NAME@.wasm (installs componentize-js and esbuild on first use). One command: ./build.sh
set -euo pipefail
cd "$(dirname "$0")"
if [ ! -d node_modules/@bytecodealliance/componentize-js ] || [ ! -d node_modules/esbuild ] || [ ! -e node_modules/@map-gateway/plugin-sdk ]; then
  npm install --ignore-scripts --no-audit --no-fund --loglevel=error
fi
node build.mjs
