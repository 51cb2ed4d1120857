// The CUDA runtime API our code calls, on the CPU: one emulated device whose memory is host memory (each
// allocation between guard pages and filled with NaN bits, as a GPU's memory holds whatever was there),
// streams that run their work at once, events that read the host clock, and graph capture that records a
// stream's work for cudaGraphLaunch to replay. It is strict where the real runtime is: synchronous calls
// during a capture invalidate it, a failed call is what the next cudaGetLastError() returns, a fault in a
// kernel is sticky (every synchronising call returns it until cudaDeviceReset), an allocation over the
// device's memory fails with cudaErrorMemoryAllocation.
//
// Environment: BSW_EMU_MEMORY_MIB sets the device's memory (default 16384); BSW_EMU_RESERVED_MIB holds some
// of it as another process would; BSW_EMU_MALLOC_LIMIT_MIB fails any single cudaMalloc above it, whatever is
// free; BSW_EMU_NO_DEVICE=1 makes cudaGetDeviceCount answer cudaErrorNoDevice; BSW_EMU_DEVICES=N shows N
// alike devices (default 1), device d on PCI bus 0x1B + 0x20*d as tests/fake_nvml numbers its GPUs, with its
// own UUID. They share one memory: a process uses one of them.
#include <cuda_runtime_api.h>
#include <sys/mman.h>
#include <unistd.h>
#include <atomic>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "runtime.hpp"

struct CUstream_st {
  bool capturing = false;
  bool invalidated = false;
  std::vector<std::function<void()>> captured;
};
struct CUevent_st {
  bool recorded = false;
  std::chrono::steady_clock::time_point when;
};
struct CUgraph_st {
  std::vector<std::function<void()>> work;
};
struct CUgraphExec_st {
  std::vector<std::function<void()>> work;
};

namespace bsw::emu {
namespace {

struct Allocation {
  void* mapping;
  std::size_t mapping_bytes;
  std::size_t bytes;
};

uint64_t device_memory();
uint64_t reserved_memory();

struct State {
  std::recursive_mutex mutex;
  std::map<uintptr_t, Allocation> device;  // by start address
  std::set<void*> host;
  std::set<cudaStream_t> streams;
  uint64_t used = reserved_memory();  // another process's share, then our allocations
  cudaError_t last_error = cudaSuccess;
  // A fault inside a kernel (or a library call) poisons the context as on a GPU: every later synchronising
  // call returns it, until cudaDeviceReset.
  cudaError_t sticky = cudaSuccess;
  std::map<cudaError_t, std::string> messages;
  std::string log;
  int capturing = 0;  // streams capturing now
  int current_device = 0;
};

State& state() {
  static State s;
  return s;
}

uint64_t device_memory() {
  static const uint64_t bytes = [] {
    const char* v = std::getenv("BSW_EMU_MEMORY_MIB");
    const uint64_t mib = v != nullptr ? std::strtoull(v, nullptr, 10) : 0;
    return (mib > 0 ? mib : 16384) << 20;
  }();
  return bytes;
}

uint64_t reserved_memory() {
  const char* v = std::getenv("BSW_EMU_RESERVED_MIB");
  return std::min<uint64_t>(v != nullptr ? std::strtoull(v, nullptr, 10) << 20 : 0, device_memory());
}

int device_count() {
  const char* v = std::getenv("BSW_EMU_DEVICES");
  const long n = v != nullptr ? std::strtol(v, nullptr, 10) : 1;
  return n >= 1 && n <= 8 ? static_cast<int>(n) : 1;
}

bool valid_device(int device) {
  return device >= 0 && device < device_count();
}

bool no_device() {
  const char* v = std::getenv("BSW_EMU_NO_DEVICE");
  return v != nullptr && std::string(v) == "1";
}

cudaError_t fail(cudaError_t e) {
  state().last_error = e;
  return e;
}

// A synchronous call while a stream captures: the real runtime refuses it and invalidates the capture.
cudaError_t refuse_during_capture(const char* call) {
  State& s = state();
  if (s.capturing == 0) return cudaSuccess;
  for (cudaStream_t st : s.streams)
    if (st->capturing) st->invalidated = true;
  const std::string m = std::string(call) + " during stream capture";
  s.messages[cudaErrorStreamCaptureUnsupported] = m;
  s.log += m + "\n";
  return fail(cudaErrorStreamCaptureUnsupported);
}

const Allocation* find(const void* p) {
  State& s = state();
  const auto address = reinterpret_cast<uintptr_t>(p);
  auto it = s.device.upper_bound(address);
  if (it == s.device.begin()) return nullptr;
  --it;
  if (address >= it->first + std::max<std::size_t>(it->second.bytes, 1)) return nullptr;
  return &it->second;
}

bool range_ok(const void* p, std::size_t bytes) {
  const auto address = reinterpret_cast<uintptr_t>(p);
  State& s = state();
  auto it = s.device.upper_bound(address);
  if (it == s.device.begin()) return false;
  --it;
  return address >= it->first && address + bytes <= it->first + it->second.bytes;
}

bool is_host(const void* p) {
  return find(p) == nullptr;
}

cudaError_t check_copy(void* dst, const void* src, std::size_t n, cudaMemcpyKind kind, const char* call) {
  const bool dst_device = !is_host(dst), src_device = !is_host(src);
  bool ok = true;
  switch (kind) {
    case cudaMemcpyHostToDevice:
      ok = range_ok(dst, n) && !src_device;
      break;
    case cudaMemcpyDeviceToHost:
      ok = range_ok(src, n) && !dst_device;
      break;
    case cudaMemcpyDeviceToDevice:
      ok = range_ok(src, n) && range_ok(dst, n);
      break;
    case cudaMemcpyHostToHost:
      ok = !src_device && !dst_device;
      break;
    case cudaMemcpyDefault:
      ok = (!dst_device || range_ok(dst, n)) && (!src_device || range_ok(src, n));
      break;
  }
  if (ok || n == 0) return cudaSuccess;
  const std::string m = std::string(call) + " of " + std::to_string(n) + " bytes (kind " +
                        std::to_string(static_cast<int>(kind)) +
                        ") reaches outside a device allocation or copies the wrong way";
  State& s = state();
  s.messages[cudaErrorInvalidValue] = m;
  s.log += m + "\n";
  std::cerr << "[cuda emulator] " << m << "\n";
  return fail(cudaErrorInvalidValue);
}

bool known_stream(cudaStream_t stream) {
  return stream == nullptr || state().streams.count(stream) != 0;
}

}  // namespace

cudaError_t enqueue(cudaStream_t stream, std::function<void()> work) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (!known_stream(stream)) return fail(cudaErrorInvalidResourceHandle);
  if (stream == nullptr && s.capturing > 0) {
    // The legacy stream synchronises with every stream; using it while one captures breaks the capture.
    for (cudaStream_t st : s.streams)
      if (st->capturing) st->invalidated = true;
    s.messages[cudaErrorStreamCaptureImplicit] = "work on the legacy default stream during a capture";
    return fail(cudaErrorStreamCaptureImplicit);
  }
  if (stream != nullptr && stream->capturing) {
    stream->captured.push_back(std::move(work));
    return cudaSuccess;
  }
  work();
  return cudaSuccess;
}

void set_launch_error(cudaError_t error, const std::string& message) {
  State& s = state();
  s.last_error = error;
  if (error == cudaErrorLaunchFailure || error == cudaErrorIllegalAddress) s.sticky = error;
  s.messages[error] = message;
  s.log += message + "\n";
  std::cerr << "[cuda emulator] " << message << "\n";
}

bool device_range_ok(const void* p, std::size_t bytes) {
  std::lock_guard lock(state().mutex);
  return range_ok(p, bytes);
}

std::string error_log() {
  return state().log;
}

}  // namespace bsw::emu

using bsw::emu::fail;
using bsw::emu::state;

// ---- errors ----

cudaError_t cudaGetLastError() {
  const cudaError_t e = state().last_error;
  state().last_error = state().sticky;
  return e;
}

cudaError_t cudaPeekAtLastError() {
  return state().last_error;
}

namespace bsw::emu {
namespace {
// What a synchronising call returns: the sticky fault, if any.
cudaError_t synchronised() {
  return state().sticky == cudaSuccess ? cudaSuccess : fail(state().sticky);
}
}  // namespace
}  // namespace bsw::emu

cudaError_t cudaDeviceReset() {
  std::lock_guard lock(state().mutex);
  state().sticky = cudaSuccess;
  state().last_error = cudaSuccess;
  return cudaSuccess;
}

const char* cudaGetErrorName(cudaError_t error) {
  switch (error) {
    case cudaSuccess:
      return "cudaSuccess";
    case cudaErrorInvalidValue:
      return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation:
      return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration:
      return "cudaErrorInvalidConfiguration";
    case cudaErrorLaunchFailure:
      return "cudaErrorLaunchFailure";
    case cudaErrorInvalidDevice:
      return "cudaErrorInvalidDevice";
    case cudaErrorNoDevice:
      return "cudaErrorNoDevice";
    case cudaErrorInvalidResourceHandle:
      return "cudaErrorInvalidResourceHandle";
    case cudaErrorStreamCaptureUnsupported:
      return "cudaErrorStreamCaptureUnsupported";
    case cudaErrorStreamCaptureInvalidated:
      return "cudaErrorStreamCaptureInvalidated";
    case cudaErrorStreamCaptureImplicit:
      return "cudaErrorStreamCaptureImplicit";
    case cudaErrorIllegalState:
      return "cudaErrorIllegalState";
    case cudaErrorIllegalAddress:
      return "cudaErrorIllegalAddress";
    case cudaErrorNotSupported:
      return "cudaErrorNotSupported";
    default:
      return "cudaErrorUnknown";
  }
}

const char* cudaGetErrorString(cudaError_t error) {
  if (error == cudaSuccess) return "no error";
  if (error == cudaErrorNoDevice) return "no CUDA-capable device is detected (BSW_EMU_NO_DEVICE=1)";
  if (error == cudaErrorMemoryAllocation) return "out of memory";
  const auto it = state().messages.find(error);
  return it != state().messages.end() ? it->second.c_str() : cudaGetErrorName(error);
}

// ---- device ----

cudaError_t cudaGetDeviceCount(int* count) {
  if (bsw::emu::no_device()) {
    *count = 0;
    return fail(cudaErrorNoDevice);
  }
  *count = bsw::emu::device_count();
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  if (bsw::emu::no_device()) return fail(cudaErrorNoDevice);
  if (!bsw::emu::valid_device(device)) return fail(cudaErrorInvalidDevice);
  const std::lock_guard lock(bsw::emu::state().mutex);
  bsw::emu::state().current_device = device;
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int* device) {
  const std::lock_guard lock(bsw::emu::state().mutex);
  *device = bsw::emu::state().current_device;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (!bsw::emu::valid_device(device) || bsw::emu::no_device()) return fail(cudaErrorInvalidDevice);
  std::memset(prop, 0, sizeof(*prop));
  std::strncpy(prop->name, "batchsweep CPU emulator", sizeof(prop->name) - 1);
  static_assert(sizeof(prop->uuid.bytes) == 16);
  std::memcpy(prop->uuid.bytes, "bsw-emulator-gpu", 16);
  if (device > 0) prop->uuid.bytes[15] = static_cast<char>('0' + device);  // "bsw-emulator-gp1", ...
  prop->totalGlobalMem = bsw::emu::device_memory();
  prop->sharedMemPerBlock = 48 * 1024;
  prop->warpSize = 32;
  prop->maxThreadsPerBlock = 1024;
  prop->maxThreadsDim[0] = prop->maxThreadsDim[1] = 1024;
  prop->maxThreadsDim[2] = 64;
  prop->maxGridSize[0] = 0x7FFFFFFF;
  prop->maxGridSize[1] = prop->maxGridSize[2] = 65535;
  // BSW_EMU_COMPUTE_CAPABILITY=7.0: an older GPU (a V100), for the backend's refusal of it.
  prop->major = 9;
  prop->minor = 0;
  if (const char* cc = std::getenv("BSW_EMU_COMPUTE_CAPABILITY"); cc != nullptr && std::strlen(cc) >= 3) {
    prop->major = cc[0] - '0';
    prop->minor = cc[2] - '0';
  }
  prop->multiProcessorCount = 132;
  prop->l2CacheSize = 50 << 20;
  prop->memoryBusWidth = 6144;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  if (!bsw::emu::valid_device(device)) return fail(cudaErrorInvalidDevice);
  switch (attr) {
    case cudaDevAttrClockRate:
      *value = 1980000;  // kHz, an H200's boost clock
      return cudaSuccess;
    case cudaDevAttrMemoryClockRate:
      *value = 3201000;
      return cudaSuccess;
    default:
      return fail(cudaErrorInvalidValue);
  }
}

cudaError_t cudaDeviceGetPCIBusId(char* id, int length, int device) {
  if (!bsw::emu::valid_device(device)) return fail(cudaErrorInvalidDevice);
  // The bus of tests/fake_nvml's GPU `device`, so telemetry matches this device to it as it would a real one.
  if (length > 0)
    std::snprintf(id, static_cast<std::size_t>(length), "00000000:%02X:00.0", 0x1B + 0x20 * device);
  return cudaSuccess;
}

cudaError_t cudaDriverGetVersion(int* version) {
  *version = CUDART_VERSION;
  return cudaSuccess;
}

cudaError_t cudaRuntimeGetVersion(int* version) {
  *version = CUDART_VERSION;
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize() {
  std::lock_guard lock(state().mutex);
  if (const cudaError_t e = bsw::emu::refuse_during_capture("cudaDeviceSynchronize"); e != cudaSuccess)
    return e;
  return bsw::emu::synchronised();
}

// ---- memory ----

cudaError_t cudaMalloc(void** p, size_t bytes) {
  auto& s = state();
  std::lock_guard lock(s.mutex);
  *p = nullptr;
  if (const cudaError_t e = bsw::emu::refuse_during_capture("cudaMalloc"); e != cudaSuccess) return e;
  if (bytes > bsw::emu::device_memory() - s.used) return fail(cudaErrorMemoryAllocation);
  // BSW_EMU_MALLOC_LIMIT_MIB: no single allocation above it succeeds, though cudaMemGetInfo says there is
  // room (a fragmented device, or another process allocating between the check and the call).
  if (const char* v = std::getenv("BSW_EMU_MALLOC_LIMIT_MIB");
      v != nullptr && bytes > std::strtoull(v, nullptr, 10) << 20)
    return fail(cudaErrorMemoryAllocation);
  // The buffer ends (rounded to 256 bytes) at a PROT_NONE page, so a kernel that runs past it faults.
  const std::size_t page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  const std::size_t rounded = (std::max<std::size_t>(bytes, 1) + 255) / 256 * 256;
  const std::size_t data = (rounded + page - 1) / page * page;
  void* mapping = mmap(nullptr, data + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mapping == MAP_FAILED) return fail(cudaErrorMemoryAllocation);
  mprotect(static_cast<char*>(mapping) + data, page, PROT_NONE);
  char* start = static_cast<char*>(mapping) + (data - rounded);
  std::memset(start, 0xFF, rounded);  // NaN in every float type: reading unwritten memory shows
  s.device[reinterpret_cast<uintptr_t>(start)] = {mapping, data + page, bytes};
  s.used += bytes;
  *p = start;
  return cudaSuccess;
}

cudaError_t cudaFree(void* p) {
  auto& s = state();
  std::lock_guard lock(s.mutex);
  if (p == nullptr) return cudaSuccess;
  const auto it = s.device.find(reinterpret_cast<uintptr_t>(p));
  if (it == s.device.end()) return fail(cudaErrorInvalidValue);
  s.used -= it->second.bytes;
  munmap(it->second.mapping, it->second.mapping_bytes);
  s.device.erase(it);
  return cudaSuccess;
}

cudaError_t cudaMallocHost(void** p, size_t bytes) {
  *p = std::aligned_alloc(256, (std::max<std::size_t>(bytes, 1) + 255) / 256 * 256);
  if (*p == nullptr) return fail(cudaErrorMemoryAllocation);
  std::lock_guard lock(state().mutex);
  state().host.insert(*p);
  return cudaSuccess;
}

cudaError_t cudaFreeHost(void* p) {
  std::lock_guard lock(state().mutex);
  if (p == nullptr) return cudaSuccess;
  if (state().host.erase(p) == 0) return fail(cudaErrorInvalidValue);
  std::free(p);
  return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  std::lock_guard lock(state().mutex);
  *total_bytes = bsw::emu::device_memory();
  *free_bytes = bsw::emu::device_memory() - state().used;
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t n, cudaMemcpyKind kind) {
  std::lock_guard lock(state().mutex);
  if (const cudaError_t e = bsw::emu::refuse_during_capture("cudaMemcpy"); e != cudaSuccess) return e;
  if (const cudaError_t e = bsw::emu::synchronised(); e != cudaSuccess) return e;
  if (const cudaError_t e = bsw::emu::check_copy(dst, src, n, kind, "cudaMemcpy"); e != cudaSuccess) return e;
  if (n > 0) std::memmove(dst, src, n);
  return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t n, cudaMemcpyKind kind, cudaStream_t stream) {
  std::lock_guard lock(state().mutex);
  if (const cudaError_t e = bsw::emu::check_copy(dst, src, n, kind, "cudaMemcpyAsync"); e != cudaSuccess)
    return e;
  const cudaError_t e = bsw::emu::enqueue(stream, [dst, src, n] {
    if (n > 0) std::memmove(dst, src, n);
  });
  return e == cudaSuccess ? e : fail(e);
}

cudaError_t cudaMemset(void* p, int value, size_t n) {
  std::lock_guard lock(state().mutex);
  if (const cudaError_t e = bsw::emu::refuse_during_capture("cudaMemset"); e != cudaSuccess) return e;
  if (n > 0 && !bsw::emu::range_ok(p, n)) return fail(cudaErrorInvalidValue);
  std::memset(p, value, n);
  return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void* p, int value, size_t n, cudaStream_t stream) {
  std::lock_guard lock(state().mutex);
  if (n > 0 && !bsw::emu::range_ok(p, n)) {
    bsw::emu::set_launch_error(cudaErrorInvalidValue, "cudaMemsetAsync of " + std::to_string(n) +
                                                          " bytes reaches outside a device allocation");
    return fail(cudaErrorInvalidValue);
  }
  const cudaError_t e = bsw::emu::enqueue(stream, [p, value, n] { std::memset(p, value, n); });
  return e == cudaSuccess ? e : fail(e);
}

// ---- streams and events ----

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int /*flags*/) {
  std::lock_guard lock(state().mutex);
  *stream = new CUstream_st;
  state().streams.insert(*stream);
  return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  std::lock_guard lock(state().mutex);
  if (state().streams.erase(stream) == 0) return fail(cudaErrorInvalidResourceHandle);
  if (stream->capturing) --state().capturing;
  delete stream;
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  std::lock_guard lock(state().mutex);
  if (!bsw::emu::known_stream(stream)) return fail(cudaErrorInvalidResourceHandle);
  if (const cudaError_t e = bsw::emu::refuse_during_capture("cudaStreamSynchronize"); e != cudaSuccess)
    return e;
  return bsw::emu::synchronised();
}

cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode /*mode*/) {
  std::lock_guard lock(state().mutex);
  if (stream == nullptr) return fail(cudaErrorStreamCaptureUnsupported);
  if (!bsw::emu::known_stream(stream)) return fail(cudaErrorInvalidResourceHandle);
  if (stream->capturing) return fail(cudaErrorIllegalState);
  stream->capturing = true;
  stream->invalidated = false;
  stream->captured.clear();
  ++state().capturing;
  return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph) {
  std::lock_guard lock(state().mutex);
  *graph = nullptr;
  if (!bsw::emu::known_stream(stream) || stream == nullptr) return fail(cudaErrorInvalidResourceHandle);
  if (!stream->capturing) return fail(cudaErrorIllegalState);
  stream->capturing = false;
  --state().capturing;
  if (stream->invalidated) {
    stream->captured.clear();
    return fail(cudaErrorStreamCaptureInvalidated);
  }
  *graph = new CUgraph_st{std::move(stream->captured)};
  stream->captured.clear();
  return cudaSuccess;
}

namespace {
std::atomic<bool> g_fail_next_instantiate{false};
}  // namespace

void bsw::emu::fail_next_graph_instantiate() {
  g_fail_next_instantiate = true;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long /*flags*/) {
  if (graph == nullptr) return fail(cudaErrorInvalidValue);
  if (g_fail_next_instantiate.exchange(false)) return fail(cudaErrorMemoryAllocation);
  *exec = new CUgraphExec_st{graph->work};
  return cudaSuccess;
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) {
  if (exec == nullptr) return fail(cudaErrorInvalidValue);
  if (const cudaError_t e = bsw::emu::synchronised(); e != cudaSuccess) return e;
  const cudaError_t e = bsw::emu::enqueue(stream, [exec] {
    for (const auto& work : exec->work) work();
  });
  return e == cudaSuccess ? e : fail(e);
}

cudaError_t cudaGraphUpload(cudaGraphExec_t exec, cudaStream_t stream) {
  if (exec == nullptr) return fail(cudaErrorInvalidValue);
  std::lock_guard lock(state().mutex);
  return bsw::emu::known_stream(stream) ? cudaSuccess : fail(cudaErrorInvalidResourceHandle);
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  delete graph;
  return cudaSuccess;
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
  delete exec;
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t* event) {
  *event = new CUevent_st;
  return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  delete event;
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  if (event == nullptr) return fail(cudaErrorInvalidResourceHandle);
  const cudaError_t e = bsw::emu::enqueue(stream, [event] {
    event->recorded = true;
    event->when = std::chrono::steady_clock::now();
  });
  return e == cudaSuccess ? e : fail(e);
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  if (event == nullptr) return fail(cudaErrorInvalidResourceHandle);
  std::lock_guard lock(state().mutex);
  if (const cudaError_t e = bsw::emu::refuse_during_capture("cudaEventSynchronize"); e != cudaSuccess)
    return e;
  return bsw::emu::synchronised();
}

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  if (start == nullptr || end == nullptr) return fail(cudaErrorInvalidResourceHandle);
  if (!start->recorded || !end->recorded) return fail(cudaErrorInvalidResourceHandle);
  *ms = std::chrono::duration<float, std::milli>(end->when - start->when).count();
  return cudaSuccess;
}

// ---- what only the cuDNN frontend's headers reach (cuDNN is not emulated): refused, never faked ----

cudaError_t cudaStreamGetCaptureInfo(cudaStream_t stream, cudaStreamCaptureStatus* status,
                                     unsigned long long* id, cudaGraph_t* graph,
                                     const cudaGraphNode_t** dependencies, const cudaGraphEdgeData** edges,
                                     size_t* count) {
  std::lock_guard lock(state().mutex);
  if (!bsw::emu::known_stream(stream)) return fail(cudaErrorInvalidResourceHandle);
  *status = stream != nullptr && stream->capturing
                ? (stream->invalidated ? cudaStreamCaptureStatusInvalidated : cudaStreamCaptureStatusActive)
                : cudaStreamCaptureStatusNone;
  if (id != nullptr) *id = reinterpret_cast<uintptr_t>(stream);
  if (graph != nullptr) *graph = nullptr;
  if (dependencies != nullptr) *dependencies = nullptr;
  if (edges != nullptr) *edges = nullptr;
  if (count != nullptr) *count = 0;
  return cudaSuccess;
}

cudaError_t cudaThreadExchangeStreamCaptureMode(cudaStreamCaptureMode* /*mode*/) {
  return cudaSuccess;
}

cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* attributes, const void* p) {
  std::memset(attributes, 0, sizeof(*attributes));
  std::lock_guard lock(state().mutex);
  const bool device = bsw::emu::find(p) != nullptr;
  attributes->type = device ? cudaMemoryTypeDevice : cudaMemoryTypeHost;
  attributes->devicePointer = device ? const_cast<void*>(p) : nullptr;
  attributes->hostPointer = device ? nullptr : const_cast<void*>(p);
  return cudaSuccess;
}

cudaError_t cudaGetDriverEntryPointByVersion(const char* /*symbol*/, void** function,
                                             unsigned int /*version*/, unsigned long long /*flags*/,
                                             cudaDriverEntryPointQueryResult* status) {
  *function = nullptr;
  if (status != nullptr) *status = cudaDriverEntryPointSymbolNotFound;
  return fail(cudaErrorNotSupported);
}

cudaError_t cudaGraphRetainUserObject(cudaGraph_t, cudaUserObject_t, unsigned int, unsigned int) {
  return fail(cudaErrorNotSupported);
}
cudaError_t cudaUserObjectCreate(cudaUserObject_t*, void*, cudaHostFn_t, unsigned int, unsigned int) {
  return fail(cudaErrorNotSupported);
}
cudaError_t cudaUserObjectRelease(cudaUserObject_t, unsigned int) {
  return fail(cudaErrorNotSupported);
}
cudaError_t cudaKernelSetAttributeForDevice(cudaKernel_t, cudaFuncAttribute, int, int) {
  return fail(cudaErrorNotSupported);
}
cudaError_t cudaLaunchKernel(const void*, dim3, dim3, void**, size_t, cudaStream_t) {
  return fail(cudaErrorNotSupported);
}
cudaError_t cudaLibraryGetKernel(cudaKernel_t*, cudaLibrary_t, const char*) {
  return fail(cudaErrorNotSupported);
}
cudaError_t cudaLibraryLoadData(cudaLibrary_t*, const void*, cudaJitOption*, void**, unsigned int,
                                cudaLibraryOption*, void**, unsigned int) {
  return fail(cudaErrorNotSupported);
}
cudaError_t cudaLibraryUnload(cudaLibrary_t) {
  return fail(cudaErrorNotSupported);
}
