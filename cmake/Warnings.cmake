# Compiler warnings (errors with BATCHSWEEP_WERROR, as in CI) and the sanitizer switch, for every target of ours.
add_library(bsw_warnings INTERFACE)
target_compile_options(bsw_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wshadow -Wno-unused-parameter>
  $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<BOOL:${BATCHSWEEP_WERROR}>>:-Werror>
  $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra --expt-relaxed-constexpr>
  $<$<AND:$<COMPILE_LANGUAGE:CUDA>,$<BOOL:${BATCHSWEEP_WERROR}>>:-Werror=all-warnings>)
if(BATCHSWEEP_SANITIZE)
  target_compile_options(bsw_warnings INTERFACE
    $<$<COMPILE_LANGUAGE:CXX>:-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all>)
  target_link_options(bsw_warnings INTERFACE -fsanitize=address,undefined)
endif()
if(BATCHSWEEP_STATIC_RUNTIME)
  target_link_options(bsw_warnings INTERFACE -static-libstdc++ -static-libgcc)
endif()
