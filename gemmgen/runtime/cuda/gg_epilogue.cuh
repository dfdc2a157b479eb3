// gg_epilogue.cuh: a tile GEMM's epilogue, per output element.
//
// In f32, in this order (docs/semantics.md): the scales the promotion did not
// apply, alpha, the bias, the activation, then the cast to out_t (RNE; FP8
// saturates). silu_mul pairs accumulator column j (gate) with column
// j + n / 2 (up); swiglu_clamped likewise, or (kPairsInterleaved) gate
// column 2j with up column 2j + 1. A new activation is one more branch in `activate` (and a
// test in tests/cuda/sm80/test_cuda_gemm_helpers.py).
#pragma once

#include "gg_convert.cuh"
#include "gg_gemm_config.cuh"
#include "gg_scales.cuh"

namespace gg::gemm {

// Whether one output reads two accumulator columns (a gate and an up).
template <class C>
constexpr bool kPaired =
    C::kActivation == Activation::kSiluMul || C::kActivation == Activation::kSwigluClamped;

// Whether the gate and up columns alternate (2j, 2j + 1) rather than lie n / 2 apart.
template <class C>
__host__ __device__ constexpr bool interleaved_pairs() {
  if constexpr (C::kActivation == Activation::kSwigluClamped) {
    return C::kPairsInterleaved;
  } else {
    return false;
  }
}
template <class C>
constexpr bool kInterleavedPairs = interleaved_pairs<C>();

// The activation of one output: `x` the accumulator column, `up` silu_mul's
// paired column (unused otherwise). swiglu_clamped, whose constants are the
// Config's, is `activate_config`'s.
template <Activation A>
__device__ __forceinline__ float activate(float x, float up) {
  if constexpr (A == Activation::kSiluMul) {
    return gg::silu(x) * up;
  } else if constexpr (A == Activation::kSilu) {
    return gg::silu(x);
  } else if constexpr (A == Activation::kGelu) {
    return gg::gelu_tanh(x);
  } else if constexpr (A == Activation::kRelu) {
    return gg::relu(x);
  } else {
    static_assert(A == Activation::kNone, "an activation");
    return x;
  }
}

// The activation of Config C: `activate`, or swiglu_clamped with C's
// alpha_gate and limit (`x` the gate, `up` the up column).
template <class C>
__device__ __forceinline__ float activate_config(float x, float up) {
  if constexpr (C::kActivation == Activation::kSwigluClamped) {
    return gg::swiglu_clamped(x, up, C::kAlphaGate, C::kLimit);
  } else {
    return activate<C::kActivation>(x, up);
  }
}

// v times the scales of its row and column that the promotion did not apply
// (per tensor, per token, per channel). With an e8m0 one among them, the
// product is exact (gg::mul_scale(s)); otherwise one f32 multiply each.
template <class C>
__device__ __forceinline__ float epilogue_scale(float v, const typename C::lhs_scale_t* lhs_scale,
                                                const typename C::rhs_scale_t* rhs_scale, int row,
                                                int gl, int col, int n) {
  constexpr bool kLhs = C::kLhsScale != ScaleMode::kNone && !kLhsScalePromoted<C>;
  constexpr bool kRhs = C::kRhsScale != ScaleMode::kNone && !kRhsScalePromoted<C>;
  if constexpr (kExactEpilogue<C> && kLhs && kRhs) {
    return gg::mul_scales(v, lhs_scale_at<C>(lhs_scale, row, 0, 0),
                          rhs_scale_at<C>(rhs_scale, gl, col, n, 0, 0));
  } else if constexpr (kExactEpilogue<C> && kLhs) {
    return gg::mul_scale(v, lhs_scale_at<C>(lhs_scale, row, 0, 0));
  } else if constexpr (kExactEpilogue<C> && kRhs) {
    return gg::mul_scale(v, rhs_scale_at<C>(rhs_scale, gl, col, n, 0, 0));
  } else {
    if constexpr (kLhs) {
      v *= lhs_scale_at<C>(lhs_scale, row, 0, 0);
    }
    if constexpr (kRhs) {
      v *= rhs_scale_at<C>(rhs_scale, gl, col, n, 0, 0);
    }
    return v;
  }
}

// Number of accumulator columns one output reads: a paired one's gate and up.
template <class C>
constexpr int kHalves = kPaired<C> ? 2 : 1;

// NVFP4's global scales of local group gl (one f32 per operand and group;
// a dense kernel's gl is 0), multiplied once: 1 without them.
template <class C>
__device__ __forceinline__ float global_scale(const float* __restrict__ lhs_global,
                                              const float* __restrict__ rhs_global, int gl) {
  float s = 1.0f;
  if constexpr (kLhsGlobal<C>) {
    s *= lhs_global[gl];
  }
  if constexpr (kRhsGlobal<C>) {
    s *= rhs_global[gl];
  }
  return s;
}

// One output element from its accumulator column(s) x (B columns bcol, of
// local group gl; `row` of out): scales, the global scale (`global`, from
// global_scale), alpha, bias, activation, cast.
template <class C>
__device__ __forceinline__ typename C::out_t epilogue_element(
    float (&x)[kHalves<C>], const int (&bcol)[kHalves<C>], const typename C::lhs_scale_t* lhs_scale,
    const typename C::rhs_scale_t* rhs_scale, const typename C::bias_t* bias, int row, int gl,
    int n, float global = 1.0f) {
  GG_UNROLL
  for (int h = 0; h < kHalves<C>; ++h) {
    float v = epilogue_scale<C>(x[h], lhs_scale, rhs_scale, row, gl, bcol[h], n);
    if constexpr (kLhsGlobal<C> || kRhsGlobal<C>) {
      v *= global;
    }
    if constexpr (C::kHasAlpha) {
      v *= C::kAlpha;
    }
    if constexpr (C::kBias == Bias::kN) {
      v += gg::to_float(bias[bcol[h]]);
    } else if constexpr (C::kBias == Bias::kGroup) {
      v += gg::to_float(bias[(long long)gl * n + bcol[h]]);
    }
    x[h] = v;
  }
  return gg::from_float<typename C::out_t>(activate_config<C>(x[0], x[kHalves<C> - 1]));
}

}  // namespace gg::gemm
