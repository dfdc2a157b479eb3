// Prints the (thread, value) -> coordinate maps CuTe's traits give the
// sm_120 block-scaled m16n8k32 MMA (cute/atom/mma_traits_sm120.hpp of the
// nvidia-cutlass wheel): A, B, C and the scale factors SFA and SFB. Read by
// tests/cuda/sm120/test_cuda_sm120_cute_oracle.py, which compares them with
// gemmgen's fragments (gg::frag) and with what the emulator's block-scaled
// MMA reads.
//
// Record: "NAME thread value row col", where (row, col) is (m, k) for A and
// SFA, (n, k) for B and SFB, (m, n) for C; CuTe's layouts map (thread,
// value) to the column-major index of that matrix. A, B, C, SFA, SFB: the
// FP8 form (m16n8k32); A64 ... SFB64: the FP4 form (m16n8k64); AW ... SFBW:
// the W4A8 form (e4m3 x e2m1, m16n8k32), and "SHIFTB before after before
// after" what CuTe's fp4_shift_B makes of two B registers.
#include <cstdio>

#include "cute/algorithm/tensor_algorithms.hpp"
#include "cute/atom/mma_traits_sm120.hpp"

template <class Layout>
void dump(const char* name, Layout layout, int rows) {
  for (int t = 0; t < 32; ++t) {
    for (int v = 0; v < int(cute::size<1>(layout)); ++v) {
      const int idx = int(layout(t, v));
      std::printf("%s %d %d %d %d\n", name, t, v, idx % rows, idx / rows);
    }
  }
}

int main() {
  using Op =
      cute::SM120::BLOCKSCALED::SM120_16x8x32_TN_VS<cutlass::float_e4m3_t, cutlass::float_e4m3_t,
                                                    float, cutlass::float_ue8m0_t, 32>;
  using Traits = cute::MMA_Traits<Op>;
  dump("A", typename Traits::ALayout{}, 16);
  dump("B", typename Traits::BLayout{}, 8);
  dump("C", typename Traits::CLayout{}, 16);
  dump("SFA", typename Traits::SFALayout{}, 16);
  dump("SFB", typename Traits::SFBLayout{}, 8);
  std::printf("SFVEC %d\n", int(Traits::SFVecSize));
  // The FP4 form, m16n8k64 (A, B: (T32,V32) -> (M16,K64), (T32,V16) -> (N8,K64)).
  using Op4 =
      cute::SM120::BLOCKSCALED::SM120_16x8x64_TN_VS<cutlass::float_e2m1_t, cutlass::float_e2m1_t,
                                                    float, cutlass::float_ue4m3_t, 16>;
  using Traits4 = cute::MMA_Traits<Op4>;
  dump("A64", typename Traits4::ALayout{}, 16);
  dump("B64", typename Traits4::BLayout{}, 8);
  dump("C64", typename Traits4::CLayout{}, 16);
  dump("SFA64", typename Traits4::SFALayout{}, 16);
  dump("SFB64", typename Traits4::SFBLayout{}, 8);
  // W4A8, e4m3 x e2m1 on the FP8 form (m16n8k32, ue8m0 scales of 32).
  using OpW =
      cute::SM120::BLOCKSCALED::SM120_16x8x32_TN_VS<cutlass::float_e4m3_t, cutlass::float_e2m1_t,
                                                    float, cutlass::float_ue8m0_t, 32>;
  using TraitsW = cute::MMA_Traits<OpW>;
  dump("AW", typename TraitsW::ALayout{}, 16);
  dump("BW", typename TraitsW::BLayout{}, 8);
  dump("CW", typename TraitsW::CLayout{}, 16);
  dump("SFAW", typename TraitsW::SFALayout{}, 16);
  dump("SFBW", typename TraitsW::SFBLayout{}, 8);
  // What CuTe does to the B registers of this MMA before issuing it
  // (fp4_shift_B): a register of four e2m1 in the low nibbles of its bytes,
  // as ldmatrix's b4x16_p64 form leaves them.
  const uint32_t before[2] = {0x0F030A01u, 0x0C050E07u};
  uint32_t regs[2] = {before[0], before[1]};
  auto t = cute::make_tensor(&regs[0], cute::make_layout(cute::Int<2>{}));
  cute::SM120::BLOCKSCALED::fp4_shift_B(OpW{}, t);
  std::printf("SHIFTB %u %u %u %u\n", before[0], regs[0], before[1], regs[1]);
  return 0;
}
