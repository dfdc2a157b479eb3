// memcheck.cu: kernels for the emulator's memory checker, uninitialised-value
// poisoning and performance counters (tests/cuda/emulator/test_cuda_runtime_memcheck.py).
// The counter kernels have access patterns whose cost is worked out by hand
// in the tests, from the CUDA / PTX definitions.
#include <cstring>

#include "gg_runtime.cuh"

extern __shared__ __align__(16) unsigned char dyn_smem[];

// ---------------------------------------------------------------------------
// Races between blocks.

// Every block writes out[0..blockDim.x): blocks overwrite each other.
extern "C" __global__ void race_write_write(float* out) {
  out[threadIdx.x] = static_cast<float>(blockIdx.x);
}

// Each block writes its own slice: no race.
extern "C" __global__ void disjoint_writes(float* out) {
  out[blockIdx.x * blockDim.x + threadIdx.x] = static_cast<float>(blockIdx.x);
}

// Block 0 writes data, the other blocks read it in the same launch.
extern "C" __global__ void race_read_write(float* data, float* out) {
  if (blockIdx.x == 0) {
    data[threadIdx.x] = 1.0f;
  } else {
    out[blockIdx.x * blockDim.x + threadIdx.x] = data[threadIdx.x];
  }
}

// Every block reads the same input and writes its own slice: no race.
extern "C" __global__ void shared_input(const float* in, float* out) {
  out[blockIdx.x * blockDim.x + threadIdx.x] = in[threadIdx.x] + 1.0f;
}

// Every thread of every block adds to one counter atomically: no race.
extern "C" __global__ void atomic_counter(int* counter) { atomicAdd(counter, 1); }

// Block 0 adds atomically while block 1 stores plainly to the same counter.
extern "C" __global__ void atomic_vs_plain(int* counter) {
  if (blockIdx.x == 0) {
    atomicAdd(counter, 1);
  } else if (threadIdx.x == 0) {
    counter[0] = 5;
  }
}

// Threads of one block write, synchronise, then read each other's values:
// within a block, not a race between blocks.
extern "C" __global__ void same_block_exchange(float* data) {
  data[threadIdx.x] = static_cast<float>(threadIdx.x);
  __syncthreads();
  const float v = data[(threadIdx.x + 1) % blockDim.x];
  __syncthreads();
  data[threadIdx.x] = v;
}

// ---------------------------------------------------------------------------
// Alignment.

// Thread t stores a uint2 at out + offset_words + 2t (an 8-byte store).
extern "C" __global__ void store_uint2_at(unsigned* out, int offset_words) {
  *reinterpret_cast<uint2*>(out + offset_words + 2 * threadIdx.x) = make_uint2(threadIdx.x, 7u);
}

// Thread t loads a float2 from dynamic shared memory at byte 4 * offset + 8t.
extern "C" __global__ void load_float2_shared_at(float* out, int offset) {
  float* buf = reinterpret_cast<float*>(dyn_smem);
  buf[threadIdx.x] = 1.0f;
  buf[threadIdx.x + blockDim.x] = 1.0f;
  __syncthreads();
  const float2 v = *reinterpret_cast<const float2*>(buf + offset + 2 * threadIdx.x);
  out[threadIdx.x] = v.x + v.y;
}

// An 8-byte memcpy from any byte offset: alignment 1 as far as the compiler
// knows, so a GPU reads it byte by byte. Not an alignment error.
extern "C" __global__ void memcpy_load_at(const unsigned char* in, unsigned* out, int offset) {
  uint2 v;
  memcpy(&v, in + offset + 8 * threadIdx.x, sizeof v);
  out[2 * threadIdx.x] = v.x;
  out[2 * threadIdx.x + 1] = v.y;
}

// ---------------------------------------------------------------------------
// Uninitialised values.

// A sum that never starts at 0: g++ keeps `s` in a register.
extern "C" __global__ void uninit_scalar(const float* x, float* out, int n) {
  float s;
  for (int i = 0; i < n; ++i) s += x[i];
  out[blockIdx.x * blockDim.x + threadIdx.x] = s;
}

extern "C" __global__ void uninit_int(const int* x, int* out, int n) {
  int s;
  for (int i = 0; i < n; ++i) s += x[i];
  out[blockIdx.x * blockDim.x + threadIdx.x] = s;
}

__device__ __attribute__((noinline)) float sum_words(const float* s, int n, int stride) {
  float t = 0.0f;
  for (int i = 0; i < n; ++i) t += s[i * stride];
  return t;
}

// A stack array that -ftrivial-auto-var-init leaves alone (`uninitialized`):
// what it holds is what the fiber stack held. Block 0 writes its first
// `written` words; every block sums `n` words `stride` apart.
extern "C" __global__ void uninit_stack(float* out, int written, int n, int stride) {
  float s[16384] __attribute__((uninitialized));  // 64 KiB: deeper than the first stack window
  for (int i = 0; i < (blockIdx.x == 0 ? written : 0); ++i) s[i] = 1.0f;
  out[blockIdx.x * blockDim.x + threadIdx.x] = sum_words(s, n, stride);
}

// ---------------------------------------------------------------------------
// Counters. One warp unless noted; expected numbers in the test.

// 32 x 32 floats in shared memory; out gets one value per pattern.
extern "C" __global__ void shared_patterns(float* out) {
  __shared__ __align__(16) float buf[32 * 32];
  const int lane = threadIdx.x;
  for (int i = lane; i < 32 * 32; i += 32) buf[i] = static_cast<float>(i);  // 32 contiguous stores
  __syncthreads();
  const float column = buf[lane * 32];                                           // stride 32 words
  const float broadcast = buf[5];                                                // one word
  const float2 pair = reinterpret_cast<const float2*>(buf)[2 * lane];            // 8 bytes, stride 16
  const float4 quad = reinterpret_cast<const float4*>(buf)[lane];                // 16 bytes, contiguous
  out[lane] = column + broadcast + pair.x + pair.y + quad.x + quad.y + quad.z + quad.w;
}

// Global loads of floats by one warp: contiguous, stride 2, shifted by one, broadcast.
extern "C" __global__ void global_patterns(const float* in, float* out, int pattern) {
  const int lane = threadIdx.x;
  float v;
  if (pattern == 0) {
    v = in[lane];
  } else if (pattern == 1) {
    v = in[2 * lane];
  } else if (pattern == 2) {
    v = in[lane + 1];
  } else {
    v = in[0];
  }
  out[lane] = v;
}

// ldmatrix.x4 over 32 rows of 16 bytes; lane l addresses row l. Row r starts
// at byte r * stride, and its 16 bytes sit at chunk (r / 2) % 4 of the row
// when `swizzle` (an XOR swizzle of 16-byte chunks), else at chunk 0.
// src holds the 32 rows of 8 uint16; out gets each lane's 4 registers.
extern "C" __global__ void ldmatrix_layout(const unsigned short* src, unsigned* out, int stride, int swizzle) {
  const int lane = threadIdx.x;
  const int row_offset = lane * stride + 16 * (swizzle ? (lane / 2) % 4 : 0);
  unsigned short* row = reinterpret_cast<unsigned short*>(dyn_smem + row_offset);
  for (int e = 0; e < 8; ++e) row[e] = src[lane * 8 + e];
  __syncthreads();
  gg::u32 r[4];
  gg::ldmatrix_x4(r, dyn_smem + row_offset);
  for (int j = 0; j < 4; ++j) out[lane * 4 + j] = r[j];
}

// Two warps, three rounds of (mma, __syncthreads), one cp.async of 16 bytes
// per thread.
extern "C" __global__ void instruction_mix(const unsigned char* src, float* out) {
  const int t = threadIdx.x;
  gg::cp_async_16(dyn_smem + 16 * t, src + 16 * t);
  gg::cp_async_wait_all();
  __syncthreads();
  const gg::u32 a[4] = {0x3f803f80u, 0, 0, 0};  // bf16 1.0 pairs
  const gg::u32 b[2] = {0x3f803f80u, 0};
  float c[4] = {0, 0, 0, 0};
  for (int round = 0; round < 3; ++round) {
    gg::mma_m16n8k16_bf16(c, a, b, c);
    __syncthreads();
  }
  out[t] = c[0] + static_cast<float>(dyn_smem[16 * t]);
}
