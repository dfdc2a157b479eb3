// gg_gemm_config.cuh: the words of a tile GEMM's configuration.
//
// A generated tile GEMM (.cu) prints one `Config` struct (types as `using`
// aliases, these enums, ints) and one `TileN : Config` struct per tile of its
// LUT; the kernel body (gg_gemm.cuh) and its helpers (gg_widen.cuh,
// gg_scales.cuh, gg_epilogue.cuh) are templates on it that choose their code
// with `if constexpr`. The members a Config must have:
//
//   using lhs_t, rhs_t, mma_t, acc_t, out_t    storage and tensor-core types
//   using lhs_scale_t, rhs_scale_t, bias_t     void when absent
//   kRhs (Format), kRhsNK (bool), kBFeed       how B reaches the tensor cores
//   kLhsScale, kLhsScaleFormat, kLhsScaleBlockK, kLhsScaleLayout
//   kRhsScale, kRhsScaleFormat, kRhsScaleBlockN, kRhsScaleBlockK, kRhsScaleLayout
//   kFoldScales (bool), kScaleBlockK (int)     the FP32 promotion
//   kBias, kActivation, kHasAlpha, kAlpha      the epilogue
//
// and a TileN adds the tile's shape, warp layout, strides and shared-memory
// bytes (see check_tile below, which states how they relate). A tile of the
// block-scaled body (sm_120a / sm_121a) derives from its TileN and adds
// `kBlockScaledMma = true` (kBlockScaledMma<T> below). A Config whose
// NVFP4 block scales carry global scales adds `kLhsGlobalScale` /
// `kRhsGlobalScale` (kLhsGlobal<C> / kRhsGlobal<C> below); others have neither.
#pragma once

#include "gg_runtime.cuh"

// `#pragma unroll` for nvcc and NVRTC; the CPU emulation's g++ has no such
// pragma (it would warn under -Wall), and unrolls as it sees fit.
#if defined(__CUDACC__)
#define GG_UNROLL _Pragma("unroll")
#else
#define GG_UNROLL
#endif

namespace gg::gemm {

// A storage format: what the bytes of an operand, a scale or the output mean.
// Several share a C++ type (int4, fp4 and e8m0 are all unsigned char).
enum class Format {
  kNone,
  kF32,
  kBF16,
  kF16,
  kE4M3,
  kE5M2,
  kInt8,
  kInt4,
  kUint4,
  kFp4,
  kE8M0,
  kUE4M3
};

// Where a scale factor lives (docs/spec.md, "Scales"; ir.ScaleMode).
enum class ScaleMode {
  kNone,
  kPerTensor,      // lhs: []; rhs: [] or [g]
  kPerToken,       // lhs: [m]
  kPerTokenGroup,  // lhs: [m, cdiv(k, block_k)]
  kPerChannel,     // rhs: [n] or [g, n]
  kBlock,          // rhs: [cdiv(n, block_n), cdiv(k, block_k)] or [g, ...]
  kKBlock,         // rhs: [g, cdiv(k, block_k), 1, n]
};

// How a per-row K-blocked scale lies in memory (docs/spec.md, "Scale
// layouts"; ir.ScaleLayout): row-major [rows, kblocks], or CUTLASS's 128 x 4
// atom (rows padded to 128, K blocks to 4; scale_offset in gg_scales.cuh).
enum class ScaleLayout { kRows, kAtom128x4 };

// How the staged B tile feeds the tensor cores.
enum class BFeed {
  kLdmatrix,       // [n, k] tile of mma_t: ldmatrix as for A
  kLdmatrixTrans,  // [k, n] tile of a 16-bit mma_t: ldmatrix.trans
  kConvert,        // widened or transposed to a [n, k] tile of mma_t first
  kUnpackFp4,      // packed fp4 [n, k] tile of an e4m3 mma_t (W4A8): two bytes
                   // (four K elements) at a time into registers, one e2m1 a byte
                   // (gg::unpack_fp4x4; the block-scaled body only)
};

enum class Bias { kNone, kN, kGroup };  // [n]; [g, 1, n]

// kSwigluClamped: GPT-OSS's gated activation; its Config adds kAlphaGate,
// kLimit and kPairsInterleaved (gate 2j, up 2j + 1; else silu_mul's halves).
enum class Activation { kNone, kRelu, kGelu, kSilu, kSiluMul, kSwigluClamped };

template <class A, class B>
constexpr bool kSame = false;
template <class A>
constexpr bool kSame<A, A> = true;

// The C++ type that stores a format.
template <Format F>
struct Storage;
template <>
struct Storage<Format::kNone> {
  using type = void;
};
template <>
struct Storage<Format::kF32> {
  using type = float;
};
template <>
struct Storage<Format::kBF16> {
  using type = __nv_bfloat16;
};
template <>
struct Storage<Format::kF16> {
  using type = __half;
};
template <>
struct Storage<Format::kE4M3> {
  using type = __nv_fp8_e4m3;
};
template <>
struct Storage<Format::kE5M2> {
  using type = __nv_fp8_e5m2;
};
template <>
struct Storage<Format::kInt8> {
  using type = signed char;
};
template <>
struct Storage<Format::kInt4> {
  using type = unsigned char;  // two per byte, element 2i in the low nibble
};
template <>
struct Storage<Format::kUint4> {
  using type = unsigned char;  // two per byte, element 2i in the low nibble
};
template <>
struct Storage<Format::kFp4> {
  using type = unsigned char;  // two per byte, element 2i in the low nibble
};
template <>
struct Storage<Format::kE8M0> {
  using type = unsigned char;
};
template <>
struct Storage<Format::kUE4M3> {
  using type = unsigned char;  // NVFP4's block scale: an e4m3 byte, sign bit clear
};
template <Format F>
using storage_t = typename Storage<F>::type;

// Bits per stored element.
__host__ __device__ constexpr int bits(Format f) {
  switch (f) {
    case Format::kNone:
      return 0;
    case Format::kInt4:
    case Format::kUint4:
    case Format::kFp4:
      return 4;
    case Format::kE4M3:
    case Format::kE5M2:
    case Format::kInt8:
    case Format::kE8M0:
    case Format::kUE4M3:
      return 8;
    case Format::kBF16:
    case Format::kF16:
      return 16;
    case Format::kF32:
      return 32;
  }
  return 0;
}

// Whether a mode's scale changes along K, so that it multiplies each K
// block's partial sums (the FP32 promotion) rather than the finished sum.
__host__ __device__ constexpr bool per_k_block(ScaleMode mode) {
  return mode == ScaleMode::kPerTokenGroup || mode == ScaleMode::kBlock ||
         mode == ScaleMode::kKBlock;
}

// Bits of one tensor-core element: mma_t's, or 4 for packed fp4 (mma_t
// unsigned char: two e2m1 per byte, the block-scaled body's FP4 MMAs only).
template <class C>
constexpr int kMmaBits =
    kSame<typename C::mma_t, unsigned char> ? 4 : 8 * static_cast<int>(sizeof(typename C::mma_t));

// K of one MMA: 32 bytes of each A row (m16n8k16 for 16-bit types, m16n8k32
// for 8-bit ones, m16n8k64 for fp4).
template <class C>
constexpr int kMmaK = 256 / kMmaBits<C>;

// Whether a side's scale multiplies the partial sums of each K block: its
// own mode needs it, or the plan folded the epilogue scales into the
// promotion (kFoldScales: a main-loop scale and an e8m0 one, docs/cuda.md).
template <class C>
constexpr bool kLhsScalePromoted =
    C::kLhsScale != ScaleMode::kNone && (per_k_block(C::kLhsScale) || C::kFoldScales);
template <class C>
constexpr bool kRhsScalePromoted =
    C::kRhsScale != ScaleMode::kNone && (per_k_block(C::kRhsScale) || C::kFoldScales);

// An FP32 promotion every kScaleBlockK of K.
template <class C>
constexpr bool kPromotion = per_k_block(C::kLhsScale) || per_k_block(C::kRhsScale);

// Whether tile T multiplies with the block-scaled MMA (gg::mma_m16n8k32_mx),
// which applies both sides' K-block scales itself: a tile of the sm_120a /
// sm_121a body sets kBlockScaledMma; the others have no such member.
template <class T>
__host__ __device__ constexpr auto block_scaled_mma(int) -> decltype(T::kBlockScaledMma) {
  return T::kBlockScaledMma;
}
template <class T>
__host__ __device__ constexpr bool block_scaled_mma(long) {
  return false;
}
template <class T>
constexpr bool kBlockScaledMma = block_scaled_mma<T>(0);

// Whether a Config's lhs / rhs block scales carry NVFP4's global scale
// (`global=f32`): its kLhsGlobalScale / kRhsGlobalScale, false without them.
template <class C>
__host__ __device__ constexpr auto lhs_global_member(int) -> decltype(C::kLhsGlobalScale) {
  return C::kLhsGlobalScale;
}
template <class C>
__host__ __device__ constexpr bool lhs_global_member(long) {
  return false;
}
template <class C>
__host__ __device__ constexpr auto rhs_global_member(int) -> decltype(C::kRhsGlobalScale) {
  return C::kRhsGlobalScale;
}
template <class C>
__host__ __device__ constexpr bool rhs_global_member(long) {
  return false;
}
// Whether a Config's rhs scale carries uint4 zero points (`zero=uint4`):
// its kRhsZero, false without it. B elements are then q - z (convert_b).
template <class C>
__host__ __device__ constexpr auto rhs_zero_member(int) -> decltype(C::kRhsZero) {
  return C::kRhsZero;
}
template <class C>
__host__ __device__ constexpr bool rhs_zero_member(long) {
  return false;
}
template <class C>
constexpr bool kRhsZeroPoints = rhs_zero_member<C>(0);
template <class C>
constexpr bool kLhsGlobal = lhs_global_member<C>(0);
template <class C>
constexpr bool kRhsGlobal = rhs_global_member<C>(0);

// The partial sums are promoted in software (the block-scaled MMA needs
// none), at the end of each scale block: once per K tile or less often when
// the block spans tiles, after every kScaleBlockK / kMmaK MMA steps inside a
// tile when the tile holds several blocks (MX scales of K = 32).
template <class T>
constexpr bool kSoftwarePromotion = kPromotion<T> && !kBlockScaledMma<T>;

// Whether a Config is W4A8: e4m3 lhs times packed fp4 rhs [n, k] (one e2m1
// a byte on the m16n8k32 kind::mxf8f6f4 MMA, BFeed::kUnpackFp4).
template <class C>
constexpr bool kW4A8 =
    kSame<typename C::lhs_t, __nv_fp8_e4m3> && kSame<typename C::mma_t, __nv_fp8_e4m3> &&
    C::kRhs == Format::kFp4 && C::kRhsNK && C::kBFeed == BFeed::kUnpackFp4;

// Whether the block-scaled MMAs run a Config: the operands one type as
// stored (or W4A8: e4m3 x packed fp4 [n, k]) and the same per-row K-blocked
// scales on both sides (lhs per_token_group, rhs block n=1, either layout),
// no folded epilogue scale: FP8 (e4m3 / e5m2) and W4A8 with e8m0 scales of
// 32 (MXFP8, m16n8k32 scale_vec::1X), fp4 with e8m0 scales of 32 (MXFP4,
// m16n8k64 2X) or ue4m3 scales of 16 (NVFP4, m16n8k64 4X).
template <class C>
constexpr bool kMxSupported =
    kSame<typename C::lhs_t, typename C::mma_t> &&
    (kSame<typename C::rhs_t, typename C::mma_t> || kW4A8<C>) &&
    !kSame<typename C::mma_t, signed char> && kMmaBits<C> <= 8 &&
    C::kLhsScale == ScaleMode::kPerTokenGroup && C::kRhsScale == ScaleMode::kBlock &&
    C::kRhsScaleBlockN == 1 && C::kLhsScaleBlockK == C::kRhsScaleBlockK &&
    C::kLhsScaleFormat == C::kRhsScaleFormat && !C::kFoldScales &&
    ((C::kLhsScaleFormat == Format::kE8M0 && C::kLhsScaleBlockK == 32) ||
     (kMmaBits<C> == 4 && C::kLhsScaleFormat == Format::kUE4M3 && C::kLhsScaleBlockK == 16));

// Scale bytes one block-scaled MMA step reads per row / column (its
// scale_vec): 1 (MXFP8), 2 (MXFP4), 4 (NVFP4).
template <class C>
constexpr int kMxPerStep = C::kLhsScaleBlockK > 0 ? kMmaK<C> / C::kLhsScaleBlockK : 1;

// An e8m0 scale in the promotion: a product of two scales may leave f32, so
// a K block whose products are not all normal is scaled exactly.
template <class C>
constexpr bool kExactPromotion = (kLhsScalePromoted<C> && C::kLhsScaleFormat == Format::kE8M0) ||
                                 (kRhsScalePromoted<C> && C::kRhsScaleFormat == Format::kE8M0);

// An e8m0 scale in the epilogue: applied with gg::mul_scale(s), exactly.
template <class C>
constexpr bool kExactEpilogue = (C::kLhsScale != ScaleMode::kNone && !kLhsScalePromoted<C> &&
                                 C::kLhsScaleFormat == Format::kE8M0) ||
                                (C::kRhsScale != ScaleMode::kNone && !kRhsScalePromoted<C> &&
                                 C::kRhsScaleFormat == Format::kE8M0);

// Whether d (> 0) divides x.
__host__ __device__ constexpr bool divides(int d, int x) {
  return d > 0 && x % d == 0;
}

template <class M>
struct Accumulator {
  using type = float;
};
template <>
struct Accumulator<signed char> {
  using type = int;
};

// Whether a Config is consistent: each type is its format's, the scale
// blocks and the promotion agree, B's feed suits its type and layout.
template <class C>
__host__ __device__ constexpr bool check_config() {
  using mma_t = typename C::mma_t;
  // lhs feeds the tensor cores as stored; rhs, the scales and the bias are
  // stored as their formats say (void: absent).
  if (!kSame<typename C::lhs_t, mma_t> || !kSame<typename C::rhs_t, storage_t<C::kRhs>> ||
      !kSame<typename C::acc_t, typename Accumulator<mma_t>::type> ||
      !kSame<typename C::lhs_scale_t, storage_t<C::kLhsScaleFormat>> ||
      !kSame<typename C::rhs_scale_t, storage_t<C::kRhsScaleFormat>> ||
      (C::kBias == Bias::kNone) != kSame<typename C::bias_t, void>) {
    return false;
  }
  if ((C::kLhsScale == ScaleMode::kNone) != (C::kLhsScaleFormat == Format::kNone) ||
      (C::kRhsScale == ScaleMode::kNone) != (C::kRhsScaleFormat == Format::kNone)) {
    return false;
  }
  // Only modes per K block have a K extent, only `block` an N extent; the
  // promotion runs at the gcd of the K extents.
  if ((C::kLhsScaleBlockK > 0) != per_k_block(C::kLhsScale) ||
      (C::kRhsScaleBlockK > 0) != per_k_block(C::kRhsScale) ||
      (C::kRhsScaleBlockN > 0) != (C::kRhsScale == ScaleMode::kBlock)) {
    return false;
  }
  if ((C::kScaleBlockK > 0) != kPromotion<C> || (C::kFoldScales && !kPromotion<C>)) {
    return false;
  }
  // Only a per-row K-blocked scale (lhs per_token_group, rhs block n=1) may
  // lie in the atom layout.
  if ((C::kLhsScaleLayout == ScaleLayout::kAtom128x4 &&
       C::kLhsScale != ScaleMode::kPerTokenGroup) ||
      (C::kRhsScaleLayout == ScaleLayout::kAtom128x4 &&
       !(C::kRhsScale == ScaleMode::kBlock && C::kRhsScaleBlockN == 1))) {
    return false;
  }
  if ((per_k_block(C::kLhsScale) && !divides(C::kScaleBlockK, C::kLhsScaleBlockK)) ||
      (per_k_block(C::kRhsScale) && !divides(C::kScaleBlockK, C::kRhsScaleBlockK))) {
    return false;
  }
  // ldmatrix reads B as stored only when it is of the tensor-core type, and
  // .trans only transposes 16-bit elements.
  // kUnpackFp4 takes packed fp4 [n, k] to the e4m3 MMA (W4A8).
  const bool as_stored = kSame<typename C::rhs_t, mma_t>;
  if ((C::kBFeed == BFeed::kLdmatrix && !(as_stored && C::kRhsNK)) ||
      (C::kBFeed == BFeed::kLdmatrixTrans && !(as_stored && !C::kRhsNK && sizeof(mma_t) == 2)) ||
      (C::kBFeed == BFeed::kUnpackFp4 &&
       !(C::kRhs == Format::kFp4 && C::kRhsNK && kSame<mma_t, __nv_fp8_e4m3>))) {
    return false;
  }
  return C::kHasAlpha || C::kAlpha == 1.0f;
}

// Whether a tile's numbers (computed by the plan, backends/cuda/gemm/)
// follow from its shape: the warp layout covers the tile, the strides are
// rows padded by 16 bytes, the shared memory holds the pipeline and the
// epilogue tile.
template <class T>
__host__ __device__ constexpr bool check_tile() {
  constexpr int kRowBytes = T::kBK * kMmaBits<T> / 8;  // of an A row of a K tile
  if (!check_config<T>() || T::kBM % T::kWM != 0 || T::kBN % T::kWN != 0 ||
      T::kWarpsN != T::kBN / T::kWN || T::kThreads != (T::kBM / T::kWM) * T::kWarpsN * 32 ||
      T::kMI != T::kWM / 16 || T::kNI != T::kWN / 8 || T::kNI % 2 != 0 ||
      T::kKSteps * kMmaK<T> != T::kBK) {
    return false;
  }
  if (T::kBNOut !=
      (T::kActivation == Activation::kSiluMul || T::kActivation == Activation::kSwigluClamped
           ? T::kBN / 2
           : T::kBN)) {
    return false;
  }
  if (T::kAStride != kRowBytes + 16 || T::kAStage != T::kBM * T::kAStride ||
      T::kBRows != (T::kRhsNK ? T::kBN : T::kBK) ||
      T::kBRowBytes != (T::kRhsNK ? T::kBK : T::kBN) * bits(T::kRhs) / 8 ||
      T::kBStride != T::kBRowBytes + 16 || T::kBStage != T::kBRows * T::kBStride ||
      T::kBConvStride != kRowBytes + 16 || T::kCStride != T::kBN + 4) {
    return false;
  }
  const int conv = T::kBFeed == BFeed::kConvert ? T::kBN * T::kBConvStride : 0;
  // A K tile divides the promotion's block, or holds whole blocks of whole
  // MMA steps (software promotion); the block-scaled MMAs take what
  // kMxSupported says, whole MMA steps of whole blocks.
  const bool blocks_fit =
      !kPromotion<T> || divides(T::kBK, T::kScaleBlockK) ||
      (divides(T::kScaleBlockK, T::kBK) && divides(kMmaK<T>, T::kScaleBlockK)) ||
      kBlockScaledMma<T>;
  if (kBlockScaledMma<T> && !kMxSupported<T>) {
    return false;
  }
  // fp4 multiplies on the block-scaled MMAs only (fp4 x fp4, and W4A8's
  // unpacked e2m1).
  if ((kMmaBits<T> == 4 || T::kBFeed == BFeed::kUnpackFp4) && !kBlockScaledMma<T>) {
    return false;
  }
  return T::kSmemBytes >= T::kStages * (T::kAStage + T::kBStage) + conv &&
         T::kSmemBytes >= T::kBM * T::kCStride * 4 && blocks_fit;
}

}  // namespace gg::gemm
