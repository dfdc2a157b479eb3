// One tcgen05.mma on operands laid out as CuTe lays them out
// (tests/cuda/sm100/test_cuda_sm100_cute_oracle.py): the host hands the
// shared-memory images CuTe's tile_to_shape addresses give (each element
// at CuTe's byte offset from a 1024-aligned base) and the LBO / SBO / swizzle
// of CuTe's make_umma_desc; the kernel builds the descriptors with
// gg::make_umma_desc at the image's start, issues the MMA (D not
// accumulated), commits to an mbarrier, and every warp reads its 32 TMEM
// lanes with tcgen05.ld.32x32b into `out` [128 lanes][n columns] (the bits of
// the f32 cells, raw): the
// test places D through CuTe's TMEM layout of the accumulator.
#include <cstdint>

#include "gg_runtime.cuh"
#include "gg_primitives_sm100.cuh"

using gg::u32;
using gg::u64;

extern __shared__ __align__(16) unsigned char smem_raw[];

// The operand image `img` (`bytes` long) of one operand, copied to `dst`.
__device__ void copy_image(unsigned char* dst, const unsigned char* img, int bytes) {
  for (int i = static_cast<int>(threadIdx.x); i < bytes; i += static_cast<int>(blockDim.x))
    dst[i] = img[i];
}

// geom: a_start, a_lbo, a_sbo, a_swizzle, a_bytes, b_start, b_lbo, b_sbo,
// b_swizzle, b_bytes, idesc, kind (0 kind::f16, 1 kind::f8f6f4), n, ncols,
// D's offset from the allocation (lane << 16 | column).
extern "C" __global__ void __launch_bounds__(128)
    umma_cute_operands(const unsigned char* a_img, const unsigned char* b_img, const u32* geom,
                       u32* out) {
  __shared__ __align__(8) u64 bar;
  __shared__ u32 slot;
  unsigned char* base = reinterpret_cast<unsigned char*>(
      (reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t{1023});
  const int a_bytes = static_cast<int>(geom[4]);
  unsigned char* a_smem = base;
  unsigned char* b_smem = base + ((a_bytes + 1023) & ~1023);
  copy_image(a_smem, a_img, a_bytes);
  copy_image(b_smem, b_img, static_cast<int>(geom[9]));
  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int n = static_cast<int>(geom[12]);
  const u32 ncols = geom[13];
  if (warp == 0)
    gg::tmem_alloc(&slot, ncols);
  if (threadIdx.x == 0) {
    gg::mbarrier_init(&bar, 1);
    gg::fence_mbarrier_init();
  }
  gg::fence_proxy_async();  // the images, written by the generic proxy, read by the MMA
  gg::tcgen05_fence_before_thread_sync();
  __syncthreads();
  gg::tcgen05_fence_after_thread_sync();
  const u32 d = slot + geom[14];
  if (threadIdx.x == 0) {
    const u64 adesc = gg::make_umma_desc(a_smem + geom[0], geom[1], geom[2],
                                         static_cast<gg::umma::Swizzle>(geom[3]));
    const u64 bdesc = gg::make_umma_desc(b_smem + geom[5], geom[6], geom[7],
                                         static_cast<gg::umma::Swizzle>(geom[8]));
    if (geom[11] == 0)
      gg::tcgen05_mma_f16(d, adesc, bdesc, geom[10], false);
    else
      gg::tcgen05_mma_f8f6f4(d, adesc, bdesc, geom[10], false);
    gg::tcgen05_commit(&bar);
  }
  gg::mbarrier_wait(&bar, 0);
  gg::tcgen05_fence_after_thread_sync();
  const int lane = 32 * warp + static_cast<int>(threadIdx.x) % 32;
  for (int c = 0; c < n; c += 8) {
    u32 r[8];
    gg::tcgen05_ld_32x32b<8>(r, slot + (static_cast<u32>(32 * warp) << 16) + static_cast<u32>(c));
    gg::tcgen05_wait_ld();
    for (int j = 0; j < 8; ++j)
      out[lane * n + c + j] = r[j];
  }
  gg::tcgen05_fence_before_thread_sync();
  __syncthreads();
  if (warp == 0)
    gg::tmem_dealloc(slot, ncols);
}
