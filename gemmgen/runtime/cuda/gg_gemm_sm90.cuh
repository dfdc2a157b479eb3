// gg_gemm_sm90.cuh: the Hopper (sm_90a) tile GEMM: TMA + wgmma, warp
// specialized, persistent; dense and grouped.
//
// One body for the 16-bit GEMMs gemmgen generates for sm_90a, templated on a
// tile struct T: a Config (gg_gemm_config.cuh) plus the Hopper tile's numbers
// (check_tile_sm90 below states how they relate). docs/cuda-hopper.md ("The
// Hopper GEMM") describes the pipeline and the barrier protocol:
//   - 384 threads: warpgroup 0 is the producer (one elected thread issues the
//     TMA loads), warpgroups 1 and 2 are the consumers, 64 rows of the
//     128-row tile each, issuing wgmma m64nBNk16 from shared memory;
//   - a kStages ring of (A, B) stages, each with a `full` mbarrier (1 arrival
//     + the TMA bytes) and an `empty` one (256 consumer arrivals, each after
//     its wgmma on the stage retired);
//   - a persistent grid: block b takes tiles b, b + gridDim.x, ... of a
//     rasterized order (kGroupM m tiles at a time, for L2 reuse); the ring's
//     stage and phase carry on from tile to tile, so the producer fills the
//     next tile's stages while the consumers run the epilogue;
//   - edges: TMA zero-fills boxes past m, n and k; the epilogue masks;
//   - epilogue: each consumer warp applies gg_epilogue's element function to
//     its 16 rows in registers, stages them in its own shared-memory slice
//     and writes them out row by row (coalesced), rows outside [row_lo,
//     row_hi) and columns past n skipped.
// A is K-major (lhs [m, k], 128-byte swizzle, one box of kBK x 128 rows). B
// is K-major for rhs [n, k] (one box of kBK x kBN rows) and MN-major for rhs
// [k, n] (kBN / 64 boxes of 64 columns x kBK rows); grouped rhs [g, ...]
// uses a 3D map whose outer coordinate is the local group.
#pragma once

#include "gg_convert.cuh"
#include "gg_epilogue.cuh"
#include "gg_gemm.cuh"
#include "gg_gemm_config.cuh"

namespace gg::gemm::sm90 {

// The fixed shape of the warp-specialized block: a producer warpgroup and two
// consumer warpgroups of 64 rows; K tiles of 64 16-bit elements (one
// 128-byte swizzle row).
constexpr int kThreads = 384;
constexpr int kBM = 128;
constexpr int kBK = 64;
constexpr int kProducerRegs = 40;  // setmaxnreg: 128 * 40 + 256 * 232 <= 64 Ki
constexpr int kConsumerRegs = 232;

// Whether a Config can run on this body: A and B of one 16-bit tensor-core
// type as stored, no main-loop or epilogue scales, no silu_mul (its paired
// columns would need two B boxes per tile).
template <class C>
__host__ __device__ constexpr bool qualifies() {
  using mma_t = typename C::mma_t;
  return (kSame<mma_t, __nv_bfloat16> || kSame<mma_t, __half>) && kSame<typename C::rhs_t, mma_t> &&
         C::kLhsScale == ScaleMode::kNone && C::kRhsScale == ScaleMode::kNone &&
         C::kActivation != Activation::kSiluMul;
}

// Whether a tile's numbers (computed by the plan, backends/cuda_gemm.py)
// follow from its shape: B's N is a wgmma N (and a multiple of 64 for the
// MN-major boxes), the stages hold A and B, each consumer warp's epilogue
// slice holds 16 rows of kCStride out_t, and everything fits after the
// 1024-byte alignment.
template <class T>
__host__ __device__ constexpr bool check_tile_sm90() {
  constexpr int kOut = static_cast<int>(sizeof(typename T::out_t));
  if (!check_config<T>() || !qualifies<T>() || T::kBM != kBM || T::kBK != kBK ||
      T::kThreads != kThreads || T::kStages < 2 || T::kGroupM < 1) {
    return false;
  }
  if (T::kBN % 64 != 0 || T::kBN < 64 || T::kBN > 256 || T::kBNOut != T::kBN) {
    return false;
  }
  if (T::kAStage != kBM * kBK * 2 || T::kBStage != T::kBN * kBK * 2 ||
      T::kCStride != T::kBN + 16 / kOut || T::kCWarpBytes != 16 * T::kCStride * kOut) {
    return false;
  }
  return T::kSmemBytes ==
         1024 + T::kStages * (T::kAStage + T::kBStage) + 8 * T::kCWarpBytes + 2 * T::kStages * 8;
}

// The shared-memory carve-up of a tile: the 1024-aligned base, then the A
// stages, the B stages, the 8 consumer warps' epilogue slices and the
// barriers.
template <class T>
struct Smem {
  unsigned char* a;
  unsigned char* b;
  unsigned char* c;
  u64* full;
  u64* empty;
  __device__ __forceinline__ explicit Smem(unsigned char* raw) {
    unsigned char* base = reinterpret_cast<unsigned char*>(
        (reinterpret_cast<uintptr_t>(raw) + 1023) & ~static_cast<uintptr_t>(1023));
    a = base;
    b = a + T::kStages * T::kAStage;
    c = b + T::kStages * T::kBStage;
    full = reinterpret_cast<u64*>(c + 8 * T::kCWarpBytes);
    empty = full + T::kStages;
  }
};

// Tile `t` of the rasterized order over an (items x tiles_n) grid of tiles:
// kGroupM rows of tiles at a time, down each column of the group, so that the
// blocks running at once share A rows and B columns in L2. Returns (item, n
// tile).
template <class T>
__device__ __forceinline__ void raster(int t, int items, int tiles_n, int& item, int& nt) {
  const int per_group = T::kGroupM * tiles_n;
  const int first = (t / per_group) * T::kGroupM;
  const int rows = items - first < T::kGroupM ? items - first : T::kGroupM;
  const int in_group = t % per_group;
  item = first + in_group % rows;
  nt = in_group / rows;
}

// Where one work item's tile lies: rows [m0, m0 + 128) of lhs, output
// columns [n0, n0 + kBN), local group gl (0 for dense), rows stored
// [row_lo, row_hi).
struct TileWork {
  int m0, n0, gl, row_lo, row_hi;
};

// The producer's elected thread: for each tile of this block, each K tile:
// wait until the stage is empty, announce its bytes, issue the loads.
template <class T, bool kGrouped>
__device__ __forceinline__ void produce(const Smem<T>& s, const CUtensorMap* map_a,
                                        const CUtensorMap* map_b, int tiles, int items, int tiles_n,
                                        int k, const int* items_gm) {
  const int ktiles = (k + kBK - 1) / kBK;
  int it = 0;  // K tiles issued by this block so far: stage it % S, round it / S
  for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
    int item, nt;
    raster<T>(t, items, tiles_n, item, nt);
    int m0 = item * kBM, gl = 0;
    if constexpr (kGrouped) {
      gl = items_gm[2 * item];
      m0 = items_gm[2 * item + 1] * kBM;
    }
    const int n0 = nt * T::kBN;
    for (int kt = 0; kt < ktiles; ++kt, ++it) {
      const int st = it % T::kStages;
      gg::mbarrier_wait(&s.empty[st], ((it / T::kStages) & 1) ^ 1);
      gg::mbarrier_arrive_expect_tx(&s.full[st], T::kAStage + T::kBStage);
      unsigned char* sa = s.a + st * T::kAStage;
      unsigned char* sb = s.b + st * T::kBStage;
      gg::tma_load_2d(sa, map_a, &s.full[st], kt * kBK, m0);
      if constexpr (T::kRhsNK) {
        if constexpr (kGrouped) {
          gg::tma_load_3d(sb, map_b, &s.full[st], kt * kBK, n0, gl);
        } else {
          gg::tma_load_2d(sb, map_b, &s.full[st], kt * kBK, n0);
        }
      } else {
        // [k, n]: boxes of 64 columns x kBK rows, 64 * kBK * 2 bytes apart.
        GG_UNROLL
        for (int j = 0; j < T::kBN / 64; ++j) {
          if constexpr (kGrouped) {
            gg::tma_load_3d(sb + j * 64 * kBK * 2, map_b, &s.full[st], n0 + 64 * j, kt * kBK, gl);
          } else {
            gg::tma_load_2d(sb + j * 64 * kBK * 2, map_b, &s.full[st], n0 + 64 * j, kt * kBK);
          }
        }
      }
    }
  }
}

// One consumer warpgroup's wgmma on stage `st`: its 64 rows of A times the
// stage's B, kBK / 16 instructions of m64nBNk16.
template <class T>
__device__ __forceinline__ void mma_stage(const Smem<T>& s, int st, int cw,
                                          float (&d)[T::kBN / 2]) {
  using mma_t = typename T::mma_t;
  const unsigned char* sa = s.a + st * T::kAStage + cw * 64 * 128;
  const unsigned char* sb = s.b + st * T::kBStage;
  GG_UNROLL
  for (int kb = 0; kb < kBK / 16; ++kb) {
    // A, K-major, 128B swizzle: rows of 128 bytes, 8-row groups 1024 apart;
    // k block kb starts 32 bytes further into the (swizzled) row.
    const u64 da = gg::make_smem_desc(sa + kb * 32, 16, 1024, gg::SmemSwizzle::b128);
    if constexpr (T::kRhsNK) {
      const u64 db = gg::make_smem_desc(sb + kb * 32, 16, 1024, gg::SmemSwizzle::b128);
      if constexpr (kSame<mma_t, __nv_bfloat16>) {
        gg::wgmma_m64nNk16_bf16_ss<T::kBN>(d, da, db, true);
      } else {
        gg::wgmma_m64nNk16_f16_ss<T::kBN>(d, da, db, true);
      }
    } else {
      // B, MN-major, 128B swizzle: k rows of 128 bytes (64 columns), 8-row
      // groups 1024 apart (SBO), 64-column boxes 64 * kBK * 2 apart (LBO);
      // k block kb starts 16 rows further.
      const u64 db =
          gg::make_smem_desc(sb + kb * 16 * 128, 64 * kBK * 2, 1024, gg::SmemSwizzle::b128);
      if constexpr (kSame<mma_t, __nv_bfloat16>) {
        gg::wgmma_m64nNk16_bf16_ss<T::kBN, false, true>(d, da, db, true);
      } else {
        gg::wgmma_m64nNk16_f16_ss<T::kBN, false, true>(d, da, db, true);
      }
    }
  }
}

// A consumer warp's epilogue: its 16 rows of the fragment through gg_epilogue
// in registers, into its slice of shared memory, then out row by row.
template <class T>
__device__ __forceinline__ void store_tile(const Smem<T>& s, const float (&d)[T::kBN / 2],
                                           const TileWork& w, int cw,
                                           const typename T::bias_t* __restrict__ bias,
                                           typename T::out_t* __restrict__ out, int n) {
  using out_t = typename T::out_t;
  const int t = threadIdx.x % 128, warp = t / 32, lane = t % 32;
  out_t* slice = reinterpret_cast<out_t*>(s.c + (cw * 4 + warp) * T::kCWarpBytes);
  const int row0 = w.m0 + cw * 64 + 16 * warp;  // the warp's first row of out
  GG_UNROLL
  for (int i = 0; i < T::kBN / 2; ++i) {
    const int r = lane / 4 + 8 * ((i / 2) % 2);
    const int c = 8 * (i / 4) + 2 * (lane % 4) + i % 2;
    const int row = row0 + r, col = w.n0 + c;
    if (row >= w.row_lo && row < w.row_hi && col < n) {
      float x[1] = {d[i]};
      const int bcol[1] = {col};
      slice[r * T::kCStride + c] =
          epilogue_element<T>(x, bcol, nullptr, nullptr, bias, row, w.gl, n);
    }
  }
  __syncwarp();
  for (int idx = lane; idx < 16 * T::kBN; idx += 32) {
    const int r = idx / T::kBN, c = idx % T::kBN;
    const int row = row0 + r, col = w.n0 + c;
    if (row >= w.row_lo && row < w.row_hi && col < n) {
      out[(long long)row * n + col] = slice[r * T::kCStride + c];
    }
  }
  __syncwarp();  // the slice is free for the next tile
}

// A consumer warpgroup (cw = 0, 1): for each tile of this block, each K
// tile: wait until the stage is full, issue its wgmmas, retire the previous
// K tile's and release that stage; then the epilogue.
template <class T, bool kGrouped>
__device__ __forceinline__ void consume(const Smem<T>& s, int cw, int tiles, int items, int tiles_n,
                                        int m, int n, int k, const int* items_gm, const int* starts,
                                        int num_groups, int group_offset,
                                        const typename T::bias_t* __restrict__ bias,
                                        typename T::out_t* __restrict__ out) {
  const int ktiles = (k + kBK - 1) / kBK;
  int it = 0;  // K tiles consumed by this block so far (as the producer counts)
  for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
    int item, nt;
    raster<T>(t, items, tiles_n, item, nt);
    TileWork w{item * kBM, nt * T::kBN, 0, 0, m};
    if constexpr (kGrouped) {
      w.gl = items_gm[2 * item];
      w.m0 = items_gm[2 * item + 1] * kBM;
      const long long group = (long long)group_offset + w.gl;
      const int lo = group_start(starts, num_groups, group);
      w.row_lo = lo > w.m0 ? lo : w.m0;
      w.row_hi = group_start(starts, num_groups, group + 1);
    }
    float d[T::kBN / 2];
    GG_UNROLL
    for (int i = 0; i < T::kBN / 2; ++i)
      d[i] = 0.0f;
    for (int kt = 0; kt < ktiles; ++kt, ++it) {
      const int st = it % T::kStages;
      gg::mbarrier_wait(&s.full[st], (it / T::kStages) & 1);
      gg::wgmma_fence();
      gg::wgmma_fence_operand(d);
      mma_stage<T>(s, st, cw, d);
      gg::wgmma_commit_group();
      // One group stays in flight: the previous K tile's has retired, so
      // its stage goes back to the producer.
      gg::wgmma_wait_group<1>();
      gg::wgmma_fence_operand(d);
      if (kt > 0) {
        gg::mbarrier_arrive(&s.empty[(it - 1) % T::kStages]);
      }
    }
    gg::wgmma_wait_group<0>();
    gg::wgmma_fence_operand(d);
    if (ktiles > 0) {
      gg::mbarrier_arrive(&s.empty[(it - 1) % T::kStages]);
    }
    store_tile<T>(s, d, w, cw, bias, out, n);
  }
}

// The block: barriers, the role split, setmaxnreg.
template <class T, bool kGrouped>
__device__ __forceinline__ void run(unsigned char* smem, const CUtensorMap* map_a,
                                    const CUtensorMap* map_b,
                                    const typename T::bias_t* __restrict__ bias,
                                    typename T::out_t* __restrict__ out, int m, int n, int k,
                                    int tiles, int items, int tiles_n, const int* items_gm,
                                    const int* starts, int num_groups, int group_offset) {
  static_assert(check_tile_sm90<T>(), "the tile's numbers follow from its shape");
  const Smem<T> s(smem);
  if (threadIdx.x == 0) {
    for (int st = 0; st < T::kStages; ++st) {
      gg::mbarrier_init(&s.full[st], 1);
      gg::mbarrier_init(&s.empty[st], 256);
    }
    gg::fence_mbarrier_init();
  }
  __syncthreads();
  const int wg = threadIdx.x / 128;
  if (wg == 0) {
    gg::setmaxnreg_dec<kProducerRegs>();
    if (threadIdx.x == 0) {
      gg::prefetch_tensormap(map_a);
      gg::prefetch_tensormap(map_b);
      produce<T, kGrouped>(s, map_a, map_b, tiles, items, tiles_n, k, items_gm);
    }
  } else {
    gg::setmaxnreg_inc<kConsumerRegs>();
    consume<T, kGrouped>(s, wg - 1, tiles, items, tiles_n, m, n, k, items_gm, starts, num_groups,
                         group_offset, bias, out);
  }
}

// Dense: out[m, n] = lhs[m, k] @ B over the tensor maps of lhs (map_a) and
// rhs (map_b); block b takes tiles b, b + gridDim.x, ...
template <class T>
__device__ __forceinline__ void dense(unsigned char* smem, const CUtensorMap* map_a,
                                      const CUtensorMap* map_b,
                                      const typename T::bias_t* __restrict__ bias,
                                      typename T::out_t* __restrict__ out, int m, int n, int k) {
  const int tiles_m = (m + kBM - 1) / kBM, tiles_n = (n + T::kBN - 1) / T::kBN;
  run<T, false>(smem, map_a, map_b, bias, out, m, n, k, tiles_m * tiles_n, tiles_m, tiles_n,
                nullptr, nullptr, 0, 0);
}

// Grouped: the work items of gg::gemm::worklist (workspace, built on the
// device by an earlier launch) times the n tiles; map_b is 3D over rhs
// [g, ...] with the local group outermost. Only the rows of each item's
// group are stored.
template <class T>
__device__ __forceinline__ void grouped(unsigned char* smem, const CUtensorMap* map_a,
                                        const CUtensorMap* map_b,
                                        const typename T::bias_t* __restrict__ bias,
                                        typename T::out_t* __restrict__ out,
                                        const int* __restrict__ workspace, int m, int n, int k,
                                        int num_groups, int group_offset) {
  const int items = workspace[0], tiles_n = (n + T::kBN - 1) / T::kBN;
  run<T, true>(smem, map_a, map_b, bias, out, m, n, k, items * tiles_n, items, tiles_n,
               workspace + 2 + num_groups, workspace + 1, num_groups, group_offset);
}

}  // namespace gg::gemm::sm90
