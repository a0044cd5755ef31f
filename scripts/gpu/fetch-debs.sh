#!/usr/bin/env bash
# Downloads (apt-get download, no root needed) the Debian packages that a cache/ + model/ build
# of kvserve (-DKVSERVE_BUILD_SERVER=OFF) needs beyond LibTorch, CMake, Ninja and a C++20
# compiler, into scripts/gpu/debs/ (ignored by git and by image builds). Copy the tree with
# that folder to a GPU machine that has PyTorch 2.x but none of these libraries (and maybe no
# internet), and run scripts/gpu/run.sh there.
#   scripts/gpu/fetch-debs.sh            # on a Debian 12 machine (these are bookworm's)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="$here/debs"
packages=(
  # abseil (headers, CMake config and the shared libraries)
  libabsl-dev libabsl20220623
  # JSON (header-only), Oniguruma and utf8proc (tokenizer), found through pkg-config
  nlohmann-json3-dev libonig-dev libonig5 libutf8proc-dev libutf8proc2
  # pkg-config itself, for machines without one
  pkgconf pkgconf-bin libpkgconf3
  # GoogleTest as sources (built there with the local compiler: no C++ ABI surprises)
  googletest
  # google-benchmark's CMake package (bench/ is configured as a whole)
  libbenchmark-dev libbenchmark1debian
)
rm -rf "$out"
mkdir -p "$out"
cd "$out"
# (As root, apt downloads unsandboxed into this folder; say so quietly.)
apt-get download -o APT::Sandbox::User="$(id -un)" "${packages[@]}" >/dev/null
echo "fetch-debs: $(ls "$out"/*.deb | wc -l) packages, $(du -sh "$out" | cut -f1) in $out"
