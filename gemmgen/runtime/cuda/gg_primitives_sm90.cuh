// gg_primitives_sm90.cuh: the Hopper (sm_90a) primitives: mbarrier, TMA
// (cp.async.bulk.tensor) through tensor maps, the async-proxy fence, wgmma
// and setmaxnreg. Included at the end of gg_primitives.cuh; as there, each
// primitive has its PTX under __CUDA_ARCH__ and a CPU body under GG_EMU, whose
// model is gg_emu_sm90.h. docs/cuda-hopper.md describes the protocol a
// warp-specialized GEMM follows with them.
//
// Archs: mbarrier, TMA and the fences need sm_90; wgmma and setmaxnreg need
// sm_90a (__CUDA_ARCH_FEAT_SM90_ALL). Every primitive is a template, so the
// static_assert of an older arch fires only in kernels that call it.
//
// - mbarrier (a u64 in shared memory, 8-byte aligned): init with the number
//   of arrivals per phase, then fence_mbarrier_init() by the initialising
//   thread and a __syncthreads before any use. A phase completes when all
//   arrivals came and the transaction count is back at 0. Waits name the
//   parity of the phase they wait for: mbarrier_wait(bar, p) returns once the
//   phase with parity p has completed (waiting with parity 1 on a fresh
//   barrier returns at once: the "previous" phase counts as complete).
// - TMA: tma_load_2d/3d(dst, &map, bar, c0, c1[, c2]) copies the map's box at
//   element coordinates (c0 innermost) into shared memory (128-byte aligned;
//   1024 for the 128-byte swizzle, so that the pattern starts at its origin),
//   zero-filling out-of-bounds elements, and completes box-bytes of
//   transaction count on `bar` (announce them with mbarrier_arrive_expect_tx).
//   tma_store_2d/3d writes a box back (out-of-bounds elements are skipped);
//   bulk_commit_group + bulk_wait_group_read<N> (smem may be reused) or
//   bulk_wait_group<N> (global writes done).
// - fence_proxy_async(): between generic-proxy writes to shared memory
//   (st.shared) and async-proxy reads of it (a TMA store, a wgmma operand).
// - Tensor maps: `const __grid_constant__ CUtensorMap` kernel parameters,
//   encoded on the host with cuTensorMapEncodeTiled (reached through
//   cudaGetDriverEntryPoint; the emulator provides it there too).
// - wgmma: make_smem_desc(ptr, lbo, sbo, swizzle) builds a matrix descriptor;
//   wgmma_fence() before a batch, then wgmma_m64nNk16_{bf16,f16}_{ss,rs}<N>
//   or wgmma_m64nNk32_{e4m3,e5m2}_ss<N>, wgmma_commit_group(), and
//   wgmma_wait_group<K>() before the accumulators are read. d[N/2] is the
//   thread's accumulator fragment: value i of warpgroup thread t holds
//   D[16*(t/32) + (t%32)/4 + 8*((i/2)%2)][8*(i/4) + 2*(t%4) + i%2].
//   Warpgroup-collective: all 128 threads of the warpgroup call it.
// - setmaxnreg_inc<R>() / setmaxnreg_dec<R>(): warpgroup-collective.
//
// The parts, by instruction family: gg_primitives_sm90_mbarrier.cuh,
// _tma.cuh (with the async-proxy fence and the bulk copy), _wgmma.cuh (with
// the matrix descriptors and setmaxnreg) and _cluster.cuh; this header holds
// what they share and includes them.
#pragma once

#if !defined(__CUDACC_RTC__)
#include <cuda.h>
#else
// NVRTC (the CuPy launchers) cannot include <cuda.h>, which includes
// <stdlib.h>: the opaque 128-byte map as cuda.h declares it, for
// `const __grid_constant__ CUtensorMap` parameters.
typedef struct CUtensorMap_st {
  alignas(128) unsigned long long opaque[16];
} CUtensorMap;
#endif

namespace gg {

using u64 = unsigned long long;

// The swizzle of a wgmma matrix descriptor (its layout type, bits 62-63).
enum class SmemSwizzle : unsigned { none = 0, b128 = 1, b64 = 2, b32 = 3 };

namespace sm90_detail {
__device__ __forceinline__ u32 smem_addr(const void* p) {
#if defined(__CUDA_ARCH__)
  return static_cast<u32>(__cvta_generic_to_shared(p));
#elif defined(GG_EMU)
  return gg::emu::sm90::addr_of(p);
#else
  (void)p;
  return 0;
#endif
}
}  // namespace sm90_detail

}  // namespace gg

#include "gg_primitives_sm90_mbarrier.cuh"
#include "gg_primitives_sm90_tma.cuh"
#include "gg_primitives_sm90_wgmma.cuh"
#include "gg_primitives_sm90_cluster.cuh"
