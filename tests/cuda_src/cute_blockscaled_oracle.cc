// Host-only CuTe program (g++, no GPU): prints what CuTe says about the sm_100
// block-scaled tcgen05 layouts, for
// tests/cuda/sm100/test_cuda_sm100_blockscaled_oracle.py to compare with the
// PTX ISA and with the emulator's decoding (gg_emu_sm100.h) and gg::umma's
// encoder. Headers: cute/arch/mma_sm100_desc.hpp (InstrDescriptorBlockScaled),
// cute/atom/copy_traits_sm100.hpp (the tcgen05.cp atom
// SM100_UTCCP_4x32dp128bit_1cta), cute/atom/mma_traits_sm100.hpp (the
// block-scaled MMA traits and their scale-factor TMEM fragments,
// UMMA::tmem_sf_frg). One record per line:
//
//   bsidesc KIND A B SF N AMAJ BMAJ SFA_ID SFB_ID RAW AF BF SFMT MDIM NDIM AMJ BMJ ASF BSF KSIZE
//       UMMA::make_instr_desc_block_scaled<A, B, float, SF, 128, N, AMAJ, BMAJ>()
//       with the scale ids CuTe takes from bits 30-31 of the scale addresses
//       (make_runtime_instr_desc_block_scaled): the raw 32-bit word and
//       CuTe's bit-field view (a / b format, scale format, m_dim, n_dim,
//       majors, a / b scale ids, k_size). KIND mxf8f6f4, mxf4 or mxf4nvf4 (the
//       traits whose types they are: SM100_MMA_MXF8F6F4_SS, SM100_MMA_MXF4_SS
//       with VS 32 or 16).
//   traits KIND A B SF VS N K SFVEC RAW
//       the MMA_Traits of the block-scaled MMA: K of one MMA, its SFVecSize
//       and its idesc_ word.
//   utccp ROW BIT Q SRC DST
//       Copy_Traits<SM100_UTCCP_4x32dp128bit_1cta> (tcgen05.cp.32x128b.warpx4):
//       for source row ROW (0..31), bit BIT (0..127, every 8th) and broadcast
//       copy Q (0..3), SrcLayout's logical bit index and ValID's TMEM bit
//       address (lane * 2^21 + column * 32 + bit).
//   sf WHICH KIND VS ROWS NUMK DP ROW KMMA BLOCK Q OFFSET SAME
//       UMMA::tmem_sf_frg<SF, VS, 1, WHICH == A>::make of ((ROWS, (VS, NSF)),
//       1, NUMK) (NSF = K / VS scales per row of one MMA): for row ROW, the
//       KMMA-th MMA along K, scale BLOCK of it and its replica in lane quarter
//       Q (the fragment's first mode holds ROWS x 4 replicas), the layout's
//       offset (in scale bytes: lane = OFFSET / DP, byte of the lane =
//       OFFSET % DP); SAME = 1 when the VS elements the scale covers all map
//       to that one byte.
#include <cstdint>
#include <cstdio>

#include <cute/atom/copy_traits_sm100.hpp>
#include <cute/atom/mma_traits_sm100.hpp>
#include <cute/tensor.hpp>

using namespace cute;

using E4 = cutlass::float_e4m3_t;
using E5 = cutlass::float_e5m2_t;
using E2u = cutlass::detail::float_e2m1_unpacksmem_t;  // fp4 of kind::mxf8f6f4 (padded in smem)
using E2 = cutlass::float_e2m1_t;                      // fp4 of kind::mxf4 / mxf4nvf4 (packed)
using U8 = cutlass::float_ue8m0_t;
using U4 = cutlass::float_ue4m3_t;

template <class T>
const char* name() {
  if constexpr (is_same_v<T, E4>)
    return "e4m3";
  if constexpr (is_same_v<T, E5>)
    return "e5m2";
  if constexpr (is_same_v<T, E2u> || is_same_v<T, E2>)
    return "e2m1";
  if constexpr (is_same_v<T, U8>)
    return "ue8m0";
  if constexpr (is_same_v<T, U4>)
    return "ue4m3";
  return "?";
}

template <class A, class B, class SF, int N, UMMA::Major AM, UMMA::Major BM>
void bsidesc(const char* kind, unsigned sfa_id, unsigned sfb_id) {
  auto d = UMMA::make_instr_desc_block_scaled<A, B, float, SF, 128, N, AM, BM>();
  const uint64_t e = UMMA::make_runtime_instr_desc_block_scaled(d, sfa_id << 30, sfb_id << 30);
  UMMA::InstrDescriptorBlockScaled r;
  r.desc_ = static_cast<uint32_t>(e >> 32);
  std::printf("bsidesc %s %s %s %s %d %s %s %u %u %u %u %u %u %u %u %u %u %u %u %u\n", kind,
              name<A>(), name<B>(), name<SF>(), N, AM == UMMA::Major::K ? "K" : "MN",
              BM == UMMA::Major::K ? "K" : "MN", sfa_id, sfb_id, r.desc_, unsigned(r.a_format_),
              unsigned(r.b_format_), unsigned(r.scale_format_), unsigned(r.m_dim_),
              unsigned(r.n_dim_), unsigned(r.a_major_), unsigned(r.b_major_), unsigned(r.a_sf_id_),
              unsigned(r.b_sf_id_), unsigned(r.k_size_));
}

template <class A, class B, class SF, int N, UMMA::Major AM, UMMA::Major BM>
void ids(const char* kind, int vec) {
  for (unsigned a = 0; a < 4; a += vec)
    for (unsigned b = 0; b < 4; b += vec)
      bsidesc<A, B, SF, N, AM, BM>(kind, a, b);
}

template <int N>
void idescs_n() {
  constexpr auto K = UMMA::Major::K;
  constexpr auto MN = UMMA::Major::MN;
  ids<E4, E4, U8, N, K, K>("mxf8f6f4", 1);
  ids<E5, E5, U8, N, K, K>("mxf8f6f4", 1);
  ids<E4, E5, U8, N, MN, K>("mxf8f6f4", 1);
  ids<E5, E4, U8, N, K, MN>("mxf8f6f4", 1);
  ids<E4, E4, U8, N, MN, MN>("mxf8f6f4", 1);
  ids<E4, E2u, U8, N, K, K>("mxf8f6f4", 1);
  ids<E2u, E4, U8, N, K, K>("mxf8f6f4", 1);
  ids<E2u, E2u, U8, N, K, K>("mxf8f6f4", 1);
  ids<E2, E2, U8, N, K, K>("mxf4", 2);
  ids<E2, E2, U4, N, K, K>("mxf4nvf4", 4);
  ids<E2, E2, U8, N, K, K>("mxf4nvf4", 4);
}

template <class MMA>
void traits(const char* kind, int vs, int n) {
  using T = MMA_Traits<MMA>;
  T t{};
  std::printf("traits %s %s %s %s %d %d %d %d %u\n", kind, name<typename T::ValTypeA>(),
              name<typename T::ValTypeB>(), name<typename T::ValTypeSFA>(), vs, n, int(T::K),
              int(T::SFVecSize), uint32_t(t.idesc_));
}

void utccp() {
  using CT = Copy_Traits<SM100_UTCCP_4x32dp128bit_1cta>;
  typename CT::SrcLayout src{};
  typename CT::ValID val{};
  for (int r = 0; r < 32; ++r)
    for (int b = 0; b < 128; b += 8)
      for (int q = 0; q < 4; ++q)
        std::printf("utccp %d %d %d %d %d\n", r, b, q, int(src(0, make_coord(r, b, q))),
                    int(val(make_coord(r, b, q))));
}

// K: of one MMA (32 for kind::mxf8f6f4, 64 for kind::mxf4 / mxf4nvf4).
template <class SF, int VS, int K, bool IsA, int Rows, int NumK>
void sf(const char* kind) {
  constexpr int NSF = K / VS;
  auto shape =
      make_shape(make_shape(Int<Rows>{}, make_shape(Int<VS>{}, Int<NSF>{})), _1{}, Int<NumK>{});
  auto t = UMMA::tmem_sf_frg<SF, VS, 1, IsA>::make(shape);
  auto l = t.layout();
  const int dp = int(TMEM::DP<SF>{});
  for (int r = 0; r < Rows; ++r) {
    for (int k = 0; k < NumK; ++k) {
      for (int j = 0; j < NSF; ++j) {
        for (int q = 0; q < 4; ++q) {  // the replica in lane quarter q: row index r + Rows q
          const int off = int(l(make_coord(make_coord(r + Rows * q, make_coord(0, j)), 0, k)));
          int same = 1;
          for (int v = 1; v < VS; ++v)
            same &= int(l(make_coord(make_coord(r + Rows * q, make_coord(v, j)), 0, k))) == off;
          std::printf("sf %s %s %d %d %d %d %d %d %d %d %d %d\n", IsA ? "A" : "B", kind, VS, Rows,
                      NumK, dp, r, k, j, q, off, same);
        }
      }
    }
  }
}

int main() {
  idescs_n<8>();
  idescs_n<64>();
  idescs_n<136>();
  idescs_n<256>();
  constexpr auto K = UMMA::Major::K;
  traits<SM100_MMA_MXF8F6F4_SS<E4, E4, float, U8, 128, 64, K, K>>("mxf8f6f4", 32, 64);
  traits<SM100_MMA_MXF8F6F4_SS<E4, E2u, float, U8, 128, 256, K, K>>("mxf8f6f4", 32, 256);
  traits<SM100_MMA_MXF4_SS<E2, E2, float, U8, 128, 128, 32, K, K>>("mxf4", 32, 128);
  traits<SM100_MMA_MXF4_SS<E2, E2, float, U4, 128, 8, 16, K, K>>("mxf4nvf4", 16, 8);
  utccp();
  // One MMA along K, then as many as one 4-byte word of scales holds.
  sf<U8, 32, 32, true, 128, 1>("mxf8f6f4");
  sf<U8, 32, 32, true, 128, 4>("mxf8f6f4");
  sf<U8, 32, 32, false, 256, 4>("mxf8f6f4");
  sf<U8, 32, 64, true, 128, 2>("mxf4");
  sf<U8, 32, 64, false, 128, 2>("mxf4");
  sf<U4, 16, 64, true, 128, 1>("mxf4nvf4");
  sf<U4, 16, 64, false, 256, 2>("mxf4nvf4");
  return 0;
}
