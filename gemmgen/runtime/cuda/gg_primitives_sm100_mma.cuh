// gg_primitives_sm100_mma.cuh: tcgen05.mma.cta_group::1 (kind::f16,
// f8f6f4 and the block-scaled kinds), tcgen05.cp of scale atoms, and
// tcgen05.commit.
// Part of gg_primitives_sm100.cuh, which includes it after defining
// GG_SM100_TCGEN05: include that header, not this one.
#pragma once

namespace gg {

// ---------------------------------------------------------------------------
// tcgen05.mma.cta_group::1 and tcgen05.commit.

template <int kNever = 0>
__device__ __forceinline__ void tcgen05_mma_f16(unsigned d_tmem, unsigned long long adesc,
                                                unsigned long long bdesc, unsigned idesc,
                                                bool accumulate) {
#if defined(__CUDA_ARCH__)
#if defined(GG_SM100_TCGEN05)
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %4, 0;\n"
      "tcgen05.mma.cta_group::1.kind::f16 [%0], %1, %2, %3, p;\n}\n" ::"r"(d_tmem),
      "l"(adesc), "l"(bdesc), "r"(idesc), "r"(accumulate ? 1u : 0u)
      : "memory");
#else
  static_assert(kNever != 0, "gg::tcgen05_mma_f16 needs sm_100a / sm_103a");
#endif
#elif defined(GG_EMU)
  gg::emu::sm100::mma(0, d_tmem, adesc, bdesc, idesc, accumulate);
#endif
}

template <int kNever = 0>
__device__ __forceinline__ void tcgen05_mma_f8f6f4(unsigned d_tmem, unsigned long long adesc,
                                                   unsigned long long bdesc, unsigned idesc,
                                                   bool accumulate) {
#if defined(__CUDA_ARCH__)
#if defined(GG_SM100_TCGEN05)
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %4, 0;\n"
      "tcgen05.mma.cta_group::1.kind::f8f6f4 [%0], %1, %2, %3, p;\n}\n" ::"r"(d_tmem),
      "l"(adesc), "l"(bdesc), "r"(idesc), "r"(accumulate ? 1u : 0u)
      : "memory");
#else
  static_assert(kNever != 0, "gg::tcgen05_mma_f8f6f4 needs sm_100a / sm_103a");
#endif
#elif defined(GG_EMU)
  gg::emu::sm100::mma(1, d_tmem, adesc, bdesc, idesc, accumulate);
#endif
}

// ---------------------------------------------------------------------------
// Block-scaled tcgen05.mma.cta_group::1 (PTX ISA "tcgen05.mma", "Block
// Scaling"): D[128 x N] = (A * scale_A) (B * scale_B)^T + (accumulate ? D :
// 0), the scales in TMEM at sfa_tmem / sfb_tmem (filled by
// tcgen05_cp_32x128b_warpx4; their bytes chosen by the descriptor's scale
// ids, umma::instr_desc_block_scaled). Issued by one thread, completed by
// tcgen05_commit as the other MMAs.
//   tcgen05_mma_mxf8f6f4_block_scaled: kind::mxf8f6f4.block_scale.scale_vec::1X,
//     e4m3 / e5m2 / e2m1 A and B, ue8m0 scales, K = 32;
//   tcgen05_mma_mxf4: kind::mxf4.block_scale.scale_vec::2X, e2m1, ue8m0, K = 64;
//   tcgen05_mma_mxf4nvf4: kind::mxf4nvf4.block_scale.scale_vec::4X, e2m1,
//     ue4m3 (NVFP4) or ue8m0 scales per 16 elements, K = 64.
// nvcc 13.5 takes the scale_vec::NX spelling for sm_100a / sm_103a and
// only the .block32 / .block16 aliases for sm_100f / sm_103f (GG_SM100_BS_*).
// The arch-specific targets (sm_100a / sm_103a) take .scale_vec::NX, the
// family targets (sm_100f / sm_103f) only the .block32 / .block16 aliases.
#if defined(__CUDA_ARCH_FEAT_SM100_ALL) || defined(__CUDA_ARCH_FEAT_SM103_ALL) || \
    defined(__CUDA_ARCH_SPECIFIC__)
#define GG_SM100_BS_1X ".scale_vec::1X"
#define GG_SM100_BS_2X ".scale_vec::2X"
#define GG_SM100_BS_4X ".scale_vec::4X"
#else
#define GG_SM100_BS_1X ".block32"
#define GG_SM100_BS_2X ".block32"
#define GG_SM100_BS_4X ".block16"
#endif

template <int kNever = 0>
__device__ __forceinline__ void tcgen05_mma_mxf8f6f4_block_scaled(
    unsigned d_tmem, unsigned long long adesc, unsigned long long bdesc, unsigned idesc,
    unsigned sfa_tmem, unsigned sfb_tmem, bool accumulate) {
#if defined(__CUDA_ARCH__)
#if defined(GG_SM100_TCGEN05)
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %6, 0;\n"
      "tcgen05.mma.cta_group::1.kind::mxf8f6f4.block_scale" GG_SM100_BS_1X
      " [%0], %1, %2, %3, [%4], [%5], p;\n}\n" ::"r"(d_tmem),
      "l"(adesc), "l"(bdesc), "r"(idesc), "r"(sfa_tmem), "r"(sfb_tmem), "r"(accumulate ? 1u : 0u)
      : "memory");
#else
  static_assert(kNever != 0, "gg::tcgen05_mma_mxf8f6f4_block_scaled needs sm_100a / sm_103a");
#endif
#elif defined(GG_EMU)
  gg::emu::sm100::mma_block_scaled(0, d_tmem, adesc, bdesc, idesc, sfa_tmem, sfb_tmem, accumulate);
#else
  (void)d_tmem, (void)adesc, (void)bdesc, (void)idesc, (void)sfa_tmem, (void)sfb_tmem,
      (void)accumulate;
#endif
}

template <int kNever = 0>
__device__ __forceinline__ void tcgen05_mma_mxf4(unsigned d_tmem, unsigned long long adesc,
                                                 unsigned long long bdesc, unsigned idesc,
                                                 unsigned sfa_tmem, unsigned sfb_tmem,
                                                 bool accumulate) {
#if defined(__CUDA_ARCH__)
#if defined(GG_SM100_TCGEN05)
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %6, 0;\n"
      "tcgen05.mma.cta_group::1.kind::mxf4.block_scale" GG_SM100_BS_2X
      " [%0], %1, %2, %3, [%4], [%5], p;\n}\n" ::"r"(d_tmem),
      "l"(adesc), "l"(bdesc), "r"(idesc), "r"(sfa_tmem), "r"(sfb_tmem), "r"(accumulate ? 1u : 0u)
      : "memory");
#else
  static_assert(kNever != 0, "gg::tcgen05_mma_mxf4 needs sm_100a / sm_103a");
#endif
#elif defined(GG_EMU)
  gg::emu::sm100::mma_block_scaled(1, d_tmem, adesc, bdesc, idesc, sfa_tmem, sfb_tmem, accumulate);
#else
  (void)d_tmem, (void)adesc, (void)bdesc, (void)idesc, (void)sfa_tmem, (void)sfb_tmem,
      (void)accumulate;
#endif
}

template <int kNever = 0>
__device__ __forceinline__ void tcgen05_mma_mxf4nvf4(unsigned d_tmem, unsigned long long adesc,
                                                     unsigned long long bdesc, unsigned idesc,
                                                     unsigned sfa_tmem, unsigned sfb_tmem,
                                                     bool accumulate) {
#if defined(__CUDA_ARCH__)
#if defined(GG_SM100_TCGEN05)
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %6, 0;\n"
      "tcgen05.mma.cta_group::1.kind::mxf4nvf4.block_scale" GG_SM100_BS_4X
      " [%0], %1, %2, %3, [%4], [%5], p;\n}\n" ::"r"(d_tmem),
      "l"(adesc), "l"(bdesc), "r"(idesc), "r"(sfa_tmem), "r"(sfb_tmem), "r"(accumulate ? 1u : 0u)
      : "memory");
#else
  static_assert(kNever != 0, "gg::tcgen05_mma_mxf4nvf4 needs sm_100a / sm_103a");
#endif
#elif defined(GG_EMU)
  gg::emu::sm100::mma_block_scaled(2, d_tmem, adesc, bdesc, idesc, sfa_tmem, sfb_tmem, accumulate);
#else
  (void)d_tmem, (void)adesc, (void)bdesc, (void)idesc, (void)sfa_tmem, (void)sfb_tmem,
      (void)accumulate;
#endif
}

#undef GG_SM100_BS_1X
#undef GG_SM100_BS_2X
#undef GG_SM100_BS_4X

// tcgen05.cp.cta_group::1.32x128b.warpx4 (PTX ISA "tcgen05.cp", "Data
// Movement Shape"): copies 32 rows of 16 bytes from shared memory (the
// matrix descriptor `sdesc`, a K-major operand of 16 one-byte elements a
// row: row r at (r % 8) * 16 + (r / 8) * SBO without swizzle) into TMEM
// columns col(taddr) .. + 3 of lanes r + 32 q for each quarter q (the
// .warpx4 multicast): bytes 4 g .. 4 g + 3 of row r are the word at column
// col(taddr) + g. One 128 x 4 scale atom (512 bytes, Sm1xxBlockScaledConfig:
// byte (r % 32) * 16 + (r / 32) * 4 + kblock) is one copy, whose words
// hold row r's 4 K-block scales at column r / 32 (umma::sf_column). lane(taddr)
// is 0. Issued by one thread; asynchronous: ordered before that thread's
// later tcgen05.mma, completed (its shared memory free) by tcgen05_commit.
template <int kNever = 0>
__device__ __forceinline__ void tcgen05_cp_32x128b_warpx4(unsigned taddr,
                                                          unsigned long long sdesc) {
#if defined(__CUDA_ARCH__)
#if defined(GG_SM100_TCGEN05)
  asm volatile("tcgen05.cp.cta_group::1.32x128b.warpx4 [%0], %1;\n" ::"r"(taddr), "l"(sdesc)
               : "memory");
#else
  static_assert(kNever != 0, "gg::tcgen05_cp_32x128b_warpx4 needs sm_100a / sm_103a");
#endif
#elif defined(GG_EMU)
  gg::emu::sm100::cp_32x128b_warpx4(taddr, sdesc);
#else
  (void)taddr, (void)sdesc;
#endif
}

// The mbarrier `bar` gets one arrival once every tcgen05.mma this thread
// issued before has completed (PTX ISA "tcgen05.commit").
template <int kNever = 0>
__device__ __forceinline__ void tcgen05_commit(unsigned long long* bar) {
#if defined(__CUDA_ARCH__)
#if defined(GG_SM100_TCGEN05)
  asm volatile(
      "tcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster.b64 [%0];\n" ::"r"(
          sm100_detail::smem_addr(bar))
      : "memory");
#else
  static_assert(kNever != 0, "gg::tcgen05_commit needs sm_100a / sm_103a");
#endif
#elif defined(GG_EMU)
  gg::emu::sm100::commit(bar);
#endif
}

}  // namespace gg
