# libFuzzer targets (issue 5), included by the top-level CMakeLists.txt with -DBATCHSWEEP_FUZZ=ON. Needs clang:
#   cmake -S . -B build-fuzz -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DBATCHSWEEP_CUDA=OFF -DBATCHSWEEP_FUZZ=ON
#   cmake --build build-fuzz --target fuzz_model_config fuzz_report_reader
# Every target of ours is instrumented for coverage (fuzzer-no-link) and built with ASan+UBSan, so the code under
# test guides the fuzzer and any memory error or undefined behaviour in it is a crash. scripts/fuzz.sh runs them.
if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
  message(FATAL_ERROR "BATCHSWEEP_FUZZ=ON needs clang for libFuzzer (found ${CMAKE_CXX_COMPILER_ID}): "
                      "configure with -DCMAKE_CXX_COMPILER=clang++ -DBATCHSWEEP_CUDA=OFF")
endif()
if(BATCHSWEEP_CUDA)
  message(FATAL_ERROR "BATCHSWEEP_FUZZ=ON builds host code only: configure with -DBATCHSWEEP_CUDA=OFF")
endif()

target_compile_options(bsw_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-fsanitize=fuzzer-no-link,address,undefined -fno-omit-frame-pointer
  -fno-sanitize-recover=all -gline-tables-only>)
target_link_options(bsw_warnings INTERFACE -fsanitize=address,undefined)

foreach(_fuzz_target fuzz_model_config fuzz_report_reader)
  add_executable(${_fuzz_target} tests/fuzz/${_fuzz_target}.cpp tests/fuzz/fuzz_entry.cpp)
  target_include_directories(${_fuzz_target} PRIVATE ${CMAKE_SOURCE_DIR}/tests)
  target_link_libraries(${_fuzz_target} PRIVATE bsw_report bsw_core bsw_warnings)
  target_link_options(${_fuzz_target} PRIVATE -fsanitize=fuzzer)
  set_target_properties(${_fuzz_target} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/fuzz)
endforeach()
