# Turns a kernel file (kernels/*.cu) into host C++ for the CPU emulator: `kernel<<<config>>>(args)` becomes
# `kernel | ::bsw::emu::Launch{config}(args)`, the emulator's header comes after the CUDA headers, and #line keeps
# the kernel file's own names and line numbers in diagnostics. Run as: cmake -DINPUT=x.cu -DOUTPUT=x.cpp -P this.
file(READ "${INPUT}" text)
string(REPLACE "<<<" " | ::bsw::emu::Launch{" text "${text}")
string(REPLACE ">>>" "}" text "${text}")
file(WRITE "${OUTPUT}.tmp"
  "// Generated from ${INPUT} by tests/emu/translate_kernels.cmake for the CPU emulator. Do not edit.\n"
  "#include <cuda_runtime.h>\n#include <cuda_bf16.h>\n#include <cuda_fp16.h>\n#include \"cuda_emu.hpp\"\n"
  "#line 1 \"${INPUT}\"\n${text}")
file(RENAME "${OUTPUT}.tmp" "${OUTPUT}")
