#!/usr/bin/env bash
# Packages the plugin SDKs as their registries take them, into one folder
# (default target/sdk-packages), and prints it:
#
#   map-protocol-VERSION.crate, map-plugin-sdk-VERSION.crate   crates.io (`cargo package`, verified)
#                                                              and each unpacked beside it
#   map-gateway-plugin-sdk-VERSION.tgz                          npm (`npm pack`; @map-gateway/plugin-sdk)
#   map_gateway_plugin_sdk-VERSION-py3-none-any.whl             PyPI (`pip wheel`; imported as map_plugin)
#
# `map-gateway plugin new NAME --sdk FOLDER` makes a project that builds on them.
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-target/sdk-packages}"
rm -rf "$out"
mkdir -p "$out"
out="$(cd "$out" && pwd)"

echo "==> the Rust SDK and the crate it depends on (map-protocol)" >&2
cargo package --locked --allow-dirty -p map-protocol >&2
cp target/package/map-protocol-*.crate "$out/"
# map-protocol is not on the registry before it is published: the SDK's
# verification builds on the package just made. That resolution must not
# stay in the plugins' lock file.
cp plugins/Cargo.lock "$out/plugins.lock"
protocol=$(ls -d "$PWD"/target/package/map-protocol-*/ | head -1)
(cd plugins && cargo package --allow-dirty -p map-plugin-sdk --config "patch.crates-io.map-protocol.path='$protocol'") >&2 || {
    mv "$out/plugins.lock" plugins/Cargo.lock
    exit 1
}
mv "$out/plugins.lock" plugins/Cargo.lock
cp plugins/target/package/map-plugin-sdk-*.crate "$out/"
for crate in "$out"/*.crate; do
    tar -xzf "$crate" -C "$out"
done

echo "==> the JavaScript SDK" >&2
(cd plugins/sdk-js && npm pack --silent --pack-destination "$out") >&2

echo "==> the Python SDK" >&2
python3 -m pip wheel --quiet --disable-pip-version-check --no-deps -w "$out" plugins/sdk-python >&2
rm -rf plugins/sdk-python/build plugins/sdk-python/*.egg-info
echo "$out"
