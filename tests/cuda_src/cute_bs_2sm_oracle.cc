// Host-only CuTe program (g++, no GPU): prints what CuTe says about the
// block-scaled 2-CTA (cta_group::2) tcgen05 layouts, for
// tests/cuda/sm100/test_cuda_sm100_pair_bs_oracle.py to compare with the PTX
// ISA, the emulator (gg_emu_sm100.h: gg_emu_sm100_pair_sf_cell,
// _pair_bs_idesc_check) and gg::umma::instr_desc_block_scaled. Headers:
// cute/atom/copy_traits_sm100.hpp (SM100_UTCCP_4x32dp128bit_2cta and _1cta),
// cute/atom/mma_traits_sm100.hpp (SM100_MMA_MXF8F6F4_2x1SM_SS,
// SM100_MMA_MXF4_2x1SM_SS; UMMA::tmem_sf_frg). One record per line:
//
//   utccp2 T ROW BIT Q SRC2 VAL2 SRC1 VAL1 DST
//       Copy_Traits<SM100_UTCCP_4x32dp128bit_2cta> for CTA T (0, 1) of the
//       pair, source row ROW, bit BIT (every 8th), broadcast copy Q: its
//       SrcLayout and ValID, then _1cta's for the same coordinate, and
//       DstLayout(T, 0) (the destination offset of CTA T's first bit).
//   utccp2thr N
//       size of the 2cta atom's ThrID.
//   traits2 KIND A B SF VS M N K SFVEC ALLOC SFM SFN ATHR BTHR RAW
//       the 2x1SM traits: K, SFVecSize, TmemAlloc (3: ScaleFactorDuplicated
//       4by1, 4: 2by2), MMA_ScaleFactor's M and N (the one-CTA tile of
//       scales a CTA holds), ALayout / BLayout strides of the CTA mode
//       (which CTA holds which rows), and the idesc_ word.
//   bsidesc2 KIND A B SF N SFA_ID SFB_ID RAW
//       make_instr_desc_block_scaled<A, B, float, SF, 256, N, K, K>() with the
//       scale ids CuTe takes from bits 30-31 of the scale addresses.
//   sf2 WHICH KIND VS ROWS NUMK ALLOC DP ROW KMMA BLOCK Q OFFSET SAME
//       UMMA::tmem_sf_frg<SF, VS, 2, WHICH == A, ALLOC>::make of ((ROWS, (VS,
//       NSF)), 1, NUMK): as cute_blockscaled_oracle.cc's `sf` records, for
//       the fragments one CTA of a 2x1SM MMA holds.
#include <cstdint>
#include <cstdio>

#include <cute/atom/copy_traits_sm100.hpp>
#include <cute/atom/mma_traits_sm100.hpp>
#include <cute/tensor.hpp>

using namespace cute;

using E4 = cutlass::float_e4m3_t;
using E2u = cutlass::detail::float_e2m1_unpacksmem_t;
using E2 = cutlass::float_e2m1_t;
using U8 = cutlass::float_ue8m0_t;
using U4 = cutlass::float_ue4m3_t;

template <class T>
const char* name() {
  if constexpr (is_same_v<T, E4>)
    return "e4m3";
  if constexpr (is_same_v<T, E2u> || is_same_v<T, E2>)
    return "e2m1";
  if constexpr (is_same_v<T, U8>)
    return "ue8m0";
  if constexpr (is_same_v<T, U4>)
    return "ue4m3";
  return "?";
}

void utccp2() {
  using C2 = Copy_Traits<SM100_UTCCP_4x32dp128bit_2cta>;
  using C1 = Copy_Traits<SM100_UTCCP_4x32dp128bit_1cta>;
  std::printf("utccp2thr %d\n", int(size(typename C2::ThrID{})));
  typename C2::SrcLayout src2{};
  typename C2::ValID val2{};
  typename C2::DstLayout dst2{};
  typename C1::SrcLayout src1{};
  typename C1::ValID val1{};
  for (int t = 0; t < 2; ++t)
    for (int r = 0; r < 32; ++r)
      for (int b = 0; b < 128; b += 8)
        for (int q = 0; q < 4; ++q)
          std::printf("utccp2 %d %d %d %d %d %d %d %d %d\n", t, r, b, q,
                      int(src2(t, make_coord(r, b, q))), int(val2(make_coord(r, b, q))),
                      int(src1(0, make_coord(r, b, q))), int(val1(make_coord(r, b, q))),
                      int(dst2(t, 0)));
}

template <class MMA>
void traits2(const char* kind, int vs, int m, int n) {
  using T = MMA_Traits<MMA>;
  using SFT = MMA_Traits<typename T::MMA_ScaleFactor>;
  T t{};
  std::printf("traits2 %s %s %s %s %d %d %d %d %d %d %d %d %d %d %u\n", kind,
              name<typename T::ValTypeA>(), name<typename T::ValTypeB>(),
              name<typename T::ValTypeSFA>(), vs, m, n, int(T::K), int(T::SFVecSize),
              int(T::TmemAlloc), int(size<0>(typename SFT::Shape_MNK{})),
              int(size<1>(typename SFT::Shape_MNK{})), int(stride<0>(typename T::ALayout{})),
              int(stride<0>(typename T::BLayout{})), uint32_t(t.idesc_));
}

template <class A, class B, class SF, int N>
void bsidesc2(const char* kind, int vec) {
  for (unsigned a = 0; a < 4; a += vec) {
    for (unsigned b = 0; b < 4; b += vec) {
      auto d = UMMA::make_instr_desc_block_scaled<A, B, float, SF, 256, N, UMMA::Major::K,
                                                  UMMA::Major::K>();
      const uint64_t e = UMMA::make_runtime_instr_desc_block_scaled(d, a << 30, b << 30);
      std::printf("bsidesc2 %s %s %s %s %d %u %u %u\n", kind, name<A>(), name<B>(), name<SF>(), N,
                  a, b, static_cast<uint32_t>(e >> 32));
    }
  }
}

template <int N>
void bsidescs_n() {
  bsidesc2<E4, E4, U8, N>("mxf8f6f4", 1);
  bsidesc2<E4, E2u, U8, N>("mxf8f6f4", 1);
  bsidesc2<E2, E2, U8, N>("mxf4", 2);
  bsidesc2<E2, E2, U4, N>("mxf4nvf4", 4);
}

template <class SF, int VS, int K, bool IsA, int Rows, int NumK, UMMA::TmemAllocMode Alloc>
void sf2(const char* kind) {
  constexpr int NSF = K / VS;
  auto shape =
      make_shape(make_shape(Int<Rows>{}, make_shape(Int<VS>{}, Int<NSF>{})), _1{}, Int<NumK>{});
  auto t = UMMA::tmem_sf_frg<SF, VS, 2, IsA, Alloc>::make(shape);
  auto l = t.layout();
  const int dp = int(TMEM::DP<SF>{});
  for (int r = 0; r < Rows; ++r) {
    for (int k = 0; k < NumK; ++k) {
      for (int j = 0; j < NSF; ++j) {
        for (int q = 0; q < 4; ++q) {
          const int off = int(l(make_coord(make_coord(r + Rows * q, make_coord(0, j)), 0, k)));
          int same = 1;
          for (int v = 1; v < VS; ++v)
            same &= int(l(make_coord(make_coord(r + Rows * q, make_coord(v, j)), 0, k))) == off;
          std::printf("sf2 %s %s %d %d %d %d %d %d %d %d %d %d %d\n", IsA ? "A" : "B", kind, VS,
                      Rows, NumK, int(Alloc), dp, r, k, j, q, off, same);
        }
      }
    }
  }
}

int main() {
  constexpr auto K = UMMA::Major::K;
  utccp2();
  traits2<SM100_MMA_MXF8F6F4_2x1SM_SS<E4, E4, float, U8, 256, 128, K, K>>("mxf8f6f4", 32, 256, 128);
  traits2<SM100_MMA_MXF8F6F4_2x1SM_SS<E4, E4, float, U8, 256, 256, K, K>>("mxf8f6f4", 32, 256, 256);
  traits2<SM100_MMA_MXF8F6F4_2x1SM_SS<E4, E4, float, U8, 256, 64, K, K>>("mxf8f6f4", 32, 256, 64);
  traits2<SM100_MMA_MXF4_2x1SM_SS<E2, E2, float, U8, 256, 128, 32, K, K>>("mxf4", 32, 256, 128);
  traits2<SM100_MMA_MXF4_2x1SM_SS<E2, E2, float, U4, 256, 256, 16, K, K>>("mxf4nvf4", 16, 256, 256);
  traits2<SM100_MMA_MXF4_2x1SM_SS<E2, E2, float, U4, 128, 256, 16, K, K>>("mxf4nvf4", 16, 128, 256);
  bsidescs_n<16>();
  bsidescs_n<128>();
  bsidescs_n<256>();
  constexpr auto k4by1 = UMMA::TmemAllocMode::ScaleFactorDuplicated4by1;
  constexpr auto k2by2 = UMMA::TmemAllocMode::ScaleFactorDuplicated2by2;
  // M = 256 per pair: a CTA's 128 rows of A; B's scales for N = 128 and 256
  // rows (MMA_ScaleFactor's round_up(N, 128)), 1X / 2X / 4X along K.
  sf2<U8, 32, 32, true, 128, 4, k4by1>("mxf8f6f4");
  sf2<U8, 32, 32, false, 256, 4, k4by1>("mxf8f6f4");
  sf2<U8, 32, 64, false, 128, 2, k4by1>("mxf4");
  sf2<U4, 16, 64, true, 128, 2, k4by1>("mxf4nvf4");
  sf2<U4, 16, 64, false, 256, 2, k4by1>("mxf4nvf4");
  // M = 128 per pair (not modelled): B's scales in the 2x2 layout.
  sf2<U4, 16, 64, false, 256, 1, k2by2>("mxf4nvf4");
  return 0;
}
