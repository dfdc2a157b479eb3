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

// Scale `i` of an array of format F, as an f32.
template <Format F, class S>
__device__ __forceinline__ float scale_value(const S* s, long long i) {
  if constexpr (F == Format::kE8M0) {
    return gg::e8m0_to_float(s[i]);
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
    return scale_value<kFormat>(s, (long long)row * kblocks + kb);
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
    return scale_value<kFormat>(
        s, ((long long)gl * nblocks + col / C::kRhsScaleBlockN) * kblocks + kb);
  } else {
    static_assert(C::kRhsScale == ScaleMode::kKBlock, "an rhs scale mode");
    const int kblocks = (k + C::kRhsScaleBlockK - 1) / C::kRhsScaleBlockK;
    const int kb = k0 / C::kRhsScaleBlockK;
    return scale_value<kFormat>(s, ((long long)gl * kblocks + kb) * n + col);  // [g, kb, 1, n]
  }
}

}  // namespace gg::gemm
