#!/usr/bin/env bash
# Installs, idempotently, every Debian package that kvserve's build, tests and benchmarks need.
set -euo pipefail

packages=(
  build-essential cmake ninja-build ccache pkg-config git clang-format
  libtorch-dev libopenblas0-pthread
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libspdlog-dev libabsl-dev libgtest-dev libgmock-dev libbenchmark-dev
  nlohmann-json3-dev libre2-dev prometheus-cpp-dev
  libonig-dev libutf8proc-dev libyaml-cpp-dev
  python3-grpcio python3-protobuf python3-numpy
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

# The tokenizer reference tests run on Node.js; keep an existing Node.js (and its npm) if present.
command -v npm >/dev/null 2>&1 || missing+=(nodejs npm)

if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "setup: all ${#packages[@]} Debian packages present"
fi
