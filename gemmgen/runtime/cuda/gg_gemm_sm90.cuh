// gg_gemm_sm90.cuh: the Hopper (sm_90a) tile GEMM: TMA + wgmma, warp
// specialized, persistent; dense and grouped.
//
// One body for the 16-bit and FP8 GEMMs on sm_90a, templated on a
// tile struct T: a Config (gg_gemm_config.cuh) plus the Hopper tile's numbers
// (check_tile_sm90 below states how they relate). docs/cuda-hopper.md ("The
// Hopper GEMM") describes the pipeline and the barrier protocol:
//   - 384 threads: warpgroup 0 is the producer (one elected thread issues the
//     TMA loads), warpgroups 1 and 2 are the consumers, 64 rows of the
//     128-row tile each, issuing wgmma m64nBNk16 (bf16, f16) or m64nBNk32
//     (e4m3, e5m2) from shared memory;
//   - a kStages ring of (A, B) stages, each with a `full` mbarrier (1 arrival
//     + the TMA bytes) and an `empty` one (256 consumer arrivals, each after
//     its wgmma on the stage retired);
//   - a persistent grid: block b takes tiles b, b + gridDim.x, ... of a
//     rasterized order (kGroupM m tiles at a time, for L2 reuse); the ring's
//     stage and phase carry on from tile to tile, so the producer fills the
//     next tile's stages while the consumers run the epilogue;
//   - edges: TMA zero-fills boxes past m, n and k; the epilogue masks;
//   - epilogue: each consumer warp applies gg_epilogue's element function
//     (per-tensor, per-token and per-channel scales, alpha, bias, activation;
//     silu_mul pairs gate column c of the tile with up column c + kBN / 2,
//     both in the same thread's fragment) to its 16 rows in registers,
//     stages them in its own shared-memory slice and writes them out row by
//     row (coalesced), rows outside [row_lo, row_hi) and columns past n
//     skipped.
// A K tile is one 128-byte swizzle row: kBK = 64 16-bit or 128 FP8
// elements. A is K-major (lhs [m, k], 128-byte swizzle, one box of kBK x 128
// rows). B is K-major for rhs [n, k] (one box of kBK x kBN rows) and, for
// 16-bit types only (wgmma reads FP8 K-major), MN-major for rhs [k, n]
// (kBN / 64 boxes of 64 columns x kBK rows); grouped rhs [g, ...] uses a 3D
// map whose outer coordinate is the local group. silu_mul: a tile's B is
// kBN / 2 gate rows (columns n0..) over kBN / 2 up rows (n / 2 + n0..), two
// loads of half boxes, and its output is kBNOut = kBN / 2 columns wide.
#pragma once

#include "gg_convert.cuh"
#include "gg_epilogue.cuh"
#include "gg_gemm.cuh"
#include "gg_gemm_config.cuh"

namespace gg::gemm::sm90 {

// The fixed shape of the warp-specialized block: a producer warpgroup and two
// consumer warpgroups of 64 rows; K tiles of one 128-byte swizzle row.
constexpr int kThreads = 384;
constexpr int kBM = 128;
constexpr int kRowBytes = 128;
constexpr int kProducerRegs = 40;  // setmaxnreg: 128 * 40 + 256 * 232 <= 64 Ki
constexpr int kConsumerRegs = 232;

// K elements of a K tile: 64 for 16-bit types, 128 for FP8.
template <class C>
constexpr int kBKFor = kRowBytes / static_cast<int>(sizeof(typename C::mma_t));

template <class M>
constexpr bool k16Bit = kSame<M, __nv_bfloat16> || kSame<M, __half>;
template <class M>
constexpr bool kFp8 = kSame<M, __nv_fp8_e4m3> || kSame<M, __nv_fp8_e5m2>;
// A paired activation whose gate and up lie n / 2 apart (silu_mul,
// swiglu_clamped pairs=halves): a tile's B is its gate half over its up
// half. swiglu_clamped pairs=interleaved (kInterleavedPairs) reads B columns
// 2 n0.. in order instead, column pair (2c, 2c + 1) making output column
// n0 + c; both have kBNOut = kBN / 2 (kPaired).
template <class C>
constexpr bool kSilu = kPaired<C> && !kInterleavedPairs<C>;

// Whether a TMA tile body (this one, the sm_100a one) computes a Config
// with B in either layout: A and B of one tensor-core type as stored (bf16,
// f16, e4m3 or e5m2); scales where the epilogue applies them (per tensor,
// per token, per channel) and, for FP8, the block scales of the FP32
// promotion (lhs 1 x block_k token groups, rhs block_n x block_k blocks); no
// folded scales; any epilogue, silu_mul included (gate and up halves of one
// B tile).
template <class C>
__host__ __device__ constexpr bool runs_one_type() {
  using mma_t = typename C::mma_t;
  constexpr bool kLhsOk = !kLhsScalePromoted<C> || C::kLhsScale == ScaleMode::kPerTokenGroup;
  constexpr bool kRhsOk = !kRhsScalePromoted<C> || C::kRhsScale == ScaleMode::kBlock;
  return (k16Bit<mma_t> ? !kPromotion<C> : (kFp8<mma_t> && kLhsOk && kRhsOk)) &&
         kSame<typename C::rhs_t, mma_t> && !C::kFoldScales;
}

// Whether a promoted Config's scale blocks fit a TMA tile body's K tile of
// kBK elements: K blocks of whole K tiles, N blocks holding a 64-column
// tile (the plan then picks a kBN that divides them).
template <class C, int kBK>
__host__ __device__ constexpr bool promotion_fits() {
  return C::kScaleBlockK % kBK == 0 &&
         (C::kRhsScale != ScaleMode::kBlock || C::kRhsScaleBlockN % 64 == 0);
}

// Whether this body computes a Config: runs_one_type, with B of an FP8
// type K-major (rhs [n, k]): wgmma reads FP8 K-major only.
template <class C>
__host__ __device__ constexpr bool runs() {
  return runs_one_type<C>() && (k16Bit<typename C::mma_t> || C::kRhsNK);
}

// Whether the weight-only variant of this body (gg_gemm_sm90_mixed.cuh)
// computes a Config: 16-bit lhs (the activations) times rhs [n, k] of an
// 8- or 4-bit weight format (int8, int4, fp4, e4m3, e5m2), which the
// consumers widen exactly to the lhs type in registers; rhs scales of any
// mode (per-K-block ones in an FP32 promotion, one scale per weight row and
// K block); lhs scales in the epilogue only; no folded scales; any
// epilogue, silu_mul included (gate and up rows interleaved 8 by 8), but
// swiglu_clamped pairs=interleaved (its pairs would straddle threads of
// the swapped accumulator).
template <class C>
__host__ __device__ constexpr bool runs_mixed() {
  using mma_t = typename C::mma_t;
  return k16Bit<mma_t> && !kSame<typename C::rhs_t, mma_t> && bits(C::kRhs) <= 8 && C::kRhsNK &&
         !kLhsScalePromoted<C> && !C::kFoldScales && !kInterleavedPairs<C>;
}

// A Config the weight-only variant computes (its tiles are `mixed`).
template <class C>
constexpr bool kMixed = runs_mixed<C>();

// Whether the generator routes a Config to this body on sm_90a (the spec's
// `mma auto | wgmma`; ir.Kernel.wgmma_obstacle states the same in Python):
// what `runs` computes, with block scales whose K blocks are whole K tiles
// and whose N blocks hold a 64-column tile (the plan then picks a kBN that
// divides them).
template <class C>
__host__ __device__ constexpr bool qualifies() {
  if constexpr (runs_mixed<C>()) {
    return !kPromotion<C> || C::kScaleBlockK % 64 == 0;
  } else if constexpr (!runs<C>()) {
    return false;
  } else if constexpr (kPromotion<C>) {
    return promotion_fits<C, kBKFor<C>>();
  } else {
    return true;
  }
}

// Whether a tile's numbers (computed by the plan, backends/cuda/gemm/)
// follow from its shape: B's N is a wgmma N (and a multiple of 64 for the
// MN-major boxes, of each half for silu_mul), the output tile is B's N (half
// of it for silu_mul), the stages hold A and B, each consumer warp's
// epilogue slice holds 16 rows of kCStride out_t, and everything fits after
// the 1024-byte alignment.
template <class T>
__host__ __device__ constexpr bool check_tile_sm90() {
  constexpr int kOut = static_cast<int>(sizeof(typename T::out_t));
  if (!check_config<T>() || !runs<T>() || T::kBM != kBM || T::kBK != kBKFor<T> ||
      T::kThreads != kThreads || T::kStages < 2 || T::kGroupM < 1) {
    return false;
  }
  if (T::kBN % 64 != 0 || T::kBN < 64 || T::kBN > 256 ||
      T::kBNOut != (kPaired<T> ? T::kBN / 2 : T::kBN) ||
      (kPaired<T> && !T::kRhsNK && T::kBNOut % 64 != 0)) {
    return false;
  }
  // A promoted tile holds two fragments of kBN / 2 f32 per thread. Block
  // scales are constant over a K tile, and over a tile's columns.
  if (kFp8<typename T::mma_t> && T::kBN > 128) {
    return false;
  }
  if (kPromotion<T> &&
      (!divides(T::kBK, T::kScaleBlockK) ||
       (T::kRhsScale == ScaleMode::kBlock &&
        !divides(kInterleavedPairs<T> ? T::kBN : T::kBNOut, T::kRhsScaleBlockN)))) {
    return false;
  }
  if (T::kAStage != kBM * kRowBytes || T::kBStage != T::kBN * kRowBytes ||
      T::kCStride != T::kBNOut + 16 / kOut || T::kCWarpBytes != 16 * T::kCStride * kOut) {
    return false;
  }
  return T::kSmemBytes ==
         1024 + T::kStages * (T::kAStage + T::kBStage) + 8 * T::kCWarpBytes + 2 * T::kStages * 8;
}

// Bytes of one weight row of a K tile of a weight-only tile (64 for 8-bit
// weights, 32 for 4-bit ones): the inner extent of its TMA box, loaded with
// a swizzle of that span; for any other tile, B's K tile in elements.
template <class T>
constexpr int kBInner = kMixed<T> ? T::kBK * bits(T::kRhs) / 8 : T::kBK;

// Output columns of a consumer warp of a weight-only tile: its 16 weight
// rows, or for silu_mul 8 (8 gate rows over the 8 matching up rows).
template <class T>
constexpr int kWarpCols = kSilu<T> ? 8 : 16;

// Whether a weight-only tile's numbers follow from its shape: kBM rows of
// lhs (wgmma's N, 8..128) times kBN = 128 weight rows (64 per consumer
// warpgroup, wgmma's M; silu_mul: 64 gate and 64 up rows, kBNOut 64), K
// tiles of 64; A stages of kBM 128-byte rows of lhs, B stages of 128 rows
// of raw weight bytes; each consumer warp's epilogue slice holds kBM rows
// of its kWarpCols output columns.
template <class T>
__host__ __device__ constexpr bool check_tile_mixed() {
  constexpr int kOut = static_cast<int>(sizeof(typename T::out_t));
  if (!check_config<T>() || !kMixed<T> || T::kBN != kBM ||
      T::kBNOut != (kSilu<T> ? T::kBN / 2 : T::kBN) || T::kBK != 64 ||
      T::kThreads != kThreads || T::kStages < 2 || T::kGroupM < 1) {
    return false;
  }
  if (T::kBM != 8 && T::kBM != 16 && T::kBM != 32 && T::kBM != 64 && T::kBM != 128) {
    return false;
  }
  if (kPromotion<T> && !divides(T::kBK, T::kScaleBlockK)) {
    return false;
  }
  if (T::kAStage != T::kBM * kRowBytes || T::kBStage != kBM * kBInner<T> ||
      T::kCStride != kWarpCols<T> + 16 / kOut || T::kCWarpBytes != T::kBM * T::kCStride * kOut) {
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
    // An offset from raw (not an integer cast back), so that the compiler
    // still knows the pointers are shared memory: ld.shared, not ld.
    a = raw + ((1024 - (static_cast<unsigned>(reinterpret_cast<unsigned long long>(raw)) & 1023u)) & 1023);
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

// The epilogue's operands: the scales it applies (null where the Config has
// none), the bias and the output.
template <class T>
struct Operands {
  const typename T::lhs_scale_t* lhs_scale;
  const typename T::rhs_scale_t* rhs_scale;
  const typename T::bias_t* bias;
  typename T::out_t* out;
};

// Where one work item's tile lies: rows [m0, m0 + 128) of lhs, output
// columns [n0, n0 + kBNOut), local group gl (0 for dense), rows computed
// and stored [row_lo, row_hi), rows stored as zeros [row_hi, zero_hi) (the
// masked layout's rows past a group's count; empty otherwise).
struct TileWork {
  int m0, n0, gl, row_lo, row_hi, zero_hi;
};

// How a block's items map to rows of lhs and out: m tiles (dense), the
// device worklist's (local group, m tile) items (grouped, the contiguous
// layout), or every (group, m tile) pair of g groups of cap rows (masked).
enum class Rows { kDense, kGrouped, kMasked };

// Where the items come from: the worklist (grouped) or the counts (masked).
struct Items {
  const int* items_gm;  // grouped: (local group, m tile) pairs
  const int* starts;    // grouped: the group starts gg::gemm::worklist wrote
  int num_groups, group_offset;
  const int* masked_m;  // masked: the valid rows of each group
  int cap;              // masked: the rows of each group
};

// Item `item`'s tile at n tile `nt`. Masked: group item / tiles of its
// cdiv(cap, 128) m tiles; rows past its count (clipped to [0, cap]) are
// zeros, and a tile with none before the count has no K loop.
template <class T, Rows L>
__device__ __forceinline__ TileWork work_of(int item, int nt, int m, const Items& g) {
  TileWork w{item * T::kBM, nt * T::kBNOut, 0, 0, m, m};
  if constexpr (L == Rows::kGrouped) {
    w.gl = g.items_gm[2 * item];
    w.m0 = g.items_gm[2 * item + 1] * T::kBM;
    const long long group = (long long)g.group_offset + w.gl;
    const int lo = group_start(g.starts, g.num_groups, group);
    w.row_lo = lo > w.m0 ? lo : w.m0;
    w.row_hi = w.zero_hi = group_start(g.starts, g.num_groups, group + 1);
  } else if constexpr (L == Rows::kMasked) {
    const int tiles = (g.cap + T::kBM - 1) / T::kBM;
    w.gl = item / tiles;
    const int base = w.gl * g.cap, lo = (item % tiles) * T::kBM;
    const int c = g.masked_m[w.gl];
    const int end = base + (c < 0 ? 0 : (c > g.cap ? g.cap : c));
    w.m0 = w.row_lo = base + lo;
    w.zero_hi = base + (lo + T::kBM < g.cap ? lo + T::kBM : g.cap);
    w.row_hi = end < w.m0 ? w.m0 : (end < w.zero_hi ? end : w.zero_hi);
  }
  return w;
}

// K tiles of a tile: all of k, none for a masked tile past its count.
template <Rows L>
__device__ __forceinline__ int ktiles_of(const TileWork& w, int ktiles) {
  return L == Rows::kMasked && w.row_hi <= w.row_lo ? 0 : ktiles;
}

// The producer's elected thread: for each tile of this block, each K tile:
// wait until the stage is empty, announce its bytes, issue the loads. `S` is
// a carve-up with the stages `a`, `b` and their barriers `full`, `empty`
// (this body's Smem, or the sm_100a body's, which shares the producer).
template <class T, Rows L, class S>
__device__ __forceinline__ void produce(const S& s, const CUtensorMap* map_a,
                                        const CUtensorMap* map_b, int tiles, int items, int tiles_n,
                                        int m, int n, int k, const Items& g) {
  constexpr int kBK = T::kBK;
  constexpr bool kGrouped = L != Rows::kDense;
  int it = 0;  // K tiles issued by this block so far: stage it % S, round it / S
  for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
    int item, nt;
    raster<T>(t, items, tiles_n, item, nt);
    const TileWork w = work_of<T, L>(item, nt, m, g);
    const int m0 = w.m0, gl = w.gl;
    const int ktiles = ktiles_of<L>(w, (k + kBK - 1) / kBK);
    // B rows (K-major) or columns (MN-major) of the tile: one run of kBN
    // from n0, or for silu_mul the gate half from n0 and the up half from
    // n / 2 + n0; a weight-only silu_mul tile interleaves them, 8 gate rows
    // then the 8 matching up rows, 16 runs (gg_gemm_sm90_mixed.cuh).
    const int n0 = w.n0;
    // Interleaved pairs: the two runs are B rows 2 n0.. in order.
    constexpr int kRuns = kPaired<T> ? (kMixed<T> ? 16 : 2) : 1;
    constexpr int kRunRows = T::kBN / kRuns;
    constexpr int kBRowBytes = kMixed<T> ? kBInner<T> : kRowBytes;
    const int b0[2] = {kInterleavedPairs<T> ? 2 * n0 : n0,
                       kInterleavedPairs<T> ? 2 * n0 + T::kBN / 2 : n / 2 + n0};
    for (int kt = 0; kt < ktiles; ++kt, ++it) {
      const int st = it % T::kStages;
      gg::mbarrier_wait(&s.empty[st], ((it / T::kStages) & 1) ^ 1);
      gg::mbarrier_arrive_expect_tx(&s.full[st], T::kAStage + T::kBStage);
      unsigned char* sa = s.a + st * T::kAStage;
      unsigned char* sb = s.b + st * T::kBStage;
      gg::tma_load_2d(sa, map_a, &s.full[st], kt * kBK, m0);
      if constexpr (T::kRhsNK) {
        // [n, k]: a box of kRunRows rows of one K tile per run; run r
        // reads half r % 2 (gate, up) from row kRunRows * (r / 2) on.
        GG_UNROLL
        for (int r = 0; r < kRuns; ++r) {
          unsigned char* dst = sb + r * kRunRows * kBRowBytes;
          const int row = b0[r % 2] + kRunRows * (r / 2);
          if constexpr (kGrouped) {
            gg::tma_load_3d(dst, map_b, &s.full[st], kt * kBInner<T>, row, gl);
          } else {
            gg::tma_load_2d(dst, map_b, &s.full[st], kt * kBInner<T>, row);
          }
        }
      } else {
        // [k, n]: boxes of one 128-byte row of columns (64 16-bit ones, 128
        // FP8 ones on sm_100a) x kBK rows, kRowBytes * kBK bytes apart.
        constexpr int kBoxCols = kRowBytes / static_cast<int>(sizeof(typename T::mma_t));
        constexpr int kBoxes = T::kBN / kBoxCols / kRuns;
        GG_UNROLL
        for (int j = 0; j < T::kBN / kBoxCols; ++j) {
          const int col = b0[j / kBoxes] + kBoxCols * (j % kBoxes);
          if constexpr (kGrouped) {
            gg::tma_load_3d(sb + j * kRowBytes * kBK, map_b, &s.full[st], col, kt * kBK, gl);
          } else {
            gg::tma_load_2d(sb + j * kRowBytes * kBK, map_b, &s.full[st], col, kt * kBK);
          }
        }
      }
    }
  }
}

// One consumer warpgroup's wgmma on stage `st`: its 64 rows of A times the
// stage's B, 4 instructions of 32 bytes of K each (m64nBNk16 for 16-bit
// types, m64nBNk32 for FP8). kFresh: the first one overwrites d (scale-d =
// 0) instead of accumulating.
template <class T, bool kFresh = false>
__device__ __forceinline__ void mma_stage(const Smem<T>& s, int st, int cw,
                                          float (&d)[T::kBN / 2]) {
  using mma_t = typename T::mma_t;
  const unsigned char* sa = s.a + st * T::kAStage + cw * 64 * kRowBytes;
  const unsigned char* sb = s.b + st * T::kBStage;
  GG_UNROLL
  for (int kb = 0; kb < kRowBytes / 32; ++kb) {
    // A, K-major, 128B swizzle: rows of 128 bytes, 8-row groups 1024 apart;
    // k block kb starts 32 bytes further into the (swizzled) row.
    const u64 da = gg::make_smem_desc(sa + kb * 32, 16, 1024, gg::SmemSwizzle::b128);
    const bool acc = !kFresh || kb > 0;
    if constexpr (T::kRhsNK) {
      const u64 db = gg::make_smem_desc(sb + kb * 32, 16, 1024, gg::SmemSwizzle::b128);
      if constexpr (kSame<mma_t, __nv_bfloat16>) {
        gg::wgmma_m64nNk16_bf16_ss<T::kBN>(d, da, db, acc);
      } else if constexpr (kSame<mma_t, __half>) {
        gg::wgmma_m64nNk16_f16_ss<T::kBN>(d, da, db, acc);
      } else if constexpr (kSame<mma_t, __nv_fp8_e4m3>) {
        gg::wgmma_m64nNk32_e4m3_ss<T::kBN>(d, da, db, acc);
      } else {
        gg::wgmma_m64nNk32_e5m2_ss<T::kBN>(d, da, db, acc);
      }
    } else {
      static_assert(k16Bit<mma_t>, "wgmma reads FP8 B K-major only");
      // B, MN-major, 128B swizzle: k rows of 128 bytes (64 columns), 8-row
      // groups 1024 apart (SBO), 64-column boxes 64 * kBK * 2 apart (LBO);
      // k block kb starts 16 rows further.
      const u64 db =
          gg::make_smem_desc(sb + kb * 16 * 128, 64 * T::kBK * 2, 1024, gg::SmemSwizzle::b128);
      if constexpr (kSame<mma_t, __nv_bfloat16>) {
        gg::wgmma_m64nNk16_bf16_ss<T::kBN, false, true>(d, da, db, acc);
      } else {
        gg::wgmma_m64nNk16_f16_ss<T::kBN, false, true>(d, da, db, acc);
      }
    }
  }
}

// A consumer warp's epilogue: its 16 rows of the fragment through gg_epilogue
// in registers, into its slice of shared memory, then out row by row (n_out
// columns: n, or n / 2 for silu_mul). Fragment element i holds row
// lane / 4 + 8 * ((i / 2) % 2) and column 8 * (i / 4) + 2 * (lane % 4) + i % 2
// of the warp's 16 x kBN; for silu_mul the up column c + kBN / 2 of gate
// column c is element i + kBN / 4, in the same thread; for interleaved
// pairs the up column 2c + 1 of gate column 2c is element i + 1 (i even).
template <class T>
__device__ __forceinline__ void store_tile(const Smem<T>& s, const float (&d)[T::kBN / 2],
                                           const TileWork& w, int cw, const Operands<T>& o, int n) {
  using out_t = typename T::out_t;
  const int t = threadIdx.x % 128, warp = t / 32, lane = t % 32;
  const int n_out = kPaired<T> ? n / 2 : n;
  out_t* slice = reinterpret_cast<out_t*>(s.c + (cw * 4 + warp) * T::kCWarpBytes);
  const int row0 = w.m0 + cw * 64 + 16 * warp;  // the warp's first row of out
  GG_UNROLL
  for (int i = 0; i < T::kBNOut / 2; ++i) {
    // Interleaved pairs: output q is the pair of elements (2q, 2q + 1).
    const int e = kInterleavedPairs<T> ? 2 * i : i;
    const int r = lane / 4 + 8 * ((e / 2) % 2);
    const int c =
        kInterleavedPairs<T> ? 4 * (e / 4) + lane % 4 : 8 * (i / 4) + 2 * (lane % 4) + i % 2;
    const int row = row0 + r, col = w.n0 + c;
    if (row >= w.row_hi && row < w.zero_hi && col < n_out) {
      slice[r * T::kCStride + c] = gg::from_float<out_t>(0.0f);  // masked: past the count
    } else if (row >= w.row_lo && row < w.row_hi && col < n_out) {
      if constexpr (kInterleavedPairs<T>) {
        float x[2] = {d[e], d[e + 1]};
        const int bcol[2] = {2 * col, 2 * col + 1};
        slice[r * T::kCStride + c] =
            epilogue_element<T>(x, bcol, o.lhs_scale, o.rhs_scale, o.bias, row, w.gl, n);
      } else if constexpr (kSilu<T>) {
        float x[2] = {d[i], d[i + T::kBN / 4]};
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
  for (int idx = lane; idx < 16 * T::kBNOut; idx += 32) {
    const int r = idx / T::kBNOut, c = idx % T::kBNOut;
    const int row = row0 + r, col = w.n0 + c;
    if (row >= w.row_lo && row < w.zero_hi && col < n_out) {
      o.out[(long long)row * n_out + col] = slice[r * T::kCStride + c];
    }
  }
  __syncwarp();  // the slice is free for the next tile
}

// FP8: each K tile's 4 wgmmas accumulate into a fresh f32 fragment (the
// first with scale-d = 0), which is added into the tile's accumulator once
// they retire. The tensor cores accumulate FP8 products with fewer mantissa
// bits than f32, so the sum over all of K is kept outside them, 128 K at a
// time (the promotion CUTLASS's default FP8 schedule and DeepGEMM use). The
// stage goes back to the producer as soon as its wgmmas retired.
template <class T>
constexpr bool kPromoted = kFp8<typename T::mma_t>;

// The scales of one K tile's partial sums (block-scaled FP8: 1 x 128 lhs
// blocks, 128 x 128 rhs blocks, docs/cuda-hopper.md): this thread's two rows'
// lhs scales and the tile's rhs scale (the tile's columns lie in one rhs
// block of N; silu_mul's gate and up halves each in one: b[0] and b[1]).
// Rows past m (never stored) take 1 on the exact path, else 0.
template <class T>
struct TileScales {
  float a[2];
  float b[2];
};

template <class T>
__device__ __forceinline__ TileScales<T> tile_scales(const TileWork& w, int row0,
                                                     const Operands<T>& o, int m, int n, int k,
                                                     int k0) {
  constexpr float kOutside = kExactPromotion<T> ? 1.0f : 0.0f;
  TileScales<T> sc{{1.0f, 1.0f}, {1.0f, 1.0f}};
  if constexpr (kLhsScalePromoted<T>) {
    GG_UNROLL
    for (int h = 0; h < 2; ++h) {
      const int row = row0 + 8 * h;
      sc.a[h] = row < m ? lhs_scale_at<T>(o.lhs_scale, row, k, k0) : kOutside;
    }
  }
  if constexpr (kRhsScalePromoted<T>) {
    // Interleaved pairs: the tile's B columns 2 n0.. lie in one block.
    sc.b[0] = rhs_scale_at<T>(o.rhs_scale, w.gl, kInterleavedPairs<T> ? 2 * w.n0 : w.n0, n, k, k0);
    sc.b[1] = kSilu<T> ? rhs_scale_at<T>(o.rhs_scale, w.gl, n / 2 + w.n0, n, k, k0) : sc.b[0];
  }
  return sc;
}

// d += part times the K tile's scales (plain add without block scales);
// element i is row half (i / 2) % 2 and, for silu_mul, column half
// i / (kBN / 4) (gate, up). With an e8m0 scale, a product of two scales may
// leave f32: when this thread's products are all normal (the usual case)
// they multiply at once, else each partial sum is scaled exactly
// (gg::mul_scales_out_of_line).
template <class T, int V>
__device__ __forceinline__ void add_scaled(float (&d)[V], const float (&part)[V],
                                           const TileScales<T>& sc) {
  if constexpr (!kPromotion<T>) {
    GG_UNROLL
    for (int i = 0; i < V; ++i)
      d[i] += part[i];
  } else {
    constexpr int kHalf = kSilu<T> ? V / 2 : V;  // elements per column half
    bool fast = true;
    if constexpr (kExactPromotion<T>) {
      const unsigned fa0 = gg::exponent_field(sc.a[0]), fa1 = gg::exponent_field(sc.a[1]);
      const unsigned fb0 = gg::exponent_field(sc.b[0]), fb1 = gg::exponent_field(sc.b[1]);
      fast = gg::product_is_normal(fa0 < fa1 ? fa0 : fa1, fa0 < fa1 ? fa1 : fa0,
                                   fb0 < fb1 ? fb0 : fb1, fb0 < fb1 ? fb1 : fb0);
    }
    if (fast) {
      const float f[2][2] = {{sc.a[0] * sc.b[0], sc.a[1] * sc.b[0]},
                             {sc.a[0] * sc.b[1], sc.a[1] * sc.b[1]}};
      GG_UNROLL
      for (int i = 0; i < V; ++i)
        d[i] += part[i] * f[i / kHalf][(i / 2) % 2];
    } else {
      GG_UNROLL
      for (int i = 0; i < V; ++i)
        d[i] += gg::mul_scales_out_of_line(part[i], gg::float_to_bits(sc.a[(i / 2) % 2]),
                                           gg::float_to_bits(sc.b[i / kHalf]));
    }
  }
}

template <class T>
__device__ __forceinline__ void promote_tiles(const Smem<T>& s, int cw, int ktiles, int& it,
                                              const TileWork& w, const Operands<T>& o, int m,
                                              int n, int k, float (&d)[T::kBN / 2]) {
  const int lane = threadIdx.x % 32, warp = (threadIdx.x % 128) / 32;
  const int row0 = w.m0 + cw * 64 + 16 * warp + lane / 4;  // this thread's first row
  for (int kt = 0; kt < ktiles; ++kt, ++it) {
    const int st = it % T::kStages;
    // The scales come from global memory: read them while the stage fills.
    const TileScales<T> sc = tile_scales<T>(w, row0, o, m, n, k, kt * T::kBK);
    float part[T::kBN / 2];
    gg::mbarrier_wait(&s.full[st], (it / T::kStages) & 1);
    gg::wgmma_fence();
    gg::wgmma_fence_operand(part);
    mma_stage<T, true>(s, st, cw, part);
    gg::wgmma_commit_group();
    gg::wgmma_wait_group<0>();
    gg::wgmma_fence_operand(part);
    gg::mbarrier_arrive(&s.empty[st]);
    add_scaled<T>(d, part, sc);
  }
}

// A consumer warpgroup (cw = 0, 1): for each tile of this block, each K
// tile: wait until the stage is full, issue its wgmmas, retire the previous
// K tile's and release that stage; then the epilogue.
template <class T, Rows L>
__device__ __forceinline__ void consume(const Smem<T>& s, int cw, int tiles, int items, int tiles_n,
                                        int m, int n, int k, const Items& g, const Operands<T>& o) {
  int it = 0;  // K tiles consumed by this block so far (as the producer counts)
  for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
    int item, nt;
    raster<T>(t, items, tiles_n, item, nt);
    const TileWork w = work_of<T, L>(item, nt, m, g);
    const int ktiles = ktiles_of<L>(w, (k + T::kBK - 1) / T::kBK);
    float d[T::kBN / 2];
    GG_UNROLL
    for (int i = 0; i < T::kBN / 2; ++i)
      d[i] = 0.0f;
    if constexpr (kPromoted<T>) {
      promote_tiles<T>(s, cw, ktiles, it, w, o, m, n, k, d);
    } else {
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
    }
    store_tile<T>(s, d, w, cw, o, n);
  }
}

// The weight-only consumer (gg_gemm_sm90_mixed.cuh, included after this
// header by gg_runtime.cuh).
template <class T, Rows L>
__device__ void consume_mixed(const Smem<T>& s, int cw, int tiles, int items, int tiles_n, int m,
                              int n, int k, const Items& g, const Operands<T>& o);

// Output tiles along N: n columns of out, or n / 2 for a paired activation.
template <class T>
__device__ __forceinline__ int tiles_n_of(int n) {
  const int n_out = kPaired<T> ? n / 2 : n;
  return (n_out + T::kBNOut - 1) / T::kBNOut;
}

// The block: barriers, the role split, setmaxnreg.
template <class T, Rows L>
__device__ __forceinline__ void run(unsigned char* smem, const CUtensorMap* map_a,
                                    const CUtensorMap* map_b, const Operands<T>& o, int m, int n,
                                    int k, int tiles, int items, int tiles_n, const Items& g) {
  static_assert(kMixed<T> ? check_tile_mixed<T>() : check_tile_sm90<T>(),
                "the tile's numbers follow from its shape");
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
      produce<T, L>(s, map_a, map_b, tiles, items, tiles_n, m, n, k, g);
    }
  } else {
    gg::setmaxnreg_inc<kConsumerRegs>();
    if constexpr (kMixed<T>) {
      consume_mixed<T, L>(s, wg - 1, tiles, items, tiles_n, m, n, k, g, o);
    } else {
      consume<T, L>(s, wg - 1, tiles, items, tiles_n, m, n, k, g, o);
    }
  }
}

// Dense: out[m, n] = lhs[m, k] @ B over the tensor maps of lhs (map_a) and
// rhs (map_b), then the epilogue (scales, bias, ...); block b takes tiles b,
// b + gridDim.x, ...
template <class T>
__device__ __forceinline__ void dense(unsigned char* smem, const CUtensorMap* map_a,
                                      const CUtensorMap* map_b,
                                      const typename T::lhs_scale_t* __restrict__ lhs_scale,
                                      const typename T::rhs_scale_t* __restrict__ rhs_scale,
                                      const typename T::bias_t* __restrict__ bias,
                                      typename T::out_t* __restrict__ out, int m, int n, int k) {
  const int tiles_m = (m + T::kBM - 1) / T::kBM, tiles_n = tiles_n_of<T>(n);
  run<T, Rows::kDense>(smem, map_a, map_b, Operands<T>{lhs_scale, rhs_scale, bias, out}, m, n, k,
                       tiles_m * tiles_n, tiles_m, tiles_n, Items{});
}

// Dense without scales.
template <class T>
__device__ __forceinline__ void dense(unsigned char* smem, const CUtensorMap* map_a,
                                      const CUtensorMap* map_b,
                                      const typename T::bias_t* __restrict__ bias,
                                      typename T::out_t* __restrict__ out, int m, int n, int k) {
  dense<T>(smem, map_a, map_b, nullptr, nullptr, bias, out, m, n, k);
}

// Grouped: the work items of gg::gemm::worklist (workspace, built on the
// device by an earlier launch) times the n tiles; map_b is 3D over rhs
// [g, ...] with the local group outermost. Only the rows of each item's
// group are stored; per-tensor and per-channel rhs scales are per local
// group ([g], [g, n]).
template <class T>
__device__ __forceinline__ void grouped(unsigned char* smem, const CUtensorMap* map_a,
                                        const CUtensorMap* map_b,
                                        const typename T::lhs_scale_t* __restrict__ lhs_scale,
                                        const typename T::rhs_scale_t* __restrict__ rhs_scale,
                                        const typename T::bias_t* __restrict__ bias,
                                        typename T::out_t* __restrict__ out,
                                        const int* __restrict__ workspace, int m, int n, int k,
                                        int num_groups, int group_offset) {
  const int items = workspace[0], tiles_n = tiles_n_of<T>(n);
  const Items g{workspace + 2 + num_groups, workspace + 1, num_groups, group_offset, nullptr, 0};
  run<T, Rows::kGrouped>(smem, map_a, map_b, Operands<T>{lhs_scale, rhs_scale, bias, out}, m, n,
                         k, items * tiles_n, items, tiles_n, g);
}

// Grouped without scales.
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

// Masked (the masked grouped layout, docs/cuda.md): lhs [g, cap, k] and out
// [g, cap, n_out] as g * cap rows over map_a and out; map_b is 3D over rhs
// [g, ...]. Every (group, m tile) pair is an item: the rows before the
// group's count masked_m[gl] (clipped to [0, cap]) are computed, the rest of
// the group's rows written as zeros (a tile past the count loads nothing).
// No worklist, no fill. Per-token lhs scales are rows of the g * cap.
template <class T>
__device__ __forceinline__ void masked(unsigned char* smem, const CUtensorMap* map_a,
                                       const CUtensorMap* map_b,
                                       const typename T::lhs_scale_t* __restrict__ lhs_scale,
                                       const typename T::rhs_scale_t* __restrict__ rhs_scale,
                                       const typename T::bias_t* __restrict__ bias,
                                       typename T::out_t* __restrict__ out,
                                       const int* __restrict__ masked_m, int n, int k, int g,
                                       int cap) {
  const int items = g * ((cap + T::kBM - 1) / T::kBM), tiles_n = tiles_n_of<T>(n);
  const Items it{nullptr, nullptr, g, 0, masked_m, cap};
  run<T, Rows::kMasked>(smem, map_a, map_b, Operands<T>{lhs_scale, rhs_scale, bias, out}, g * cap,
                        n, k, items * tiles_n, items, tiles_n, it);
}

// Masked without scales.
template <class T>
__device__ __forceinline__ void masked(unsigned char* smem, const CUtensorMap* map_a,
                                       const CUtensorMap* map_b,
                                       const typename T::bias_t* __restrict__ bias,
                                       typename T::out_t* __restrict__ out,
                                       const int* __restrict__ masked_m, int n, int k, int g,
                                       int cap) {
  masked<T>(smem, map_a, map_b, nullptr, nullptr, bias, out, masked_m, n, k, g, cap);
}

}  // namespace gg::gemm::sm90
