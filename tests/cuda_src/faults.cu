// faults.cu: kernels that each break one rule of CUDA on purpose, so that
// tests/cuda/emulator/test_cuda_runtime_faults.py can check what the emulator reports.
// Emulator only: several of them would hang or crash a GPU.
#include <cassert>

#include "gg_runtime.cuh"

// Threads 64 and up return before a __syncthreads the others wait at.
extern "C" __global__ void barrier_after_exit(float* out) {
  if (threadIdx.x >= 64) return;
  __syncthreads();
  out[threadIdx.x] = 1.0f;
}

// Lanes 16-31 skip a shuffle whose mask names them.
extern "C" __global__ void partial_warp_shuffle(float* out) {
  float v = static_cast<float>(threadIdx.x);
  if (threadIdx.x < 16) v = gg::shfl_xor(v, 1);
  out[threadIdx.x] = v;
}

// Even lanes shuffle while odd lanes sync the warp.
extern "C" __global__ void divergent_collectives(float* out) {
  float v = static_cast<float>(threadIdx.x);
  if (threadIdx.x % 2 == 0) {
    v = gg::shfl_xor(v, 2);
  } else {
    __syncwarp();
  }
  out[threadIdx.x] = v;
}

// A full-warp shuffle in a block of fewer than 32 threads.
extern "C" __global__ void shuffle_in_short_warp(float* out) {
  out[threadIdx.x] = gg::shfl_xor(static_cast<float>(threadIdx.x), 1);
}

// Thread 0 writes out[n + offset].
extern "C" __global__ void write_at(float* out, int n, int offset) {
  if (threadIdx.x == 0) out[n + offset] = 1.0f;
}

// Thread 0 reads in[-offset].
extern "C" __global__ void read_before_start(const float* in, float* out, int offset) {
  if (threadIdx.x == 0) out[0] = in[-offset];
}

// Writes a byte of dynamic shared memory past the `bytes` the launch asked for.
extern "C" __global__ void dynamic_smem_overflow(int bytes) {
  extern __shared__ unsigned char smem[];
  if (threadIdx.x == 0) smem[bytes + 3] = 1;
}

// Spins until *flag becomes nonzero, which it never does.
extern "C" __global__ void endless(const int* flag) {
  while (*reinterpret_cast<const volatile int*>(flag) == 0) {
  }
}

// cp.async into a shared address that is not 16-byte aligned.
extern "C" __global__ void misaligned_cp_async(const float* in) {
  __shared__ __align__(16) float staging[8];
  gg::cp_async_16(staging + 1, in);
  gg::cp_async_wait_all();
}

// ldmatrix with row addresses in global memory.
extern "C" __global__ void ldmatrix_from_global(const unsigned short* in, unsigned* out) {
  gg::u32 r[1];
  gg::ldmatrix_x1(r, in + 8 * (threadIdx.x % 8));
  out[threadIdx.x] = r[0];
}

// A device-side assert that fails.
extern "C" __global__ void failed_assert(int n) { assert(n > 0); }

// Thread i reads the value thread i ^ 1 writes, without a barrier between.
extern "C" __global__ void missing_barrier(float* out) {
  __shared__ float exchange[64];
  exchange[threadIdx.x] = static_cast<float>(threadIdx.x);
  out[threadIdx.x] = exchange[threadIdx.x ^ 1];
}

// The same exchange done right.
extern "C" __global__ void with_barrier(float* out) {
  __shared__ float exchange[64];
  exchange[threadIdx.x] = static_cast<float>(threadIdx.x);
  __syncthreads();
  out[threadIdx.x] = exchange[threadIdx.x ^ 1];
}

// Reads static shared memory before writing it: every block must see the
// block-start poison, not what the previous block on its worker left there.
extern "C" __global__ void read_before_write(float* out, int write) {
  __shared__ float scratch[32];
  out[blockIdx.x * blockDim.x + threadIdx.x] = scratch[threadIdx.x];
  __syncthreads();
  if (write) scratch[threadIdx.x] = 1.0f;
}

// Prints from a kernel; the launch keeps the output in EmuModule.last_log.
extern "C" __global__ void hello(int value) {
  if (threadIdx.x == 0) printf("hello from block %u: %d\n", blockIdx.x, value);
}

// Warp 1 writes a value that warp 0 reads without a __syncthreads. Both warps
// run __syncwarp in between, which orders nothing across warps: TSan mode
// must still see the race, however the threads happen to interleave.
extern "C" __global__ void race_behind_syncwarp(float* out, int rounds) {
  __shared__ float value;
  if (threadIdx.x / 32 == 1) {
    if (threadIdx.x == 32) value = 1.0f;
    for (int i = 0; i < rounds; ++i) __syncwarp();
  } else {
    for (int i = 0; i < rounds; ++i) __syncwarp();
    if (threadIdx.x == 0) out[0] = value;
  }
}
