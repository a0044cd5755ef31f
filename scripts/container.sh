#!/usr/bin/env bash
# Builds, tests and smoke-runs kvserve's container images, with a Docker daemon or without
# one (buildah, as root). One command per step:
#
#   scripts/container.sh [--mirror URL] [--security-mirror URL] COMMAND ...
#   scripts/container.sh base                       local debian:trixie base (debootstrap)
#   scripts/container.sh build cpu|cuda [--target test] [--cudnn download|stub] [-- ARGS]
#                       (cuda: --cudnn defaults to download when NVIDIA answers, else stub,
#                       a link-only cuDNN for offline verification only; see Dockerfile)
#   scripts/container.sh smoke cpu                  serve, query through kvctl, drain
#   scripts/container.sh sizes                      sizes of the kvserve images
#
# Without a Docker daemon it installs what it needs from Debian (buildah, and debootstrap for
# `base`), as scripts/setup.sh does for the build.
#
# The Debian mirror (what `base` bootstraps from and apt uses in the images) is --mirror, else
# $DEBIAN_MIRROR, else the one this machine's apt uses (scripts/debian_mirror.sh); the security
# mirror likewise (--security-mirror, $DEBIAN_SECURITY_MIRROR, apt's CODENAME-security source;
# none: the images get no security source). A machine behind its own mirror needs no option.
#
# Environment: KVSERVE_ENGINE=docker|buildah forces the tool; KVSERVE_IMAGE_PREFIX (default
# localhost/kvserve) names the images (tags cpu and runtime-cpu, cuda and runtime-cuda,
# test-cpu, test-cuda); BUILD_JOBS limits compile jobs; KVSERVE_CA_BUNDLE (default the host's
# /etc/ssl/certs/ca-certificates.crt) is handed to the test stage's npm as a build secret.
set -euo pipefail

cd "$(dirname "$0")/.."
# shellcheck source=scripts/debian_mirror.sh
source scripts/debian_mirror.sh
readonly base_image="docker.io/library/debian:trixie"
readonly prefix="${KVSERVE_IMAGE_PREFIX:-localhost/kvserve}"
mirror="${DEBIAN_MIRROR:-}"
security_mirror="${DEBIAN_SECURITY_MIRROR:-}"
tool=""

die() {
  echo "container.sh: $*" >&2
  exit 1
}
say() { echo "container.sh: $*" >&2; }

usage() {  # exit status: $1 (2 by default)
  sed -n '2,/^set -euo/{/^#/s/^# \{0,1\}//p}' "$0" >&2
  exit "${1:-2}"
}

# Installs the Debian packages given that are not installed yet (as root, or through sudo).
install_packages() {
  local missing=() p
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  ((${#missing[@]})) || return 0
  command -v apt-get >/dev/null 2>&1 || die "${missing[*]} missing, and no apt-get to install them"
  local sudo_cmd=()
  [[ "$(id -u)" -eq 0 ]] || sudo_cmd=(sudo)
  say "installing ${missing[*]}"
  local log
  log="$(mktemp)"
  if ! { "${sudo_cmd[@]}" apt-get update -qq &&
    DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq \
      --no-install-recommends "${missing[@]}"; } >"$log" 2>&1; then
    tail -20 "$log" >&2
    rm -f "$log"
    die "could not install ${missing[*]}"
  fi
  rm -f "$log"
}

# Sets $tool: docker when a daemon answers, else buildah (OCI images without a daemon),
# installed when missing (fuse-overlayfs: container storage where the root filesystem is itself
# an overlay).
choose_engine() {
  if [[ -n "${KVSERVE_ENGINE:-}" ]]; then
    tool="$KVSERVE_ENGINE"
  elif command -v docker >/dev/null 2>&1 && timeout 10 docker info >/dev/null 2>&1; then
    tool=docker
  else
    tool=buildah
  fi
  if [[ "$tool" == buildah ]]; then
    install_packages buildah fuse-overlayfs
  fi
  return 0
}

# Sets $mirror and $security_mirror: the options, else the environment, else this machine's apt.
choose_mirrors() {
  if [[ -z "$mirror" ]]; then
    mirror="$(debian_mirror)" ||
      die "this machine's apt names no Debian mirror for $(debian_codename): pass --mirror URL"
  fi
  if [[ -z "$security_mirror" ]]; then
    security_mirror="$(debian_security_mirror)" ||
      say "no security mirror in this machine's apt sources: the images get none" \
        "(--security-mirror URL adds one)"
  fi
  mirror="${mirror%/}"
  security_mirror="${security_mirror%/}"
}

image_exists() {
  case "$tool" in
    docker) docker image inspect "$1" >/dev/null 2>&1 ;;
    *) buildah inspect --type image "$1" >/dev/null 2>&1 ;;
  esac
}

# --- base -----------------------------------------------------------------------------
cmd_base() {
  if image_exists "$base_image"; then
    say "$base_image is already present"
    return 0
  fi
  if [[ "$tool" == docker ]]; then
    if timeout 300 docker pull "$base_image"; then return 0; fi
  else
    if timeout 300 buildah pull --quiet "$base_image" >/dev/null 2>&1; then
      say "pulled $base_image"
      return 0
    fi
  fi
  say "no $base_image to pull; bootstrapping one from $mirror"
  [[ "$(id -u)" -eq 0 ]] || die "debootstrap needs root"
  install_packages debootstrap debian-archive-keyring
  local work root started
  work="$(mktemp -d /var/tmp/kvserve-base.XXXXXX)"
  root="$work/rootfs"
  started=$SECONDS
  # The keyring of a Debian 12 host also verifies trixie (its archive is signed by the
  # bookworm key too).
  debootstrap --variant=minbase trixie "$root" "$mirror" >"$work/debootstrap.log" 2>&1 ||
    {
      tail -20 "$work/debootstrap.log" >&2
      die "debootstrap failed (log: $work/debootstrap.log)"
    }
  # What the official image does: no documentation, no apt lists, one deb822 source.
  rm -f "$root/etc/apt/sources.list"
  cat >"$root/etc/apt/sources.list.d/debian.sources" <<EOF
Types: deb
URIs: $mirror
Suites: trixie trixie-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
  rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/archives/*.deb "$root"/tmp/*
  local created
  created="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  if [[ "$tool" == docker ]]; then
    tar -C "$root" --numeric-owner -c . | docker import \
      --change 'CMD ["bash"]' --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
      --message "debootstrap --variant=minbase trixie $mirror ($created)" - "$base_image" >/dev/null
  else
    tar -C "$root" --numeric-owner -cf "$work/rootfs.tar" .
    local ctr
    ctr="$(buildah from scratch)"
    buildah add --quiet "$ctr" "$work/rootfs.tar" / >/dev/null
    buildah config --cmd bash \
      --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
      --label org.opencontainers.image.description="debootstrap --variant=minbase trixie $mirror" \
      --label org.opencontainers.image.created="$created" "$ctr"
    buildah commit --quiet "$ctr" "$base_image" >/dev/null
    buildah rm "$ctr" >/dev/null
  fi
  rm -rf "$work"
  say "made $base_image with debootstrap in $((SECONDS - started)) s"
}

# --- build ----------------------------------------------------------------------------
# Whether NVIDIA's download server, where Debian's nvidia-cudnn fetches cuDNN, answers.
nvidia_reachable() {
  timeout 10 bash -c 'exec 3<>/dev/tcp/developer.download.nvidia.com/443' 2>/dev/null
}

cmd_build() {
  local variant="${1:-}"
  [[ "$variant" == cpu || "$variant" == cuda ]] || usage
  shift
  local target="" cudnn="auto" extra=()
  while [[ $# -gt 0 ]]; do
    case "$1" in
      --target) target="${2:?--target needs a stage}"; shift 2 ;;
      --target=*) target="${1#--target=}"; shift ;;
      --cudnn) cudnn="${2:?--cudnn needs download or stub}"; shift 2 ;;
      --cudnn=*) cudnn="${1#--cudnn=}"; shift ;;
      --offline-cudnn) cudnn=stub; shift ;;
      --) shift; extra=("$@"); break ;;
      *) usage ;;
    esac
  done
  local stage tag
  case "$variant:${target:-}" in
    cpu:) stage=runtime-cpu tag="$prefix:cpu" ;;
    cpu:test) stage=test tag="$prefix:test-cpu" ;;
    cuda:) stage=runtime-cuda tag="$prefix:cuda" ;;
    # The CUDA build's checks (device refusal with the reason, gpu tests skipping) run in its
    # builder; the full suite runs in the cpu test stage.
    cuda:test) stage=builder-cuda tag="$prefix:test-cuda" ;;
    *) stage="$target" tag="$prefix:$variant-$target" ;;
  esac
  local args=(--target "$stage" -t "$tag" -f Dockerfile
    --build-arg "VCS_REF=$(git rev-parse HEAD 2>/dev/null || echo unknown)"
    --build-arg "BUILD_DATE=$(date -u +%Y-%m-%dT%H:%M:%SZ)")
  [[ -n "${BUILD_JOBS:-}" ]] && args+=(--build-arg "BUILD_JOBS=$BUILD_JOBS")
  args+=(--build-arg "DEBIAN_MIRROR=$mirror" --build-arg "DEBIAN_SECURITY_MIRROR=$security_mirror")
  # The test stage fetches npm packages; behind a TLS-inspecting proxy it needs the host's CA
  # bundle, given as a build secret (never stored in a layer).
  local ca_bundle="${KVSERVE_CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}"
  [[ -s "$ca_bundle" ]] && args+=(--secret "id=ca_bundle,src=$ca_bundle")
  if [[ "$variant" == cuda ]]; then
    if [[ "$cudnn" == auto ]]; then
      if nvidia_reachable; then
        cudnn=download
      else
        cudnn=stub
        say "WARNING: developer.download.nvidia.com is unreachable, so Debian's nvidia-cudnn"
        say "WARNING: cannot download cuDNN: building with CUDNN=stub, a link-only stand-in"
        say "WARNING: FOR OFFLINE VERIFICATION ONLY (never deploy it): tag $tag-cudnn-stub"
      fi
    fi
    [[ "$cudnn" == download || "$cudnn" == stub ]] || die "--cudnn must be download or stub"
    [[ "$cudnn" == stub ]] && tag="$tag-cudnn-stub" && args[3]="$tag"
    args+=(--build-arg "CUDNN=$cudnn")
  fi
  # The names deploy/k8s expects (kvserve:runtime-cpu, kvserve:runtime-cuda) for deployable
  # images; a stub-cuDNN image keeps only its warning tag.
  if [[ "$stage" == runtime-* && "$tag" != *-cudnn-stub ]]; then
    args+=(-t "$prefix:$stage")
  fi
  image_exists "$base_image" || die "no $base_image: run 'scripts/container.sh base' first"
  local started=$SECONDS
  say "building $tag (stage $stage) with $tool"
  case "$tool" in
    docker) DOCKER_BUILDKIT=1 docker build "${args[@]}" "${extra[@]}" . ;;
    # chroot isolation: RUN steps need no daemon, no user namespaces and no cgroup setup;
    # --layers keeps every step's result so that a rebuild redoes only what changed.
    *) buildah bud --isolation chroot --layers "${args[@]}" "${extra[@]}" . ;;
  esac
  say "built $tag in $(((SECONDS - started) / 60)) min $(((SECONDS - started) % 60)) s"
  cmd_sizes
}

# --- sizes ----------------------------------------------------------------------------
cmd_sizes() {
  case "$tool" in
    docker) docker images --format '{{.Repository}}:{{.Tag}}  {{.Size}}' "$prefix" ;;
    *) buildah images --format '{{.Name}}:{{.Tag}}  {{.Size}}' | grep -F "$prefix:" || true ;;
  esac
}

# --- smoke ----------------------------------------------------------------------------
# Runs the image's kvserve on 127.0.0.1 and checks it through the image's own kvctl: health
# SERVING, Generate, RegisterPrefix then Generate naming it (cached tokens > 0), /metrics,
# then SIGTERM drains and exits 0.
smoke_dir=""
server_pid=""
server_ctr=""
client_ctr=""

smoke_cleanup() {
  if [[ -n "$server_pid" ]] && kill -0 "$server_pid" 2>/dev/null; then
    local pid
    pid="$(find_kvserve_pid "$server_pid")" && kill -KILL "$pid" 2>/dev/null
    kill "$server_pid" 2>/dev/null || true
  fi
  case "$tool" in
    docker) docker rm -f "kvserve-smoke-$$" >/dev/null 2>&1 || true ;;
    buildah)
      [[ -n "$server_ctr" ]] && buildah rm "$server_ctr" >/dev/null 2>&1
      [[ -n "$client_ctr" ]] && buildah rm "$client_ctr" >/dev/null 2>&1
      ;;
  esac
  [[ -n "$smoke_dir" ]] && rm -rf "$smoke_dir"
  return 0
}

kvctl() {
  case "$tool" in
    docker) docker run --rm --network host --entrypoint kvctl "$image" "$@" ;;
    *) buildah run --isolation chroot "$client_ctr" -- kvctl "$@" ;;
  esac
}

# The pid of the kvserve process that `buildah run` (pid $1) started: the descendant named
# kvserve (chroot isolation shares the host's process table).
find_kvserve_pid() {
  local pids=("$1") next=() p child
  for _ in 1 2 3 4 5 6; do
    next=()
    for p in "${pids[@]}"; do
      for child in $(cat "/proc/$p/task/"*/children 2>/dev/null); do
        if [[ "$(cat "/proc/$child/comm" 2>/dev/null)" == kvserve ]]; then
          echo "$child"
          return 0
        fi
        next+=("$child")
      done
    done
    [[ ${#next[@]} -gt 0 ]] || return 1
    pids=("${next[@]}")
  done
  return 1
}

check() {  # description, then a command that must succeed
  local what="$1"
  shift
  if "$@"; then
    echo "smoke: ok    $what"
  else
    echo "smoke: FAIL  $what" >&2
    [[ -f "$smoke_dir/stderr" ]] && tail -20 "$smoke_dir/stderr" >&2
    exit 1
  fi
}

json_int() {  # key, json text: the first integer value of "key" (proto3 JSON quotes int64)
  sed -n "s/.*\"$1\": *\"\{0,1\}\([0-9][0-9]*\).*/\1/p" <<<"$2" | head -1
}

cmd_smoke() {
  [[ "${1:-}" == cpu || "${1:-}" == cuda ]] || usage
  image="$prefix:$1"
  image_exists "$image" || die "no image $image: run 'scripts/container.sh build $1' first"
  smoke_dir="$(mktemp -d)"
  trap smoke_cleanup EXIT
  local started=$SECONDS
  local serve_args=(--listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0 --threads 2)
  if [[ "$tool" == docker ]]; then
    docker run -d --name "kvserve-smoke-$$" --network host "$image" "${serve_args[@]}" >/dev/null
    docker logs -f "kvserve-smoke-$$" >"$smoke_dir/stdout" 2>"$smoke_dir/stderr" &
  else
    server_ctr="$(buildah from --pull=never "$image")"
    client_ctr="$(buildah from --pull=never "$image")"
    # The image's ENTRYPOINT is not used by `buildah run`: name the program.
    buildah run --isolation chroot "$server_ctr" -- kvserve "${serve_args[@]}" \
      >"$smoke_dir/stdout" 2>"$smoke_dir/stderr" &
    server_pid=$!
  fi
  local target="" metrics="" i
  for i in $(seq 1200); do
    target="$(sed -n 's/^kvserve listening on //p' "$smoke_dir/stdout" 2>/dev/null)"
    [[ -n "$target" ]] && break
    sleep 0.1
  done
  check "kvserve started and listens ($target)" test -n "$target"
  for i in $(seq 1200); do
    kvctl --target "$target" health >/dev/null 2>&1 && break
    sleep 0.1
  done
  check "health is SERVING" kvctl --target "$target" health
  metrics="$(sed -n 's/.*metrics on http:\/\/[^ ]* (port \([0-9]*\)).*/\1/p' "$smoke_dir/stderr")"

  local out
  out="$(kvctl --target "$target" --output json generate --prompt "Once upon a time" \
    --max-new-tokens 8 --ignore-eos)"
  check "Generate returns 8 tokens" test "$(json_int completionTokens "$out")" = 8

  kvctl --target "$target" prefix register --name smoke \
    --text "You are a helpful support agent for kvserve. Answer in one short sentence." \
    >/dev/null
  check "RegisterPrefix" kvctl --target "$target" prefix get --name smoke
  out="$(kvctl --target "$target" --output json generate --prefix smoke \
    --prompt " How do I reset my password?" --max-new-tokens 4)"
  local cached
  cached="$(json_int cachedTokens "$out")"
  check "Generate naming the prefix reuses it (cached tokens ${cached:-0})" test "${cached:-0}" -gt 0

  check "metrics served on port ${metrics:-?}" smoke_metrics "$metrics"

  if [[ "$tool" == docker ]]; then
    docker stop --time 30 "kvserve-smoke-$$" >/dev/null
    local status
    status="$(docker wait "kvserve-smoke-$$")"
    check "SIGTERM drains and exits 0" test "$status" = 0
  else
    local pid
    pid="$(find_kvserve_pid "$server_pid")"
    check "found the kvserve process ($pid)" test -n "$pid"
    kill -TERM "$pid"
    local status=0
    wait "$server_pid" || status=$?
    server_pid=""
    check "SIGTERM drains and exits 0 (exit status $status)" test "$status" = 0
  fi
  check "kvserve logged a clean stop" grep -q "stopped" "$smoke_dir/stderr"
  echo "smoke: $image passed in $((SECONDS - started)) s"
  cmd_sizes
}

smoke_metrics() {  # port: GET /metrics over bash's /dev/tcp (no curl in minimal hosts)
  [[ -n "$1" ]] || return 1
  local body
  body="$(timeout 10 bash -c 'exec 3<>/dev/tcp/127.0.0.1/'"$1"'
    printf "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n" >&3; cat <&3')" || return 1
  grep -q '^HTTP/1\.[01] 200' <<<"$body" && grep -q '^kvserve_requests_total' <<<"$body" &&
    grep -q '^kvserve_prompt_tokens_cached_total' <<<"$body"
}

main() {
  while [[ $# -gt 0 ]]; do
    case "$1" in
      --mirror) mirror="${2:?--mirror needs a URL}"; shift 2 ;;
      --mirror=*) mirror="${1#--mirror=}"; shift ;;
      --security-mirror) security_mirror="${2:?--security-mirror needs a URL}"; shift 2 ;;
      --security-mirror=*) security_mirror="${1#--security-mirror=}"; shift ;;
      *) break ;;
    esac
  done
  [[ $# -ge 1 ]] || usage
  local cmd="$1"
  shift
  case "$cmd" in
    -h | --help | help) usage 0 ;;
    base | build | smoke | sizes) ;;
    *) usage ;;
  esac
  choose_engine
  case "$cmd" in
    base) choose_mirrors && cmd_base "$@" ;;
    build) choose_mirrors && cmd_build "$@" ;;
    smoke) cmd_smoke "$@" ;;
    sizes) cmd_sizes "$@" ;;
  esac
}

main "$@"
