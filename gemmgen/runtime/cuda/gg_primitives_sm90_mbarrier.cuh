// gg_primitives_sm90_mbarrier.cuh: the Hopper mbarrier primitives (init,
// inval, arrive, expect_tx, try_wait / wait).
// Part of gg_primitives_sm90.cuh, which includes it after what the parts
// share (u64, SmemSwizzle, sm90_detail::smem_addr): include that header,
// not this one.
#pragma once

namespace gg {

// ---------------------------------------------------------------------------
// mbarrier.

template <int kNever = 0>
__device__ __forceinline__ void mbarrier_init(u64* bar, u32 count) {
#if defined(__CUDA_ARCH__)
#if __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(sm90_detail::smem_addr(bar)),
               "r"(count)
               : "memory");
#else
  static_assert(kNever != 0, "gg::mbarrier_init needs sm_90 or newer");
#endif
#elif defined(GG_EMU)
  gg::emu::sm90::mbarrier_init(bar, count);
#endif
}

// Makes the calling thread's mbarrier.init visible to the async proxy (TMA).
template <int kNever = 0>
__device__ __forceinline__ void fence_mbarrier_init() {
#if defined(__CUDA_ARCH__)
#if __CUDA_ARCH__ >= 900
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#else
  static_assert(kNever != 0, "gg::fence_mbarrier_init needs sm_90 or newer");
#endif
#elif defined(GG_EMU)
  gg::emu::sm90::fence_mbarrier_init();
#endif
}

template <int kNever = 0>
__device__ __forceinline__ void mbarrier_inval(u64* bar) {
#if defined(__CUDA_ARCH__)
#if __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.inval.shared::cta.b64 [%0];\n" ::"r"(sm90_detail::smem_addr(bar))
               : "memory");
#else
  static_assert(kNever != 0, "gg::mbarrier_inval needs sm_90 or newer");
#endif
#elif defined(GG_EMU)
  gg::emu::sm90::mbarrier_inval(bar);
#endif
}

// One arrival; returns the barrier's state token.
template <int kNever = 0>
__device__ __forceinline__ u64 mbarrier_arrive(u64* bar) {
  u64 state = 0;
#if defined(__CUDA_ARCH__)
#if __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.arrive.shared::cta.b64 %0, [%1];\n"
               : "=l"(state)
               : "r"(sm90_detail::smem_addr(bar))
               : "memory");
#else
  static_assert(kNever != 0, "gg::mbarrier_arrive needs sm_90 or newer");
#endif
#elif defined(GG_EMU)
  state = gg::emu::sm90::mbarrier_arrive(bar, 0);
#endif
  return state;
}

// Announces `tx_bytes` more transaction bytes for the current phase, then
// arrives.
template <int kNever = 0>
__device__ __forceinline__ void mbarrier_arrive_expect_tx(u64* bar, u32 tx_bytes) {
#if defined(__CUDA_ARCH__)
#if __CUDA_ARCH__ >= 900
  asm volatile(
      "mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(sm90_detail::smem_addr(bar)),
      "r"(tx_bytes)
      : "memory");
#else
  static_assert(kNever != 0, "gg::mbarrier_arrive_expect_tx needs sm_90 or newer");
#endif
#elif defined(GG_EMU)
  gg::emu::sm90::mbarrier_arrive(bar, tx_bytes);
#endif
}

// True once the phase with parity `parity` has completed. (The emulator
// blocks the thread until then, and reports a wait that never can complete.)
template <int kNever = 0>
__device__ __forceinline__ bool mbarrier_try_wait_parity(u64* bar, u32 parity) {
#if defined(__CUDA_ARCH__)
#if __CUDA_ARCH__ >= 900
  u32 done;
  asm volatile(
      "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.b32 %0, 1, 0, "
      "p;\n}\n"
      : "=r"(done)
      : "r"(sm90_detail::smem_addr(bar)), "r"(parity)
      : "memory");
  return done != 0;
#else
  static_assert(kNever != 0, "gg::mbarrier_try_wait_parity needs sm_90 or newer");
  return false;
#endif
#elif defined(GG_EMU)
  return gg::emu::sm90::mbarrier_wait(bar, parity, "mbarrier.try_wait.parity");
#else
  (void)bar;
  (void)parity;
  return true;
#endif
}

// Waits until the phase with parity `parity` has completed.
template <int kNever = 0>
__device__ __forceinline__ void mbarrier_wait(u64* bar, u32 parity) {
  while (!mbarrier_try_wait_parity<kNever>(bar, parity)) {
  }
}

}  // namespace gg
