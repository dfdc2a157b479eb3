// Kernels that take tensor maps from Python (tests/cuda/sm90/test_cuda_sm90_tensor_map_args.py):
// EmuModule.launch and cuda_gpu.GpuModule.launch encode a cuda_emu.TensorMap
// against the launch's own device buffer and pass the CUtensorMap by value.
// The kernels use only the gg:: primitives, so nvcc compiles them for sm_90a
// and the same launches run on a GPU.
#include <cuda.h>

#include <cstdint>

#include "gg_runtime.cuh"

using gg::u64;

// The dynamic shared memory, rounded up to 1024 bytes (the 128-byte swizzle's
// period); launches ask for 1024 bytes more than the box.
extern __shared__ __align__(16) unsigned char smem_raw[];
__device__ __forceinline__ unsigned char* smem_1024() {
  return reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) &
                                          ~uintptr_t{1023});
}

// Byte `o` of a box as TMA lays it out in shared memory with a `span`-byte
// swizzle (0: none): Swizzle<log2(span/16), 4, 3> on the offset from a
// 1024-byte aligned base.
__device__ __forceinline__ int swizzled(int o, int span) {
  return span == 0 ? o : o ^ (((o >> 7) & (span / 16 - 1)) << 4);
}

// Loads the box at origin + blockIdx * box (elements, innermost first) with
// one TMA load of `rank` 2 or 3, and writes its bytes in box order (the
// swizzle undone) to out[block * box_bytes ...], block = the linear block
// index. Out-of-bounds elements of the box arrive as zeros.
extern "C" __global__ void __launch_bounds__(128)
    tma_boxes(const __grid_constant__ CUtensorMap map, unsigned char* out, int rank, int box_bytes,
              int span, int box0, int box1, int box2, int origin0, int origin1, int origin2) {
  unsigned char* smem = smem_1024();
  __shared__ __align__(8) u64 bar;
  if (threadIdx.x == 0) {
    gg::mbarrier_init(&bar, 1);
    gg::fence_mbarrier_init();
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    const int c0 = origin0 + static_cast<int>(blockIdx.x) * box0;
    const int c1 = origin1 + static_cast<int>(blockIdx.y) * box1;
    const int c2 = origin2 + static_cast<int>(blockIdx.z) * box2;
    gg::prefetch_tensormap(&map);
    gg::mbarrier_arrive_expect_tx(&bar, box_bytes);
    if (rank == 2) {
      gg::tma_load_2d(smem, &map, &bar, c0, c1);
    } else {
      gg::tma_load_3d(smem, &map, &bar, c0, c1, c2);
    }
  }
  gg::mbarrier_wait(&bar, 0);
  const unsigned block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  for (int o = threadIdx.x; o < box_bytes; o += blockDim.x)
    out[static_cast<size_t>(block) * box_bytes + o] = smem[swizzled(o, span)];
}

// A tiled copy through TMA only: each block loads tile blockIdx * box of
// `src` and stores it through `dst` (the same box and swizzle). The kernel
// takes no pointers: the buffers are reached through the maps alone. TMA
// stores clip the parts of edge tiles outside the tensor.
extern "C" __global__ void __launch_bounds__(128)
    tma_copy(const __grid_constant__ CUtensorMap src, const __grid_constant__ CUtensorMap dst,
             int rank, int box_bytes, int box0, int box1, int box2) {
  unsigned char* smem = smem_1024();
  __shared__ __align__(8) u64 bar;
  if (threadIdx.x == 0) {
    gg::mbarrier_init(&bar, 1);
    gg::fence_mbarrier_init();
  }
  __syncthreads();
  const int c0 = static_cast<int>(blockIdx.x) * box0;
  const int c1 = static_cast<int>(blockIdx.y) * box1;
  const int c2 = static_cast<int>(blockIdx.z) * box2;
  if (threadIdx.x == 0) {
    gg::mbarrier_arrive_expect_tx(&bar, box_bytes);
    if (rank == 2) {
      gg::tma_load_2d(smem, &src, &bar, c0, c1);
    } else {
      gg::tma_load_3d(smem, &src, &bar, c0, c1, c2);
    }
    gg::mbarrier_wait(&bar, 0);
    if (rank == 2) {
      gg::tma_store_2d(&dst, smem, c0, c1);
    } else {
      gg::tma_store_3d(&dst, smem, c0, c1, c2);
    }
    gg::bulk_commit_group();
    gg::bulk_wait_group<0>();
  }
}

// The smallest kernel with a tensor map and a pointer: writes 1 to flag[0].
extern "C" __global__ void map_probe(const __grid_constant__ CUtensorMap map, int* flag) {
  gg::prefetch_tensormap(&map);
  if (threadIdx.x == 0)
    flag[0] = 1;
}
