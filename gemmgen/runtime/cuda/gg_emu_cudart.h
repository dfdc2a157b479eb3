// gg_emu_cudart.h: the part of the CUDA runtime API that host code calls
// (a launcher such as gemmgen's launch_<kernel>()), on the CPU emulator.
// Included by gg_emu.h only; docs/cuda-emulation.md, "Host code", has the
// full story.
//
// The functions are CUDA's own, with the signatures of the real
// cuda_runtime_api.h (which gg_emu.h includes): a host translation unit
// compiled against CUDA's headers links against these instead of libcudart.
// `kernel<<<grid, block, smem, stream>>>(args)` in an emulated source is
// rewritten by gemmgen.harness.cuda_emu into gg::emu::chevron(...)(args),
// which converts the arguments to the kernel's parameter types as nvcc does.
//
// Modelled:
// - one device, the emulated arch (gg_emu.h, "Emulated device"):
//   cudaGetDeviceProperties / cudaDeviceGetAttribute give its limits;
// - launches (cudaLaunchKernel, <<<>>>, cudaLaunchKernelExC and CUDA's
//   cudaLaunchKernelEx templates over it, whose cluster attribute launches
//   thread-block clusters) get the driver's checks: grid and
//   block limits, __launch_bounds__, the cluster dimension, dynamic shared memory against the
//   kernel's cudaFuncAttributeMaxDynamicSharedMemorySize (48 KiB until
//   cudaFuncSetAttribute raises it, at most the arch's opt-in limit). A
//   rejected launch launches nothing and leaves its cudaError_t for
//   cudaGetLastError / cudaPeekAtLastError, as on a GPU;
// - device memory (cudaMalloc: guarded, filled with 0xFF), copies and
//   memsets, which must stay inside one live allocation;
// - streams: ordered queues whose work completes when it is enqueued (every
//   launch and copy is synchronous), so any stream order is kept and
//   cudaStreamSynchronize has nothing to wait for;
// - errors: each failed call returns its cudaError_t, records it as the
//   thread's last error and prints "gg-emu: rejected: <why>" on stderr.
// - cudaGetDriverEntryPoint[ByVersion] finds cuTensorMapEncodeTiled, the
//   emulator's (gg_emu_sm90.h), with the driver's checks and CUresults;
// Not modelled: events, graphs, pinned or managed memory, peer access,
// several devices, asynchronous overlap, sticky errors (a kernel fault ends
// the process instead, status 70 / 71).
//
// This header holds the templates (the `<<<>>>` call, the overloads CUDA
// gives for kernels named by their function); the runtime API itself is
// compiled once per build mode in gg_emu_cudart.cc.
#pragma once

// CUDA declares CUstream_st and never defines it; here a stream is this.
struct CUstream_st {
  unsigned magic;
  unsigned id;
};


namespace gg::emu {

// cudaLaunchKernel and `<<<>>>`: every launch runs to completion before the
// call returns (gg_emu_cudart.cc).
cudaError_t api_launch(const void* fn, dim3 grid, dim3 block, void** args, std::size_t smem, cudaStream_t stream);

// `kernel<<<grid, block, smem, stream>>>(args...)`, after cuda_emu's rewrite:
// chevron(kernel, grid, block, smem, stream)(args...). The call converts the
// arguments to the kernel's parameter types, as nvcc does; a launch error
// is left for cudaGetLastError.
template <class... A>
struct KernelCall {
  void (*fn)(A...);
  dim3 grid;
  dim3 block;
  std::size_t smem;
  cudaStream_t stream;

  void operator()(A... args) const {
    void* pointers[sizeof...(A) + 1] = {const_cast<void*>(static_cast<const void*>(&args))...};
    api_launch(reinterpret_cast<const void*>(fn), grid, block, pointers, smem, stream);
  }
};

template <class... A>
KernelCall<A...> chevron(void (*fn)(A...), dim3 grid, dim3 block, std::size_t smem = 0, cudaStream_t stream = nullptr) {
  return KernelCall<A...>{fn, grid, block, smem, stream};
}

}  // namespace gg::emu


// cuda_runtime.h gives these overloads for kernels named by their function
// only under nvcc.
template <class T>
inline cudaError_t cudaFuncSetAttribute(T* entry, cudaFuncAttribute attr, int value) {
  return ::cudaFuncSetAttribute(reinterpret_cast<const void*>(entry), attr, value);
}

template <class T>
inline cudaError_t cudaFuncGetAttributes(cudaFuncAttributes* attr, T* entry) {
  return ::cudaFuncGetAttributes(attr, reinterpret_cast<const void*>(entry));
}

