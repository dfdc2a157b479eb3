// sm120_primitives.cu: the block-scaled mma.sync (gg_primitives_sm120.cuh)
// and the MX scale helpers of gg_scales.cuh, one small kernel each, for
// tests/cuda/sm120/test_cuda_sm120_primitives.py (the expected values are
// computed there). The MMA kernels run as one warp on an sm_120a / sm_121a
// device.
#include "gg_runtime.cuh"

using gg::u32;

namespace {

// D[16x8] = (SFA A[16x32]) (B[32x8] SFB) + C through one block-scaled
// m16n8k32 MMA: A and B hold FP8 bytes row-major ([m][k], [k][n]); lane l
// passes SFA[l] and SFB[l] as its scale registers.
template <class A, class B, int kByteA, int kThreadA, int kByteB, int kThreadB>
__device__ void mx(const unsigned char* Am, const unsigned char* Bm, const float* C, const u32* SFA,
                   const u32* SFB, float* D) {
  const int lane = static_cast<int>(gg::lane_id());
  u32 a[4] = {0, 0, 0, 0};
  u32 b[2] = {0, 0};
  float c[4], d[4];
  for (int i = 0; i < 16; ++i) {
    const gg::RowCol rc = gg::frag::a_m16n8k32(lane, i);
    a[i / 4] |= static_cast<u32>(Am[rc.row * 32 + rc.col]) << (8 * (i % 4));
  }
  for (int i = 0; i < 8; ++i) {
    const gg::RowCol kn = gg::frag::b_m16n8k32(lane, i);
    b[i / 4] |= static_cast<u32>(Bm[kn.row * 8 + kn.col]) << (8 * (i % 4));
  }
  for (int i = 0; i < 4; ++i) {
    const gg::RowCol rc = gg::frag::c_m16n8(lane, i);
    c[i] = C[rc.row * 8 + rc.col];
  }
  gg::mma_m16n8k32_mx<A, B, kByteA, kThreadA, kByteB, kThreadB>(d, a, b, c, SFA[lane], SFB[lane]);
  for (int i = 0; i < 4; ++i) {
    const gg::RowCol rc = gg::frag::c_m16n8(lane, i);
    D[rc.row * 8 + rc.col] = d[i];
  }
}

// D[16x8] = (SFA A[16x64]) (B[64x8] SFB) + C through one m16n8k64 FP4 MMA
// with kVec scales per row / column: A and B hold one e2m1 nibble per byte,
// row-major ([m][k], [k][n]); the kernel packs two per byte (element 2i in
// the low nibble) into the 8-bit fragments' bytes.
template <int kVec, int kByteA, int kThreadA, int kByteB, int kThreadB>
__device__ void fp4(const unsigned char* Am, const unsigned char* Bm, const float* C,
                    const u32* SFA, const u32* SFB, float* D) {
  const int lane = static_cast<int>(gg::lane_id());
  u32 a[4] = {0, 0, 0, 0};
  u32 b[2] = {0, 0};
  float c[4], d[4];
  for (int i = 0; i < 16; ++i) {
    const gg::RowCol rc = gg::frag::a_m16n8k32(lane, i);  // rc.col: the byte along K
    const u32 byte = Am[rc.row * 64 + 2 * rc.col] | (Am[rc.row * 64 + 2 * rc.col + 1] << 4);
    a[i / 4] |= byte << (8 * (i % 4));
  }
  for (int i = 0; i < 8; ++i) {
    const gg::RowCol kn = gg::frag::b_m16n8k32(lane, i);  // kn.row: the byte along K
    const u32 byte = Bm[(2 * kn.row) * 8 + kn.col] | (Bm[(2 * kn.row + 1) * 8 + kn.col] << 4);
    b[i / 4] |= byte << (8 * (i % 4));
  }
  for (int i = 0; i < 4; ++i) {
    const gg::RowCol rc = gg::frag::c_m16n8(lane, i);
    c[i] = C[rc.row * 8 + rc.col];
  }
  gg::mma_m16n8k64_fp4<kVec, kByteA, kThreadA, kByteB, kThreadB>(d, a, b, c, SFA[lane], SFB[lane]);
  for (int i = 0; i < 4; ++i) {
    const gg::RowCol rc = gg::frag::c_m16n8(lane, i);
    D[rc.row * 8 + rc.col] = d[i];
  }
}

using E4 = __nv_fp8_e4m3;
using E5 = __nv_fp8_e5m2;

}  // namespace

// mx_<A>_<B>_<byte-id-a><thread-id-a><byte-id-b><thread-id-b>
#define GG_MX_KERNEL(NAME, A, B, BA, TA, BB, TB)                                              \
  extern "C" __global__ void NAME(const unsigned char* Am, const unsigned char* Bm,           \
                                  const float* C, const u32* SFA, const u32* SFB, float* D) { \
    mx<A, B, BA, TA, BB, TB>(Am, Bm, C, SFA, SFB, D);                                         \
  }
GG_MX_KERNEL(mx_e4m3_e4m3_0000, E4, E4, 0, 0, 0, 0)
GG_MX_KERNEL(mx_e4m3_e4m3_1132, E4, E4, 1, 1, 3, 2)
GG_MX_KERNEL(mx_e4m3_e4m3_2031, E4, E4, 2, 0, 3, 1)
GG_MX_KERNEL(mx_e4m3_e4m3_3113, E4, E4, 3, 1, 1, 3)
GG_MX_KERNEL(mx_e5m2_e4m3_2101, E5, E4, 2, 1, 0, 1)
GG_MX_KERNEL(mx_e4m3_e5m2_0123, E4, E5, 0, 1, 2, 3)
GG_MX_KERNEL(mx_e5m2_e5m2_3030, E5, E5, 3, 0, 3, 0)
#undef GG_MX_KERNEL

// fp4_<vec>x_<byte-id-a><thread-id-a><byte-id-b><thread-id-b>
#define GG_FP4_KERNEL(NAME, VEC, BA, TA, BB, TB)                                              \
  extern "C" __global__ void NAME(const unsigned char* Am, const unsigned char* Bm,           \
                                  const float* C, const u32* SFA, const u32* SFB, float* D) { \
    fp4<VEC, BA, TA, BB, TB>(Am, Bm, C, SFA, SFB, D);                                         \
  }
GG_FP4_KERNEL(fp4_2x_0000, 2, 0, 0, 0, 0)
GG_FP4_KERNEL(fp4_2x_2123, 2, 2, 1, 2, 3)
GG_FP4_KERNEL(fp4_2x_0021, 2, 0, 0, 2, 1)
GG_FP4_KERNEL(fp4_4x_0000, 4, 0, 0, 0, 0)
GG_FP4_KERNEL(fp4_4x_0102, 4, 0, 1, 0, 2)
#undef GG_FP4_KERNEL

// W4A8: D[16x8] = (SFA A[16x32]) (B[32x8] SFB) + C on the e4m3 x e2m1 MMA.
// A holds e4m3 bytes [m][k]; B is packed fp4 as gemmgen stores the weights,
// [n][k / 2] (element 2i of a row in the low nibble of byte i), and each
// lane builds its fragment words as the body does: two packed bytes (K
// elements 16 h + 4 (lane % 4) .. + 3 of column lane / 4) through
// gg::unpack_fp4x4.
template <int kByteA, int kThreadA, int kByteB, int kThreadB>
__device__ void w4a8(const unsigned char* Am, const unsigned char* Bp, const float* C,
                     const u32* SFA, const u32* SFB, float* D) {
  const int lane = static_cast<int>(gg::lane_id());
  u32 a[4] = {0, 0, 0, 0};
  u32 b[2];
  float c[4], d[4];
  for (int i = 0; i < 16; ++i) {
    const gg::RowCol rc = gg::frag::a_m16n8k32(lane, i);
    a[i / 4] |= static_cast<u32>(Am[rc.row * 32 + rc.col]) << (8 * (i % 4));
  }
  for (int h = 0; h < 2; ++h) {
    const unsigned char* src = Bp + (lane / 4) * 16 + 8 * h + 2 * (lane % 4);
    b[h] = gg::unpack_fp4x4(static_cast<u32>(src[0]) | (static_cast<u32>(src[1]) << 8));
  }
  for (int i = 0; i < 4; ++i) {
    const gg::RowCol rc = gg::frag::c_m16n8(lane, i);
    c[i] = C[rc.row * 8 + rc.col];
  }
  gg::mma_m16n8k32_mx<__nv_fp8_e4m3, gg::e2m1_in_byte_t, kByteA, kThreadA, kByteB, kThreadB>(
      d, a, b, c, SFA[lane], SFB[lane]);
  for (int i = 0; i < 4; ++i) {
    const gg::RowCol rc = gg::frag::c_m16n8(lane, i);
    D[rc.row * 8 + rc.col] = d[i];
  }
}

// w4a8_<byte-id-a><thread-id-a><byte-id-b><thread-id-b>
#define GG_W4A8_KERNEL(NAME, BA, TA, BB, TB)                                                  \
  extern "C" __global__ void NAME(const unsigned char* Am, const unsigned char* Bp,           \
                                  const float* C, const u32* SFA, const u32* SFB, float* D) { \
    w4a8<BA, TA, BB, TB>(Am, Bp, C, SFA, SFB, D);                                             \
  }
GG_W4A8_KERNEL(w4a8_0000, 0, 0, 0, 0)
GG_W4A8_KERNEL(w4a8_1132, 1, 1, 3, 2)
GG_W4A8_KERNEL(w4a8_3021, 3, 0, 2, 1)
#undef GG_W4A8_KERNEL

// W4A8 with B's fragment bytes given as they are (the 8-bit containers, one
// per K element, [k][n]): for the emulator's check of the container.
extern "C" __global__ void w4a8_containers(const unsigned char* Am, const unsigned char* Bm,
                                           const float* C, const u32* SFA, const u32* SFB,
                                           float* D) {
  const int lane = static_cast<int>(gg::lane_id());
  u32 a[4] = {0, 0, 0, 0};
  u32 b[2] = {0, 0};
  float c[4], d[4];
  for (int i = 0; i < 16; ++i) {
    const gg::RowCol rc = gg::frag::a_m16n8k32(lane, i);
    a[i / 4] |= static_cast<u32>(Am[rc.row * 32 + rc.col]) << (8 * (i % 4));
  }
  for (int i = 0; i < 8; ++i) {
    const gg::RowCol kn = gg::frag::b_m16n8k32(lane, i);
    b[i / 4] |= static_cast<u32>(Bm[kn.row * 8 + kn.col]) << (8 * (i % 4));
  }
  for (int i = 0; i < 4; ++i) {
    const gg::RowCol rc = gg::frag::c_m16n8(lane, i);
    c[i] = C[rc.row * 8 + rc.col];
  }
  gg::mma_m16n8k32_mx<__nv_fp8_e4m3, gg::e2m1_in_byte_t, 0, 0, 0, 0>(d, a, b, c, SFA[lane],
                                                                     SFB[lane]);
  for (int i = 0; i < 4; ++i) {
    const gg::RowCol rc = gg::frag::c_m16n8(lane, i);
    D[rc.row * 8 + rc.col] = d[i];
  }
}

// out[x] = gg::unpack_fp4x4(x) for x in [0, 65536); one thread.
extern "C" __global__ void unpack_fp4x4_all(u32* out) {
  for (u32 x = 0; x < 65536u; ++x)
    out[x] = gg::unpack_fp4x4(x);
}

// offsets[r * kblocks + kb] = gg::gemm::scale_offset<kAtom128x4>(r, kb, kblocks);
// one thread.
extern "C" __global__ void atom_offsets(int rows, int kblocks, long long* offsets) {
  for (int r = 0; r < rows; ++r) {
    for (int kb = 0; kb < kblocks; ++kb) {
      offsets[r * kblocks + kb] =
          gg::gemm::scale_offset<gg::gemm::ScaleLayout::kAtom128x4>(r, kb, kblocks);
    }
  }
}

// words[(r * kblocks + kb0)] = mx_scale_word(s, r < rows, r, kb0, kblocks) for
// r in [0, rows + 1) (the last row outside) and every kb0, in the layout
// `atom` says; one thread.
extern "C" __global__ void mx_scale_words(const unsigned char* s, int rows, int kblocks, int atom,
                                          u32* words) {
  for (int r = 0; r <= rows; ++r) {
    for (int kb0 = 0; kb0 < kblocks; ++kb0) {
      u32 w;
      if (atom != 0) {
        w = gg::gemm::mx_scale_word<gg::gemm::ScaleLayout::kAtom128x4>(s, r < rows, r, kb0,
                                                                       kblocks);
      } else {
        w = gg::gemm::mx_scale_word<gg::gemm::ScaleLayout::kRows>(s, r < rows, r, kb0, kblocks);
      }
      words[r * kblocks + kb0] = w;
    }
  }
}
