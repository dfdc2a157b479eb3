// Host-only CuTe program (g++, no GPU): prints what CuTe says about the
// 2-CTA (cta_group::2, "2x1SM") tcgen05 MMAs, for
// tests/cuda/sm100/test_cuda_sm100_pair_oracle.py to compare with the
// emulator (gg_emu_sm100.h's gg_emu_sm100_pair_d_cell and the pair GEMM) and
// with gg::umma. Headers: cute/atom/mma_traits_sm100.hpp (the
// SM100_MMA_*_2x1SM_SS traits, UMMA::tmem_frg_2sm), cute/arch/mma_sm100_desc.hpp.
// One record per line:
//
//   pair KIND M N K THR RAW A B C
//       MMA_Traits<SM100_MMA_F16BF16_2x1SM_SS | SM100_MMA_F8F6F4_2x1SM_SS |
//       SM100_MMA_MXF8F6F4_2x1SM_SS> at the pair's M x N: K of one MMA, the
//       size of ThrID (the CTAs), the traits' instruction descriptor, then the
//       ALayout, BLayout and CLayout evaluated at every (CTA, value): A and B
//       as the column-major (row, k) index, C as the column-major (m, n)
//       index, CTA-major then value order, comma-separated.
//   tmem2 MH N ADDR...
//       UMMA::tmem_frg_2sm<float>::make of one CTA's (MH x N) half of the
//       accumulator (MH = M / 2): the TMEM address (lane << 16 | column) of
//       element (m, n), column-major order.
#include <cstddef>
#include <cstdint>

static inline size_t __cvta_generic_to_shared(const void* p) {
  return reinterpret_cast<size_t>(p) & 0x3FFFF;
}
#define CUTE_CVTA_GENERIC_TO_SHARED_ACTIVATED 1

#include <cute/atom/mma_traits_sm100.hpp>
#include <cute/tensor.hpp>

#include <cstdio>

using namespace cute;

template <class Layout>
void values(const char* sep, Layout layout, int nthr, int nval) {
  std::printf("%s", sep);
  for (int t = 0; t < nthr; ++t) {
    for (int v = 0; v < nval; ++v)
      std::printf("%s%d", t == 0 && v == 0 ? "" : ",", int(layout(t, v)));
  }
}

template <class Traits>
void pair(const char* kind, int m, int n) {
  Traits traits{};
  constexpr int K = Traits::K;
  std::printf("pair %s %d %d %d %d %u", kind, m, n, K, int(size(typename Traits::ThrID{})),
              unsigned(traits.idesc_.desc_));
  values(" ", typename Traits::ALayout{}, 2, m / 2 * K);
  values(" ", typename Traits::BLayout{}, 2, n / 2 * K);
  values(" ", typename Traits::CLayout{}, 2, m / 2 * n);
  std::printf("\n");
}

template <int M, int N>
void pair_all() {
  pair<MMA_Traits<SM100_MMA_F16BF16_2x1SM_SS<bfloat16_t, bfloat16_t, float, M, N, UMMA::Major::K,
                                             UMMA::Major::K>>>("f16", M, N);
  pair<MMA_Traits<SM100_MMA_F8F6F4_2x1SM_SS, float_e4m3_t, float_e4m3_t, float, C<M>, C<N>,
                  integral_constant<UMMA::Major, UMMA::Major::K>,
                  integral_constant<UMMA::Major, UMMA::Major::K>,
                  integral_constant<UMMA::ScaleIn, UMMA::ScaleIn::One>,
                  integral_constant<UMMA::ScaleIn, UMMA::ScaleIn::One>>>("f8f6f4", M, N);
  if constexpr (M == 256) {
    pair<MMA_Traits<SM100_MMA_MXF8F6F4_2x1SM_SS<float_e4m3_t, float_e4m3_t, float, float_ue8m0_t, M, N,
                                                UMMA::Major::K, UMMA::Major::K>>>("mxf8f6f4", M, N);
  }
}

template <int MH, int N>
void tmem2() {
  Tensor t = UMMA::tmem_frg_2sm<float>::make(Shape<Shape<Int<MH>, Int<N>>, _1, _1>{});
  std::printf("tmem2 %d %d", MH, N);
  for (int n = 0; n < N; ++n) {
    for (int m = 0; m < MH; ++m)
      std::printf(" %u", unsigned(raw_pointer_cast(t.data() + t.layout()(make_coord(m, n), 0, 0))));
  }
  std::printf("\n");
}

int main() {
  pair_all<256, 64>();
  pair_all<256, 128>();
  pair_all<256, 256>();
  pair_all<128, 64>();
  pair_all<128, 128>();
  pair_all<128, 256>();
  tmem2<128, 64>();
  tmem2<128, 128>();
  tmem2<128, 256>();
  tmem2<64, 64>();
  tmem2<64, 128>();
  tmem2<64, 256>();
  return 0;
}
