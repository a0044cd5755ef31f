#!/usr/bin/env bash
# Installs, idempotently, every Debian package that kvserve's build, tests and benchmarks need.
# usage: scripts/setup.sh [--fuzz]
#   --fuzz   also clang-14 and libclang-rt-14-dev, for the libFuzzer build (scripts/fuzz.sh)
set -euo pipefail

fuzz=0
for arg in "$@"; do
  case "$arg" in
    --fuzz) fuzz=1 ;;
    *) echo "setup.sh: unknown argument '$arg' (usage: scripts/setup.sh [--fuzz])" >&2; exit 2 ;;
  esac
done

packages=(
  build-essential cmake ninja-build ccache pkg-config git clang-format
  libtorch-dev libopenblas0-pthread libdnnl-dev
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libspdlog-dev libabsl-dev libgtest-dev libgmock-dev libbenchmark-dev
  nlohmann-json3-dev libre2-dev prometheus-cpp-dev
  libonig-dev libutf8proc-dev libyaml-cpp-dev libcpp-httplib-dev
  python3-grpcio python3-protobuf python3-numpy python3-yaml
  nginx
)
((fuzz)) && packages+=(clang-14 libclang-rt-14-dev)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

# The tokenizer reference tests and the OpenAI SDK tests (tests/openai) run on Node.js; keep an existing Node.js (and its npm) if present.
command -v npm >/dev/null 2>&1 || missing+=(nodejs npm)

if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
  # The gateway test runs its own nginx on loopback ports; the system service that Debian starts
  # when it installs nginx (on port 80) is not needed. Stopped only when installed just now.
  if [[ " ${missing[*]} " == *" nginx "* ]] && command -v systemctl >/dev/null 2>&1 &&
    systemctl is-active --quiet nginx 2>/dev/null; then
    echo "setup: stopping and disabling the nginx service that the install started"
    "${sudo_cmd[@]}" systemctl disable --now nginx || true
  fi
else
  echo "setup: all ${#packages[@]} Debian packages present"
fi
