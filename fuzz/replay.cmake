# Included by the top-level CMakeLists.txt: the fuzz targets' harnesses (fuzz/<name>.cc) built by
# the main compiler with fuzz/replay_main.cc instead of libFuzzer, linking the main tree's
# libraries, and run by `make test` (label fuzz): each seed of fuzz/corpus/<name>, then
# KVSERVE_FUZZ_REPLAY_MUTATIONS mutants of each from a fixed seed. Any crash or broken check
# fails the test. Coverage-guided fuzzing with ASan and UBSan is scripts/fuzz.sh (clang +
# libFuzzer, minutes per target), or `-DKVSERVE_FUZZ=ON` to run it for a few seconds per target
# in ctest (fuzz/tests.cmake).
set(KVSERVE_FUZZ_REPLAY_MUTATIONS 300 CACHE STRING "Mutants of each seed that make test runs")

function(kvserve_fuzz_replay name)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "" "LIBS")
  add_executable(kvserve_fuzz_replay_${name} ${PROJECT_SOURCE_DIR}/fuzz/${name}.cc
                                             ${PROJECT_SOURCE_DIR}/fuzz/replay_main.cc)
  target_include_directories(kvserve_fuzz_replay_${name} PRIVATE ${PROJECT_SOURCE_DIR})
  # The driver declares the harness's optional LLVMFuzzerInitialize weak: two files, never one.
  set_target_properties(kvserve_fuzz_replay_${name} PROPERTIES UNITY_BUILD OFF)
  target_link_libraries(kvserve_fuzz_replay_${name} PRIVATE ${arg_LIBS} kvserve_warnings)
  # The harnesses' own checks (assert) stay on, as in the libFuzzer build.
  target_compile_options(kvserve_fuzz_replay_${name} PRIVATE -UNDEBUG -O1)
  set(_command kvserve_fuzz_replay_${name} --mutations ${KVSERVE_FUZZ_REPLAY_MUTATIONS}
               --artifact ${CMAKE_CURRENT_BINARY_DIR}/fuzz-replay-crash-${name})
  if(EXISTS ${PROJECT_SOURCE_DIR}/fuzz/dict/${name}.dict)
    list(APPEND _command --dict ${PROJECT_SOURCE_DIR}/fuzz/dict/${name}.dict)
  endif()
  add_test(NAME fuzz_replay_${name} COMMAND ${_command} ${PROJECT_SOURCE_DIR}/fuzz/corpus/${name})
  set_tests_properties(fuzz_replay_${name} PROPERTIES LABELS fuzz TIMEOUT 300
                                                      ENVIRONMENT OMP_NUM_THREADS=1)
endfunction()

kvserve_fuzz_replay(safetensors LIBS kvserve_model kvserve_base)
kvserve_fuzz_replay(model_config LIBS kvserve_model kvserve_base)
kvserve_fuzz_replay(tokenizer LIBS kvserve_tokenizer kvserve_base nlohmann_json::nlohmann_json)
kvserve_fuzz_replay(chat_template LIBS kvserve_tokenizer kvserve_base)
kvserve_fuzz_replay(prefixes_file LIBS kvserve_server kvserve_base)
kvserve_fuzz_replay(request_builder LIBS kvserve_grpc_api kvserve_engine kvserve_proto)
