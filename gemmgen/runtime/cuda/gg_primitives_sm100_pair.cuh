// gg_primitives_sm100_pair.cuh: cta_group::2, the 2-CTA forms over a
// CTA pair: TMEM allocation, the MMAs (dense and block-scaled), tcgen05.cp,
// the multicast commit and the 2-CTA TMA loads.
// Part of gg_primitives_sm100.cuh, which includes it after defining
// GG_SM100_TCGEN05: include that header, not this one.
#pragma once

namespace gg {

// ---------------------------------------------------------------------------
// cta_group::2: the 2-CTA MMA over a CTA pair (PTX ISA, tcgen05 "CTA pair":
// ranks 2i and 2i + 1 of a cluster; docs/cuda-sm100.md, "The 2-CTA MMA").
//
// - tmem_alloc_pair(slot, ncols) / tmem_dealloc_pair(addr, ncols) /
//   tmem_relinquish_alloc_permit_pair(): tcgen05.alloc / dealloc /
//   relinquish_alloc_permit .cta_group::2, issued by a warp of the same warp
//   id in each CTA of the pair, with the same slot: the same columns in both.
// - tcgen05_mma_f16_pair / tcgen05_mma_f8f6f4_pair(d, adesc, bdesc, idesc,
//   accumulate): tcgen05.mma.cta_group::2, issued by ONE thread of the even
//   CTA, M = 128 or 256 per pair (umma::instr_desc's M), N a multiple of 16 in
//   16..256. The descriptors name the same shared-memory offsets in both
//   CTAs: CTA v holds A's rows [v M/2, (v + 1) M/2) and B's rows
//   [v N/2, (v + 1) N/2) (CuTe's SM100_MMA_*_2x1SM_SS: ALayout, BLayout) and
//   gets D's rows [v M/2, (v + 1) M/2) in its TMEM at the same address
//   (tmem_frg_2sm: M = 256: row m at lane m, column n; M = 128: umma::
//   pair_d_cell).
// - tcgen05_commit_pair_multicast(bar, mask): tcgen05.commit.cta_group::2
//   ... .multicast::cluster: one arrival on the mbarrier at bar's offset in
//   every CTA of the 16-bit ctaMask once every earlier MMA of the thread has
//   completed (both CTAs' halves).
// - tma_load_2d_pair(dst, &map, bar, c0, c1) (tma_load_3d_pair: c0, c1, c2)
//   and tma_load_2d_multicast_pair
//   (..., mask): cp.async.bulk.tensor.2d.cta_group::2: the box lands at dst
//   (in the calling CTA, or at dst's offset in every CTA of the mask) and
//   completes on the mbarrier at bar's offset in the pair leader (the even
//   CTA) of each destination, so that the leader's one wait covers both
//   halves (CUTLASS's SM100_TMA_2SM_LOAD: the barrier address with the peer
//   bit, 1 << 24, cleared).

namespace umma {
// The TMEM (lane, column offset) of element (m, n) of CTA v's half of a
// cta_group::2 accumulator of m_total x n_total (m < m_total / 2).
__host__ __device__ constexpr unsigned pair_d_lane(int m_total, int n_total, int m, int n) {
  return m_total == 256 ? static_cast<unsigned>(m)
                        : static_cast<unsigned>(m + 64 * (n / (n_total / 2)));
}
__host__ __device__ constexpr unsigned pair_d_column(int m_total, int n_total, int n) {
  return m_total == 256 ? static_cast<unsigned>(n) : static_cast<unsigned>(n % (n_total / 2));
}
}  // namespace umma

namespace sm100_detail {
// CUTLASS's Sm100MmaPeerBitMask: a shared::cta address with this bit cleared
// names the same offset in the pair leader.
inline constexpr unsigned kPeerBitMask = 0xFEFFFFFFu;
}  // namespace sm100_detail

template <int kNever = 0>
__device__ __forceinline__ void tmem_alloc_pair(unsigned* slot, unsigned ncols) {
#if defined(__CUDA_ARCH__)
#if defined(GG_SM100_TCGEN05)
  asm volatile("tcgen05.alloc.cta_group::2.sync.aligned.shared::cta.b32 [%0], %1;\n" ::"r"(
                   sm100_detail::smem_addr(slot)),
               "r"(ncols)
               : "memory");
#else
  static_assert(kNever != 0, "gg::tmem_alloc_pair needs sm_100a / sm_103a");
#endif
#elif defined(GG_EMU)
  gg::emu::sm100::tmem_alloc_pair(slot, ncols);
#endif
}

template <int kNever = 0>
__device__ __forceinline__ void tmem_dealloc_pair(unsigned taddr, unsigned ncols) {
#if defined(__CUDA_ARCH__)
#if defined(GG_SM100_TCGEN05)
  asm volatile("tcgen05.dealloc.cta_group::2.sync.aligned.b32 %0, %1;\n" ::"r"(taddr), "r"(ncols)
               : "memory");
#else
  static_assert(kNever != 0, "gg::tmem_dealloc_pair needs sm_100a / sm_103a");
#endif
#elif defined(GG_EMU)
  gg::emu::sm100::tmem_dealloc_pair(taddr, ncols);
#endif
}

template <int kNever = 0>
__device__ __forceinline__ void tmem_relinquish_alloc_permit_pair() {
#if defined(__CUDA_ARCH__)
#if defined(GG_SM100_TCGEN05)
  asm volatile("tcgen05.relinquish_alloc_permit.cta_group::2.sync.aligned;\n" ::: "memory");
#else
  static_assert(kNever != 0, "gg::tmem_relinquish_alloc_permit_pair needs sm_100a / sm_103a");
#endif
#elif defined(GG_EMU)
  gg::emu::sm100::tmem_relinquish_pair();
#endif
}

template <int kNever = 0>
__device__ __forceinline__ void tcgen05_mma_f16_pair(unsigned d_tmem, unsigned long long adesc,
                                                     unsigned long long bdesc, unsigned idesc,
                                                     bool accumulate) {
#if defined(__CUDA_ARCH__)
#if defined(GG_SM100_TCGEN05)
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %4, 0;\n"
      "tcgen05.mma.cta_group::2.kind::f16 [%0], %1, %2, %3, p;\n}\n" ::"r"(d_tmem),
      "l"(adesc), "l"(bdesc), "r"(idesc), "r"(accumulate ? 1u : 0u)
      : "memory");
#else
  static_assert(kNever != 0, "gg::tcgen05_mma_f16_pair needs sm_100a / sm_103a");
#endif
#elif defined(GG_EMU)
  gg::emu::sm100::mma_pair(0, d_tmem, adesc, bdesc, idesc, accumulate);
#endif
}

template <int kNever = 0>
__device__ __forceinline__ void tcgen05_mma_f8f6f4_pair(unsigned d_tmem, unsigned long long adesc,
                                                        unsigned long long bdesc, unsigned idesc,
                                                        bool accumulate) {
#if defined(__CUDA_ARCH__)
#if defined(GG_SM100_TCGEN05)
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %4, 0;\n"
      "tcgen05.mma.cta_group::2.kind::f8f6f4 [%0], %1, %2, %3, p;\n}\n" ::"r"(d_tmem),
      "l"(adesc), "l"(bdesc), "r"(idesc), "r"(accumulate ? 1u : 0u)
      : "memory");
#else
  static_assert(kNever != 0, "gg::tcgen05_mma_f8f6f4_pair needs sm_100a / sm_103a");
#endif
#elif defined(GG_EMU)
  gg::emu::sm100::mma_pair(1, d_tmem, adesc, bdesc, idesc, accumulate);
#endif
}

template <int kNever = 0>
__device__ __forceinline__ void tcgen05_commit_pair_multicast(unsigned long long* bar,
                                                              unsigned short cta_mask) {
#if defined(__CUDA_ARCH__)
#if defined(GG_SM100_TCGEN05)
  asm volatile(
      "tcgen05.commit.cta_group::2.mbarrier::arrive::one.shared::cluster.multicast::cluster.b64 "
      "[%0], %1;\n" ::"r"(sm100_detail::smem_addr(bar)),
      "h"(cta_mask)
      : "memory");
#else
  static_assert(kNever != 0, "gg::tcgen05_commit_pair_multicast needs sm_100a / sm_103a");
#endif
#elif defined(GG_EMU)
  gg::emu::sm100::commit_pair(bar, cta_mask);
#endif
}

// (Map: CUtensorMap, a template parameter so that this header needs no
// <cuda.h>.)
template <class Map, int kNever = 0>
__device__ __forceinline__ void tma_load_2d_pair(void* smem_dst, const Map* map,
                                                 unsigned long long* bar, int c0, int c1) {
#if defined(__CUDA_ARCH__)
#if defined(GG_SM100_TCGEN05)
  asm volatile(
      "cp.async.bulk.tensor.2d.cta_group::2.shared::cluster.global.mbarrier::complete_tx::bytes "
      "[%0], [%1, {%3, %4}], [%2];\n" ::"r"(sm100_detail::smem_addr(smem_dst)),
      "l"(reinterpret_cast<unsigned long long>(map)),
      "r"(sm100_detail::smem_addr(bar) & sm100_detail::kPeerBitMask), "r"(c0), "r"(c1)
      : "memory");
#else
  static_assert(kNever != 0, "gg::tma_load_2d_pair needs sm_100a / sm_103a");
#endif
#elif defined(GG_EMU)
  const int c[2] = {c0, c1};
  gg::emu::sm90::tma_load_pair(smem_dst, map, bar, c, 2, 0);
#endif
}

// The 3-D form (a grouped rhs [g, ...]: the local group outermost).
template <class Map, int kNever = 0>
__device__ __forceinline__ void tma_load_3d_pair(void* smem_dst, const Map* map,
                                                 unsigned long long* bar, int c0, int c1, int c2) {
#if defined(__CUDA_ARCH__)
#if defined(GG_SM100_TCGEN05)
  asm volatile(
      "cp.async.bulk.tensor.3d.cta_group::2.shared::cluster.global.mbarrier::complete_tx::bytes "
      "[%0], [%1, {%3, %4, %5}], [%2];\n" ::"r"(sm100_detail::smem_addr(smem_dst)),
      "l"(reinterpret_cast<unsigned long long>(map)),
      "r"(sm100_detail::smem_addr(bar) & sm100_detail::kPeerBitMask), "r"(c0), "r"(c1), "r"(c2)
      : "memory");
#else
  static_assert(kNever != 0, "gg::tma_load_3d_pair needs sm_100a / sm_103a");
#endif
#elif defined(GG_EMU)
  const int c[3] = {c0, c1, c2};
  gg::emu::sm90::tma_load_pair(smem_dst, map, bar, c, 3, 0);
#endif
}

template <class Map, int kNever = 0>
__device__ __forceinline__ void tma_load_2d_multicast_pair(void* smem_dst, const Map* map,
                                                           unsigned long long* bar, int c0, int c1,
                                                           unsigned short cta_mask) {
#if defined(__CUDA_ARCH__)
#if defined(GG_SM100_TCGEN05)
  asm volatile(
      "cp.async.bulk.tensor.2d.cta_group::2.shared::cluster.global.mbarrier::complete_tx::bytes."
      "multicast::cluster [%0], [%1, {%3, %4}], [%2], %5;\n" ::"r"(
          sm100_detail::smem_addr(smem_dst)),
      "l"(reinterpret_cast<unsigned long long>(map)),
      "r"(sm100_detail::smem_addr(bar) & sm100_detail::kPeerBitMask), "r"(c0), "r"(c1),
      "h"(cta_mask)
      : "memory");
#else
  static_assert(kNever != 0, "gg::tma_load_2d_multicast_pair needs sm_100a / sm_103a");
#endif
#elif defined(GG_EMU)
  const int c[2] = {c0, c1};
  gg::emu::sm90::tma_load_pair(smem_dst, map, bar, c, 2, cta_mask);
#endif
}

// ---------------------------------------------------------------------------
// Block-scaled cta_group::2 (docs/cuda-sm100.md, "Block-scaled 2-CTA MMA"):
// M = 256 per pair, issued by ONE thread of the even CTA like
// tcgen05_mma_f8f6f4_pair, completed by tcgen05_commit_pair_multicast.
//
// - tcgen05_cp_32x128b_warpx4_pair(taddr, sdesc):
//   tcgen05.cp.cta_group::2.32x128b.warpx4. Each CTA of the pair copies the
//   512-byte atom at the descriptor's offset of ITS OWN shared memory into
//   ITS OWN TMEM at taddr (lanes and columns as tcgen05_cp_32x128b_warpx4;
//   CuTe's SM100_UTCCP_4x32dp128bit_2cta: ThrID 2, the same source and
//   destination layout in both CTAs). taddr's columns come from
//   tmem_alloc_pair.
// - tcgen05_mma_mxf8f6f4_block_scaled_pair / tcgen05_mma_mxf4_pair
//   / tcgen05_mma_mxf4nvf4_pair(d, adesc, bdesc, idesc, sfa, sfb, acc): the
//   cta_group::2 forms of the block-scaled MMAs (umma::instr_desc_block_scaled
//   with m = 256). A, B and D split as for tcgen05_mma_f8f6f4_pair; CTA v
//   reads the scales of ITS 128 rows of A at sfa and of ALL N rows of B at
//   sfb in ITS OWN TMEM (CuTe's SM100_MMA_MXF8F6F4_2x1SM_SS /
//   MXF4_2x1SM_SS traits at M = 256: tmem_sf_frg "4x1", MMA_ScaleFactor
//   the cta_group::1 MMA of M / 2 x round_up(N, 128)). So each CTA stages
//   its own SFA atom and the whole N's SFB atoms (CUTLASS's TileShape_SF).
// nvcc 13.5 (sm_100a, sm_100f): UTCCP.T.S.2CTA.4, UTCQMMA.2CTA (mxf8f6f4),
// UTCOMMA.2CTA (mxf4), UTCOMMA.2CTA.4X (mxf4nvf4).
#if defined(__CUDA_ARCH_FEAT_SM100_ALL) || defined(__CUDA_ARCH_FEAT_SM103_ALL) || \
    defined(__CUDA_ARCH_SPECIFIC__)
#define GG_SM100_BS2_1X ".scale_vec::1X"
#define GG_SM100_BS2_2X ".scale_vec::2X"
#define GG_SM100_BS2_4X ".scale_vec::4X"
#else
#define GG_SM100_BS2_1X ".block32"
#define GG_SM100_BS2_2X ".block32"
#define GG_SM100_BS2_4X ".block16"
#endif

template <int kNever = 0>
__device__ __forceinline__ void tcgen05_cp_32x128b_warpx4_pair(unsigned taddr,
                                                               unsigned long long sdesc) {
#if defined(__CUDA_ARCH__)
#if defined(GG_SM100_TCGEN05)
  asm volatile("tcgen05.cp.cta_group::2.32x128b.warpx4 [%0], %1;\n" ::"r"(taddr), "l"(sdesc)
               : "memory");
#else
  static_assert(kNever != 0, "gg::tcgen05_cp_32x128b_warpx4_pair needs sm_100a / sm_103a");
#endif
#elif defined(GG_EMU)
  gg::emu::sm100::cp_32x128b_warpx4_pair(taddr, sdesc);
#else
  (void)taddr, (void)sdesc;
#endif
}

#define GG_SM100_BS_PAIR(NAME, KIND_PTX, VEC, KIND)                                                \
  template <int kNever = 0>                                                                        \
  __device__ __forceinline__ void NAME(unsigned d_tmem, unsigned long long adesc,                  \
                                       unsigned long long bdesc, unsigned idesc,                   \
                                       unsigned sfa_tmem, unsigned sfb_tmem, bool accumulate) {    \
    GG_SM100_BS_PAIR_BODY(NAME, KIND_PTX, VEC, KIND)                                               \
  }
#if defined(__CUDA_ARCH__)
#if defined(GG_SM100_TCGEN05)
#define GG_SM100_BS_PAIR_BODY(NAME, KIND_PTX, VEC, KIND)                                           \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %6, 0;\n"                                         \
               "tcgen05.mma.cta_group::2.kind::" KIND_PTX ".block_scale" VEC                       \
               " [%0], %1, %2, %3, [%4], [%5], p;\n}\n" ::"r"(d_tmem),                             \
               "l"(adesc), "l"(bdesc), "r"(idesc), "r"(sfa_tmem), "r"(sfb_tmem),                   \
               "r"(accumulate ? 1u : 0u)                                                           \
               : "memory");
#else
#define GG_SM100_BS_PAIR_BODY(NAME, KIND_PTX, VEC, KIND) \
  static_assert(kNever != 0, "gg::" #NAME " needs sm_100a / sm_103a");
#endif
#elif defined(GG_EMU)
#define GG_SM100_BS_PAIR_BODY(NAME, KIND_PTX, VEC, KIND)                                     \
  gg::emu::sm100::mma_block_scaled_pair(KIND, d_tmem, adesc, bdesc, idesc, sfa_tmem, sfb_tmem, \
                                        accumulate);
#else
#define GG_SM100_BS_PAIR_BODY(NAME, KIND_PTX, VEC, KIND)                                   \
  (void)d_tmem, (void)adesc, (void)bdesc, (void)idesc, (void)sfa_tmem, (void)sfb_tmem, \
      (void)accumulate;
#endif

// kind::mxf8f6f4.block_scale.scale_vec::1X: e4m3 / e5m2 / e2m1, ue8m0, K = 32.
GG_SM100_BS_PAIR(tcgen05_mma_mxf8f6f4_block_scaled_pair, "mxf8f6f4", GG_SM100_BS2_1X, 0)
// kind::mxf4.block_scale.scale_vec::2X: e2m1, ue8m0, K = 64.
GG_SM100_BS_PAIR(tcgen05_mma_mxf4_pair, "mxf4", GG_SM100_BS2_2X, 1)
// kind::mxf4nvf4.block_scale.scale_vec::4X: e2m1, ue4m3 or ue8m0 per 16, K = 64.
GG_SM100_BS_PAIR(tcgen05_mma_mxf4nvf4_pair, "mxf4nvf4", GG_SM100_BS2_4X, 2)

#undef GG_SM100_BS_PAIR
#undef GG_SM100_BS_PAIR_BODY
#undef GG_SM100_BS2_1X
#undef GG_SM100_BS2_2X
#undef GG_SM100_BS2_4X

}  // namespace gg
