// gg_gemm_sm90_mixed.cuh: the weight-only consumers of the Hopper body:
// 16-bit activations times 8- or 4-bit weights widened in registers.
//
// wgmma takes A, but not B, from registers, so the weight-only tile swaps
// the operands (docs/cuda-hopper.md, "Weight-only"): the weights are wgmma's
// A and the activations its B, and the tile computes out^T. The producer and
// the pipeline are gg_gemm_sm90.cuh's (runs_mixed, check_tile_mixed, kBInner
// there say which tiles take this path):
//   - a tile is kBM rows of lhs (wgmma's N: 8..128) times kBN = 128 weight
//     rows (wgmma's M: 64 per consumer warpgroup), K tiles of 64;
//   - each stage holds kBM 128-byte rows of lhs (K-major, 128-byte swizzle:
//     wgmma's B through a descriptor) and 128 rows of raw weight bytes (64
//     bytes of 8-bit or 32 of 4-bit elements a row, loaded with a swizzle of
//     that span so that the consumers' 16- and 8-bit reads spread over the
//     banks);
//   - a consumer thread reads its two weight rows' elements of a K tile from
//     shared memory, widens them exactly (gg_widen.cuh) into the A fragments
//     of wgmma .m64nNk16 .rs (the mma.m16n8k16 A layout), issues 4 wgmmas
//     and waits for them before anything else: an in-flight wgmma's A
//     registers must not change, and ptxas does not reserve them across
//     branchy code (consume_mixed);
//   - per-K-block weight scales (rhs block or kblock): the K tiles of one
//     scale block accumulate into a fresh fragment, which is then added into
//     the f32 accumulator times this thread's two rows' scales (the FP32
//     promotion of the mma.sync body);
//   - the epilogue transposes: fragment row r, column c is out column
//     n0 + r, row m0 + c; each warp stages its kBM x 16 block of out in its
//     slice of shared memory and stores it row by row;
//   - silu_mul: the 128 weight rows of a stage are 64 gate rows (output
//     columns n0..) and the 64 matching up rows (n / 2 + n0..), interleaved
//     8 by 8 (16 TMA boxes of 8 rows), so that a thread's two fragment rows
//     r and r + 8 are the gate and the up row of one output column; the
//     epilogue pairs them in registers and a warp stores kBM x 8.
#pragma once

#include "gg_gemm_sm90.cuh"
#include "gg_scales.cuh"
#include "gg_widen.cuh"

namespace gg::gemm::sm90 {

// Elements e and e + 1 (e even) of weight row `row` of a stage's raw tile,
// widened to mma_t in one register (gg::gemm::widen_pair). The tile is 128
// rows of kBInner bytes, swizzled as the TMA load wrote it: the 16-byte
// chunk of byte offset x is x's bits [4, 4 + log2(span / 16)) XOR its bits
// [7, ...) (the stage is 1024-aligned, so offsets stand for addresses).
// Both elements lie in one 16-byte chunk.
template <class T>
__device__ __forceinline__ u32 fragment_pair(const unsigned char* tile, int row, int e) {
  constexpr unsigned kMask = kBInner<T> / 16 - 1;
  const unsigned x = static_cast<unsigned>(row * kBInner<T> + e * bits(T::kRhs) / 8);
  return widen_pair<T::kRhs, typename T::mma_t>(tile + (x ^ (((x >> 7) & kMask) << 4)));
}

// This thread's A fragments of K tile `st`: for each of the 4 k16 steps kb,
// registers (row, k) = (r, 2t), (r + 8, 2t), (r, 2t + 8), (r + 8, 2t + 8)
// (+ 16 kb), two elements each, where r = lane / 4 of its warp's 16 rows of
// the consumer warpgroup's 64 and t = lane % 4.
template <class T>
__device__ __forceinline__ void load_fragments(const Smem<T>& s, int st, int cw,
                                               u32 (&a)[4][4]) {
  const unsigned char* tile = s.b + st * T::kBStage;
  const int lane = threadIdx.x % 32, warp = (threadIdx.x % 128) / 32;
  const int row = cw * 64 + 16 * warp + lane / 4;
#if defined(GG_EMU) && !defined(__CUDA_ARCH__)
  gg::emu::sm90::register_work("widening weights into A fragments (load_fragments)");
#endif
  GG_UNROLL
  for (int kb = 0; kb < 4; ++kb) {
    GG_UNROLL
    for (int h = 0; h < 2; ++h) {
      GG_UNROLL
      for (int r = 0; r < 2; ++r) {
        a[kb][2 * h + r] = fragment_pair<T>(tile, row + 8 * r, 16 * kb + 8 * h + 2 * (lane % 4));
      }
    }
  }
}

// One consumer warpgroup's wgmmas on stage `st`: its 64 weight rows (A, the
// fragments) times the stage's kBM rows of lhs (B, K-major, 128-byte
// swizzle), 4 k16 steps 32 bytes apart. kFresh: the first overwrites d.
template <class T>
__device__ __forceinline__ void mma_mixed(const Smem<T>& s, int st, const u32 (&a)[4][4],
                                          bool fresh, float (&d)[T::kBM / 2]) {
  const unsigned char* sa = s.a + st * T::kAStage;
  GG_UNROLL
  for (int kb = 0; kb < 4; ++kb) {
    const u64 db = gg::make_smem_desc(sa + kb * 32, 16, 1024, gg::SmemSwizzle::b128);
    if constexpr (kSame<typename T::mma_t, __nv_bfloat16>) {
      gg::wgmma_m64nNk16_bf16_rs<T::kBM>(d, a[kb], db, !fresh || kb > 0);
    } else {
      gg::wgmma_m64nNk16_f16_rs<T::kBM>(d, a[kb], db, !fresh || kb > 0);
    }
  }
}

// The weight rows (columns of B, rhs rows) of this thread's two fragment
// rows r = lane / 4 and r + 8 of its warp: rows c and c + 8 from the
// warp's first, or for silu_mul gate row c and up row n / 2 + c of output
// column c. Rows past n (past n / 2 for silu_mul's c) are never stored.
template <class T>
__device__ __forceinline__ void weight_rows(const TileWork& w, int cw, int n, int (&rows)[2],
                                            bool& inside) {
  const int warp = (threadIdx.x % 128) / 32, lane = threadIdx.x % 32;
  const int c = w.n0 + (cw * 4 + warp) * kWarpCols<T> + lane / 4;
  if constexpr (kSilu<T>) {
    rows[0] = c;
    rows[1] = n / 2 + c;
    inside = c < n / 2;
  } else {
    rows[0] = c;
    rows[1] = c + 8;
    inside = true;
  }
}

// The scales of one scale block of K for this thread's two weight rows
// (fragment rows: TileScales' row-indexed `a`, so that add_scaled applies
// them; `b` is 1). Rows never stored take 1 on the exact path, else 0.
template <class T>
__device__ __forceinline__ TileScales<T> weight_scales(const TileWork& w, int cw,
                                                       const Operands<T>& o, int n, int k,
                                                       int k0) {
  constexpr float kOutside = kExactPromotion<T> ? 1.0f : 0.0f;
  int rows[2];
  bool inside;
  weight_rows<T>(w, cw, n, rows, inside);
  TileScales<T> sc{{1.0f, 1.0f}, {1.0f, 1.0f}};
  GG_UNROLL
  for (int h = 0; h < 2; ++h) {
    sc.a[h] = inside && rows[h] < n ? rhs_scale_at<T>(o.rhs_scale, w.gl, rows[h], n, k, k0)
                                     : kOutside;
  }
  return sc;
}

// A consumer warp's epilogue: fragment element i is weight row lane / 4 +
// 8 * ((i / 2) % 2) of the warp's 16 (out column c of its kWarpCols: the
// row itself, or for silu_mul the gate row c = lane / 4 with its up row in
// element i + 2) and lhs row (out row) 8 * (i / 4) + 2 * (lane % 4) + i % 2
// of the tile's kBM; through gg_epilogue into the warp's [kBM][kWarpCols]
// slice, then out row by row (n_out columns: n, or n / 2 for silu_mul).
template <class T>
__device__ __forceinline__ void store_mixed(const Smem<T>& s, const float (&d)[T::kBM / 2],
                                            const TileWork& w, int cw, const Operands<T>& o,
                                            int n) {
  using out_t = typename T::out_t;
  constexpr int kCols = kWarpCols<T>;
  const int t = threadIdx.x % 128, warp = t / 32, lane = t % 32;
  const int n_out = kSilu<T> ? n / 2 : n;
  out_t* slice = reinterpret_cast<out_t*>(s.c + (cw * 4 + warp) * T::kCWarpBytes);
  const int col0 = w.n0 + (cw * 4 + warp) * kCols;  // the warp's first column of out
  GG_UNROLL
  for (int i = 0; i < T::kBM / 2; ++i) {
    if (kSilu<T> && (i / 2) % 2 == 1) {
      continue;  // an up row: paired with its gate row, element i - 2
    }
    const int c = lane / 4 + 8 * ((i / 2) % 2);
    const int r = 8 * (i / 4) + 2 * (lane % 4) + i % 2;
    const int row = w.m0 + r, col = col0 + c;
    if (row >= w.row_hi && row < w.zero_hi && col < n_out) {
      slice[r * T::kCStride + c] = gg::from_float<out_t>(0.0f);  // masked: past the count
    } else if (row >= w.row_lo && row < w.row_hi && col < n_out) {
      if constexpr (kSilu<T>) {
        float x[2] = {d[i], d[i + 2]};
        const int bcol[2] = {col, n / 2 + col};
        slice[r * T::kCStride + c] =
            epilogue_element<T>(x, bcol, o.lhs_scale, o.rhs_scale, o.bias, row, w.gl, n);
      } else {
        float x[1] = {d[i]};
        const int bcol[1] = {col};
        slice[r * T::kCStride + c] =
            epilogue_element<T>(x, bcol, o.lhs_scale, o.rhs_scale, o.bias, row, w.gl, n);
      }
    }
  }
  __syncwarp();
  for (int idx = lane; idx < kCols * T::kBM; idx += 32) {
    const int r = idx / kCols, c = idx % kCols;
    const int row = w.m0 + r, col = col0 + c;
    if (row >= w.row_lo && row < w.zero_hi && col < n_out) {
      o.out[(long long)row * n_out + col] = slice[r * T::kCStride + c];
    }
  }
  __syncwarp();  // the slice is free for the next tile
}

// A consumer warpgroup (cw = 0, 1) of a weight-only tile: for each tile of
// this block, each K tile: wait for its stage, widen its weights into the A
// fragments, issue its wgmmas, retire them and release the stage; per-K-block
// scales promote at the end of each scale block; then the epilogue.
//
// Nothing runs between a K tile's wgmmas and their wgmma.wait_group: an
// in-flight wgmma reads its A registers until the wait, but ptxas does not
// keep them reserved when the code in between branches (the next stage's
// mbarrier wait, a bounds check): it gave the next K tile's values, in a
// second array here once, the in-flight fragment's physical registers
// (docs/cuda-hopper.md, "Register-sourced wgmma hazards";
// gemmgen.harness.nvcc.wgmma_register_hazards checks the SASS). The other
// consumer warpgroup's wgmmas keep the tensor cores busy while this one
// widens.
template <class T, Rows L>
__device__ void consume_mixed(const Smem<T>& s, int cw, int tiles, int items, int tiles_n, int m,
                              int n, int k, const Items& g, const Operands<T>& o) {
  constexpr int kV = T::kBM / 2;
  int it = 0;  // K tiles consumed by this block so far (as the producer counts)
  for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
    int item, nt;
    raster<T>(t, items, tiles_n, item, nt);
    const TileWork w = work_of<T, L>(item, nt, m, g);
    const int ktiles = ktiles_of<L>(w, (k + T::kBK - 1) / T::kBK);
    float d[kV];
    float part[kPromotion<T> ? kV : 1];
    GG_UNROLL
    for (int i = 0; i < kV; ++i)
      d[i] = 0.0f;
    TileScales<T> sc{{1.0f, 1.0f}, {1.0f, 1.0f}};
    for (int kt = 0; kt < ktiles; ++kt, ++it) {
      const int st = it % T::kStages;
      u32 a[4][4];
      gg::mbarrier_wait(&s.full[st], (it / T::kStages) & 1);
      load_fragments<T>(s, st, cw, a);
      if constexpr (kPromotion<T>) {
        // A scale block's first K tile starts a fresh partial sum.
        const bool first = kt * T::kBK % T::kScaleBlockK == 0;
        if (first) {
          sc = weight_scales<T>(w, cw, o, n, k, kt * T::kBK);
        }
        gg::wgmma_fence();
        gg::wgmma_fence_operand(part);
        mma_mixed<T>(s, st, a, first, part);
      } else {
        gg::wgmma_fence();
        gg::wgmma_fence_operand(d);
        mma_mixed<T>(s, st, a, false, d);
      }
      gg::wgmma_commit_group();
      gg::wgmma_wait_group<0>();
      if constexpr (kPromotion<T>) {
        gg::wgmma_fence_operand(part);
        gg::mbarrier_arrive(&s.empty[st]);
        if ((kt + 1) * T::kBK % T::kScaleBlockK == 0 || kt + 1 == ktiles) {
          add_scaled<T>(d, part, sc);
        }
      } else {
        gg::wgmma_fence_operand(d);
        gg::mbarrier_arrive(&s.empty[st]);
      }
    }
    store_mixed<T>(s, d, w, cw, o, n);
  }
}

}  // namespace gg::gemm::sm90
