# Included by the top-level CMakeLists.txt when KVSERVE_FUZZ is ON: the ctest side of the
# libFuzzer targets (label fuzz).
#
# fuzz_build configures and builds the clang tree <build>/fuzz (fuzz/CMakeLists.txt) through
# scripts/fuzz.sh, after the main build has made the kvserve_cache and kvserve_proto libraries
# it links; then fuzz_<target> runs each target for KVSERVE_FUZZ_SECONDS from its seed corpus
# (fuzz/corpus/<target>) and fails on any crash, sanitizer report or broken check. Without
# clang and libFuzzer (Debian: clang-14 libclang-rt-14-dev, which scripts/setup.sh --fuzz
# installs) one test, fuzz_unavailable, is registered and skips itself.

set(KVSERVE_FUZZ_TARGETS safetensors model_config tokenizer chat_template prefixes_file
                         request_builder)
set(KVSERVE_FUZZ_SECONDS 8 CACHE STRING "Seconds each fuzz target runs in make test")

# The main build's part in the fuzz tree: the libraries it links as they are.
file(GENERATE OUTPUT ${CMAKE_BINARY_DIR}/fuzz-host.cmake CONTENT
"# Written by kvserve's CMakeLists.txt (fuzz/tests.cmake) for fuzz/CMakeLists.txt.
set(KVSERVE_HOST_CACHE_LIBRARY \"$<TARGET_FILE:kvserve_cache>\")
set(KVSERVE_HOST_PROTO_LIBRARY \"$<TARGET_FILE:kvserve_proto>\")
set(KVSERVE_HOST_PROTO_INCLUDE_DIR \"${CMAKE_BINARY_DIR}/proto\")
")

# Whether clang can link a libFuzzer target with ASan and UBSan here (checked once).
if(NOT DEFINED KVSERVE_FUZZ_CLANGXX)
  find_program(_fuzz_clangxx NAMES clang++-14 clang++)
  set(_fuzz_reason "")
  if(NOT _fuzz_clangxx)
    set(_fuzz_reason "no clang++ (scripts/setup.sh --fuzz installs clang-14 and libclang-rt-14-dev)")
  else()
    set(_probe_dir ${CMAKE_BINARY_DIR}/CMakeFiles/fuzz-probe)
    file(WRITE ${_probe_dir}/probe.cc
         "#include <cstddef>\n#include <cstdint>\n"
         "extern \"C\" int LLVMFuzzerTestOneInput(const uint8_t*, size_t) { return 0; }\n")
    execute_process(
      COMMAND ${_fuzz_clangxx} -fsanitize=fuzzer,address,undefined ${_probe_dir}/probe.cc
              -o ${_probe_dir}/probe
      RESULT_VARIABLE _probe_rc OUTPUT_QUIET ERROR_VARIABLE _probe_err)
    if(NOT _probe_rc EQUAL 0)
      set(_fuzz_reason
          "${_fuzz_clangxx} cannot link a libFuzzer target (scripts/setup.sh --fuzz installs libclang-rt-14-dev)")
    endif()
  endif()
  if(_fuzz_reason)
    set(KVSERVE_FUZZ_CLANGXX "" CACHE STRING "clang++ for the fuzz targets (empty: none)")
    set(KVSERVE_FUZZ_UNAVAILABLE "${_fuzz_reason}" CACHE INTERNAL "")
  else()
    set(KVSERVE_FUZZ_CLANGXX "${_fuzz_clangxx}" CACHE STRING
        "clang++ for the fuzz targets (empty: none)")
  endif()
  unset(_fuzz_clangxx CACHE)
endif()

if(NOT KVSERVE_FUZZ_CLANGXX)
  if(NOT KVSERVE_FUZZ_UNAVAILABLE)
    set(KVSERVE_FUZZ_UNAVAILABLE "KVSERVE_FUZZ_CLANGXX is empty")
  endif()
  add_test(NAME fuzz_unavailable
           COMMAND sh -c "echo 'fuzz targets skipped: ${KVSERVE_FUZZ_UNAVAILABLE}'; exit 77")
  set_tests_properties(fuzz_unavailable PROPERTIES LABELS fuzz SKIP_RETURN_CODE 77)
  message(STATUS "kvserve: fuzz tests skipped: ${KVSERVE_FUZZ_UNAVAILABLE}")
  return()
endif()
message(STATUS "kvserve: fuzz targets built with ${KVSERVE_FUZZ_CLANGXX}")

set(_fuzz_script ${PROJECT_SOURCE_DIR}/scripts/fuzz.sh --build-dir ${CMAKE_BINARY_DIR}
                 --clang ${KVSERVE_FUZZ_CLANGXX})
add_test(NAME fuzz_build COMMAND ${_fuzz_script} --build-only --no-main-build)
set_tests_properties(fuzz_build PROPERTIES LABELS fuzz FIXTURES_SETUP kvserve_fuzz TIMEOUT 1800
                                           SKIP_RETURN_CODE 77)
foreach(_target IN LISTS KVSERVE_FUZZ_TARGETS)
  add_test(NAME fuzz_${_target}
           COMMAND ${_fuzz_script} --skip-build --fresh --seconds ${KVSERVE_FUZZ_SECONDS}
                   --only ${_target})
  math(EXPR _timeout "${KVSERVE_FUZZ_SECONDS} + 120")
  set_tests_properties(fuzz_${_target} PROPERTIES LABELS fuzz FIXTURES_REQUIRED kvserve_fuzz
                                                  TIMEOUT ${_timeout} SKIP_RETURN_CODE 77)
endforeach()
