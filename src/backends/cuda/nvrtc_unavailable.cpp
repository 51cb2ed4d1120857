// The cuDNN frontend's headers carry an experimental SM100 RMSNorm+SiLU engine that compiles kernels with
// NVRTC; its code is emitted into cudnn_graphs.cpp although batchsweep never builds that engine (we use
// convolutions and SDPA only). Linking NVRTC would add a ~100 MB library to every build and carried binary
// for nothing, so these weak definitions answer "NVRTC is not available" instead. A program that links the
// real NVRTC gets the real functions (strong symbols win).
#include <nvrtc.h>

#include <cstddef>

extern "C" {

__attribute__((weak)) nvrtcResult nvrtcVersion(int* major, int* minor) {
  if (major != nullptr) *major = 0;
  if (minor != nullptr) *minor = 0;
  return NVRTC_ERROR_INTERNAL_ERROR;
}

__attribute__((weak)) const char* nvrtcGetErrorString(nvrtcResult) {
  return "NVRTC is not linked into batchsweep";
}

__attribute__((weak)) nvrtcResult nvrtcCreateProgram(nvrtcProgram*, const char*, const char*, int,
                                                     const char* const*, const char* const*) {
  return NVRTC_ERROR_INTERNAL_ERROR;
}

__attribute__((weak)) nvrtcResult nvrtcDestroyProgram(nvrtcProgram*) {
  return NVRTC_ERROR_INTERNAL_ERROR;
}

__attribute__((weak)) nvrtcResult nvrtcCompileProgram(nvrtcProgram, int, const char* const*) {
  return NVRTC_ERROR_INTERNAL_ERROR;
}

__attribute__((weak)) nvrtcResult nvrtcGetCUBINSize(nvrtcProgram, size_t*) {
  return NVRTC_ERROR_INTERNAL_ERROR;
}

__attribute__((weak)) nvrtcResult nvrtcGetCUBIN(nvrtcProgram, char*) {
  return NVRTC_ERROR_INTERNAL_ERROR;
}

__attribute__((weak)) nvrtcResult nvrtcGetProgramLogSize(nvrtcProgram, size_t*) {
  return NVRTC_ERROR_INTERNAL_ERROR;
}

__attribute__((weak)) nvrtcResult nvrtcGetProgramLog(nvrtcProgram, char*) {
  return NVRTC_ERROR_INTERNAL_ERROR;
}

}  // extern "C"
