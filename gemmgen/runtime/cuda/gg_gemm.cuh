// gg_gemm.cuh: the tile GEMM on tensor cores, dense and grouped.
//
// One body for every tile GEMM gemmgen generates, templated on the tile
// struct T (a Config plus the tile's numbers, gg_gemm_config.cuh); a
// generated .cu prints T and entry points that call `dense` or `grouped`.
// docs/cuda.md ("The tile GEMM") describes the algorithm:
//   (1) grouped: `fill` writes out = existing_out (or zeros), `worklist`
//       turns group_sizes into (local group, m tile) work items (the masked
//       layout needs neither: `masked` indexes its (group, m tile) grid);
//   (2) a kStages-stage cp.async pipeline of 16-byte copies of the A and B
//       tiles, zero-filled past m, n and k;
//   (3) B fed to ldmatrix as staged, or widened / transposed first (widen);
//       MMAs accumulate in acc_t; with main-loop scales, every kScaleBlockK
//       of K the partial sums are scaled and added to an f32 total (FP32
//       promotion, gg_scales.cuh), or, in a tile of the sm_120a / sm_121a
//       block-scaled body (kBlockScaledMma), the MX scales go to the MMA
//       itself (mma_mx below);
//   (4) the epilogue stages the tile in shared memory and writes out row by
//       row (gg_epilogue.cuh).
#pragma once

#include "gg_convert.cuh"
#include "gg_epilogue.cuh"
#include "gg_gemm_config.cuh"
#include "gg_scales.cuh"
#include "gg_widen.cuh"

namespace gg::gemm {

// Marks an entry point's parameters used (an entry that only traps).
template <class... Args>
__device__ __forceinline__ void unused(const Args&...) {}

// One MMA of the tensor-core type M: d = a * b + c.
template <class M, class Acc>
__device__ __forceinline__ void mma(Acc (&d)[4], const u32 (&a)[4], const u32 (&b)[2],
                                    const Acc (&c)[4]) {
  if constexpr (kSame<M, __nv_bfloat16>) {
    gg::mma_m16n8k16_bf16(d, a, b, c);
  } else if constexpr (kSame<M, __half>) {
    gg::mma_m16n8k16_f16(d, a, b, c);
  } else if constexpr (kSame<M, __nv_fp8_e4m3>) {
    gg::mma_m16n8k32_e4m3(d, a, b, c);
  } else if constexpr (kSame<M, __nv_fp8_e5m2>) {
    gg::mma_m16n8k32_e5m2(d, a, b, c);
  } else {
    static_assert(kSame<M, signed char>, "a tensor-core type");
    gg::mma_m16n8k32_s8(d, a, b, c);
  }
}

// Column of B (and of the accumulator) that tile column c of the block
// starting at output column n0 computes. silu_mul: the first half of the
// tile holds gate columns n0.., the second half the matching up columns
// n/2 + n0.., so out[:, j] = silu(gate j) * up j stays inside one block
// (swiglu_clamped's halves too). Interleaved pairs: the tile is B columns
// 2 n0.. in order, its column pair (2c, 2c + 1) output column n0 + c.
template <class T>
__device__ __forceinline__ int b_col(int c, int n0, int n) {
  if constexpr (kInterleavedPairs<T>) {
    return 2 * n0 + c;
  } else if constexpr (kPaired<T>) {
    return c < T::kBN / 2 ? n0 + c : n / 2 + n0 + (c - T::kBN / 2);
  } else {
    return n0 + c;
  }
}

// One pipeline stage: a [bm, bk] tile of lhs and the matching B tile, by
// 16-byte cp.async copies. Rows past m and columns past n or k read nothing
// and land as zeros (the source pointer stays inside the array).
template <class T>
__device__ __forceinline__ void load_stage(unsigned char* smem, int slot, int kt,
                                           const typename T::lhs_t* __restrict__ lhs,
                                           const unsigned char* __restrict__ rhs_bytes, int m,
                                           int n, int k, int m0, int n0) {
  constexpr int kRhsBits = bits(T::kRhs);
  constexpr int kABits = kMmaBits<T>;  // lhs is stored as the tensor cores take it
  const unsigned char* lhs_bytes = reinterpret_cast<const unsigned char*>(lhs);
  unsigned char* a_dst = smem + slot * T::kAStage;
  constexpr int kAChunksPerRow = T::kBK * kABits / 8 / 16;
  for (int c = threadIdx.x; c < T::kBM * kAChunksPerRow; c += T::kThreads) {
    const int r = c / kAChunksPerRow, q = c % kAChunksPerRow;
    const int row = m0 + r;
    const int col = kt * T::kBK + q * (128 / kABits);
    int bytes = (k - col) * kABits / 8;
    bytes = row < m ? (bytes < 0 ? 0 : (bytes > 16 ? 16 : bytes)) : 0;
    const unsigned char* src =
        lhs_bytes + (bytes > 0 ? ((long long)row * k + col) * kABits / 8 : 0);
    gg::cp_async_16(a_dst + r * T::kAStride + q * 16, src, bytes);
  }
  unsigned char* b_dst = smem + T::kStages * T::kAStage + slot * T::kBStage;
  constexpr int kBChunksPerRow = T::kBRowBytes / 16;
  for (int c = threadIdx.x; c < T::kBRows * kBChunksPerRow; c += T::kThreads) {
    const int r = c / kBChunksPerRow, q = c % kBChunksPerRow;
    if constexpr (T::kRhsNK) {
      // rhs [n, k]: staged row r is B column b_col(r), bytes along k.
      const int col = b_col<T>(r, n0, n);
      const long long row_bytes = (long long)k * kRhsBits / 8;
      const long long off = (long long)kt * T::kBK * kRhsBits / 8 + q * 16;
      long long bytes = row_bytes - off;
      bytes = col < n ? (bytes < 0 ? 0 : (bytes > 16 ? 16 : bytes)) : 0;
      const unsigned char* src = rhs_bytes + (bytes > 0 ? (long long)col * row_bytes + off : 0);
      gg::cp_async_16(b_dst + r * T::kBStride + q * 16, src, (unsigned)bytes);
    } else {
      // rhs [k, n]: staged row r is K index kt * bk + r, bytes along n.
      const int krow = kt * T::kBK + r;
      const int col = b_col<T>(q * 16 * 8 / kRhsBits, n0, n);
      const long long row_bytes = (long long)n * kRhsBits / 8;
      long long bytes = (long long)(n - col) * kRhsBits / 8;
      bytes = krow < k ? (bytes < 0 ? 0 : (bytes > 16 ? 16 : bytes)) : 0;
      const unsigned char* src =
          rhs_bytes + (bytes > 0 ? (long long)krow * row_bytes + (long long)col * kRhsBits / 8 : 0);
      gg::cp_async_16(b_dst + r * T::kBStride + q * 16, src, (unsigned)bytes);
    }
  }
}

// Element (tile column c, k index kk) of the staged B tile, widened exactly
// to the tensor-core type (gg_widen.cuh).
template <class T>
__device__ __forceinline__ typename T::mma_t b_element(const unsigned char* staged, int c, int kk) {
  if constexpr (T::kRhsNK) {
    return widen<T::kRhs, typename T::mma_t>(staged + c * T::kBStride, kk);
  } else {
    return widen<T::kRhs, typename T::mma_t>(staged + kk * T::kBStride, c);
  }
}

// The uint4 zero point (`zero=uint4`) of B column `col` in the rhs scale
// block of K index `kk`, local group gl: the scale's indexing, its last dim
// packed two per byte (element 2i in the low nibble; docs/semantics.md,
// "Zero points"). Columns past n and K indices past k take 0, so B's zero
// fill stays zero.
template <class T>
__device__ __forceinline__ float zero_point(const unsigned char* __restrict__ rhs_zero, int gl,
                                            int col, int kk, int n, int k) {
  if (col >= n || kk >= k) {
    return 0.0f;
  }
  const int kb = (k + T::kRhsScaleBlockK - 1) / T::kRhsScaleBlockK, b = kk / T::kRhsScaleBlockK;
  long long index;  // the nibble's index: rows of the last dim padded to whole bytes
  if constexpr (T::kRhsScale == ScaleMode::kKBlock) {  // [g, kb, 1, n]
    index = ((long long)gl * kb + b) * ((n + 1) / 2 * 2) + col;
  } else {  // block n=BN k=BK: [(g,) ceil(n / BN), kb]
    const int nb = (n + T::kRhsScaleBlockN - 1) / T::kRhsScaleBlockN;
    index = ((long long)gl * nb + col / T::kRhsScaleBlockN) * ((kb + 1) / 2 * 2) + b;
  }
  return static_cast<float>((rhs_zero[index >> 1] >> (4 * (index & 1))) & 0xFu);
}

// The staged B tile of `slot` (K tile kt), as a [bn][bk] tile of mma_t (K
// contiguous); with zero points, each element is q - z, exact in mma_t.
template <class T>
__device__ __forceinline__ void convert_b(unsigned char* smem, int slot, unsigned char* conv,
                                          const unsigned char* __restrict__ rhs_zero, int gl, int n,
                                          int k, int n0, int kt) {
  using mma_t = typename T::mma_t;
  const unsigned char* staged = smem + T::kStages * T::kAStage + slot * T::kBStage;
  for (int i = threadIdx.x; i < T::kBN * T::kBK; i += T::kThreads) {
    const int c = i / T::kBK, kk = i % T::kBK;
    mma_t v = b_element<T>(staged, c, kk);
    if constexpr (kRhsZeroPoints<T>) {
      const float z = zero_point<T>(rhs_zero, gl, b_col<T>(c, n0, n), kt * T::kBK + kk, n, k);
      v = gg::from_float<mma_t>(gg::to_float(v) - z);
    }
    memcpy(conv + c * T::kBConvStride + kk * (int)sizeof(mma_t), &v, sizeof(mma_t));
  }
}

// The FP32 promotion at the end of the scale block of K that starts at k
// index k0: the partial sums times their scales, added to the f32 total;
// acc restarts from 0. The
// scales of this thread's rows and columns are read once per block; rows
// past m and columns past n (never stored) take 1 on the exact path, else 0.
template <class T>
__device__ __forceinline__ void promote(typename T::acc_t (&acc)[T::kMI][T::kNI][4],
                                        float (&total)[T::kMI][T::kNI][4],
                                        const typename T::lhs_scale_t* __restrict__ lhs_scale,
                                        const typename T::rhs_scale_t* __restrict__ rhs_scale,
                                        int m, int n, int k, int m0, int n0, int gl, int wm0,
                                        int wn0, int lane, int k0) {
  constexpr float kOutside = kExactPromotion<T> ? 1.0f : 0.0f;
  float sa[T::kMI][2], sb[T::kNI][2];
  GG_UNROLL
  for (int i = 0; i < T::kMI; ++i) {
    GG_UNROLL
    for (int h = 0; h < 2; ++h) {
      if constexpr (kLhsScalePromoted<T>) {
        const int row = m0 + wm0 + i * 16 + lane / 4 + 8 * h;
        sa[i][h] = row < m ? lhs_scale_at<T>(lhs_scale, row, k, k0) : kOutside;
      } else {
        sa[i][h] = 1.0f;
      }
    }
  }
  GG_UNROLL
  for (int j = 0; j < T::kNI; ++j) {
    GG_UNROLL
    for (int h = 0; h < 2; ++h) {
      if constexpr (kRhsScalePromoted<T>) {
        const int col = b_col<T>(wn0 + j * 8 + 2 * (lane % 4) + h, n0, n);
        sb[j][h] = col < n ? rhs_scale_at<T>(rhs_scale, gl, col, n, k, k0) : kOutside;
      } else {
        sb[j][h] = 1.0f;
      }
    }
  }
  if constexpr (kExactPromotion<T>) {
    // e8m0 scales: a product sa * sb may lie anywhere in 2^-254 .. 2^254
    // (docs/semantics.md, "e8m0"). When every product this thread forms is
    // a normal f32 (the usual case), it is exact and multiplies the partial
    // sum at once; otherwise each partial sum is scaled exactly, with the
    // scales' exponents added as integers (gg::mul_scales_out_of_line).
    unsigned lo_a = 255u, hi_a = 0u, lo_b = 255u, hi_b = 0u;
    GG_UNROLL
    for (int i = 0; i < T::kMI; ++i) {
      GG_UNROLL
      for (int h = 0; h < 2; ++h) {
        const unsigned f = gg::exponent_field(sa[i][h]);
        lo_a = f < lo_a ? f : lo_a;
        hi_a = f > hi_a ? f : hi_a;
      }
    }
    GG_UNROLL
    for (int j = 0; j < T::kNI; ++j) {
      GG_UNROLL
      for (int h = 0; h < 2; ++h) {
        const unsigned f = gg::exponent_field(sb[j][h]);
        lo_b = f < lo_b ? f : lo_b;
        hi_b = f > hi_b ? f : hi_b;
      }
    }
    if (gg::product_is_normal(lo_a, hi_a, lo_b, hi_b)) {
      GG_UNROLL
      for (int i = 0; i < T::kMI; ++i) {
        GG_UNROLL
        for (int j = 0; j < T::kNI; ++j) {
          GG_UNROLL
          for (int e = 0; e < 4; ++e) {
            total[i][j][e] += static_cast<float>(acc[i][j][e]) * (sa[i][e / 2] * sb[j][e % 2]);
          }
        }
      }
    } else {
      GG_UNROLL
      for (int i = 0; i < T::kMI; ++i) {
        GG_UNROLL
        for (int j = 0; j < T::kNI; ++j) {
          GG_UNROLL
          for (int e = 0; e < 4; ++e) {
            total[i][j][e] += gg::mul_scales_out_of_line(static_cast<float>(acc[i][j][e]),
                                                         gg::float_to_bits(sa[i][e / 2]),
                                                         gg::float_to_bits(sb[j][e % 2]));
          }
        }
      }
    }
    GG_UNROLL
    for (int i = 0; i < T::kMI; ++i) {
      GG_UNROLL
      for (int j = 0; j < T::kNI; ++j) {
        GG_UNROLL
        for (int e = 0; e < 4; ++e)
          acc[i][j][e] = 0;
      }
    }
  } else {
    GG_UNROLL
    for (int i = 0; i < T::kMI; ++i) {
      GG_UNROLL
      for (int j = 0; j < T::kNI; ++j) {
        GG_UNROLL
        for (int e = 0; e < 4; ++e) {
          total[i][j][e] += static_cast<float>(acc[i][j][e]) * (sa[i][e / 2] * sb[j][e % 2]);
          acc[i][j][e] = 0;
        }
      }
    }
  }
}

// Words of MX scale bytes a lane holds per fragment for one K tile: byte j
// of word w is the tile's K block 4w + j (kMxPerStep blocks per MMA step: 1
// MXFP8, 2 MXFP4, 4 NVFP4).
template <class T>
constexpr int kMxWords = (T::kKSteps * kMxPerStep<T> + 3) / 4;

// The block-scaled body's scales of K tile kt for this lane: for each A
// fragment i the lhs row it supplies (gg::frag::sfa_row, thread-id 0), for
// each B fragment j the rhs column (gg::frag::sfb_col); lanes that supply
// none keep 127s, which the MMA does not read.
template <class T>
__device__ __forceinline__ void mx_scales(gg::u32 (&sfa)[T::kMI][kMxWords<T>],
                                          gg::u32 (&sfb)[T::kNI][kMxWords<T>],
                                          const typename T::lhs_scale_t* __restrict__ lhs_scale,
                                          const typename T::rhs_scale_t* __restrict__ rhs_scale,
                                          int m, int n, int k, int m0, int n0, int gl, int wm0,
                                          int wn0, int lane, int kt) {
  constexpr int kBlockK = T::kLhsScaleBlockK;  // 32, or 16 (NVFP4)
  constexpr unsigned char kOne = T::kLhsScaleFormat == Format::kUE4M3 ? 0x38 : 0x7F;  // 1.0
  const int kblocks = (k + kBlockK - 1) / kBlockK;
  const int a_row = gg::frag::sfa_row(lane, 0), b_col_in = gg::frag::sfb_col(lane, 0);
  const unsigned char* lscales = reinterpret_cast<const unsigned char*>(lhs_scale);
  const unsigned char* bscales = reinterpret_cast<const unsigned char*>(rhs_scale) +
                                 gl * scale_matrix_size<T::kRhsScaleLayout>(n, kblocks);
  GG_UNROLL
  for (int w = 0; w < kMxWords<T>; ++w) {
    const int kb0 = kt * T::kKSteps * kMxPerStep<T> + 4 * w;
    GG_UNROLL
    for (int i = 0; i < T::kMI; ++i) {
      const int row = m0 + wm0 + i * 16 + a_row;
      sfa[i][w] = mx_scale_word<T::kLhsScaleLayout, kOne>(lscales, a_row >= 0 && row < m, row, kb0,
                                                          kblocks);
    }
    GG_UNROLL
    for (int j = 0; j < T::kNI; ++j) {
      const int col = b_col<T>(wn0 + j * 8 + b_col_in, n0, n);
      sfb[j][w] = mx_scale_word<T::kRhsScaleLayout, kOne>(bscales, b_col_in >= 0 && col < n, col,
                                                          kb0, kblocks);
    }
  }
}

// The block-scaled MMAs of one K step whose scales start at byte kByte of
// word w (kMxPerStep<T> bytes: the MMA's scale_vec).
template <class T, int kByte>
__device__ __forceinline__ void mma_mx_step(float (&acc)[T::kMI][T::kNI][4],
                                            const gg::u32 (&a)[T::kMI][4],
                                            const gg::u32 (&b)[T::kNI][2],
                                            const gg::u32 (&sfa)[T::kMI][kMxWords<T>],
                                            const gg::u32 (&sfb)[T::kNI][kMxWords<T>], int w) {
  using mma_t = typename T::mma_t;
  GG_UNROLL
  for (int i = 0; i < T::kMI; ++i) {
    GG_UNROLL
    for (int j = 0; j < T::kNI; ++j) {
      if constexpr (kMmaBits<T> == 4) {
        gg::mma_m16n8k64_fp4<kMxPerStep<T>, kByte, 0, kByte, 0>(acc[i][j], a[i], b[j], acc[i][j],
                                                                sfa[i][w], sfb[j][w]);
      } else if constexpr (kW4A8<T>) {
        gg::mma_m16n8k32_mx<mma_t, gg::e2m1_in_byte_t, kByte, 0, kByte, 0>(
            acc[i][j], a[i], b[j], acc[i][j], sfa[i][w], sfb[j][w]);
      } else {
        gg::mma_m16n8k32_mx<mma_t, mma_t, kByte, 0, kByte, 0>(acc[i][j], a[i], b[j], acc[i][j],
                                                              sfa[i][w], sfb[j][w]);
      }
    }
  }
}

// The MMAs of K step ks with the block-scaled MMA: the step's scales start
// at byte ks * kMxPerStep of the tile's words (MXFP8: byte ks % 4 of word
// ks / 4; MXFP4: byte 0 or 2; NVFP4: a whole word). A byte-id is an
// immediate, so each possible first byte is a case.
template <class T>
__device__ __forceinline__ void mma_mx(int ks, float (&acc)[T::kMI][T::kNI][4],
                                       const gg::u32 (&a)[T::kMI][4], const gg::u32 (&b)[T::kNI][2],
                                       const gg::u32 (&sfa)[T::kMI][kMxWords<T>],
                                       const gg::u32 (&sfb)[T::kNI][kMxWords<T>]) {
  constexpr int kPer = kMxPerStep<T>;
  const int first = ks * kPer, w = first / 4;
  if (first % 4 == 0) {
    mma_mx_step<T, 0>(acc, a, b, sfa, sfb, w);
  } else if constexpr (kPer <= 2) {
    if (first % 4 == 2) {
      mma_mx_step<T, 2>(acc, a, b, sfa, sfb, w);
    } else if constexpr (kPer == 1) {
      if (first % 4 == 1) {
        mma_mx_step<T, 1>(acc, a, b, sfa, sfb, w);
      } else {
        mma_mx_step<T, 3>(acc, a, b, sfa, sfb, w);
      }
    }
  }
}

// The block's tile: rows [m0, m0 + bm) of lhs times B of local group `gl`,
// output columns [n0, n0 + bn_out); rows outside [row_lo, row_hi) are not
// stored (they belong to another group).
template <class T>
__device__ __forceinline__ void gemm_tile(
    unsigned char* smem, const typename T::lhs_t* __restrict__ lhs,
    const typename T::rhs_t* __restrict__ rhs,
    const typename T::lhs_scale_t* __restrict__ lhs_scale,
    const typename T::rhs_scale_t* __restrict__ rhs_scale,
    const typename T::bias_t* __restrict__ bias, typename T::out_t* __restrict__ out, int m, int n,
    int k, int m0, int n0, int gl, int row_lo, int row_hi, const float* __restrict__ lhs_global,
    const float* __restrict__ rhs_global, const unsigned char* __restrict__ rhs_zero = nullptr) {
  static_assert(check_tile<T>(), "the tile's numbers follow from its shape (check_tile)");
  static_assert(!kRhsZeroPoints<T> || T::kBFeed == BFeed::kConvert,
                "zero points are subtracted as B is widened (convert_b)");
  using mma_t = typename T::mma_t;
  using acc_t = typename T::acc_t;
  constexpr bool kConvert = T::kBFeed == BFeed::kConvert;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int wm0 = (warp / T::kWarpsN) * T::kWM, wn0 = (warp % T::kWarpsN) * T::kWN;
  // Output columns.
  const int n_out = kPaired<T> ? n / 2 : n;
  const int ktiles = (k + T::kBK - 1) / T::kBK;
  const unsigned char* rhs_bytes =
      reinterpret_cast<const unsigned char*>(rhs) + (long long)gl * n * k * bits(T::kRhs) / 8;
  unsigned char* conv = smem + T::kStages * (T::kAStage + T::kBStage);

  acc_t acc[T::kMI][T::kNI][4];
  // The f32 sum of the scaled K blocks (with a software promotion).
  constexpr bool kPromote = kSoftwarePromotion<T>;
  float total[kPromote ? T::kMI : 1][kPromote ? T::kNI : 1][4];
  GG_UNROLL
  for (int i = 0; i < T::kMI; ++i) {
    GG_UNROLL
    for (int j = 0; j < T::kNI; ++j) {
      GG_UNROLL
      for (int e = 0; e < 4; ++e) {
        acc[i][j][e] = 0;
        if constexpr (kPromote) {
          total[i][j][e] = 0.0f;
        }
      }
    }
  }

  // Prologue: fill all but one stage.
  GG_UNROLL
  for (int s = 0; s < T::kStages - 1; ++s) {
    if (s < ktiles) {
      load_stage<T>(smem, s, s, lhs, rhs_bytes, m, n, k, m0, n0);
    }
    gg::cp_async_commit_group();
  }

  // Block-scaled body: the scales of K tile kt are read one tile ahead, so
  // their loads overlap the MMAs of the tile before.
  constexpr int kWords = kBlockScaledMma<T> ? kMxWords<T> : 1;
  gg::u32 sfa[kBlockScaledMma<T> ? T::kMI : 1][kWords],
      sfb[kBlockScaledMma<T> ? T::kNI : 1][kWords];
  if constexpr (kBlockScaledMma<T>) {
    mx_scales<T>(sfa, sfb, lhs_scale, rhs_scale, m, n, k, m0, n0, gl, wm0, wn0, lane, 0);
  }

  for (int kt = 0; kt < ktiles; ++kt) {
    const int slot = kt % T::kStages;
    gg::u32 next_sfa[kBlockScaledMma<T> ? T::kMI : 1][kWords];
    gg::u32 next_sfb[kBlockScaledMma<T> ? T::kNI : 1][kWords];
    if constexpr (kBlockScaledMma<T>) {
      if (kt + 1 < ktiles) {
        mx_scales<T>(next_sfa, next_sfb, lhs_scale, rhs_scale, m, n, k, m0, n0, gl, wm0, wn0, lane,
                     kt + 1);
      }
    }
    gg::cp_async_wait_group<T::kStages - 2>();
    __syncthreads();  // stage kt has landed for every thread; stage kt - 1 is free
    {
      const int next = kt + T::kStages - 1;
      if (next < ktiles) {
        load_stage<T>(smem, next % T::kStages, next, lhs, rhs_bytes, m, n, k, m0, n0);
      }
      gg::cp_async_commit_group();
    }
    const unsigned char* b_tile;
    if constexpr (kConvert) {
      convert_b<T>(smem, slot, conv, rhs_zero, gl, n, k, n0, kt);
      __syncthreads();
      b_tile = conv;
    } else {
      b_tile = smem + T::kStages * T::kAStage + slot * T::kBStage;
    }
    constexpr int kBTileStride = kConvert ? T::kBConvStride : T::kBStride;
    const unsigned char* a_tile = smem + slot * T::kAStage;
    GG_UNROLL
    for (int ks = 0; ks < T::kKSteps; ++ks) {
      // A fragments: four 8x8 matrices of 16 bytes per row (rows 0-7 / 8-15,
      // bytes 0-15 / 16-31 of this MMA's K slice).
      gg::u32 a[T::kMI][4];
      GG_UNROLL
      for (int i = 0; i < T::kMI; ++i) {
        const int row = wm0 + i * 16 + (lane % 8) + 8 * ((lane / 8) % 2);
        gg::ldmatrix_x4(a[i], a_tile + row * T::kAStride + ks * 32 + 16 * (lane / 16));
      }
      gg::u32 b[T::kNI][2];
      GG_UNROLL
      for (int j = 0; j < T::kNI; j += 2) {
        gg::u32 r[4];
        if constexpr (T::kBFeed == BFeed::kUnpackFp4) {
          // W4A8: B is packed fp4 [n][k / 2]. The 8-bit fragment's word h of
          // column lane / 4 holds K elements 16 h + 4 (lane % 4) + 0..3: two
          // packed bytes, unpacked to one e2m1 a byte (gg::unpack_fp4x4).
          GG_UNROLL
          for (int jj = 0; jj < 2; ++jj) {
            const unsigned char* src =
                b_tile + (wn0 + (j + jj) * 8 + lane / 4) * kBTileStride + ks * 16 + 2 * (lane % 4);
            r[2 * jj] = gg::unpack_fp4x4(*reinterpret_cast<const unsigned short*>(src));
            r[2 * jj + 1] = gg::unpack_fp4x4(*reinterpret_cast<const unsigned short*>(src + 8));
          }
        } else if constexpr (T::kBFeed == BFeed::kLdmatrixTrans) {
          // B is [k][n] in shared memory: .trans turns 8x8 blocks of K rows
          // into the column-major fragments.
          const int kr = ks * kMmaK<T> + (lane % 8) + 8 * ((lane / 8) % 2);
          const int nc = wn0 + j * 8 + 8 * (lane / 16);
          gg::ldmatrix_x4_trans(r, b_tile + kr * kBTileStride + nc * (int)sizeof(mma_t));
        } else {
          // B is [n][k] in shared memory, like A: rows are output columns.
          const int nr = wn0 + j * 8 + (lane % 8) + 8 * (lane / 16);
          gg::ldmatrix_x4(r, b_tile + nr * kBTileStride + ks * 32 + 16 * ((lane / 8) % 2));
        }
        b[j][0] = r[0];
        b[j][1] = r[1];
        b[j + 1][0] = r[2];
        b[j + 1][1] = r[3];
      }
      if constexpr (kBlockScaledMma<T>) {
        mma_mx<T>(ks, acc, a, b, sfa, sfb);
      } else {
        GG_UNROLL
        for (int i = 0; i < T::kMI; ++i) {
          GG_UNROLL
          for (int j = 0; j < T::kNI; ++j)
            mma<mma_t>(acc[i][j], a[i], b[j], acc[i][j]);
        }
      }
      if constexpr (kPromote && T::kScaleBlockK < T::kBK) {
        // The tile holds several scale blocks: promote at the end of each
        // that starts before k (those past it multiplied zeros).
        constexpr int kSteps = T::kScaleBlockK / kMmaK<T>;
        const int k0 = kt * T::kBK + (ks + 1 - kSteps) * kMmaK<T>;
        if ((ks + 1) % kSteps == 0 && k0 < k) {
          promote<T>(acc, total, lhs_scale, rhs_scale, m, n, k, m0, n0, gl, wm0, wn0, lane, k0);
        }
      }
    }
    if constexpr (kPromote && T::kScaleBlockK >= T::kBK) {
      if (((kt + 1) * T::kBK) % T::kScaleBlockK == 0 || kt + 1 == ktiles) {
        promote<T>(acc, total, lhs_scale, rhs_scale, m, n, k, m0, n0, gl, wm0, wn0, lane,
                   kt * T::kBK);
      }
    }
    if constexpr (kBlockScaledMma<T>) {
      GG_UNROLL
      for (int i = 0; i < T::kMI; ++i) {
        GG_UNROLL
        for (int w = 0; w < kWords; ++w)
          sfa[i][w] = next_sfa[i][w];
      }
      GG_UNROLL
      for (int j = 0; j < T::kNI; ++j) {
        GG_UNROLL
        for (int w = 0; w < kWords; ++w)
          sfb[j][w] = next_sfb[j][w];
      }
    }
  }

  // Epilogue. (1) the accumulators go to a [bm][bn] f32 tile in shared
  // memory, reusing the pipeline buffers.
  gg::cp_async_wait_all();
  __syncthreads();
  float* c_tile = reinterpret_cast<float*>(smem);
  GG_UNROLL
  for (int i = 0; i < T::kMI; ++i) {
    GG_UNROLL
    for (int j = 0; j < T::kNI; ++j) {
      GG_UNROLL
      for (int e = 0; e < 4; ++e) {
        const int r = wm0 + i * 16 + lane / 4 + 8 * (e / 2);
        const int c = wn0 + j * 8 + 2 * (lane % 4) + (e % 2);
        if constexpr (kPromote) {
          c_tile[r * T::kCStride + c] = total[i][j][e];
        } else {
          c_tile[r * T::kCStride + c] = static_cast<float>(acc[i][j][e]);
        }
      }
    }
  }
  __syncthreads();

  // (2) consecutive threads take consecutive columns of a row: scales,
  // alpha, bias and the activation in f32, then the cast to out_t.
  const float global = global_scale<T>(lhs_global, rhs_global, gl);
  for (int idx = threadIdx.x; idx < T::kBM * T::kBNOut; idx += T::kThreads) {
    const int r = idx / T::kBNOut, c = idx % T::kBNOut;
    const int row = m0 + r, col = n0 + c;
    if (row < row_lo || row >= row_hi || col >= n_out) {
      continue;
    }
    if constexpr (kInterleavedPairs<T>) {
      float x[2] = {c_tile[r * T::kCStride + 2 * c], c_tile[r * T::kCStride + 2 * c + 1]};
      const int bcol[2] = {2 * col, 2 * col + 1};
      out[(long long)row * n_out + col] =
          epilogue_element<T>(x, bcol, lhs_scale, rhs_scale, bias, row, gl, n, global);
    } else if constexpr (kHalves<T> == 2) {
      float x[2] = {c_tile[r * T::kCStride + c], c_tile[r * T::kCStride + c + T::kBN / 2]};
      const int bcol[2] = {col, n / 2 + col};
      out[(long long)row * n_out + col] =
          epilogue_element<T>(x, bcol, lhs_scale, rhs_scale, bias, row, gl, n, global);
    } else {
      float x[1] = {c_tile[r * T::kCStride + c]};
      const int bcol[1] = {col};
      out[(long long)row * n_out + col] =
          epilogue_element<T>(x, bcol, lhs_scale, rhs_scale, bias, row, gl, n, global);
    }
  }
}

// (2-4) for a dense GEMM: block (x, y, z) computes n tile x and m tile
// y + z * gridDim.y (the m tiles fold over grid y and z, docs/cuda.md,
// "Launch limits"); blocks past m in the last z slice exit.
template <class T>
__device__ __forceinline__ void dense(unsigned char* smem,
                                      const typename T::lhs_t* __restrict__ lhs,
                                      const typename T::rhs_t* __restrict__ rhs,
                                      const typename T::lhs_scale_t* __restrict__ lhs_scale,
                                      const typename T::rhs_scale_t* __restrict__ rhs_scale,
                                      const typename T::bias_t* __restrict__ bias,
                                      typename T::out_t* __restrict__ out, int m, int n, int k,
                                      const float* __restrict__ lhs_global = nullptr,
                                      const float* __restrict__ rhs_global = nullptr,
                                      const unsigned char* __restrict__ rhs_zero = nullptr) {
  const unsigned m_tile = blockIdx.y + blockIdx.z * gridDim.y;
  if (m_tile * T::kBM >= static_cast<unsigned>(m)) {
    return;
  }
  gemm_tile<T>(smem, lhs, rhs, lhs_scale, rhs_scale, bias, out, m, n, k, m_tile * T::kBM,
               blockIdx.x * T::kBNOut, 0, 0, m, lhs_global, rhs_global, rhs_zero);
}

// Where group `group` of group_sizes starts, from the prefix sums starts[0 ..
// num_groups]. Any group index is defined (docs/semantics.md, "grouped"): a
// group group_sizes lacks (before 0, or past its end) is empty, so it starts
// where its neighbour does and ends there too.
__device__ __forceinline__ int group_start(const int* __restrict__ starts, int num_groups,
                                           long long group) {
  return starts[group < 0 ? 0 : (group > num_groups ? num_groups : group)];
}

// (2-4) for a grouped GEMM: block (x, y, z) takes n tile x and work item
// y + z * gridDim.y of the worklist; blocks past the item count (the grid is
// sized for the worst case) exit. Only the rows of the item's group are
// stored.
template <class T>
__device__ __forceinline__ void grouped(
    unsigned char* smem, const typename T::lhs_t* __restrict__ lhs,
    const typename T::rhs_t* __restrict__ rhs,
    const typename T::lhs_scale_t* __restrict__ lhs_scale,
    const typename T::rhs_scale_t* __restrict__ rhs_scale,
    const typename T::bias_t* __restrict__ bias, typename T::out_t* __restrict__ out,
    const int* __restrict__ workspace, int m, int n, int k, int num_groups, int group_offset,
    const float* __restrict__ lhs_global = nullptr, const float* __restrict__ rhs_global = nullptr,
    const unsigned char* __restrict__ rhs_zero = nullptr) {
  const unsigned y = blockIdx.y + blockIdx.z * gridDim.y;
  if (y >= static_cast<unsigned>(workspace[0])) {
    return;
  }
  const int* starts = workspace + 1;
  const int* item = workspace + 2 + num_groups + 2LL * y;
  const int gl = item[0], m0 = item[1] * T::kBM;
  const long long group = (long long)group_offset + gl;
  const int lo = group_start(starts, num_groups, group);
  const int hi = group_start(starts, num_groups, group + 1);
  gemm_tile<T>(smem, lhs, rhs, lhs_scale, rhs_scale, bias, out, m, n, k, m0, blockIdx.x * T::kBNOut,
               gl, lo > m0 ? lo : m0, hi, lhs_global, rhs_global, rhs_zero);
}

// (1a) out = existing_out, or zeros: rows this shard does not compute keep
// these values; the GEMM overwrites the rows of its groups.
template <class O>
__device__ __forceinline__ void fill(O* __restrict__ out, const O* __restrict__ existing_out,
                                     long long total) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total;
       i += (long long)gridDim.x * blockDim.x) {
    out[i] = existing_out != nullptr ? existing_out[i] : gg::from_float<O>(0.0f);
  }
}

// (1b) The tile worklist, built on the device by one thread, so no host
// synchronisation is needed. Workspace layout (ints): [0] the item count;
// [1, 2 + num_groups) the first row of each group, then the end of the last
// (prefix sums, clamped to [0, m]; a negative size counts as 0); then
// (local group, m tile) pairs, group by group.
__device__ __forceinline__ void worklist(const int* __restrict__ group_sizes, int num_groups,
                                         int group_offset, int g, int m, int bm,
                                         int* __restrict__ workspace) {
  if (blockIdx.x != 0 || threadIdx.x != 0) {
    return;
  }
  int* starts = workspace + 1;
  int* items = workspace + 2 + num_groups;
  int row = 0;
  starts[0] = 0;
  for (int i = 0; i < num_groups; ++i) {
    const int size = group_sizes[i] > 0 ? group_sizes[i] : 0;
    row = size > m - row ? m : row + size;  // no overflow: 0 <= row <= m
    starts[i + 1] = row;
  }
  int count = 0;
  for (int gl = 0; gl < g; ++gl) {
    const long long group = (long long)group_offset + gl;
    const int lo = group_start(starts, num_groups, group);
    const int hi = group_start(starts, num_groups, group + 1);
    if (hi <= lo) {
      continue;  // empty groups get no work
    }
    for (int mt = lo / bm; (long long)mt * bm < hi; ++mt) {
      items[2 * count] = gl;
      items[2 * count + 1] = mt;
      ++count;
    }
  }
  workspace[0] = count;
}

// (2-4) for a masked grouped GEMM (docs/cuda.md, "Masked grouped launches"):
// lhs [g, cap, k] and out [g, cap, n_out] as g * cap rows; group gl owns
// rows [gl * cap, gl * cap + masked_m[gl]) (the count clipped to [0, cap]).
// Block (x, y, z) takes n tile x and m tile y + z * gridDim.y of the grid's
// g * cdiv(cap, bm) (group, m tile) pairs: it zeroes the rows of its tile
// past the count and computes the rows before it, so every element of out is
// written once, without a fill pass. The GEMM reads no row past the count:
// its m bound is the group's last valid row, so lhs padding (and its scales)
// may hold anything.
template <class T>
__device__ __forceinline__ void masked(unsigned char* smem,
                                       const typename T::lhs_t* __restrict__ lhs,
                                       const typename T::rhs_t* __restrict__ rhs,
                                       const typename T::lhs_scale_t* __restrict__ lhs_scale,
                                       const typename T::rhs_scale_t* __restrict__ rhs_scale,
                                       const typename T::bias_t* __restrict__ bias,
                                       typename T::out_t* __restrict__ out,
                                       const int* __restrict__ masked_m, int n, int k, int g,
                                       int cap, const float* __restrict__ lhs_global = nullptr,
                                       const float* __restrict__ rhs_global = nullptr,
                                       const unsigned char* __restrict__ rhs_zero = nullptr) {
  const unsigned y = blockIdx.y + blockIdx.z * gridDim.y;
  const unsigned tiles = static_cast<unsigned>((cap + T::kBM - 1) / T::kBM);
  if (y >= tiles * static_cast<unsigned>(g)) {
    return;  // the last z slice of the folded grid
  }
  const int gl = static_cast<int>(y / tiles);
  const int lo = static_cast<int>(y % tiles) * T::kBM;  // the tile's first row in its group
  const int hi = lo + T::kBM < cap ? lo + T::kBM : cap;
  const int count = masked_m[gl] < 0 ? 0 : (masked_m[gl] > cap ? cap : masked_m[gl]);
  const int base = gl * cap;  // < g * cap <= INT_MAX: the launchers check it
  const int n_out = kPaired<T> ? n / 2 : n;
  const int n0 = blockIdx.x * T::kBNOut;
  // Rows [max(lo, count), hi) of the tile are past the count: zeros.
  const int zero_from = count > lo ? count : lo;
  const int cols = n_out - n0 < T::kBNOut ? n_out - n0 : T::kBNOut;
  for (int idx = threadIdx.x; idx < (hi - zero_from) * cols; idx += T::kThreads) {
    const int r = zero_from + idx / cols, c = n0 + idx % cols;
    out[(long long)(base + r) * n_out + c] = gg::from_float<typename T::out_t>(0.0f);
  }
  if (count > lo) {
    gemm_tile<T>(smem, lhs, rhs, lhs_scale, rhs_scale, bias, out, base + count, n, k, base + lo, n0,
                 gl, base + lo, base + count, lhs_global, rhs_global, rhs_zero);
  }
}

}  // namespace gg::gemm
