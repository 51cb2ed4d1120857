# Compiler warnings (errors with BATCHSWEEP_WERROR, as in CI) and the sanitizer switch, for every target of ours.
add_library(bsw_warnings INTERFACE)
target_compile_options(bsw_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wshadow -Wno-unused-parameter>
  $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<BOOL:${BATCHSWEEP_WERROR}>>:-Werror>
  $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra --expt-relaxed-constexpr>
  $<$<AND:$<COMPILE_LANGUAGE:CUDA>,$<BOOL:${BATCHSWEEP_WERROR}>>:-Werror=all-warnings>)
# The sanitizers instrument the project's code; the tests' own code (BSW_TEST_CODE, below) only links their
# runtimes: what they check is the library and the binary, and instrumenting gtest-heavy test files doubled
# the sanitized build.
if(BATCHSWEEP_SANITIZE)
  target_compile_options(bsw_warnings INTERFACE
    "$<$<AND:$<COMPILE_LANGUAGE:CXX>,$<NOT:$<BOOL:$<TARGET_PROPERTY:BSW_TEST_CODE>>>>:-fsanitize=address,undefined;-fno-omit-frame-pointer;-fno-sanitize-recover=all>")
  target_link_options(bsw_warnings INTERFACE -fsanitize=address,undefined)
endif()

# bsw_test_code(TARGET): a test's own executable. Compiled at -O1 whatever the build type: the code under test
# keeps the build's optimisation, and test files (gtest's macros, large tables) compiled about three times
# faster than at Release's -O3. Not instrumented by BATCHSWEEP_SANITIZE (above).
# BSW_SANITIZED_BUILD tells a test that the binary it runs is instrumented (its own __SANITIZE_ADDRESS__ is not).
function(bsw_test_code target)
  set_target_properties(${target} PROPERTIES BSW_TEST_CODE ON)
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-O1>)
  if(BATCHSWEEP_SANITIZE)
    target_compile_definitions(${target} PRIVATE BSW_SANITIZED_BUILD=1)
  endif()
endfunction()
if(BATCHSWEEP_STATIC_RUNTIME)
  target_link_options(bsw_warnings INTERFACE -static-libstdc++ -static-libgcc)
endif()
