#!/usr/bin/env bash
# Builds the container image from a release folder (scripts/release.sh) and
# the Containerfile in it, with Podman (or Docker when there is no Podman).
# Prints the image's name.
#
#   scripts/image.sh                         # release build, base debian:bookworm-slim from the registry
#   scripts/image.sh --debian-base           # base made from Debian's packages (mmdebstrap), no registry
#   scripts/image.sh --debug                 # the test build of the gateway instead of the release build
#   scripts/image.sh --tag NAME              # default map-gateway:VERSION
#
# --debian-base makes the base once per machine: ${XDG_CACHE_HOME:-~/.cache}/map-gateway/container-base/
# keeps its tarball, imported as localhost/map-gateway-base:bookworm.
set -euo pipefail
cd "$(dirname "$0")/.."

release_args=()
base=""
tag=""
while [ $# -gt 0 ]; do
    case "$1" in
        --debug) release_args+=(--debug); shift ;;
        --debian-base) base=debian; shift ;;
        --base) base="$2"; shift 2 ;;
        --tag) tag="$2"; shift 2 ;;
        *) echo "usage: scripts/image.sh [--debug] [--debian-base | --base IMAGE] [--tag NAME]" >&2; exit 2 ;;
    esac
done

engine=podman
command -v podman >/dev/null || engine=docker
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
tag="${tag:-map-gateway:$version}"

if [ "$base" = debian ]; then
    base=localhost/map-gateway-base:bookworm
    if ! "$engine" image exists "$base" 2>/dev/null && ! "$engine" image inspect "$base" >/dev/null 2>&1; then
        cache="${XDG_CACHE_HOME:-$HOME/.cache}/map-gateway/container-base"
        if [ ! -s "$cache/bookworm.tar" ]; then
            echo "==> making the base image from Debian's packages ($cache/bookworm.tar)" >&2
            mkdir -p "$cache"
            # Unpacked, not installed: glibc, libgcc and the CA certificates
            # (their bundle written by the hook), time zones; no shell, no apt.
            mmdebstrap --variant=extract --mode=root --format=tar --include=libc6,libgcc-s1,ca-certificates,netbase,tzdata \
                --customize-hook='mkdir -p "$1/etc/ssl/certs" && cat "$1"/usr/share/ca-certificates/*/*.crt >"$1/etc/ssl/certs/ca-certificates.crt"' \
                --customize-hook='mkdir -p "$1/tmp" && chmod 1777 "$1/tmp" && rm -rf "$1"/var/cache/apt/* "$1"/var/lib/apt/lists/*' \
                bookworm "$cache/bookworm.tar.part" >&2
            mv "$cache/bookworm.tar.part" "$cache/bookworm.tar"
        fi
        "$engine" import "$cache/bookworm.tar" "$base" >&2
    fi
fi

archive=$(scripts/release.sh "${release_args[@]}")
folder="${archive%.tar.gz}"
echo "==> building $tag with $engine${base:+ on $base}" >&2
build_args=(build -f "$folder/Containerfile" -t "$tag")
[ -n "$base" ] && build_args+=(--build-arg "BASE=$base")
# Podman keeps HEALTHCHECK only in Docker's image format.
[ "$engine" = podman ] && build_args+=(--format docker)
previous=$("$engine" image inspect --format '{{.Id}}' "$tag" 2>/dev/null || true)
"$engine" "${build_args[@]}" "$folder" >&2
# The image this one replaces under the tag is left untagged: remove it.
if [ -n "$previous" ] && [ "$previous" != "$("$engine" image inspect --format '{{.Id}}' "$tag")" ]; then
    "$engine" rmi "$previous" >/dev/null 2>&1 || true
fi
echo "$tag"
