#!/usr/bin/env bash
# Makes the release archive: target/dist/map-gateway-VERSION-x86_64-linux-gnu.tar.gz
# holding the gateway (needs only glibc), the standard plugins with their
# defaults and signatures, the key they are signed with, a configuration that
# serves them, the Containerfile, README and licence, SHA256SUMS and a
# software bill of materials (CycloneDX JSON). Prints the archive's path.
#
#   scripts/release.sh                 # an optimised build (about 10 minutes on two cores)
#   scripts/release.sh --debug         # the test build instead (the tests' container image)
#   scripts/release.sh --key FILE      # sign the plugins with this key (`plugin keygen`)
#   scripts/release.sh --out DIR       # write into DIR instead of target/dist
#
# Without --key the plugins are signed with a key made once in
# target/release-key.key: pass the project's release key for a real release.
set -euo pipefail
cd "$(dirname "$0")/.."

profile=release
key=""
out=target/dist
while [ $# -gt 0 ]; do
    case "$1" in
        --debug) profile=debug; shift ;;
        --key) key="$2"; shift 2 ;;
        --out) out="$2"; shift 2 ;;
        *) echo "usage: scripts/release.sh [--debug] [--key FILE] [--out DIR]" >&2; exit 2 ;;
    esac
done

version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
commit=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
if [ "$commit" != unknown ] && [ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]; then
    commit="$commit-modified"
fi
name="map-gateway-$version-x86_64-linux-gnu"

echo "==> building the gateway ($profile, commit $commit)" >&2
cargo_args=(--locked -p map-gateway)
[ "$profile" = release ] && cargo_args+=(--release)
MAP_GATEWAY_COMMIT="$commit" cargo build "${cargo_args[@]}" >&2
echo "==> building the standard plugins" >&2
scripts/build-plugins.sh >&2
bin="target/$profile/map-gateway"

stage="$out/$name"
rm -rf "$stage" "$out/$name.tar.gz"
# data/: the quick start's data folder, and the image's volume (empty).
mkdir -p "$stage/bin" "$stage/plugins" "$stage/data"
# Line tables and symbols are for debugging: the archive carries none.
strip -o "$stage/bin/map-gateway" "$bin"

echo "==> signing the standard plugins" >&2
for plugin in plugins/dist/*.wasm; do
    cp "$plugin" "$stage/plugins/"
    defaults="${plugin%.wasm}.toml"
    [ -f "$defaults" ] && cp "$defaults" "$stage/plugins/"
done
if [ -z "$key" ]; then
    key=target/release-key.key
    [ -f "$key" ] || "$bin" plugin keygen --out target/release-key >&2
fi
"$bin" plugin sign "$stage/plugins" --key "$key" >&2
# `plugin keygen` writes the public key beside the secret one.
signer=$(cat "${key%.key}.pub")
echo "$signer" >"$stage/plugin-signers.pub"

sed "s|@SIGNER@|$signer|" scripts/release/gateway.toml >"$stage/gateway.toml"
sed "s|@SIGNER@|$signer|" scripts/release/container.toml >"$stage/container.toml"
cp Containerfile README.md LICENSE CHANGELOG.md "$stage/"
cp scripts/release/README.txt "$stage/INSTALL.txt"

echo "==> software bill of materials" >&2
python3 scripts/release/sbom.py "$version" "$commit" >"$stage/sbom.cdx.json"
(cd "$stage" && find . -type f ! -name SHA256SUMS -printf '%P\n' | LC_ALL=C sort | xargs sha256sum >SHA256SUMS)

tar -C "$out" --owner=0 --group=0 --numeric-owner -czf "$out/$name.tar.gz" "$name"
(cd "$out" && sha256sum "$name.tar.gz" >"$name.tar.gz.sha256")
echo "$out/$name.tar.gz"
