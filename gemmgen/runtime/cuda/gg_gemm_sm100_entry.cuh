// gg_gemm_sm100_entry.cuh: the entry points of the sm_100a GEMM body
// (gg_gemm_sm100.cuh, docs/cuda-sm100.md): the tile's block `run`, the
// 1-CTA tile's (run_cta) or the 2-CTA tile's (run_pair,
// gg_gemm_sm100_pair.cuh), and the dense, grouped and masked kernels'
// device functions the generated entries call. Included at the end of
// gg_gemm_sm100.cuh, whose pieces it calls.
#pragma once

#include "gg_gemm_sm100.cuh"
#include "gg_gemm_sm100_pair.cuh"

namespace gg::gemm::sm100 {

// The tile's block: the 1-CTA tile's (run_cta) or the pair's (run_pair).
template <class T, Rows L>
__device__ __forceinline__ void run(unsigned char* smem, const CUtensorMap* map_a,
                                    const CUtensorMap* map_b, const Operands<T>& o, int m, int n,
                                    int k, int tiles, int items, int tiles_n, const Items& g,
                                    const Globals& gs,
                                    const unsigned char* __restrict__ rhs_fp4 = nullptr) {
  static_assert(check_tile_sm100<T>(), "the tile's numbers follow from its shape");
  if constexpr (kPair<T>) {
    run_pair<T, L>(smem, map_a, map_b, o, m, n, k, items, tiles_n, g, gs, rhs_fp4);
  } else {
    run_cta<T, L>(smem, map_a, map_b, o, m, n, k, tiles, items, tiles_n, g, gs, rhs_fp4);
  }
}

// Dense: out[m, n] = lhs[m, k] @ B over the tensor maps of lhs (map_a) and
// rhs (map_b), then the epilogue; block b takes tiles b, b + gridDim.x, ...
template <class T>
__device__ __forceinline__ void dense(unsigned char* smem, const CUtensorMap* map_a,
                                      const CUtensorMap* map_b,
                                      const typename T::lhs_scale_t* __restrict__ lhs_scale,
                                      const typename T::rhs_scale_t* __restrict__ rhs_scale,
                                      const typename T::bias_t* __restrict__ bias,
                                      typename T::out_t* __restrict__ out, int m, int n, int k,
                                      const float* __restrict__ lhs_global = nullptr,
                                      const float* __restrict__ rhs_global = nullptr) {
  const int tiles_m = (m + T::kBM - 1) / T::kBM, tiles_n = sm90::tiles_n_of<T>(n);
  sm100::run<T, Rows::kDense>(smem, map_a, map_b, Operands<T>{lhs_scale, rhs_scale, bias, out}, m, n, k,
                       tiles_m * tiles_n, tiles_m, tiles_n, Items{}, Globals{lhs_global, rhs_global});
}

template <class T>
__device__ __forceinline__ void dense(unsigned char* smem, const CUtensorMap* map_a,
                                      const CUtensorMap* map_b,
                                      const typename T::bias_t* __restrict__ bias,
                                      typename T::out_t* __restrict__ out, int m, int n, int k) {
  dense<T>(smem, map_a, map_b, nullptr, nullptr, bias, out, m, n, k);
}

// W4A8 (e4m3 x packed fp4 [n, k]): the weights through a pointer, which the
// producer warp unpacks into kind::mxf8f6f4's padded layout (gather_b_fp4).
template <class T>
__device__ __forceinline__ void dense(unsigned char* smem, const CUtensorMap* map_a,
                                      const unsigned char* __restrict__ rhs,
                                      const typename T::lhs_scale_t* __restrict__ lhs_scale,
                                      const typename T::rhs_scale_t* __restrict__ rhs_scale,
                                      const typename T::bias_t* __restrict__ bias,
                                      typename T::out_t* __restrict__ out, int m, int n, int k) {
  static_assert(kW4A8<T>, "a pointer to rhs is W4A8's");
  const int tiles_m = (m + T::kBM - 1) / T::kBM, tiles_n = sm90::tiles_n_of<T>(n);
  sm100::run<T, Rows::kDense>(smem, map_a, nullptr, Operands<T>{lhs_scale, rhs_scale, bias, out},
                              m, n, k, tiles_m * tiles_n, tiles_m, tiles_n, Items{},
                              Globals{nullptr, nullptr}, rhs);
}

template <class T>
__device__ __forceinline__ void grouped(unsigned char* smem, const CUtensorMap* map_a,
                                        const unsigned char* __restrict__ rhs,
                                        const typename T::lhs_scale_t* __restrict__ lhs_scale,
                                        const typename T::rhs_scale_t* __restrict__ rhs_scale,
                                        const typename T::bias_t* __restrict__ bias,
                                        typename T::out_t* __restrict__ out,
                                        const int* __restrict__ workspace, int m, int n, int k,
                                        int num_groups, int group_offset) {
  static_assert(kW4A8<T>, "a pointer to rhs is W4A8's");
  const int items = workspace[0], tiles_n = sm90::tiles_n_of<T>(n);
  const Items g{workspace + 2 + num_groups, workspace + 1, num_groups, group_offset, nullptr, 0};
  sm100::run<T, Rows::kGrouped>(smem, map_a, nullptr, Operands<T>{lhs_scale, rhs_scale, bias, out},
                                m, n, k, items * tiles_n, items, tiles_n, g,
                                Globals{nullptr, nullptr}, rhs);
}

// Grouped: the work items of gg::gemm::worklist times the n tiles; map_b is
// 3D over rhs [g, ...] with the local group outermost (gg_gemm_sm90.cuh).
template <class T>
__device__ __forceinline__ void grouped(unsigned char* smem, const CUtensorMap* map_a,
                                        const CUtensorMap* map_b,
                                        const typename T::lhs_scale_t* __restrict__ lhs_scale,
                                        const typename T::rhs_scale_t* __restrict__ rhs_scale,
                                        const typename T::bias_t* __restrict__ bias,
                                        typename T::out_t* __restrict__ out,
                                        const int* __restrict__ workspace, int m, int n, int k,
                                        int num_groups, int group_offset,
                                        const float* __restrict__ lhs_global = nullptr,
                                        const float* __restrict__ rhs_global = nullptr) {
  const int items = workspace[0], tiles_n = sm90::tiles_n_of<T>(n);
  const Items g{workspace + 2 + num_groups, workspace + 1, num_groups, group_offset, nullptr, 0};
  sm100::run<T, Rows::kGrouped>(smem, map_a, map_b, Operands<T>{lhs_scale, rhs_scale, bias, out}, m, n,
                         k, items * tiles_n, items, tiles_n, g, Globals{lhs_global, rhs_global});
}

template <class T>
__device__ __forceinline__ void grouped(unsigned char* smem, const CUtensorMap* map_a,
                                        const CUtensorMap* map_b,
                                        const typename T::bias_t* __restrict__ bias,
                                        typename T::out_t* __restrict__ out,
                                        const int* __restrict__ workspace, int m, int n, int k,
                                        int num_groups, int group_offset) {
  grouped<T>(smem, map_a, map_b, nullptr, nullptr, bias, out, workspace, m, n, k, num_groups,
             group_offset);
}

// Masked: lhs [g, cap, k] and out [g, cap, n_out] as g * cap rows; every
// (group, m tile) pair is an item (gg_gemm_sm90.cuh's `masked`).
template <class T>
__device__ __forceinline__ void masked(unsigned char* smem, const CUtensorMap* map_a,
                                       const CUtensorMap* map_b,
                                       const typename T::lhs_scale_t* __restrict__ lhs_scale,
                                       const typename T::rhs_scale_t* __restrict__ rhs_scale,
                                       const typename T::bias_t* __restrict__ bias,
                                       typename T::out_t* __restrict__ out,
                                       const int* __restrict__ masked_m, int n, int k, int g,
                                       int cap, const float* __restrict__ lhs_global = nullptr,
                                       const float* __restrict__ rhs_global = nullptr) {
  const int items = g * ((cap + T::kBM - 1) / T::kBM), tiles_n = sm90::tiles_n_of<T>(n);
  const Items it{nullptr, nullptr, g, 0, masked_m, cap};
  sm100::run<T, Rows::kMasked>(smem, map_a, map_b, Operands<T>{lhs_scale, rhs_scale, bias, out}, g * cap,
                        n, k, items * tiles_n, items, tiles_n, it, Globals{lhs_global, rhs_global});
}

// W4A8 masked: the weights through a pointer (gather_b_fp4).
template <class T>
__device__ __forceinline__ void masked(unsigned char* smem, const CUtensorMap* map_a,
                                       const unsigned char* __restrict__ rhs,
                                       const typename T::lhs_scale_t* __restrict__ lhs_scale,
                                       const typename T::rhs_scale_t* __restrict__ rhs_scale,
                                       const typename T::bias_t* __restrict__ bias,
                                       typename T::out_t* __restrict__ out,
                                       const int* __restrict__ masked_m, int n, int k, int g,
                                       int cap) {
  static_assert(kW4A8<T>, "a pointer to rhs is W4A8's");
  const int items = g * ((cap + T::kBM - 1) / T::kBM), tiles_n = sm90::tiles_n_of<T>(n);
  const Items it{nullptr, nullptr, g, 0, masked_m, cap};
  sm100::run<T, Rows::kMasked>(smem, map_a, nullptr, Operands<T>{lhs_scale, rhs_scale, bias, out},
                               g * cap, n, k, items * tiles_n, items, tiles_n, it,
                               Globals{nullptr, nullptr}, rhs);
}

template <class T>
__device__ __forceinline__ void masked(unsigned char* smem, const CUtensorMap* map_a,
                                       const CUtensorMap* map_b,
                                       const typename T::bias_t* __restrict__ bias,
                                       typename T::out_t* __restrict__ out,
                                       const int* __restrict__ masked_m, int n, int k, int g,
                                       int cap) {
  masked<T>(smem, map_a, map_b, nullptr, nullptr, bias, out, masked_m, n, k, g, cap);
}

}  // namespace gg::gemm::sm100
