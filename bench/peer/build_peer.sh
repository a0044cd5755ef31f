#!/usr/bin/env bash
# Builds the llama.cpp peer (llama-bench, llama-server) in a scratch folder outside the
# repository, from upstream commit 82bb485 (see ../../../shared/reference/peer-llamacpp.md for
# why that commit and that mirror).
#
#   bench/peer/build_peer.sh PEER_DIR [SOURCE]
#
# SOURCE is a llama.cpp source tree or a git directory holding the commit (for example the
# unslothai/llama.cpp mirror); without it PEER_DIR/llama.cpp must exist already. Blobs missing
# from a partial mirror (a few vocab GGUFs, docs) are skipped: none is needed. The build is
# CMake Release, CPU only, GGML_NATIVE on (the peer at its best on this CPU), OpenMP on; tests,
# web UI, OpenSSL and ccache off. About 15 minutes on 2 cores.
set -euo pipefail
peer=${1:?usage: build_peer.sh PEER_DIR [SOURCE]}
source=${2:-}
commit=82bb48500a9a6b3374da2cf5811695369278e4d3
mkdir -p "$peer"
peer=$(cd "$peer" && pwd)
if [[ -n "$source" && ! -e "$peer/llama.cpp/CMakeLists.txt" ]]; then
  if [[ -e "$source/CMakeLists.txt" ]]; then
    cp -a "$source" "$peer/llama.cpp"
  else
    # Extract the commit's tree blob by blob, so that a blob missing from a partial mirror
    # only leaves its one file out.
    /usr/bin/python3 - "$source" "$commit" "$peer/llama.cpp" <<'PY'
import os, subprocess, sys
repo, commit, out = sys.argv[1:4]
tree = subprocess.run(["git", "-C", repo, "ls-tree", "-r", commit], capture_output=True,
                      text=True, check=True).stdout.splitlines()
cat = subprocess.Popen(["git", "-C", repo, "cat-file", "--batch"], stdin=subprocess.PIPE,
                       stdout=subprocess.PIPE)
written = missing = 0
for line in tree:
    meta, path = line.split("\t", 1)
    mode, kind, sha = meta.split()
    if kind != "blob":
        continue
    cat.stdin.write((sha + "\n").encode())
    cat.stdin.flush()
    header = cat.stdout.readline().decode().split()
    if len(header) < 3 or header[1] == "missing":
        missing += 1
        continue
    data = cat.stdout.read(int(header[2]))
    cat.stdout.read(1)
    dst = os.path.join(out, path)
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    if mode == "120000":
        os.symlink(data.decode(), dst)
        continue
    with open(dst, "wb") as f:
        f.write(data)
    if mode == "100755":
        os.chmod(dst, 0o755)
    written += 1
print(f"llama.cpp {commit[:7]}: {written} files, {missing} missing blobs skipped")
PY
  fi
fi
[[ -e "$peer/llama.cpp/CMakeLists.txt" ]] || { echo "no llama.cpp source in $peer/llama.cpp" >&2; exit 2; }
cmake -S "$peer/llama.cpp" -B "$peer/llama.cpp/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DGGML_NATIVE=ON -DGGML_OPENMP=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_UI=OFF \
  -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF -DGGML_CCACHE=OFF >/dev/null
nice -n 10 cmake --build "$peer/llama.cpp/build" -j2 --target llama-bench llama-server
ls -l "$peer/llama.cpp/build/bin/llama-bench" "$peer/llama.cpp/build/bin/llama-server"
