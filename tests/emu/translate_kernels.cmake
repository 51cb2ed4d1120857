# Turns a kernel file (kernels/*.cu) into host C++ for the CPU emulator: `kernel<<<config>>>(args)` becomes
# `kernel | ::bsw::emu::Launch{config}(args)`, each `__shared__` array is registered with the emulator, the
# emulator's header comes after the CUDA headers, and #line keeps the kernel file's own names and line numbers in
# diagnostics. Run as: cmake -DINPUT=x.cu -DOUTPUT=x.cpp -P this.
file(READ "${INPUT}" text)
string(REPLACE "<<<" " | ::bsw::emu::Launch{" text "${text}")
string(REPLACE ">>>" "}" text "${text}")
# Shared memory is a static array on the emulator; registering it lets each block start it NaN-filled, as
# stale shared memory on a GPU holds whatever the last block left.
string(REGEX REPLACE "__shared__ ([A-Za-z_][A-Za-z_0-9:]*) ([A-Za-z_][A-Za-z_0-9]*)((\\[[^]]*\\])+);"
  "__shared__ \\1 \\2\\3; ::bsw::emu::shared_memory(\\2, sizeof(\\2));" text "${text}")
file(WRITE "${OUTPUT}.tmp"
  "// Generated from ${INPUT} by tests/emu/translate_kernels.cmake for the CPU emulator. Do not edit.\n"
  "#include <cuda_runtime.h>\n#include <cuda_bf16.h>\n#include <cuda_fp16.h>\n#include \"cuda_emu.hpp\"\n"
  "#line 1 \"${INPUT}\"\n${text}")
file(RENAME "${OUTPUT}.tmp" "${OUTPUT}")
