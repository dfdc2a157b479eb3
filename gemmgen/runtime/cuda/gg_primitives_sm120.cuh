// gg_primitives_sm120.cuh: the Blackwell workstation (sm_120a / sm_121a)
// primitives: the block-scaled mma.sync. Included at the end of
// gg_primitives.cuh; as there, each primitive has its PTX under __CUDA_ARCH__
// and a CPU body under GG_EMU. docs/cuda-blackwell.md describes the body that
// uses them.
//
// mma.sync.aligned.kind::mxf8f6f4.block_scale.scale_vec::1X.m16n8k32.row.col
//   .f32.<A>.<B>.f32.ue8m0  d, a, b, c, sfa, {byte-id-a, thread-id-a},
//                                        sfb, {byte-id-b, thread-id-b}
// (PTX ISA, "Block Scaling for mma.sync"; SASS QMMA.SF.16832.F32.<A>.<B>.E8)
// computes D = (SFA * A) (B * SFB) + C: row r of A is scaled by one ue8m0 byte
// SFA[r], column c of B by SFB[c] (scale_vec::1X: one scale per row / column
// for the MMA's 32 K elements, exactly one MX block). A, B, C and D are the
// fragments of the unscaled m16n8k32 (gg_primitives.cuh).
//
// The scales come from registers: every lane passes a 32-bit sfa and sfb;
// the hardware reads byte `byte-id` of the lanes the thread-id selects
// (immediates; ptxas accepts byte-id 0..3, thread-id-a 0..1, thread-id-b
// 0..3):
//   SFA[r] from lane 4 * (r % 8) + 2 * thread-id-a + r / 8
//   SFB[c] from lane 4 * c + thread-id-b
// so with thread-id 0 lane l supplies row (l / 4) + 8 * (l % 2) of A when
// l % 4 < 2 and column l / 4 of B when l % 4 == 0 (gg::frag::sfa_row,
// sfb_col; CuTe's SM120 SFALayout ((2,2,8),32):((8,0,1),16) and SFBLayout
// ((4,8),32):((0,1),8) state the same map with the unread lanes as copies,
// tests/cuda/sm120/test_cuda_sm120_cute_oracle.py compares them). Four
// byte-ids let one register carry the scales of four consecutive K blocks.
//
// Arch: the `a` targets sm_120a and sm_121a, GG_SM12X_BLOCK_SCALED below.
// The primitive is a template, so its static_assert fires only in a kernel
// of another arch that calls it.
#pragma once

// Defined in device code built for sm_120a or sm_121a. nvcc defines
// __CUDA_ARCH_FEAT_SM120_ALL / __CUDA_ARCH_FEAT_SM121_ALL there, but NVRTC
// (13.5) defines neither for sm_121a; both define __CUDA_ARCH_SPECIFIC__
// (1200, 1210) for an `a` target (tests/launchers/test_cuda_nvrtc.py holds
// NVRTC's `_sm120` entries to QMMA.SF).
#if defined(__CUDA_ARCH_FEAT_SM120_ALL) || defined(__CUDA_ARCH_FEAT_SM121_ALL) || \
    (defined(__CUDA_ARCH_SPECIFIC__) &&                                           \
     (__CUDA_ARCH_SPECIFIC__ == 1200 || __CUDA_ARCH_SPECIFIC__ == 1210))
#define GG_SM12X_BLOCK_SCALED 1
#endif

namespace gg {

namespace frag {

// The row of A whose block scale lane `lane` supplies with thread-id-a
// `tid` (0 or 1), or -1 when the hardware reads no byte of it.
__host__ __device__ constexpr int sfa_row(int lane, int tid) {
  return ((lane & 3) >> 1) == tid ? (lane >> 2) + 8 * (lane & 1) : -1;
}
// The column of B whose block scale lane `lane` supplies with thread-id-b
// `tid` (0 .. 3), or -1.
__host__ __device__ constexpr int sfb_col(int lane, int tid) {
  return (lane & 3) == tid ? lane >> 2 : -1;
}
// The lanes that supply row r of SFA and column c of SFB (the inverses).
__host__ __device__ constexpr int sfa_lane(int row, int tid) {
  return 4 * (row & 7) + 2 * tid + (row >> 3);
}
__host__ __device__ constexpr int sfb_lane(int col, int tid) {
  return 4 * col + tid;
}

}  // namespace frag

#if defined(GG_EMU)
namespace emu_detail {

struct MxIn {
  u32 a[4];
  u32 b[2];
  float c[4];
  u32 sfa;
  u32 sfb;
};

// 2^(byte - 127) of an ue8m0 scale; NaN for 0xFF.
GG_EMU_ALWAYS_INLINE double ue8m0_value(unsigned byte) {
  return byte == 0xFFu ? NAN : std::ldexp(1.0, static_cast<int>(byte) - 127);
}

// The block-scaled MMA exists on sm_120a / sm_121a only: a kernel that runs
// it on another emulated device (a launcher that picked the wrong entry)
// fails, as ptxas would refuse to build it there.
inline void require_mx_arch() {
  static const bool ok = [] {
    const char* arch = gg::emu::device_arch();
    return std::strcmp(arch, "sm_120a") == 0 || std::strcmp(arch, "sm_121a") == 0;
  }();
  if (!ok) {
    gg::emu::fail(
        "mma.sync.kind::mxf8f6f4.block_scale needs sm_120a or sm_121a; the emulated "
        "device is %s",
        gg::emu::device_arch());
  }
}

// D = (SFA A)(B SFB) + C for the lane's four accumulator elements: the 32
// products summed in double, times the two scales (exact: the sum is far
// from double's range ends), plus C, rounded once to f32.
template <double (*ValueA)(unsigned), double (*ValueB)(unsigned), int kByteA, int kThreadA,
          int kByteB, int kThreadB>
GG_EMU_UNCHECKED MmaOut<float> mx_lane(unsigned lane, const MxIn* const* ins) {
  MmaOut<float> out{};
  for (int i = 0; i < 4; ++i) {
    const RowCol rc = frag::c_m16n8(static_cast<int>(lane), i);
    double acc = 0.0;
    for (int k = 0; k < 32; ++k) {
      const Lane ao = owner_a_m16n8k32(rc.row, k);
      const Lane bo = owner_b_m16n8k32(k, rc.col);
      acc += ValueA(byte_of(ins[ao.lane]->a[ao.i >> 2], ao.i)) *
             ValueB(byte_of(ins[bo.lane]->b[bo.i >> 2], bo.i));
    }
    const unsigned sa = byte_of(ins[frag::sfa_lane(rc.row, kThreadA)]->sfa, kByteA);
    const unsigned sb = byte_of(ins[frag::sfb_lane(rc.col, kThreadB)]->sfb, kByteB);
    out.d[i] = static_cast<float>(static_cast<double>(ins[lane]->c[i]) +
                                  acc * ue8m0_value(sa) * ue8m0_value(sb));
  }
  return out;
}

}  // namespace emu_detail
#endif

// Whether T is e4m3 / e5m2 (the FP8 operand types of the block-scaled MMA).
template <class T>
constexpr bool kIsE4M3 = false;
template <>
inline constexpr bool kIsE4M3<__nv_fp8_e4m3> = true;
template <class T>
constexpr bool kIsE5M2 = false;
template <>
inline constexpr bool kIsE5M2<__nv_fp8_e5m2> = true;

// D = (SFA A)(B SFB) + C, m16n8k32, A and B e4m3 or e5m2 (either of each),
// ue8m0 scales: byte kByteA of the sfa registers the kThreadA selector
// picks, byte kByteB of the sfb registers kThreadB picks (header comment).
template <class A, class B, int kByteA, int kThreadA, int kByteB, int kThreadB>
__device__ __forceinline__ void mma_m16n8k32_mx(float (&d)[4], const u32 (&a)[4], const u32 (&b)[2],
                                                const float (&c)[4], u32 sfa, u32 sfb) {
  static_assert(kByteA >= 0 && kByteA <= 3 && kByteB >= 0 && kByteB <= 3,
                "byte-id selects one of the 4 bytes of a scale register");
  static_assert(kThreadA >= 0 && kThreadA <= 1 && kThreadB >= 0 && kThreadB <= 3,
                "thread-id-a is 0 or 1 (M = 16), thread-id-b 0 .. 3 (N = 8)");
  static_assert((kIsE4M3<A> || kIsE5M2<A>) && (kIsE4M3<B> || kIsE5M2<B>),
                "mma_m16n8k32_mx multiplies e4m3 / e5m2 operands");
#if defined(__CUDA_ARCH__)
#if defined(GG_SM12X_BLOCK_SCALED)
#define GG_MMA_MX(TYPES)                                                                        \
  asm volatile(                                                                                 \
      "mma.sync.aligned.kind::mxf8f6f4.block_scale.scale_vec::1X.m16n8k32.row.col.f32." TYPES   \
      ".f32.ue8m0 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13}, %14, "    \
      "{%15, %16}, %17, {%18, %19};\n"                                                          \
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])                                          \
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]), \
        "f"(c[2]), "f"(c[3]), "r"(sfa), "n"(kByteA), "n"(kThreadA), "r"(sfb), "n"(kByteB),      \
        "n"(kThreadB))
  if constexpr (kIsE4M3<A> && kIsE4M3<B>) {
    GG_MMA_MX("e4m3.e4m3");
  } else if constexpr (kIsE4M3<A>) {
    GG_MMA_MX("e4m3.e5m2");
  } else if constexpr (kIsE4M3<B>) {
    GG_MMA_MX("e5m2.e4m3");
  } else {
    GG_MMA_MX("e5m2.e5m2");
  }
#undef GG_MMA_MX
#else
  static_assert(kByteA < 0, "gg::mma_m16n8k32_mx needs sm_120a or sm_121a (block-scaled mma.sync)");
#endif
#elif defined(GG_EMU)
  constexpr auto value_a = kIsE4M3<A> ? emu_detail::e4m3_value : emu_detail::e5m2_value;
  constexpr auto value_b = kIsE4M3<B> ? emu_detail::e4m3_value : emu_detail::e5m2_value;
  emu_detail::require_mx_arch();
  gg::emu::mc::on_mma();
  const emu_detail::MxIn in{
      {a[0], a[1], a[2], a[3]}, {b[0], b[1]}, {c[0], c[1], c[2], c[3]}, sfa, sfb};
  const emu_detail::MmaOut<float> out =
      gg::emu::warp_collective<emu_detail::MxIn, emu_detail::MmaOut<float> >(
          "mma.sync.kind::mxf8f6f4.block_scale.m16n8k32", 0xffffffffu, in,
          [](unsigned lane, const emu_detail::MxIn* const* ins) {
            return emu_detail::mx_lane<value_a, value_b, kByteA, kThreadA, kByteB, kThreadB>(lane,
                                                                                             ins);
          });
  for (int i = 0; i < 4; ++i)
    d[i] = out.d[i];
#else
  (void)d;
  (void)a;
  (void)b;
  (void)c;
  (void)sfa;
  (void)sfb;
#endif
}

}  // namespace gg
