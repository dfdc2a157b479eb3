// gg_primitives_sm90_tma.cuh: the async-proxy fence and TMA
// (cp.async.bulk.tensor loads and stores, the bulk groups), and the
// non-tensor bulk copy.
// Part of gg_primitives_sm90.cuh, which includes it after what the parts
// share (u64, SmemSwizzle, sm90_detail::smem_addr): include that header,
// not this one.
#pragma once

namespace gg {

// ---------------------------------------------------------------------------
// The async proxy and TMA.

// Orders the calling thread's generic-proxy writes to shared memory before
// later async-proxy accesses (TMA, wgmma operands).
template <int kNever = 0>
__device__ __forceinline__ void fence_proxy_async() {
#if defined(__CUDA_ARCH__)
#if __CUDA_ARCH__ >= 900
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#else
  static_assert(kNever != 0, "gg::fence_proxy_async needs sm_90 or newer");
#endif
#elif defined(GG_EMU)
  gg::emu::sm90::fence_proxy_async();
#endif
}

template <int kNever = 0>
__device__ __forceinline__ void prefetch_tensormap(const CUtensorMap* map) {
#if defined(__CUDA_ARCH__)
#if __CUDA_ARCH__ >= 900
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<u64>(map)) : "memory");
#else
  static_assert(kNever != 0, "gg::prefetch_tensormap needs sm_90 or newer");
#endif
#elif defined(GG_EMU)
  gg::emu::sm90::map_bits(map, "prefetch.tensormap");
#endif
}

template <int kNever = 0>
__device__ __forceinline__ void tma_load_2d(void* smem_dst, const CUtensorMap* map, u64* bar,
                                            int c0, int c1) {
#if defined(__CUDA_ARCH__)
#if __CUDA_ARCH__ >= 900
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, "
      "{%3, %4}], [%2];\n" ::"r"(sm90_detail::smem_addr(smem_dst)),
      "l"(reinterpret_cast<u64>(map)), "r"(sm90_detail::smem_addr(bar)), "r"(c0), "r"(c1)
      : "memory");
#else
  static_assert(kNever != 0, "gg::tma_load_2d needs sm_90 or newer");
#endif
#elif defined(GG_EMU)
  const int c[2] = {c0, c1};
  gg::emu::sm90::tma_load(smem_dst, map, bar, c, 2);
#endif
}

template <int kNever = 0>
__device__ __forceinline__ void tma_load_3d(void* smem_dst, const CUtensorMap* map, u64* bar,
                                            int c0, int c1, int c2) {
#if defined(__CUDA_ARCH__)
#if __CUDA_ARCH__ >= 900
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, "
      "{%3, %4, %5}], "
      "[%2];\n" ::"r"(sm90_detail::smem_addr(smem_dst)),
      "l"(reinterpret_cast<u64>(map)), "r"(sm90_detail::smem_addr(bar)), "r"(c0), "r"(c1), "r"(c2)
      : "memory");
#else
  static_assert(kNever != 0, "gg::tma_load_3d needs sm_90 or newer");
#endif
#elif defined(GG_EMU)
  const int c[3] = {c0, c1, c2};
  gg::emu::sm90::tma_load(smem_dst, map, bar, c, 3);
#endif
}

template <int kNever = 0>
__device__ __forceinline__ void tma_store_2d(const CUtensorMap* map, const void* smem_src, int c0,
                                             int c1) {
#if defined(__CUDA_ARCH__)
#if __CUDA_ARCH__ >= 900
  asm volatile(
      "cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group [%0, {%2, %3}], [%1];\n" ::"l"(
          reinterpret_cast<u64>(map)),
      "r"(sm90_detail::smem_addr(smem_src)), "r"(c0), "r"(c1)
      : "memory");
#else
  static_assert(kNever != 0, "gg::tma_store_2d needs sm_90 or newer");
#endif
#elif defined(GG_EMU)
  const int c[2] = {c0, c1};
  gg::emu::sm90::tma_store(map, smem_src, c, 2);
#endif
}

template <int kNever = 0>
__device__ __forceinline__ void tma_store_3d(const CUtensorMap* map, const void* smem_src, int c0,
                                             int c1, int c2) {
#if defined(__CUDA_ARCH__)
#if __CUDA_ARCH__ >= 900
  asm volatile(
      "cp.async.bulk.tensor.3d.global.shared::cta.tile.bulk_group [%0, {%2, %3, %4}], [%1];\n" ::
          "l"(reinterpret_cast<u64>(map)),
      "r"(sm90_detail::smem_addr(smem_src)), "r"(c0), "r"(c1), "r"(c2)
      : "memory");
#else
  static_assert(kNever != 0, "gg::tma_store_3d needs sm_90 or newer");
#endif
#elif defined(GG_EMU)
  const int c[3] = {c0, c1, c2};
  gg::emu::sm90::tma_store(map, smem_src, c, 3);
#endif
}

// Closes the calling thread's current group of TMA stores.
template <int kNever = 0>
__device__ __forceinline__ void bulk_commit_group() {
#if defined(__CUDA_ARCH__)
#if __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
#else
  static_assert(kNever != 0, "gg::bulk_commit_group needs sm_90 or newer");
#endif
#elif defined(GG_EMU)
  gg::emu::sm90::bulk_commit();
#endif
}

// Waits until at most kPending of the thread's newest store groups still
// read their shared-memory source.
template <int kPending, int kNever = 0>
__device__ __forceinline__ void bulk_wait_group_read() {
  static_assert(kPending >= 0 && kPending <= 7, "cp.async.bulk.wait_group takes 0..7");
#if defined(__CUDA_ARCH__)
#if __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(kPending) : "memory");
#else
  static_assert(kNever != 0, "gg::bulk_wait_group_read needs sm_90 or newer");
#endif
#elif defined(GG_EMU)
  gg::emu::sm90::bulk_wait(kPending, true);
#endif
}

// Waits until at most kPending of the thread's newest store groups are
// incomplete (their global writes done).
template <int kPending, int kNever = 0>
__device__ __forceinline__ void bulk_wait_group() {
  static_assert(kPending >= 0 && kPending <= 7, "cp.async.bulk.wait_group takes 0..7");
#if defined(__CUDA_ARCH__)
#if __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(kPending) : "memory");
#else
  static_assert(kNever != 0, "gg::bulk_wait_group needs sm_90 or newer");
#endif
#elif defined(GG_EMU)
  gg::emu::sm90::bulk_wait(kPending, false);
#endif
}

// ---------------------------------------------------------------------------
// (issue 30) The non-tensor bulk copy: `bytes` (a multiple of 16) of global
// memory at `src` into shared memory at `smem_dst` (both 16-byte aligned),
// completing on the mbarrier `bar` with complete_tx (its bytes announced by
// an arrive.expect_tx of the same phase, as a TMA load's). SASS: UBLKCP.
// The sm_100a body copies contiguous 512-byte scale atoms with it
// (gg_gemm_sm100.cuh, layout=atom128x4).
template <int kNever = 0>
__device__ __forceinline__ void bulk_load(void* smem_dst, const void* src, u32 bytes, u64* bar) {
#if defined(__CUDA_ARCH__)
#if __CUDA_ARCH__ >= 900
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::
          "r"(sm90_detail::smem_addr(smem_dst)),
      "l"(reinterpret_cast<u64>(src)), "r"(bytes), "r"(sm90_detail::smem_addr(bar))
      : "memory");
#else
  static_assert(kNever != 0, "gg::bulk_load needs sm_90 or newer");
#endif
#elif defined(GG_EMU)
  gg::emu::sm90::bulk_load(smem_dst, src, bytes, bar);
#endif
}

}  // namespace gg
