#!/usr/bin/env bash
# Compiles every C++ file of the tree (-fsyntax-only) with Debian trixie's g++ 14 against
# trixie's headers (libstdc++ 14, abseil, gRPC, protobuf, LibTorch 2.6, spdlog, fmt, nlohmann,
# yaml-cpp, prometheus-cpp, cpp-httplib, GoogleTest, oneDNN, ...), the compiler and libraries
# the container images build with: a file that uses a name from a header it does not include,
# which Debian 12's headers happen to bring in and trixie's no longer do, fails here instead of
# an hour into an image build. Run it before submitting a change to #includes or build files.
#
#   scripts/check_trixie_includes.sh [--build-dir DIR] [--jobs N] [--mirror URL] [FILE...]
#   scripts/check_trixie_includes.sh --fetch [--mirror URL]
#
# The files and their flags come from DIR/compile_commands.json (DIR: build by default, a
# configured tree whose generated protobuf headers exist, e.g. after `make build`), plus
# fuzz/*.cc with the request parser's flags; FILE... limits the check to those sources. Only
# what changed since the last run is compiled again (ninja, in DIR/trixie-check): from nothing,
# about 2,800 s of CPU (23 minutes on two idle cores); one changed file, seconds.
#
# Trixie's packages are downloaded once (about 110 MB of .debs, header packages and the
# compiler only; 540 MB unpacked) from --mirror, else $DEBIAN_MIRROR, else this machine's apt
# mirror (scripts/debian_mirror.sh), with a private apt state, and unpacked with dpkg-deb -x
# into .cache/trixie/root ($KVSERVE_TRIXIE_CACHE/root); nothing is installed on this machine.
# The compiler runs through trixie's own dynamic loader. --fetch only downloads and unpacks.
#
# Exit status: 0 every file compiles; 1 some do not (their errors are printed); 77 trixie's
# packages are absent and cannot be fetched; 2 usage, or no compile_commands.json.
set -euo pipefail

cd "$(dirname "$0")/.."
# shellcheck source=scripts/debian_mirror.sh
source scripts/debian_mirror.sh
readonly source_dir="$PWD"
readonly cache_dir="${KVSERVE_TRIXIE_CACHE:-$source_dir/.cache/trixie}"
readonly root="$cache_dir/root"
readonly gcc_version=14

# What the image's build stages install that holds headers, and the compiler. Their -dev
# dependencies come along; the shared libraries behind them do not (nothing is linked).
readonly packages=(
  "g++-$gcc_version" libtorch-dev libdnnl-dev libopenblas-dev
  libgrpc++-dev libprotobuf-dev libspdlog-dev libfmt-dev libabsl-dev
  libgtest-dev libgmock-dev libbenchmark-dev nlohmann-json3-dev libre2-dev prometheus-cpp-dev
  libonig-dev libutf8proc-dev libyaml-cpp-dev libcpp-httplib-dev
)

die() {
  echo "check_trixie_includes: $*" >&2
  exit 2
}
say() { echo "check_trixie_includes: $*" >&2; }
skip() {
  echo "check_trixie_includes: SKIP: $*"
  exit 77
}

usage() {
  sed -n '2,/^set -euo/{/^#/s/^# \{0,1\}//p}' "$0" >&2
  exit 2
}

build_dir=build
jobs="$(nproc)"
mirror="${DEBIAN_MIRROR:-}"
fetch_only=0
files=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build-dir) build_dir="${2:?--build-dir needs a directory}"; shift 2 ;;
    --jobs | -j) jobs="${2:?--jobs needs a number}"; shift 2 ;;
    --mirror) mirror="${2:?--mirror needs a URL}"; shift 2 ;;
    --fetch) fetch_only=1; shift ;;
    -h | --help) usage ;;
    -*) usage ;;
    *) files+=("$1"); shift ;;
  esac
done

# --- fetch: trixie's header packages and compiler, unpacked under $root ------------------------
# The stamp names the mirror and the package list: a change of either fetches again.
stamp_text() { printf '%s\n' "$mirror" "${packages[@]}"; }

fetch() {
  if [[ -f "$root/.kvserve-fetched" && "$(cat "$root/.kvserve-fetched")" == "$(stamp_text)" ]]; then
    return 0
  fi
  command -v apt-get >/dev/null 2>&1 || return 1
  command -v dpkg-deb >/dev/null 2>&1 || return 1
  local keyring=/usr/share/keyrings/debian-archive-keyring.gpg
  [[ -r "$keyring" ]] || {
    say "no $keyring (package debian-archive-keyring) to verify trixie's archive"
    return 1
  }
  local apt="$cache_dir/apt" new="$cache_dir/root.new" arch
  arch="$(dpkg --print-architecture)"
  rm -rf "$apt" "$new"
  mkdir -p "$apt/lists/partial" "$apt/archives/partial" "$apt/etc/sources.list.d" \
    "$apt/etc/preferences.d" "$apt/debs" "$new"
  : >"$apt/status"
  echo "deb [signed-by=$keyring] $mirror trixie main" >"$apt/etc/sources.list"
  # A private apt: its own sources, lists, cache and (empty) dpkg status, so that dependencies
  # resolve against nothing installed and this machine's apt is left as it is.
  local opts=(-o "Dir::State=$apt" -o "Dir::State::status=$apt/status"
    -o "Dir::State::Lists=$apt/lists" -o "Dir::Cache=$apt" -o "Dir::Cache::archives=$apt/archives"
    -o "Dir::Etc::SourceList=$apt/etc/sources.list" -o "Dir::Etc::SourceParts=$apt/etc/sources.list.d"
    -o "Dir::Etc::Preferences=$apt/etc/preferences" -o "Dir::Etc::PreferencesParts=$apt/etc/preferences.d"
    -o "APT::Architecture=$arch" -o "APT::Architectures=$arch" -o "APT::Install-Recommends=false"
    -o "Acquire::Languages=none" -o "Debug::NoLocking=true" -o "APT::Sandbox::User=$(id -un)")
  say "fetching trixie's headers and g++ $gcc_version from $mirror into ${root#"$source_dir"/}"
  local started=$SECONDS
  apt-get "${opts[@]}" -qq update >&2 || return 1
  # Everything the packages pull in, resolved by apt, then only what compiling needs: the
  # compiler's own closure (it runs) and every -dev package (headers).
  local compiler all wanted
  compiler="$(apt-get "${opts[@]}" -s install "g++-$gcc_version" | awk '$1 == "Inst" { print $2 }')" ||
    return 1
  all="$(apt-get "${opts[@]}" -s install "${packages[@]}" | awk '$1 == "Inst" { print $2 }')" ||
    return 1
  wanted="$( (
    echo "$compiler"
    grep -- '-dev$' <<<"$all"
  ) | sort -u)"
  # shellcheck disable=SC2086
  (cd "$apt/debs" && apt-get "${opts[@]}" -qq download $wanted) >&2 || return 1
  local deb size
  for deb in "$apt/debs"/*.deb; do
    dpkg-deb -x "$deb" "$new" || return 1
  done
  size="$(du -sh "$apt/debs" | awk '{print $1}')"
  rm -rf "$apt/debs" "$apt/archives" "$root"
  stamp_text >"$new/.kvserve-fetched"
  mv "$new" "$root"
  say "$(wc -w <<<"$wanted") packages ($size of .debs) unpacked in $((SECONDS - started)) s"
}

if [[ -z "$mirror" ]]; then
  mirror="$(debian_mirror)" || {
    [[ -f "$root/.kvserve-fetched" ]] || skip "no Debian mirror in this machine's apt sources (--mirror URL)"
    mirror="$(head -1 "$root/.kvserve-fetched")"
  }
fi
mirror="${mirror%/}"
if ! fetch; then
  rm -rf "$cache_dir/root.new"
  [[ -f "$root/.kvserve-fetched" ]] || skip "trixie's packages could not be fetched from $mirror"
  say "could not fetch from $mirror again: checking against the packages fetched before" \
    "($(head -1 "$root/.kvserve-fetched"))"
fi
((fetch_only)) && exit 0

# --- check ----------------------------------------------------------------------------------
command -v ninja >/dev/null 2>&1 || die "ninja is missing (scripts/setup.sh installs it)"
build_dir="$(cd "$build_dir" 2>/dev/null && pwd)" || die "no build directory $build_dir"
[[ -f "$build_dir/compile_commands.json" ]] ||
  die "no $build_dir/compile_commands.json: configure first (make configure)"
loader="$(find "$root" -name 'ld-linux-x86-64.so.2' -type f -print -quit)"
[[ -n "$loader" ]] || die "trixie's dynamic loader is missing from $root: rm -rf $cache_dir and rerun"

check_dir="$build_dir/trixie-check"
mkdir -p "$check_dir"
/usr/bin/python3 - "$source_dir" "$build_dir" "$root" "$loader" "$gcc_version" "$check_dir" \
  "${files[@]}" <<'EOF'
"""Writes build.ninja: one -fsyntax-only compile per source, with its flags from
compile_commands.json and every /usr path moved into the trixie root."""
import json
import os
import re
import shlex
import sys

source_dir, build_dir, root, loader, gcc, check_dir = sys.argv[1:7]
only = {os.path.abspath(f) for f in sys.argv[7:]}
triplet = "x86_64-linux-gnu"
libpath = ":".join(f"{root}{d}" for d in
                   (f"/usr/lib/{triplet}", f"/lib/{triplet}", "/usr/lib", "/lib"))
run = [loader, "--inhibit-cache", "--library-path", libpath]
compiler = run + [f"{root}/usr/bin/{triplet}-g++-{gcc}",
                  "-wrapper", ",".join(run), f"-B{root}/usr/libexec/gcc/{triplet}/{gcc}/"]
# trixie's default search list, in g++'s order (-nostdinc drops this machine's).
system_dirs = [f"/usr/include/c++/{gcc}", f"/usr/include/{triplet}/c++/{gcc}",
               f"/usr/include/c++/{gcc}/backward", f"/usr/lib/gcc/{triplet}/{gcc}/include",
               f"/usr/include/{triplet}", "/usr/include"]
system_flags = ["-nostdinc"] + [a for d in system_dirs for a in ("-isystem", root + d)]

def trixie_path(path):
    if path.startswith("/usr/") and not path.startswith((source_dir + "/", build_dir + "/")):
        return root + path
    return path

def flags_of(args, directory, source):
    """The compile flags of one command line: no compiler, output, depfile or source."""
    out = []
    i = 1
    if os.path.basename(args[0]).startswith("ccache"):
        i = 2
    while i < len(args):
        a = args[i]
        if a in ("-o", "-MF", "-MT", "-MQ"):
            i += 2
            continue
        if a in ("-c", "-MD", "-MMD") or os.path.abspath(os.path.join(directory, a)) == source:
            i += 1
            continue
        # A precompiled header (KVSERVE_PCH) would hand every file what its target precompiles,
        # hiding the includes a file lacks: each file is checked on its own includes.
        if a in ("-Winvalid-pch", "-fpch-preprocess"):
            i += 1
            continue
        if a == "-include" and i + 1 < len(args) and "cmake_pch" in os.path.basename(args[i + 1]):
            i += 2
            continue
        if a in ("-I", "-isystem", "-iquote", "-idirafter", "-include") and i + 1 < len(args):
            d = trixie_path(args[i + 1])
            if not (a in ("-I", "-isystem") and d in (root + s for s in system_dirs)):
                out += [a, d]
            i += 2
            continue
        if a.startswith("-I") and len(a) > 2:
            d = trixie_path(a[2:])
            if d not in (root + s for s in system_dirs):
                out.append("-I" + d)
            i += 1
            continue
        out.append(a)
        i += 1
    return out

with open(os.path.join(build_dir, "compile_commands.json")) as f:
    entries = json.load(f)
units = {}
for e in entries:
    source = os.path.abspath(os.path.join(e["directory"], e["file"]))
    args = e["arguments"] if "arguments" in e else shlex.split(e["command"])
    if "/Unity/unity_" in source and source.startswith(build_dir + "/"):
        # A unity batch (KVSERVE_UNITY): each source it includes is checked on its own, with
        # the batch's flags.
        with open(source) as batch:
            for line in batch:
                m = re.match(r'#include "(.+)"', line.strip())
                if m and os.path.abspath(m.group(1)).startswith(source_dir + "/"):
                    units.setdefault(os.path.abspath(m.group(1)), flags_of(args, e["directory"], source))
        continue
    if not source.startswith(source_dir + "/") or source.startswith(build_dir + "/"):
        continue  # generated code (protoc's) is not ours
    units.setdefault(source, flags_of(args, e["directory"], source))
# fuzz/ builds in its own clang tree (absent from this compile_commands.json): its targets get
# the flags of the gRPC adapter's proto_inputs.cc (the request builder's and the proto's
# include paths), which reach every header they include.
parser = units.get(os.path.join(source_dir, "server/grpc_api/proto_inputs.cc"))
fuzz_dir = os.path.join(source_dir, "fuzz")
if parser is None and os.path.isdir(fuzz_dir):
    sys.exit("check_trixie_includes: server/grpc_api/proto_inputs.cc is not in "
             "compile_commands.json, so fuzz/ has no flags to be checked with")
if os.path.isdir(fuzz_dir):
    for name in sorted(os.listdir(fuzz_dir)):
        if name.endswith(".cc"):
            units.setdefault(os.path.join(fuzz_dir, name), parser)
if only:
    missing = only - units.keys()
    if missing:
        sys.exit("check_trixie_includes: not in compile_commands.json: " + " ".join(sorted(missing)))
    units = {s: units[s] for s in only}

def esc(s):
    return s.replace("$", "$$").replace(" ", "$ ").replace(":", "$:")

q = shlex.quote
lines = [
    "# Written by scripts/check_trixie_includes.sh; rewritten on every run.",
    "rule syntax",
    "  command = " + " ".join(map(q, compiler)) + " $flags " + " ".join(map(q, system_flags))
    + " -w -fsyntax-only -MD -MF $out.d -MT $out $in && touch $out",
    "  depfile = $out.d",
    "  deps = gcc",
    "  description = trixie g++ $rel",
    "",
]
targets = []
for source in sorted(units):
    rel = os.path.relpath(source, source_dir)
    out = os.path.join("ok", rel + ".ok")
    targets.append(out)
    lines += [f"build {esc(out)}: syntax {esc(source)}",
              "  flags = " + " ".join(q(a) for a in units[source]).replace("$", "$$"),
              f"  rel = {rel}"]
lines += ["", "build all: phony " + " ".join(esc(t) for t in targets), "default all", ""]
with open(os.path.join(check_dir, "build.ninja.new"), "w") as f:
    f.write("\n".join(lines))
os.replace(os.path.join(check_dir, "build.ninja.new"), os.path.join(check_dir, "build.ninja"))
with open(os.path.join(check_dir, "count"), "w") as f:
    f.write(f"{len(targets)}\n")
EOF

count="$(cat "$check_dir/count")"
started=$SECONDS
status=0
ninja -C "$check_dir" -k 0 -j "$jobs" >"$check_dir/log" 2>&1 || status=$?
if ((status)); then
  # ninja's own lines ("[3/180] trixie g++ x.cc") are noise here; the compiler's are the point.
  grep -v '^\[[0-9]*/[0-9]*\] \|^ninja: \(Entering\|build stopped\)' "$check_dir/log" || true
  failed="$(grep -c '^FAILED: ' "$check_dir/log" || true)"
  echo "check_trixie_includes: $failed of $count files do not compile with trixie's g++" \
    "$gcc_version and headers ($((SECONDS - started)) s; log: ${check_dir#"$source_dir"/}/log)"
  exit 1
fi
echo "check_trixie_includes: $count files compile with trixie's g++ $gcc_version and headers" \
  "($((SECONDS - started)) s)"
