// gg_scales.cuh: a tile GEMM's scale factors, one lookup per scale mode.
//
// A scale is read as an f32 (e8m0 bytes decoded exactly, 2^(e - 127), NaN for
// 255); where it sits in its array is a function of its mode (ScaleMode, the
// shapes of docs/spec.md) and of the element's row, column, local group and
// K block. A new scale mode is one more branch in lhs_scale_at or
// rhs_scale_at (and a test in tests/cuda/sm80/test_cuda_gemm_helpers.py).
#pragma once

#include "gg_convert.cuh"
#include "gg_gemm_config.cuh"

namespace gg::gemm {

// Where the scale of (row, K block kb) of one matrix of per-row K-blocked
// scales lies, in elements from the matrix's start: row-major [rows,
// kblocks], or CUTLASS's 128 x 4 atom (Sm1xxBlockScaledConfig; docs/spec.md,
// "Scale layouts"): atoms of 128 rows x 4 K blocks in 512 bytes, K-major
// across atoms, byte (row % 32) * 16 + (row / 32 % 4) * 4 + kb % 4 within
// one.
template <ScaleLayout L>
__host__ __device__ constexpr long long scale_offset(int row, int kb, int kblocks) {
  if constexpr (L == ScaleLayout::kAtom128x4) {
    const long long k_atoms = (kblocks + 3) / 4;
    return ((long long)(row / 128) * k_atoms + kb / 4) * 512 + (row % 32) * 16 +
           (row / 32 % 4) * 4 + kb % 4;
  } else {
    return (long long)row * kblocks + kb;
  }
}

// The elements one matrix of per-row K-blocked scales spans (the stride
// between the groups of a grouped rhs): rows x kblocks, padded to whole
// atoms in the atom layout.
template <ScaleLayout L>
__host__ __device__ constexpr long long scale_matrix_size(int rows, int kblocks) {
  if constexpr (L == ScaleLayout::kAtom128x4) {
    return (long long)((rows + 127) / 128 * 128) * ((kblocks + 3) / 4 * 4);
  } else {
    return (long long)rows * kblocks;
  }
}

// Scale `i` of an array of format F, as an f32.
template <Format F, class S>
__device__ __forceinline__ float scale_value(const S* s, long long i) {
  if constexpr (F == Format::kE8M0) {
    return gg::e8m0_to_float(s[i]);
  } else if constexpr (F == Format::kUE4M3) {
    return gg::to_float(*reinterpret_cast<const __nv_fp8_e4m3*>(s + i));
  } else {
    return gg::to_float(s[i]);
  }
}

// The lhs scale of row `row` (< m) for the K block starting at k index k0.
template <class C>
__device__ __forceinline__ float lhs_scale_at(const typename C::lhs_scale_t* s, int row, int k,
                                              int k0) {
  constexpr Format kFormat = C::kLhsScaleFormat;
  if constexpr (C::kLhsScale == ScaleMode::kPerTensor) {
    return scale_value<kFormat>(s, 0);
  } else if constexpr (C::kLhsScale == ScaleMode::kPerToken) {
    return scale_value<kFormat>(s, row);
  } else {
    static_assert(C::kLhsScale == ScaleMode::kPerTokenGroup, "an lhs scale mode");
    const int kblocks = (k + C::kLhsScaleBlockK - 1) / C::kLhsScaleBlockK;
    const int kb = k0 / C::kLhsScaleBlockK;
    return scale_value<kFormat>(s, scale_offset<C::kLhsScaleLayout>(row, kb, kblocks));
  }
}

// The rhs scale of column `col` (< n) of local group `gl` for the K block
// starting at k index k0.
template <class C>
__device__ __forceinline__ float rhs_scale_at(const typename C::rhs_scale_t* s, int gl, int col,
                                              int n, int k, int k0) {
  constexpr Format kFormat = C::kRhsScaleFormat;
  if constexpr (C::kRhsScale == ScaleMode::kPerTensor) {
    return scale_value<kFormat>(s, gl);
  } else if constexpr (C::kRhsScale == ScaleMode::kPerChannel) {
    return scale_value<kFormat>(s, (long long)gl * n + col);
  } else if constexpr (C::kRhsScale == ScaleMode::kBlock) {
    const int kblocks = (k + C::kRhsScaleBlockK - 1) / C::kRhsScaleBlockK;
    const int kb = k0 / C::kRhsScaleBlockK;
    const int nblocks = (n + C::kRhsScaleBlockN - 1) / C::kRhsScaleBlockN;
    if constexpr (C::kRhsScaleLayout == ScaleLayout::kAtom128x4) {  // block n=1
      return scale_value<kFormat>(s, gl * scale_matrix_size<C::kRhsScaleLayout>(n, kblocks) +
                                         scale_offset<C::kRhsScaleLayout>(col, kb, kblocks));
    }
    return scale_value<kFormat>(
        s, ((long long)gl * nblocks + col / C::kRhsScaleBlockN) * kblocks + kb);
  } else {
    static_assert(C::kRhsScale == ScaleMode::kKBlock, "an rhs scale mode");
    const int kblocks = (k + C::kRhsScaleBlockK - 1) / C::kRhsScaleBlockK;
    const int kb = k0 / C::kRhsScaleBlockK;
    return scale_value<kFormat>(s, ((long long)gl * kblocks + kb) * n + col);  // [g, kb, 1, n]
  }
}

// The block-scaled MMAs' scale bytes (gg_gemm.cuh, the sm_120a / sm_121a
// body): the bytes of K blocks kb0 .. kb0 + 3 of one lhs row or one rhs
// column, byte j for block kb0 + j, as the MMAs' byte-ids read them. A block
// at or past kblocks (whose operands are zero-filled) and a row or column
// outside the matrix read kOne (1.0: 0x7F in ue8m0, 0x38 in ue4m3), never a
// NaN byte that would turn the zeros into NaN; in the atom layout four
// aligned blocks are one 32-bit load.
template <ScaleLayout L, unsigned char kOne = 0x7F>
__device__ __forceinline__ u32 mx_scale_word(const unsigned char* __restrict__ s, bool inside,
                                             int row, int kb0, int kblocks) {
  constexpr u32 kFill = 0x01010101u * kOne;
  u32 word = kFill;
  if (!inside || kb0 >= kblocks) {
    return word;
  }
  if constexpr (L == ScaleLayout::kAtom128x4) {
    if (kb0 % 4 == 0) {
      word = *reinterpret_cast<const u32*>(s + scale_offset<L>(row, kb0, kblocks));
      const int valid = kblocks - kb0;  // 1 .. : blocks of the word inside the matrix
      if (valid < 4) {
        const u32 keep = (1u << (8 * valid)) - 1u;
        word = (word & keep) | (kFill & ~keep);
      }
      return word;
    }
  }
  for (int j = 0; j < 4; ++j) {
    if (kb0 + j < kblocks) {
      const u32 b = s[scale_offset<L>(row, kb0 + j, kblocks)];
      word = (word & ~(0xFFu << (8 * j))) | (b << (8 * j));
    }
  }
  return word;
}

}  // namespace gg::gemm
