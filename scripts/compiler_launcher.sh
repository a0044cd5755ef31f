#!/bin/sh
# kvserve's compiler launcher (CMakeLists.txt: CMAKE_CXX_COMPILER_LAUNCHER): `compiler_launcher.sh
# CCACHE COMPILER ARGS...` runs the compile through ccache, except the creation of a precompiled
# header (an output ending in .gch), which runs the compiler directly: GCC 12 crashes (internal
# compiler error: Segmentation fault) loading a .gch that ccache restored from a build in another
# directory under the same CCACHE_BASEDIR. The objects that use a precompiled header are still
# cached; ccache needs the sloppiness below for them.
ccache="$1"
shift
for arg in "$@"; do
  case "$arg" in
    *.gch) exec "$@" ;;
  esac
done
CCACHE_SLOPPINESS="${CCACHE_SLOPPINESS:+$CCACHE_SLOPPINESS,}pch_defines,time_macros"
export CCACHE_SLOPPINESS
exec "$ccache" "$@"
