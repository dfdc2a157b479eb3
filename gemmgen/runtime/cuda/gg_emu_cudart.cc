// gg_emu_cudart.cc: the CUDA runtime API for host code on the emulator
// (gg_emu_cudart.h describes what is modelled) and host programs
// (gg_emu_run_host), compiled once per build mode into the core objects.
#include "gg_emu_internal.h"

namespace gg::emu {

inline constexpr unsigned kStreamMagic = 0x67677374u;

struct Runtime {
  std::mutex mu;
  std::vector<CUstream_st*> streams;
  unsigned next_stream = 1;
};

Runtime& runtime() {
  static Runtime r;
  return r;
}

// The calling host thread's last error (cudaGetLastError). NB: a nonzero
// initialiser keeps it in .tdata (see Tls in gg_emu.h).
struct HostThread {
  int last_error;
  unsigned magic;
};
thread_local HostThread host_thread{0, 0x67676872u};

// The result of a runtime call: records a failure as the thread's last
// error and reports it with last_error()'s message.
cudaError_t api_result(int code) {
  if (code != 0) {
    host_thread.last_error = code;
    std::fprintf(stderr, "gg-emu: rejected: %s\n", last_error().c_str());
    std::fflush(stderr);
  }
  return static_cast<cudaError_t>(code);
}

cudaError_t api_error(cudaError_t code, const std::string& message) {
  return api_result(reject(code, message));
}

bool valid_stream(cudaStream_t s) {
  if (s == nullptr || s == cudaStreamLegacy || s == cudaStreamPerThread) return true;
  Runtime& r = runtime();
  std::lock_guard<std::mutex> lock(r.mu);
  return std::find(r.streams.begin(), r.streams.end(), s) != r.streams.end();
}

cudaError_t check_stream(cudaStream_t s, const char* call) {
  if (valid_stream(s)) return cudaSuccess;
  return api_error(cudaErrorInvalidResourceHandle,
                   format("%s: stream %p was not created by cudaStreamCreate or was destroyed "
                          "(cudaErrorInvalidResourceHandle)",
                          call, static_cast<void*>(s)));
}

// True when [p, p + bytes) lies inside one live device allocation.
bool in_device_buffer(const void* p, std::size_t bytes) {
  const auto* c = static_cast<const unsigned char*>(p);
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  for (const DeviceBuffer& b : r.buffers) {
    if (c >= b.data && c <= b.data + b.bytes && bytes <= static_cast<std::size_t>(b.data + b.bytes - c)) return true;
  }
  return false;
}

bool is_device_allocation(const void* p) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  for (const DeviceBuffer& b : r.buffers) {
    if (b.data == p) return true;
  }
  return false;
}

const char* memcpy_kind_name(cudaMemcpyKind kind) {
  switch (kind) {
    case cudaMemcpyHostToHost:
      return "cudaMemcpyHostToHost";
    case cudaMemcpyHostToDevice:
      return "cudaMemcpyHostToDevice";
    case cudaMemcpyDeviceToHost:
      return "cudaMemcpyDeviceToHost";
    case cudaMemcpyDeviceToDevice:
      return "cudaMemcpyDeviceToDevice";
    case cudaMemcpyDefault:
      return "cudaMemcpyDefault";
  }
  return "an invalid cudaMemcpyKind";
}

cudaError_t copy(void* dst, const void* src, std::size_t count, cudaMemcpyKind kind, const char* call) {
  const bool dst_device = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
  const bool src_device = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
  if (kind != cudaMemcpyHostToHost && !dst_device && !src_device && kind != cudaMemcpyDefault) {
    return api_error(cudaErrorInvalidMemcpyDirection,
                     format("%s: %d is not a cudaMemcpyKind (cudaErrorInvalidMemcpyDirection)", call,
                            static_cast<int>(kind)));
  }
  if (count == 0) return cudaSuccess;
  if (dst_device && !in_device_buffer(dst, count)) {
    return api_error(cudaErrorInvalidValue,
                     format("%s(%s): destination [%p, +%zu) is not inside one device allocation (cudaErrorInvalidValue)",
                            call, memcpy_kind_name(kind), dst, count));
  }
  if (src_device && !in_device_buffer(src, count)) {
    return api_error(cudaErrorInvalidValue,
                     format("%s(%s): source [%p, +%zu) is not inside one device allocation (cudaErrorInvalidValue)",
                            call, memcpy_kind_name(kind), src, count));
  }
  std::memmove(dst, src, count);
  return cudaSuccess;
}

cudaError_t fill(void* dst, int value, std::size_t count, const char* call) {
  if (count == 0) return cudaSuccess;
  if (!in_device_buffer(dst, count)) {
    return api_error(cudaErrorInvalidValue,
                     format("%s: [%p, +%zu) is not inside one device allocation (cudaErrorInvalidValue)", call, dst,
                            count));
  }
  std::memset(dst, value, count);
  return cudaSuccess;
}

KernelInfo* kernel_at(const void* fn, const char* call) {
  KernelInfo* k = find_kernel_at(fn);
  if (k == nullptr) {
    api_error(cudaErrorInvalidDeviceFunction,
              format("%s: %p is not a kernel of this module (only registered extern \"C\" __global__ functions are; "
                     "cudaErrorInvalidDeviceFunction)",
                     call, fn));
  }
  return k;
}

// cudaLaunchKernel and `<<<>>>`: every launch runs to completion before the
// call returns.
cudaError_t api_launch(const void* fn, dim3 grid, dim3 block, void** args, std::size_t smem,
                              cudaStream_t stream) {
  KernelInfo* k = kernel_at(fn, "cudaLaunchKernel");
  if (k == nullptr) return cudaErrorInvalidDeviceFunction;
  if (const cudaError_t e = check_stream(stream, "cudaLaunchKernel")) return e;
  const unsigned g[3] = {grid.x, grid.y, grid.z};
  const unsigned b[3] = {block.x, block.y, block.z};
  return api_result(run_kernel(k, g, b, smem, args));
}

// cudaLaunchKernelExC (and cuda_runtime.h's cudaLaunchKernelEx templates,
// which call it): the config's grid, block, shared memory and stream, and
// its attributes: cudaLaunchAttributeClusterDimension is modelled; the
// scheduling hints (priority, carve-out, cluster scheduling policy, memory
// sync domains, programmatic stream serialization off) are accepted and
// change nothing; any other attribute is refused as not modelled.
cudaError_t api_launch_ex(const cudaLaunchConfig_t* config, const void* fn, void** args) {
  static constexpr const char* kCall = "cudaLaunchKernelEx";
  if (config == nullptr) return api_error(cudaErrorInvalidValue, "cudaLaunchKernelEx: config is NULL (cudaErrorInvalidValue)");
  KernelInfo* k = kernel_at(fn, kCall);
  if (k == nullptr) return cudaErrorInvalidDeviceFunction;
  if (const cudaError_t e = check_stream(config->stream, kCall)) return e;
  if (config->numAttrs != 0 && config->attrs == nullptr) {
    return api_error(cudaErrorInvalidValue,
                     format("cudaLaunchKernelEx(%s): numAttrs is %u but attrs is NULL (cudaErrorInvalidValue)",
                            k->name.c_str(), config->numAttrs));
  }
  unsigned cluster[3] = {1, 1, 1};
  bool clustered = false;
  for (unsigned i = 0; i < config->numAttrs; ++i) {
    const cudaLaunchAttribute& a = config->attrs[i];
    switch (a.id) {
      case cudaLaunchAttributeClusterDimension:
        cluster[0] = a.val.clusterDim.x;
        cluster[1] = a.val.clusterDim.y;
        cluster[2] = a.val.clusterDim.z;
        clustered = true;
        break;
      case cudaLaunchAttributeIgnore:
      case cudaLaunchAttributePriority:
      case cudaLaunchAttributeClusterSchedulingPolicyPreference:
      case cudaLaunchAttributeMemSyncDomain:
      case cudaLaunchAttributeMemSyncDomainMap:
      case cudaLaunchAttributePreferredSharedMemoryCarveout:
        break;  // hints: nothing to model
      case cudaLaunchAttributeProgrammaticStreamSerialization:
        if (a.val.programmaticStreamSerializationAllowed == 0) break;
        [[fallthrough]];
      default:
        return api_error(cudaErrorNotSupported,
                         format("cudaLaunchKernelEx(%s): launch attribute %d (attrs[%u]) is not modelled by the "
                                "emulator (cudaErrorNotSupported)",
                                k->name.c_str(), static_cast<int>(a.id), i));
    }
  }
  // NB: gridDim and blockDim are the builtin variables' macros here.
#pragma push_macro("gridDim")
#pragma push_macro("blockDim")
#undef gridDim
#undef blockDim
  const unsigned g[3] = {config->gridDim.x, config->gridDim.y, config->gridDim.z};
  const unsigned b[3] = {config->blockDim.x, config->blockDim.y, config->blockDim.z};
#pragma pop_macro("blockDim")
#pragma pop_macro("gridDim")
  return api_result(run_kernel(k, g, b, config->dynamicSmemBytes, args, clustered ? cluster : nullptr));
}

}  // namespace gg::emu

// ---------------------------------------------------------------------------
// The runtime API (a subset), with cuda_runtime_api.h's signatures.

#define GG_EMU_CUDART extern "C" __attribute__((used))

GG_EMU_CUDART cudaError_t cudaGetLastError(void) {
  const int e = gg::emu::host_thread.last_error;
  gg::emu::host_thread.last_error = 0;
  return static_cast<cudaError_t>(e);
}

GG_EMU_CUDART cudaError_t cudaPeekAtLastError(void) {
  return static_cast<cudaError_t>(gg::emu::host_thread.last_error);
}

GG_EMU_CUDART const char* cudaGetErrorName(cudaError_t error) {
  switch (error) {
    case cudaSuccess:
      return "cudaSuccess";
    case cudaErrorInvalidValue:
      return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation:
      return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration:
      return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidMemcpyDirection:
      return "cudaErrorInvalidMemcpyDirection";
    case cudaErrorInvalidDeviceFunction:
      return "cudaErrorInvalidDeviceFunction";
    case cudaErrorNoKernelImageForDevice:
      return "cudaErrorNoKernelImageForDevice";
    case cudaErrorInvalidDevice:
      return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle:
      return "cudaErrorInvalidResourceHandle";
    case cudaErrorLaunchOutOfResources:
      return "cudaErrorLaunchOutOfResources";
    case cudaErrorNotSupported:
      return "cudaErrorNotSupported";
    case cudaErrorInvalidClusterSize:
      return "cudaErrorInvalidClusterSize";
    default:
      return "cudaErrorUnknown";
  }
}

GG_EMU_CUDART const char* cudaGetErrorString(cudaError_t error) {
  switch (error) {
    case cudaSuccess:
      return "no error";
    case cudaErrorInvalidValue:
      return "invalid argument";
    case cudaErrorMemoryAllocation:
      return "out of memory";
    case cudaErrorInvalidConfiguration:
      return "invalid configuration argument";
    case cudaErrorInvalidMemcpyDirection:
      return "invalid copy direction for memcpy";
    case cudaErrorInvalidDeviceFunction:
      return "invalid device function";
    case cudaErrorNoKernelImageForDevice:
      return "no kernel image is available for execution on the device";
    case cudaErrorInvalidDevice:
      return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle:
      return "invalid resource handle";
    case cudaErrorLaunchOutOfResources:
      return "too many resources requested for launch";
    case cudaErrorNotSupported:
      return "operation not supported";
    case cudaErrorInvalidClusterSize:
      return "a kernel launch error has occurred due to cluster misconfiguration";
    default:
      return "unrecognized error code";
  }
}

GG_EMU_CUDART cudaError_t cudaGetDeviceCount(int* count) {
  *count = 1;
  return cudaSuccess;
}

GG_EMU_CUDART cudaError_t cudaGetDevice(int* device) {
  *device = 0;
  return cudaSuccess;
}

GG_EMU_CUDART cudaError_t cudaSetDevice(int device) {
  if (device == 0) return cudaSuccess;
  return gg::emu::api_error(cudaErrorInvalidDevice,
                            gg::emu::format("cudaSetDevice(%d): the emulator has one device, 0 "
                                            "(cudaErrorInvalidDevice)",
                                            device));
}

GG_EMU_CUDART cudaError_t cudaDeviceSynchronize(void) { return cudaSuccess; }

GG_EMU_CUDART cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  using namespace gg::emu;
  if (device != 0) {
    return api_error(cudaErrorInvalidDevice,
                     format("cudaDeviceGetAttribute: no device %d (cudaErrorInvalidDevice)", device));
  }
  const Device& d = gg::emu::device();
  switch (attr) {
    case cudaDevAttrMaxThreadsPerBlock:
      *value = static_cast<int>(kMaxBlockThreads);
      return cudaSuccess;
    case cudaDevAttrMaxBlockDimX:
    case cudaDevAttrMaxBlockDimY:
      *value = static_cast<int>(kMaxBlockXY);
      return cudaSuccess;
    case cudaDevAttrMaxBlockDimZ:
      *value = static_cast<int>(kMaxBlockZ);
      return cudaSuccess;
    case cudaDevAttrMaxGridDimX:
      *value = static_cast<int>(kMaxGridX);
      return cudaSuccess;
    case cudaDevAttrMaxGridDimY:
    case cudaDevAttrMaxGridDimZ:
      *value = static_cast<int>(kMaxGridYZ);
      return cudaSuccess;
    case cudaDevAttrMaxSharedMemoryPerBlock:
      *value = kDefaultDynamicSmem;
      return cudaSuccess;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin:
      *value = static_cast<int>(d.smem_optin);
      return cudaSuccess;
    case cudaDevAttrWarpSize:
      *value = static_cast<int>(kWarpSize);
      return cudaSuccess;
    case cudaDevAttrComputeCapabilityMajor:
      *value = d.major;
      return cudaSuccess;
    case cudaDevAttrComputeCapabilityMinor:
      *value = d.minor;
      return cudaSuccess;
    case cudaDevAttrMultiProcessorCount:
      *value = d.sm_count;
      return cudaSuccess;
    case cudaDevAttrClusterLaunch:
      *value = d.major >= 9 ? 1 : 0;
      return cudaSuccess;
    default:
      return api_error(cudaErrorNotSupported,
                       format("cudaDeviceGetAttribute: attribute %d is not modelled by the emulator "
                              "(cudaErrorNotSupported)",
                              static_cast<int>(attr)));
  }
}

// The emulated arch's limits; fields the emulator does not model are 0.
GG_EMU_CUDART cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  using namespace gg::emu;
  if (device != 0) {
    return api_error(cudaErrorInvalidDevice,
                     format("cudaGetDeviceProperties: no device %d (cudaErrorInvalidDevice)", device));
  }
  const Device& d = gg::emu::device();
  std::memset(static_cast<void*>(prop), 0, sizeof(*prop));
  std::snprintf(prop->name, sizeof(prop->name), "gg-emu %s (CPU emulation)", d.arch.c_str());
  prop->major = d.major;
  prop->minor = d.minor;
  prop->warpSize = static_cast<int>(kWarpSize);
  prop->maxThreadsPerBlock = static_cast<int>(kMaxBlockThreads);
  prop->maxThreadsDim[0] = prop->maxThreadsDim[1] = static_cast<int>(kMaxBlockXY);
  prop->maxThreadsDim[2] = static_cast<int>(kMaxBlockZ);
  prop->maxGridSize[0] = static_cast<int>(kMaxGridX);
  prop->maxGridSize[1] = prop->maxGridSize[2] = static_cast<int>(kMaxGridYZ);
  prop->sharedMemPerBlock = static_cast<std::size_t>(kDefaultDynamicSmem);
  prop->sharedMemPerBlockOptin = d.smem_optin;
  prop->multiProcessorCount = d.sm_count;
  prop->unifiedAddressing = 1;
  return cudaSuccess;
}

GG_EMU_CUDART cudaError_t cudaMalloc(void** ptr, std::size_t size) {
  *ptr = gg::emu::device_malloc(size, -1);
  return cudaSuccess;
}

GG_EMU_CUDART cudaError_t cudaFree(void* ptr) {
  using namespace gg::emu;
  if (ptr == nullptr) return cudaSuccess;
  if (!is_device_allocation(ptr)) {
    return api_error(cudaErrorInvalidValue,
                     format("cudaFree(%p): not a live cudaMalloc allocation (cudaErrorInvalidValue)", ptr));
  }
  device_free(ptr);
  return cudaSuccess;
}

GG_EMU_CUDART cudaError_t cudaMemcpy(void* dst, const void* src, std::size_t count, cudaMemcpyKind kind) {
  return gg::emu::copy(dst, src, count, kind, "cudaMemcpy");
}

GG_EMU_CUDART cudaError_t cudaMemcpyAsync(void* dst, const void* src, std::size_t count, cudaMemcpyKind kind,
                                          cudaStream_t stream) {
  if (const cudaError_t e = gg::emu::check_stream(stream, "cudaMemcpyAsync")) return e;
  return gg::emu::copy(dst, src, count, kind, "cudaMemcpyAsync");
}

GG_EMU_CUDART cudaError_t cudaMemset(void* dst, int value, std::size_t count) {
  return gg::emu::fill(dst, value, count, "cudaMemset");
}

GG_EMU_CUDART cudaError_t cudaMemsetAsync(void* dst, int value, std::size_t count, cudaStream_t stream) {
  if (const cudaError_t e = gg::emu::check_stream(stream, "cudaMemsetAsync")) return e;
  return gg::emu::fill(dst, value, count, "cudaMemsetAsync");
}

GG_EMU_CUDART cudaError_t cudaStreamCreate(cudaStream_t* stream) {
  gg::emu::Runtime& r = gg::emu::runtime();
  std::lock_guard<std::mutex> lock(r.mu);
  auto* s = new CUstream_st{gg::emu::kStreamMagic, r.next_stream++};
  r.streams.push_back(s);
  *stream = s;
  return cudaSuccess;
}

GG_EMU_CUDART cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int) {
  return cudaStreamCreate(stream);
}

GG_EMU_CUDART cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  gg::emu::Runtime& r = gg::emu::runtime();
  {
    std::lock_guard<std::mutex> lock(r.mu);
    auto it = std::find(r.streams.begin(), r.streams.end(), stream);
    if (it != r.streams.end()) {
      r.streams.erase(it);
      delete stream;
      return cudaSuccess;
    }
  }
  return gg::emu::api_error(cudaErrorInvalidResourceHandle,
                            gg::emu::format("cudaStreamDestroy: stream %p was not created by cudaStreamCreate or was "
                                            "destroyed (cudaErrorInvalidResourceHandle)",
                                            static_cast<void*>(stream)));
}

GG_EMU_CUDART cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  return gg::emu::check_stream(stream, "cudaStreamSynchronize");
}

GG_EMU_CUDART cudaError_t cudaStreamQuery(cudaStream_t stream) {
  return gg::emu::check_stream(stream, "cudaStreamQuery");
}

GG_EMU_CUDART cudaError_t cudaFuncSetAttribute(const void* func, cudaFuncAttribute attr, int value) {
  using namespace gg::emu;
  KernelInfo* k = kernel_at(func, "cudaFuncSetAttribute");
  if (k == nullptr) return cudaErrorInvalidDeviceFunction;
  switch (attr) {
    case cudaFuncAttributeMaxDynamicSharedMemorySize:
      return api_result(set_max_dynamic_smem(*k, value));
    case cudaFuncAttributeNonPortableClusterSizeAllowed:
      if (value != 0 && value != 1) {
        return api_error(cudaErrorInvalidValue,
                         format("cudaFuncSetAttribute(%s, cudaFuncAttributeNonPortableClusterSizeAllowed, %d): "
                                "expected 0 or 1 (cudaErrorInvalidValue)",
                                k->name.c_str(), value));
      }
      if (value == 1 && device().major < 9) {
        return api_error(cudaErrorNotSupported,
                         format("cudaFuncSetAttribute(%s, cudaFuncAttributeNonPortableClusterSizeAllowed, 1): the "
                                "emulated %s has no clusters (cudaErrorNotSupported)",
                                k->name.c_str(), device().arch.c_str()));
      }
      k->non_portable_cluster = value == 1;
      return cudaSuccess;
    case cudaFuncAttributePreferredSharedMemoryCarveout:
      if (value >= -1 && value <= 100) return cudaSuccess;  // a hint
      return api_error(cudaErrorInvalidValue,
                       format("cudaFuncSetAttribute(%s, cudaFuncAttributePreferredSharedMemoryCarveout, %d): "
                              "expected -1..100 (cudaErrorInvalidValue)",
                              k->name.c_str(), value));
    default:
      return api_error(cudaErrorNotSupported,
                       format("cudaFuncSetAttribute(%s, attribute %d): not modelled by the emulator "
                              "(cudaErrorNotSupported)",
                              k->name.c_str(), static_cast<int>(attr)));
  }
}

// What the emulator knows of a kernel: its launch bound and dynamic shared
// memory attribute (registers and static shared memory: 0, not modelled).
GG_EMU_CUDART cudaError_t cudaFuncGetAttributes(cudaFuncAttributes* attr, const void* func) {
  using namespace gg::emu;
  KernelInfo* k = kernel_at(func, "cudaFuncGetAttributes");
  if (k == nullptr) return cudaErrorInvalidDeviceFunction;
  std::memset(static_cast<void*>(attr), 0, sizeof(*attr));
  attr->maxThreadsPerBlock = static_cast<int>(k->max_threads != 0 ? k->max_threads : kMaxBlockThreads);
  attr->maxDynamicSharedSizeBytes = k->max_dynamic_smem;
  attr->preferredShmemCarveout = -1;
  return cudaSuccess;
}

GG_EMU_CUDART cudaError_t cudaLaunchKernel(const void* func, dim3 grid, dim3 block, void** args, std::size_t smem,
                                           cudaStream_t stream) {
  return gg::emu::api_launch(func, grid, block, args, smem, stream);
}

GG_EMU_CUDART cudaError_t cudaLaunchKernelExC(const cudaLaunchConfig_t* config, const void* func, void** args) {
  return gg::emu::api_launch_ex(config, func, args);
}

// The driver entry points host code may look up: cuTensorMapEncodeTiled (the
// emulator's, gg_emu_sm90.h), so that launchers need no -lcuda.
cudaError_t gg_emu_driver_entry_point(const char* symbol, void** fn, cudaDriverEntryPointQueryResult* status) {
  using namespace gg::emu;
  if (symbol != nullptr && std::strcmp(symbol, "cuTensorMapEncodeTiled") == 0) {
    *fn = reinterpret_cast<void*>(&sm90::encode_tiled);
    if (status != nullptr) *status = cudaDriverEntryPointSuccess;
    return cudaSuccess;
  }
  *fn = nullptr;
  if (status != nullptr) *status = cudaDriverEntryPointSymbolNotFound;
  std::fprintf(stderr, "gg-emu: note: cudaGetDriverEntryPoint(%s): not a driver function the emulator provides\n",
               symbol != nullptr ? symbol : "(null)");
  return cudaSuccess;
}

GG_EMU_CUDART cudaError_t cudaGetDriverEntryPoint(const char* symbol, void** funcPtr, unsigned long long,
                                                  cudaDriverEntryPointQueryResult* driverStatus) {
  return gg_emu_driver_entry_point(symbol, funcPtr, driverStatus);
}

GG_EMU_CUDART cudaError_t cudaGetDriverEntryPointByVersion(const char* symbol, void** funcPtr, unsigned int,
                                                           unsigned long long,
                                                           cudaDriverEntryPointQueryResult* driverStatus) {
  return gg_emu_driver_entry_point(symbol, funcPtr, driverStatus);
}

#undef GG_EMU_CUDART

// ---------------------------------------------------------------------------
// Host programs: a library with `extern "C" int gg_emu_host_main(void)` (a
// test's C++ caller of a launcher) runs it in the emulator's child process
// (gg_emu_run_host). Its inputs and outputs are named byte strings:
//   request  "GGEMUHST" u32 version(=1) u32 count, then per input:
//            u32 name_len, name, u32 flags (1: size only, no data), u64 nbytes, data
//   response "GGEMUOUT" u32 version(=1) i32 status (gg_emu_host_main's result)
//            u32 count, then per output: u32 name_len, name, u64 nbytes, data

extern "C" int gg_emu_host_main(void) __attribute__((weak));

namespace gg::emu {

struct HostBlob {
  std::string name;
  bool size_only = false;
  std::vector<unsigned char> data;
  std::size_t bytes = 0;
};

struct HostIo {
  std::vector<HostBlob> inputs;
  std::vector<HostBlob> outputs;
};

HostIo& host_io() {
  static HostIo io;
  return io;
}

int run_host(const char* request_path, const char* response_path) {
  if (gg_emu_host_main == nullptr) fail("this library has no gg_emu_host_main (not a host program)");
  const std::vector<unsigned char> request = read_file(request_path);
  Reader r{request.data(), request.data() + request.size()};
  if (std::memcmp(r.take(8), "GGEMUHST", 8) != 0 || r.get<std::uint32_t>() != 1) fail("not a gg-emu host request");
  HostIo& io = host_io();
  const std::uint32_t count = r.get<std::uint32_t>();
  for (std::uint32_t i = 0; i < count; ++i) {
    HostBlob b;
    const std::uint32_t name_len = r.get<std::uint32_t>();
    b.name.assign(reinterpret_cast<const char*>(r.take(name_len)), name_len);
    b.size_only = (r.get<std::uint32_t>() & 1u) != 0;
    b.bytes = r.get<std::uint64_t>();
    if (!b.size_only) {
      const unsigned char* p = r.take(b.bytes);
      b.data.assign(p, p + b.bytes);
    }
    io.inputs.push_back(std::move(b));
  }
  install_fault_handler();
  const std::int32_t status = gg_emu_host_main();
  check_canaries();
  FILE* f = std::fopen(response_path, "wb");
  if (f == nullptr) fail("cannot write %s: %s", response_path, std::strerror(errno));
  const std::uint32_t version = 1, n = static_cast<std::uint32_t>(io.outputs.size());
  std::fwrite("GGEMUOUT", 1, 8, f);
  std::fwrite(&version, sizeof(version), 1, f);
  std::fwrite(&status, sizeof(status), 1, f);
  std::fwrite(&n, sizeof(n), 1, f);
  for (const HostBlob& b : io.outputs) {
    const std::uint32_t name_len = static_cast<std::uint32_t>(b.name.size());
    const std::uint64_t bytes = b.data.size();
    std::fwrite(&name_len, sizeof(name_len), 1, f);
    std::fwrite(b.name.data(), 1, b.name.size(), f);
    std::fwrite(&bytes, sizeof(bytes), 1, f);
    std::fwrite(b.data.data(), 1, b.data.size(), f);
  }
  std::fclose(f);
  return 0;
}

}  // namespace gg::emu

// Runs the host program a request file describes (its gg_emu_host_main) and
// writes the response file.
GG_EMU_API int gg_emu_run_host(const char* request_path, const char* response_path) {
  return gg::emu::run_host(request_path, response_path);
}

// The host program's input `name`: 1, its bytes in *data (null for a
// size-only input) and its size in *bytes; 0 when there is no such input.
GG_EMU_API int gg_emu_host_input(const char* name, const void** data, std::size_t* bytes) {
  for (const gg::emu::HostBlob& b : gg::emu::host_io().inputs) {
    if (b.name == name) {
      *data = b.size_only ? nullptr : b.data.data();
      *bytes = b.bytes;
      return 1;
    }
  }
  *data = nullptr;
  *bytes = 0;
  return 0;
}

// Hands `bytes` bytes at `data` (host memory) back to the caller as output `name`.
GG_EMU_API void gg_emu_host_output(const char* name, const void* data, std::size_t bytes) {
  const auto* p = static_cast<const unsigned char*>(data);
  gg::emu::HostBlob b;
  b.name = name;
  b.bytes = bytes;
  b.data.assign(p, p + bytes);
  gg::emu::host_io().outputs.push_back(std::move(b));
}
