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
// The FP4 forms multiply e2m1 (packed two per byte, element 2i in the low
// nibble, as gemmgen stores fp4) at m16n8k64, two or four scales per row /
// column for the 64 K elements:
//   kind::mxf4.block_scale.scale_vec::2X ... .e2m1.e2m1.f32.ue8m0 (MXFP4,
//     blocks of 32; SASS OMMA.SF.16864.F32.E2M1.E2M1.E8): bytes byte-id and
//     byte-id + 1 (byte-id 0 or 2) scale K 0..31 and 32..63;
//   kind::mxf4nvf4.block_scale.scale_vec::4X ... .e2m1.e2m1.f32.ue4m3
//     (NVFP4, blocks of 16; OMMA.SF.16864.F32.E2M1.E2M1.UE4M3.4X): the four
//     bytes (byte-id 0) scale K 16j .. 16j + 15.
// Their A and B fragments are the bytes of the 8-bit m16n8k32 fragments
// (the nibbles of byte i are K elements 2 * (byte's K) and + 1), the lanes
// supplying the scales those of the FP8 form (CuTe's SM120_16x8x64_TN_VS
// traits; tests/cuda/sm120/test_cuda_sm120_primitives.py compares them).
//
// W4A8 (MXFP8 activations x MXFP4 weights) multiplies e4m3 A by e2m1 B on
// the FP8 form, .e4m3.e2m1 (SASS QMMA.SF.16832.F32.E4M3.E2M1.E8): under
// kind::mxf8f6f4 every operand element has an 8-bit container, so B's
// fragments are those of the 8-bit m16n8k32 (PTX ISA, "Matrix Fragments for
// mma.m16n8k32": four .e2m1 to a .b32 register, laid out as .e4m3), one
// e2m1 per byte in bits [5:2] with bits [7:6] and [1:0] zero (CuTe,
// mma_traits_sm120.hpp, fp4_shift_B: "MMA F8F6F4 expects the four-bit data
// to be in the middle of the eight-bit container ... 0b0000ABCD -->
// 0b00ABCD00"). gg::unpack_fp4x4
// turns two packed bytes (four K elements) into such a word; the emulator
// refuses a container whose padding bits are set.
//
// Arch: the `a` targets sm_120a and sm_121a (GG_SM12X_BLOCK_SCALED below).
// The primitives are templates, so their static_asserts fire only in a
// kernel of another arch that calls them.
#pragma once

// Defined where the block-scaled MMAs exist: a device pass for sm_120a or
// sm_121a. nvcc 13.5 defines __CUDA_ARCH_FEAT_SM120_ALL / _SM121_ALL there;
// NVRTC 13.5 (the CuPy launchers' compiler) defines __CUDA_ARCH_SPECIFIC__
// (1200 / 1210) for both but not __CUDA_ARCH_FEAT_SM121_ALL, so both are
// tested (tests/cuda/sm120/test_cuda_sm120_gemm.py builds with each).
#if (defined(__CUDA_ARCH_SPECIFIC__) &&                                     \
     (__CUDA_ARCH_SPECIFIC__ == 1200 || __CUDA_ARCH_SPECIFIC__ == 1210)) || \
    defined(__CUDA_ARCH_FEAT_SM120_ALL) || defined(__CUDA_ARCH_FEAT_SM121_ALL)
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

// e2m1: sign, 2 exponent bits (bias 1), 1 mantissa bit; no inf or NaN.
GG_EMU_ALWAYS_INLINE double e2m1_value(unsigned nibble) {
  static constexpr double kMagnitude[8] = {0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0};
  return (nibble & 8u) ? -kMagnitude[nibble & 7u] : kMagnitude[nibble & 7u];
}

// An e2m1 in its 8-bit container (kind::mxf8f6f4): the value in bits [5:2].
// The padding bits must be zero: what the hardware makes of others is not
// documented, and a set padding bit means the unpacking went wrong.
inline double e2m1_byte_value(unsigned byte) {
  if ((byte & 0xC3u) != 0u) {
    gg::emu::fail(
        "mma.sync.kind::mxf8f6f4 .e2m1 operand byte 0x%02x has padding bits set (the e2m1 "
        "value goes in bits [5:2], the rest zero)",
        byte);
  }
  return e2m1_value((byte >> 2) & 15u);
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

// The m16n8k64 FP4 MMA with kVec scales per row / column (2: ue8m0 blocks
// of 32, 4: ue4m3 blocks of 16), the bytes from byte-id on: each block's
// products summed in double and scaled, the blocks and C added in double,
// rounded once to f32.
template <int kVec, int kByteA, int kThreadA, int kByteB, int kThreadB>
GG_EMU_UNCHECKED MmaOut<float> fp4_lane(unsigned lane, const MxIn* const* ins) {
  MmaOut<float> out{};
  for (int i = 0; i < 4; ++i) {
    const RowCol rc = frag::c_m16n8(static_cast<int>(lane), i);
    const u32 sfa = ins[frag::sfa_lane(rc.row, kThreadA)]->sfa;
    const u32 sfb = ins[frag::sfb_lane(rc.col, kThreadB)]->sfb;
    double sum = static_cast<double>(ins[lane]->c[i]);
    for (int v = 0; v < kVec; ++v) {
      double acc = 0.0;
      for (int kk = v * (64 / kVec); kk < (v + 1) * (64 / kVec); ++kk) {
        // K element kk is nibble kk % 2 of the 8-bit fragment's byte kk / 2.
        const Lane ao = owner_a_m16n8k32(rc.row, kk / 2);
        const Lane bo = owner_b_m16n8k32(kk / 2, rc.col);
        const unsigned ab = byte_of(ins[ao.lane]->a[ao.i >> 2], ao.i);
        const unsigned bb = byte_of(ins[bo.lane]->b[bo.i >> 2], bo.i);
        acc += e2m1_value((ab >> (4 * (kk & 1))) & 15u) * e2m1_value((bb >> (4 * (kk & 1))) & 15u);
      }
      const unsigned sa = byte_of(sfa, kByteA + v), sb = byte_of(sfb, kByteB + v);
      const double scale =
          kVec == 4 ? e4m3_value(sa) * e4m3_value(sb) : ue8m0_value(sa) * ue8m0_value(sb);
      sum += acc * scale;
    }
    out.d[i] = static_cast<float>(sum);
  }
  return out;
}

}  // namespace emu_detail
#endif

// The B operand type of W4A8's block-scaled MMA: e2m1, one per byte in
// bits [5:2] (header comment; gg::unpack_fp4x4 makes its fragments).
struct e2m1_in_byte_t {};

// Four packed e2m1 (element i in nibble i of the low 16 bits, as gemmgen
// stores fp4) as four bytes of the kind::mxf8f6f4 container: byte i holds
// element i in bits [5:2].
__host__ __device__ __forceinline__ u32 unpack_fp4x4(u32 packed) {
  u32 x = packed & 0xFFFFu;
  x = (x | (x << 8)) & 0x00FF00FFu;  // bytes 0, 2: elements 0-1, 2-3
  x = (x | (x << 4)) & 0x0F0F0F0Fu;  // byte i: element i
  return x << 2;
}

// Whether T is e4m3 / e5m2 (the FP8 operand types of the block-scaled MMA).
template <class T>
constexpr bool kIsE4M3 = false;
template <>
inline constexpr bool kIsE4M3<__nv_fp8_e4m3> = true;
template <class T>
constexpr bool kIsE5M2 = false;
template <>
inline constexpr bool kIsE5M2<__nv_fp8_e5m2> = true;
template <class T>
constexpr bool kIsE2M1Byte = false;
template <>
inline constexpr bool kIsE2M1Byte<e2m1_in_byte_t> = true;

// D = (SFA A)(B SFB) + C, m16n8k32, A e4m3 or e5m2, B e4m3, e5m2 or
// e2m1_in_byte_t (W4A8: one e2m1 per byte, bits [5:2]), ue8m0 scales: byte
// kByteA of the sfa registers the kThreadA selector picks, byte kByteB of
// the sfb registers kThreadB picks (header comment).
template <class A, class B, int kByteA, int kThreadA, int kByteB, int kThreadB>
__device__ __forceinline__ void mma_m16n8k32_mx(float (&d)[4], const u32 (&a)[4], const u32 (&b)[2],
                                                const float (&c)[4], u32 sfa, u32 sfb) {
  static_assert(kByteA >= 0 && kByteA <= 3 && kByteB >= 0 && kByteB <= 3,
                "byte-id selects one of the 4 bytes of a scale register");
  static_assert(kThreadA >= 0 && kThreadA <= 1 && kThreadB >= 0 && kThreadB <= 3,
                "thread-id-a is 0 or 1 (M = 16), thread-id-b 0 .. 3 (N = 8)");
  static_assert((kIsE4M3<A> || kIsE5M2<A>) && (kIsE4M3<B> || kIsE5M2<B> || kIsE2M1Byte<B>),
                "mma_m16n8k32_mx multiplies e4m3 / e5m2 A by e4m3 / e5m2 / e2m1 B");
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
  if constexpr (kIsE2M1Byte<B>) {
    if constexpr (kIsE4M3<A>) {
      GG_MMA_MX("e4m3.e2m1");
    } else {
      GG_MMA_MX("e5m2.e2m1");
    }
  } else if constexpr (kIsE4M3<A> && kIsE4M3<B>) {
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
  constexpr auto value_b = kIsE2M1Byte<B> ? emu_detail::e2m1_byte_value
                           : kIsE4M3<B>   ? emu_detail::e4m3_value
                                          : emu_detail::e5m2_value;
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

// D = (SFA A)(B SFB) + C, m16n8k64, A and B e2m1 (packed fp4), kVec = 2:
// MXFP4 (ue8m0 scales of 32 K elements, bytes kByteA, kByteA + 1 of the
// selected lanes' sfa; byte-id 0 or 2), kVec = 4: NVFP4 (ue4m3 scales of 16,
// all four bytes; byte-id 0). Header comment.
template <int kVec, int kByteA, int kThreadA, int kByteB, int kThreadB>
__device__ __forceinline__ void mma_m16n8k64_fp4(float (&d)[4], const u32 (&a)[4],
                                                 const u32 (&b)[2], const float (&c)[4], u32 sfa,
                                                 u32 sfb) {
  static_assert((kVec == 2 && kByteA % 2 == 0 && kByteB % 2 == 0 && kByteA <= 2 && kByteB <= 2) ||
                    (kVec == 4 && kByteA == 0 && kByteB == 0),
                "scale_vec::2X takes byte-id 0 or 2, scale_vec::4X byte-id 0");
  static_assert(kThreadA >= 0 && kThreadA <= 1 && kThreadB >= 0 && kThreadB <= 3,
                "thread-id-a is 0 or 1 (M = 16), thread-id-b 0 .. 3 (N = 8)");
#if defined(__CUDA_ARCH__)
#if defined(GG_SM12X_BLOCK_SCALED)
#define GG_MMA_FP4(KIND)                                                                          \
  asm volatile("mma.sync.aligned." KIND                                                           \
               " {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13}, %14, "       \
               "{%15, %16}, %17, {%18, %19};\n"                                                   \
               : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])                                   \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]),     \
                 "f"(c[1]), "f"(c[2]), "f"(c[3]), "r"(sfa), "n"(kByteA), "n"(kThreadA), "r"(sfb), \
                 "n"(kByteB), "n"(kThreadB))
  if constexpr (kVec == 2) {
    GG_MMA_FP4("kind::mxf4.block_scale.scale_vec::2X.m16n8k64.row.col.f32.e2m1.e2m1.f32.ue8m0");
  } else {
    GG_MMA_FP4("kind::mxf4nvf4.block_scale.scale_vec::4X.m16n8k64.row.col.f32.e2m1.e2m1.f32.ue4m3");
  }
#undef GG_MMA_FP4
#else
  static_assert(kVec < 0, "gg::mma_m16n8k64_fp4 needs sm_120a or sm_121a (block-scaled mma.sync)");
#endif
#elif defined(GG_EMU)
  emu_detail::require_mx_arch();
  gg::emu::mc::on_mma();
  const emu_detail::MxIn in{
      {a[0], a[1], a[2], a[3]}, {b[0], b[1]}, {c[0], c[1], c[2], c[3]}, sfa, sfb};
  const emu_detail::MmaOut<float> out =
      gg::emu::warp_collective<emu_detail::MxIn, emu_detail::MmaOut<float> >(
          kVec == 2 ? "mma.sync.kind::mxf4.block_scale.m16n8k64"
                    : "mma.sync.kind::mxf4nvf4.block_scale.m16n8k64",
          0xffffffffu, in, [](unsigned lane, const emu_detail::MxIn* const* ins) {
            return emu_detail::fp4_lane<kVec, kByteA, kThreadA, kByteB, kThreadB>(lane, ins);
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
