// gg_gemm_sm100_epilogue.cuh: the sm_100a GEMM body's epilogue warps
// (tensor memory -> registers -> shared memory -> global: load_chunk,
// store_chunk, store_from_tmem; the promoted FP8 accumulator in registers;
// `epilogue`) and the 1-CTA tile's block (run_cta), on the pieces of
// gg_gemm_sm100.cuh, which includes it at its end (docs/cuda-sm100.md, "The
// sm_100a GEMM").
#pragma once

#include "gg_gemm_sm100.cuh"

namespace gg::gemm::sm100 {

// TMEM address of this epilogue warp's lanes (32 (warp % 4) on, the lane
// field in bits 31..16) at column `col`.
__device__ __forceinline__ u32 lane_addr(u32 tmem, int col) {
  const int quarter = (threadIdx.x / 32) % 4;
  return tmem + (static_cast<u32>(32 * quarter) << 16) + static_cast<u32>(col);
}

// kN columns of this thread's row from TMEM, as f32 (a template, so that
// only an sm_100a build instantiates the tcgen05 primitives).
template <int kN>
__device__ __forceinline__ void load_chunk(u32 addr, float (&x)[kN]) {
  u32 r[kN];
  gg::tcgen05_ld_32x32b(r, addr);
  gg::tcgen05_wait_ld();
  GG_UNROLL
  for (int j = 0; j < kN; ++j)
    x[j] = gg::bits_to_float(r[j]);
}

// The bits of one output, for packing into 32-bit words.
__device__ __forceinline__ u32 out_bits(float v) {
  return gg::float_to_bits(v);
}
__device__ __forceinline__ u32 out_bits(__nv_bfloat16 v) {
  return gg::bf16_bits(v);
}
__device__ __forceinline__ u32 out_bits(__half v) {
  return gg::f16_bits(v);
}

// One chunk of output columns [c0, c0 + 32) of the tile through the element
// function, into the warp's slice, then out; x[h][j] is the thread's row's
// value at column c0 + j (h: gate, up for silu_mul). The slice holds 32 rows
// of kP 16-byte pieces (kE out_t each), a row padded by one piece
// (kCStride), and both sides move 16 bytes a lane without bank conflicts
// (docs/cuda-sm100.md, "The epilogue's shared memory"):
//   - each thread packs its row piece by piece and stores each piece: a
//     phase of 8 lanes writes 8 rows kP + 1 (odd) pieces apart, 8 bank groups;
//   - request i loads 4 pieces of 8 rows, lane l piece 4 (i % (kP / 4)) +
//     l / 8 of row 8 (i / (kP / 4)) + l % 8: a phase is one piece of 8 rows
//     (8 bank groups again), and the request stores 8 row segments of 64
//     bytes to out, 16 bytes a lane.
// Where n_out or out is not 16-byte aligned, the warp stores a row at a time
// instead, one out_t a lane. Outputs outside the tile's rows or past n are
// zeros in the slice and not stored; the masked layout's rows past a count
// are stored (zeros).
template <class T>
__device__ __forceinline__ void store_chunk(const Smem<T>& s, const float (&x)[2][kChunk],
                                            const TileWork& w, int c0, const Operands<T>& o,
                                            int n, float global) {
  using out_t = typename T::out_t;
  constexpr int kOut = static_cast<int>(sizeof(out_t));
  static_assert(kOut == 2 || kOut == 4, "a 16-bit or f32 output");
  constexpr int kE = 16 / kOut, kP = kChunk / kE, kPerWord = 4 / kOut;
  constexpr int kSliceRow = T::kCStride * kOut;  // bytes
  static_assert(kSliceRow == 16 * (kP + 1), "a slice row is kP + 1 pieces");
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, quarter = warp % 4;
  const int n_out = kPaired<T> ? n / 2 : n;
  unsigned char* slice = s.c + (warp - kEpilogueWarp0) * T::kCWarpBytes;
  const int row0 = w.m0 + 32 * quarter;  // the warp's first row
  const int row = row0 + lane;
  const bool live_row = row >= w.row_lo && row < w.row_hi;
  GG_UNROLL
  for (int p = 0; p < kP; ++p) {
    u32 word[4];
    GG_UNROLL
    for (int i = 0; i < 4; ++i) {
      word[i] = 0;
      GG_UNROLL
      for (int e = 0; e < kPerWord; ++e) {
        const int j = p * kE + i * kPerWord + e;
        const int col = w.n0 + c0 + j;
        if (live_row && col < n_out) {
          out_t y;
          if constexpr (kPaired<T>) {
            float v[2] = {x[0][j], x[1][j]};
            const int bcol[2] = {kInterleavedPairs<T> ? 2 * col : col,
                                 kInterleavedPairs<T> ? 2 * col + 1 : n / 2 + col};
            y = epilogue_element<T>(v, bcol, o.lhs_scale, o.rhs_scale, o.bias, row, w.gl, n,
                                    global);
          } else {
            float v[1] = {x[0][j]};
            const int bcol[1] = {col};
            y = epilogue_element<T>(v, bcol, o.lhs_scale, o.rhs_scale, o.bias, row, w.gl, n,
                                    global);
          }
          word[i] |= out_bits(y) << (8 * kOut * e);
        }
      }
    }
    *reinterpret_cast<uint4*>(slice + lane * kSliceRow + 16 * p) =
        make_uint4(word[0], word[1], word[2], word[3]);
  }
  __syncwarp();
  if (n_out % kE == 0 && reinterpret_cast<unsigned long long>(o.out) % 16 == 0) {
    GG_UNROLL
    for (int i = 0; i < kP; ++i) {  // 8 rows x 4 pieces a request
      const int r = 8 * (i / (kP / 4)) + lane % 8, p = 4 * (i % (kP / 4)) + lane / 8;
      const int orow = row0 + r, col = w.n0 + c0 + p * kE;
      if (orow >= w.row_lo && orow < w.zero_hi && col < n_out) {  // n_out % kE == 0
        *reinterpret_cast<uint4*>(o.out + (long long)orow * n_out + col) =
            *reinterpret_cast<const uint4*>(slice + r * kSliceRow + 16 * p);
      }
    }
  } else {
    for (int r = 0; r < 32; ++r) {
      const int orow = row0 + r, col = w.n0 + c0 + lane;
      if (orow >= w.row_lo && orow < w.zero_hi && col < n_out) {
        o.out[(long long)orow * n_out + col] =
            *reinterpret_cast<const out_t*>(slice + r * kSliceRow + kOut * lane);
      }
    }
  }
  __syncwarp();  // the slice is free for the next chunk
}

// A tile's epilogue straight from the accumulator at `acc` (no promotion):
// each 32-column chunk of the output (and its up half for silu_mul) read
// from TMEM, or zeros when the tile had no K tile. Interleaved pairs: output
// columns c0.. read the 64 accumulator columns 2 c0.., gate even, up odd.
template <class T>
__device__ __forceinline__ void store_from_tmem(const Smem<T>& s, u32 acc, bool loaded,
                                                const TileWork& w, const Operands<T>& o, int n,
                                                float global) {
  for (int c0 = 0; c0 < T::kBNOut; c0 += kChunk) {
    // Chunk h: column c0 of half h (kSilu), or interleaved the columns
    // 2 c0 + 32 h.. (its outputs' gate and up columns, alternating).
    float x[2][kChunk];
    GG_UNROLL
    for (int h = 0; h < (kPaired<T> ? 2 : 1); ++h) {
      if (loaded) {
        const int col = kInterleavedPairs<T> ? 2 * c0 + h * kChunk : h * (T::kBN / 2) + c0;
        load_chunk(lane_addr(acc, col), x[h]);
      } else {
        GG_UNROLL
        for (int j = 0; j < kChunk; ++j)
          x[h][j] = 0.0f;
      }
    }
    if constexpr (kInterleavedPairs<T>) {
      float y[2][kChunk];  // y[0] the gates, y[1] the ups of outputs c0..
      GG_UNROLL
      for (int j = 0; j < kChunk; ++j) {
        y[0][j] = x[j / (kChunk / 2)][(2 * j) % kChunk];
        y[1][j] = x[j / (kChunk / 2)][(2 * j) % kChunk + 1];
      }
      store_chunk<T>(s, y, w, c0, o, n, global);
    } else {
      store_chunk<T>(s, x, w, c0, o, n, global);
    }
  }
}

// d += part times one K tile's block scales, for this thread's row (lhs
// scale sa) and the tile's rhs scale (sb[0]; sb[1] for silu_mul's up half:
// a chunk lies in one half). With an e8m0 scale a product of two scales may
// leave f32: when both products are normal they multiply at once, else each
// partial sum is scaled exactly: the mantissas' product (exact, one of them
// a power of two's) times the sum, then times 2^(the exponents' sum) through
// f64 (gg::mul_scales_exact's arithmetic, split once per chunk). No call: a
// call with the 128 sums live spills them (255 registers and a 304-byte
// stack frame with nvcc and NVRTC 13.5, gg::mul_scales_out_of_line).
template <class T>
__device__ __forceinline__ void add_scaled(float (&d)[T::kBN], const float (&part)[kChunk], int c0,
                                           float sa, const float (&sb)[2]) {
  const float b = sb[kSilu<T> ? c0 / (T::kBN / 2) : 0];
  bool fast = true;
  if constexpr (kExactPromotion<T>) {
    const unsigned fa = gg::exponent_field(sa), fb = gg::exponent_field(b);
    fast = gg::product_is_normal(fa, fa, fb, fb);
  }
  if (fast) {
    const float f = sa * b;
    GG_UNROLL
    for (int j = 0; j < kChunk; ++j)
      d[c0 + j] += part[j] * f;
  } else {
    int ea, eb;
    const float mab = gg::split_exp2(sa, ea) * gg::split_exp2(b, eb);
    GG_UNROLL
    for (int j = 0; j < kChunk; ++j)
      d[c0 + j] += gg::mul_exp2(part[j] * mab, ea + eb);
  }
}

// NVFP4's global scales (`global=f32`: f32 [] or [g] per side; null
// without them), which the epilogue multiplies once (gg_epilogue.cuh's
// global_scale and epilogue_element), as the other bodies do.
struct Globals {
  const float* lhs;
  const float* rhs;
};

// The epilogue's hand-back of accumulator `acc` to the MMA thread, after its
// last tcgen05.ld of it (tcgen05.fence::before_thread_sync, then an
// arrival): on its CTA's acc_empty, or on the pair its leader's (a
// shared::cluster address: both CTAs' epilogue warpgroups arrive there).
template <class T>
struct AccBack {
  u64* own;
  u32 leader = 0;
  __device__ __forceinline__ explicit AccBack(const Smem<T>& s) : own(s.acc_empty) {
    if constexpr (kPair<T>) {
      leader = gg::cluster_map_shared_addr(s.acc_empty, gg::cluster_ctarank() & ~1u);
    }
  }
  __device__ __forceinline__ void arrive(int acc) const {
    gg::tcgen05_fence_before_thread_sync();
    if constexpr (kPair<T>) {
      gg::mbarrier_arrive_cluster(leader + 8u * static_cast<u32>(acc));
    } else {
      gg::mbarrier_arrive(&own[acc]);
    }
  }
};

// The epilogue warpgroup: for each unit of this block, wait for its
// accumulator, read it from TMEM (promoted: each K tile's partial sums times
// its scales into registers), hand it back, store the tile; on the pair each
// CTA its own 128 rows (m0 + 128 v ..) of the pair's tile, none for the idle
// pair's tile past n.
template <class T, Rows L>
__device__ __forceinline__ void epilogue(const Smem<T>& s, u32 tmem, int units, int items,
                                         int tiles_n, int m, int n, int k, const Items& g,
                                         const Operands<T>& o, const Globals& gs) {
  const AccBack<T> back(s);
  const int n_out = kPaired<T> ? n / 2 : n;
  int a = 0;  // accumulators consumed so far, as the MMA thread counts them
  for (int u = first_unit<T>(); u < units; u += unit_step<T>()) {
    TileWork w = unit_work<T, L>(u, items, tiles_n, m, g);
    const int ktiles = sm90::ktiles_of<L>(w, (k + T::kBK - 1) / T::kBK);
    w.m0 += kBM * cta_of_pair<T>();  // this CTA's rows; the row bounds are the tile's
    if constexpr (kPromoted<T>) {
      // A unit per K tile: its sums times the K tile's scales into this
      // thread's row's registers.
      constexpr float kOutside = kExactPromotion<T> ? 1.0f : 0.0f;
      const int quarter = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
      const int row = w.m0 + 32 * quarter + lane;
      float d[T::kBN];
      GG_UNROLL
      for (int j = 0; j < T::kBN; ++j)
        d[j] = 0.0f;
      for (int kt = 0; kt < ktiles; ++kt, ++a) {
        const int k0 = kt * T::kBK;
        float sa = 1.0f, sb[2] = {1.0f, 1.0f};
        if constexpr (kLhsScalePromoted<T>) {
          sa = row < m ? lhs_scale_at<T>(o.lhs_scale, row, k, k0) : kOutside;
        }
        if constexpr (kRhsScalePromoted<T>) {
          if (w.n0 < n_out) {  // not the idle pair's tile
            // Interleaved pairs: the tile's B columns 2 n0.. lie in one block.
            const int col0 = kInterleavedPairs<T> ? 2 * w.n0 : w.n0;
            sb[0] = rhs_scale_at<T>(o.rhs_scale, w.gl, col0, n, k, k0);
            sb[1] = kSilu<T> ? rhs_scale_at<T>(o.rhs_scale, w.gl, n / 2 + w.n0, n, k, k0) : sb[0];
          }
        }
        const int acc = a % 2;
        gg::mbarrier_wait(&s.acc_full[acc], (a / 2) & 1);
        gg::tcgen05_fence_after_thread_sync();
        GG_UNROLL
        for (int c0 = 0; c0 < T::kBN; c0 += kChunk) {
          float part[kChunk];
          load_chunk(lane_addr(tmem + acc * T::kBN, c0), part);
          sm100::add_scaled<T>(d, part, c0, sa, sb);
        }
        back.arrive(acc);
      }
      GG_UNROLL
      for (int c0 = 0; c0 < (w.n0 < n_out ? T::kBNOut : 0); c0 += kChunk) {
        float x[2][kChunk];
        GG_UNROLL
        for (int j = 0; j < kChunk; ++j) {
          if constexpr (kInterleavedPairs<T>) {
            x[0][j] = d[2 * (c0 + j)];
            x[1][j] = d[2 * (c0 + j) + 1];
          } else {
            x[0][j] = d[c0 + j];
            x[1][j] = kSilu<T> ? d[T::kBN / 2 + c0 + j] : 0.0f;
          }
        }
        store_chunk<T>(s, x, w, c0, o, n, 1.0f);
      }
    } else {
      const int acc = a % 2;
      if (ktiles > 0) {
        gg::mbarrier_wait(&s.acc_full[acc], (a / 2) & 1);
        gg::tcgen05_fence_after_thread_sync();
      }
      // NVFP4's global scales of the tile's group, once per output element.
      const float global = global_scale<T>(gs.lhs, gs.rhs, w.gl);
      if (w.n0 < n_out) {  // the idle pair's tile (past n) stores nothing
        store_from_tmem<T>(s, tmem + acc * T::kBN, ktiles > 0, w, o, n, global);
      }
      if (ktiles > 0) {
        back.arrive(acc);
        ++a;
      }
    }
  }
}

// The block: barriers, the TMEM allocation, the role split.
template <class T, Rows L>
__device__ __forceinline__ void run_cta(unsigned char* smem, const CUtensorMap* map_a,
                                        const CUtensorMap* map_b, const Operands<T>& o, int m,
                                        int n, int k, int tiles, int items, int tiles_n,
                                        const Items& g, const Globals& gs,
                                        const unsigned char* __restrict__ rhs_fp4) {
  const Smem<T> s(smem);
  const int warp = threadIdx.x / 32;
  if (threadIdx.x == 0) {
    for (int st = 0; st < T::kStages; ++st) {
      gg::mbarrier_init(&s.full[st], kBs<T> ? 32 : 1);  // block-scaled: the warp's arrivals
      gg::mbarrier_init(&s.empty[st], 1);
    }
    for (int a = 0; a < 2; ++a) {
      gg::mbarrier_init(&s.acc_full[a], 1);
      gg::mbarrier_init(&s.acc_empty[a], 128);
    }
    gg::fence_mbarrier_init();
  }
  if (warp == 1) {
    gg::tmem_alloc(s.tmem_slot, T::kTmemCols);
    gg::tmem_relinquish_alloc_permit();
  }
  gg::tcgen05_fence_before_thread_sync();
  __syncthreads();
  gg::tcgen05_fence_after_thread_sync();
  const u32 tmem = *s.tmem_slot;
  if (warp == 0) {
    if constexpr (kBs<T>) {
      if (threadIdx.x == 0) {
        gg::prefetch_tensormap(map_a);
        if (map_b != nullptr) {  // W4A8 reads rhs through a pointer
          gg::prefetch_tensormap(map_b);
        }
      }
      produce_scaled<T, L>(s, map_a, map_b, rhs_fp4, o, tiles, items, tiles_n, m, n, k, g);
    } else if (threadIdx.x == 0) {
      gg::prefetch_tensormap(map_a);
      gg::prefetch_tensormap(map_b);
      sm90::produce<T, L>(s, map_a, map_b, tiles, items, tiles_n, m, n, k, g);
    }
  } else if (warp == 1) {
    if (threadIdx.x == 32) {
      issue<T, L>(s, tmem, tiles, items, tiles_n, m, k, g);
    }
  } else {
    epilogue<T, L>(s, tmem, tiles, items, tiles_n, m, n, k, g, o, gs);
  }
  // Every accumulator has been read (the epilogue waited on each commit
  // before its last tcgen05.ld): the MMA warp frees the columns.
  gg::tcgen05_fence_before_thread_sync();
  __syncthreads();
  if (warp == 1) {
    gg::tcgen05_fence_after_thread_sync();
    gg::tmem_dealloc(tmem, T::kTmemCols);
  }
}

}  // namespace gg::gemm::sm100
