// gg_gemm_sm100_mixed.cuh: the weight-only (W8A16 / W4A16) tiles of the
// datacenter Blackwell (sm_100a) body: 16-bit activations times int8, int4,
// fp4, e4m3 or e5m2 weights [n, k], the weights widened in shared memory by
// a transform warpgroup before tcgen05.mma reads them.
//
// tcgen05.mma reads both operands from shared memory (A may come from TMEM,
// never B), and its kind::f16 takes bf16 / f16 on both sides; kind::f8f6f4
// takes no 16-bit operand, so 16-bit activations need 16-bit weights. As
// CUTLASS's sm100 mixed-input GEMM does, a stage is widened on its way from
// TMA to the MMA (docs/cuda-sm100.md, "Weight-only W8A16 / W4A16"):
//   - 320 threads: warp 0 the producer (one thread issues the TMA loads of a
//     128 x 64 lhs box and the tile's 128 weight rows of one K tile as raw
//     bytes: gg_gemm_sm90.cuh's `produce` with the Hopper weight-only boxes
//     and swizzle), warp 1 allocates TMEM and one thread issues the
//     tcgen05.mma (`issue` below: gg_gemm_sm100.cuh's, a unit being a
//     tile or a scale block of K), warps 2..5 the epilogue
//     warpgroup (gg_gemm_sm100.cuh's `epilogue`, or `epilogue_promoted`
//     below with per-K-block weight scales), warps 6..9 the transform
//     warpgroup;
//   - a stage is A (128 rows of 128 bytes, TMA, 128-byte swizzle), the raw
//     weights (128 rows of 64 or 32 bytes, TMA, swizzled over that span)
//     and B widened (128 rows of 128 bytes: 64 bf16 / f16 weights, the
//     UMMA K-major layout with the 128-byte swizzle, written by the
//     transform);
//   - barriers per stage: `loaded` (the producer's one arrival + the TMA
//     bytes of A and the raw weights: the transform waits on it), `full`
//     (the transform's 128 arrivals, each after its wait on `loaded`, its
//     st.shared of the widened tile and a fence.proxy.async: the MMA
//     thread waits on it, for B and, through the transform's wait, A) and
//     `empty` (the MMA
//     thread's tcgen05.commit: the MMAs that read A and widened B are done,
//     and the transform read the raw bytes before it arrived on `full`, so
//     the producer may refill all three);
//   - the transform widens exactly (gg_widen.cuh's widen_pair: int4 and
//     int8 by integer and f32 adds, fp4 and FP8 element by element); a
//     silu_mul stage holds the raw rows interleaved 8 by 8 (gate, up: the
//     Hopper boxes), which the transform writes as the gate half over the
//     up half, the layout the epilogue pairs;
//   - per-K-block weight scales (block, kblock): the scale varies along K
//     and per weight row, and a scale folded into the widened weight would
//     round weight x scale to 16 bits; instead each scale block's MMAs go
//     into an accumulator of their own (a promoted unit), and the
//     epilogue warps add its sums times each column's scale into the
//     tile's f32 sums, kept in TMEM beside the accumulators
//     (epilogue_promoted): exact products, f32 sums, as the other bodies
//     compute them. per_tensor and per_channel weight scales,
//     lhs scales and bias are the epilogue's;
//   - the pair (kCtaPair, a LUT entry of m = 256): 256 x 128 tiles over a
//     CTA pair (clusters of 2, or of 2P with `cluster_n` = P: P pairs along
//     n walking the cluster's units, gg_gemm_sm100_pair.cuh); each CTA
//     loads its 128 lhs rows and 64 weight rows on its own `loaded`
//     (produce_pair; with P > 1 CTA v of pair 0 multicasts A's half v to
//     CTA v of every pair, landing on each one's own `loaded`) and widens
//     them, each transform thread arrives on the leader's `full` (256
//     arrivals: the leader's tcgen05.mma.cta_group::2 reads both halves
//     only once both are written and fenced), and the leader's commits
//     release the stages of every CTA of the cluster (`empty` takes P
//     arrivals, one a pair: pair 0's multicast refills every pair's stage)
//     and both CTAs' accumulators; each CTA's epilogue
//     (gg_gemm_sm100.cuh's epilogue, or epilogue_promoted on its
//     128 rows) hands the accumulator back on the leader's acc_empty; a
//     pair whose tile lies past n (the idle pair) stores nothing.
#pragma once

#include "gg_gemm_sm100.cuh"
#include "gg_gemm_sm100_pair.cuh"
#include "gg_widen.cuh"

namespace gg::gemm::sm100_mixed {

using sm100::kBM;
using sm100::kChunk;
using sm100::kCtaBRows;
using sm100::kCtaRows;
using sm100::kPair;
using sm100::kRowBytes;
using sm90::Items;
using sm90::kSilu;
using sm90::Operands;
using sm90::raster;
using sm90::Rows;
using sm90::TileWork;

// The block: a producer warp, an MMA warp, the epilogue warpgroup (warps
// 2..5) and the transform warpgroup (warps 6..9); tiles of 128 lhs rows x
// 128 weight rows x 64 K elements.
constexpr int kThreads = 320;
constexpr int kTransformWarp0 = 6;
constexpr int kBN = 128;
constexpr int kBK = 64;

// Bytes of one weight row of a K tile as stored (64 for 8-bit weights, 32
// for 4-bit ones), and of a stage's raw weights.
template <class T>
constexpr int kRawRow = kBK * bits(T::kRhs) / 8;
template <class T>
constexpr int kRawStage = kBN * kRawRow<T>;

// The decode tile (kSwapAB, LUT entries of m <= 32): the operands swapped
// as in the Hopper weight-only tile, the widened weights the MMA's A (M =
// 128 weight rows) and kBM = 16 or 32 rows of lhs its B (N), so a decode
// call spends no tensor-core work on 96 padding rows; its accumulator is
// transposed (TMEM lane: output column, column: lhs row), and read back by
// epilogue_swapped. Not for silu_mul (a gate and its up row would lie in
// different lanes).
// Columns of one accumulator: kBN, or the decode tile's kBM.
template <class T>
constexpr int kAccCols = T::kSwapAB ? T::kBM : kBN;

// The TMEM column of the promoted tile's f32 sums (after the two
// accumulators: kBN columns, this thread's row in its lane), and the
// tile's TMEM columns: 256, or 512 with the sums; the decode tile's two
// accumulators of kBM columns (at least 32: tcgen05.alloc's granule).
constexpr int kSumCol = 2 * kBN;
template <class T>
constexpr int kTmemCols = T::kSwapAB      ? sm100::kPow2Cols<2 * T::kBM>
                          : kPromotion<T> ? 4 * kBN
                                          : 2 * kBN;

// Whether the generator routes a Config here on sm_100a (ir.Kernel.
// tcgen05_obstacle says the same): the Hopper weight-only tile's Configs
// (gg_gemm_sm90.cuh's runs_mixed), per-K-block scales in whole K tiles.
template <class C>
__host__ __device__ constexpr bool qualifies() {
  return sm90::runs_mixed<C>() && (!kPromotion<C> || C::kScaleBlockK % kBK == 0);
}

// Whether a tile's numbers (backends/cuda/gemm/tcgen05.py, `_mixed_tile`)
// follow from its shape: 128 x 128 x 64, the output 128 columns (64 for
// silu_mul), stages of A, widened B and raw weights, two 128-column
// accumulators (and the promoted tile's 128 columns of sums: 512 in all,
// a power of two), four epilogue slices of a 32-column chunk, three barriers
// per stage.
// The decode tile: kBM = 16 or 32 lhs rows (the MMA's N), no silu_mul.
// The pair (kCtaPair): 256 x 128 x 64 over a CTA pair, each CTA's stage its
// 128 lhs rows and its 64 weight rows (raw and widened), the TMEM columns
// the 1-CTA tile's in each CTA; one pair a cluster (kClusterN = 1).
template <class T>
__host__ __device__ constexpr bool check_tile_mixed() {
  constexpr int kOut = static_cast<int>(sizeof(typename T::out_t));
  if (!check_config<T>() || !qualifies<T>() || T::kBN != kBN || T::kBK != kBK ||
      T::kBNOut != (kSilu<T> ? kBN / 2 : kBN) || T::kThreads != kThreads || T::kStages < 2 ||
      T::kGroupM < 1) {
    return false;
  }
  if (T::kSwapAB ? (T::kBM != 16 && T::kBM != 32) || kSilu<T> || kPair<T>
                 : T::kBM != (kPair<T> ? 2 * kBM : kBM)) {
    return false;
  }
  // Clusters of kClusterN pairs (sharing A by TMA multicast) on the pair
  // only, at most 8 CTAs (the portable cluster size).
  if (sm100::kClusterN<T> < 1 || sm100::kClusterCtas<T> > 8 ||
      (sm100::kClusterN<T> > 1 && !kPair<T>)) {
    return false;
  }
  if (T::kAStage != kCtaRows<T> * kRowBytes || T::kBStage != kCtaBRows<T> * kRowBytes ||
      T::kRawStage != kCtaBRows<T> * kRawRow<T> || T::kTmemCols != kTmemCols<T> ||
      T::kCStride != kChunk + 16 / kOut || T::kCWarpBytes != 32 * T::kCStride * kOut) {
    return false;
  }
  return T::kSmemBytes == 1024 + T::kStages * (T::kAStage + T::kBStage + T::kRawStage) +
                              4 * T::kCWarpBytes + (3 * T::kStages + 4) * 8 + 16;
}

// The carve-up: gg_gemm_sm100.cuh's (the MMA thread and the epilogue use its
// `a`, `b`, `c`, `full`, `empty`, `acc_*` and the TMEM slot) with the raw
// weight stages after the widened ones and the `loaded` barriers after the
// accumulators'. `full` is the transform's barrier here.
template <class T>
struct Smem : sm100::Smem<T> {
  unsigned char* raw;
  u64* loaded;
  __device__ __forceinline__ explicit Smem(unsigned char* smem) : sm100::Smem<T>(smem) {
    raw = this->b + T::kStages * T::kBStage;
    this->sf = raw + T::kStages * T::kRawStage;  // no scale atoms
    this->c = this->sf;
    this->full = reinterpret_cast<u64*>(this->c + 4 * T::kCWarpBytes);
    this->empty = this->full + T::kStages;
    this->acc_full = this->empty + T::kStages;
    this->acc_empty = this->acc_full + 2;
    loaded = this->acc_empty + 2;
    this->tmem_slot = reinterpret_cast<u32*>(loaded + T::kStages);
  }
};

// The producer's view of a tile: its B stage is the raw weights (what the
// TMA loads of gg_gemm_sm90.cuh's `produce` fill), and its stages' carve-up.
template <class T>
struct RawTile : T {
  static constexpr int kBStage = kRawStage<T>;
};
struct RawStages {
  unsigned char* a;
  unsigned char* b;
  u64* full;
  u64* empty;
};

// One 16-byte chunk of the widened tile: 8 weights (K elements 8c .. 8c + 7)
// of raw row r, read from the stage as the TMA load swizzled it (the 16-byte
// chunk of byte offset x is x's bits [4, ...) XOR its bits [7, ...), over the
// row's span: gg_gemm_sm90_mixed.cuh's fragment_pair) and widened in 4
// pairs, stored at row `dr` of the UMMA K-major 128-byte-swizzle layout
// ((dr / 8) 1024 + (dr % 8) 128 + (c ^ dr % 8) 16: the layout TMA gives A).
template <class T>
__device__ __forceinline__ void widen_chunk(const unsigned char* raw, unsigned char* wide, int r,
                                            int c, int dr) {
  using mma_t = typename T::mma_t;
  constexpr int kBytes = 8 * bits(T::kRhs) / 8;  // raw bytes of 8 weights: 8 or 4
  constexpr unsigned kMask = kRawRow<T> / 16 - 1;
  unsigned x = static_cast<unsigned>(r * kRawRow<T> + c * kBytes);
  x ^= ((x >> 7) & kMask) << 4;
  unsigned char p[8];
  if constexpr (kBytes == 8) {
    const uint2 v = *reinterpret_cast<const uint2*>(raw + x);
    memcpy(p, &v, 8);
  } else {
    const u32 v = *reinterpret_cast<const u32*>(raw + x);
    memcpy(p, &v, 4);
  }
  u32 w[4];
  GG_UNROLL
  for (int i = 0; i < 4; ++i)
    w[i] = widen_pair<T::kRhs, mma_t>(p + i * (kBytes / 4));
  *reinterpret_cast<uint4*>(wide + (dr / 8) * 1024 + (dr % 8) * 128 + ((c ^ (dr % 8)) * 16)) =
      make_uint4(w[0], w[1], w[2], w[3]);
}

// The widened row of raw row r: itself, or for silu_mul (raw rows 16j ..
// 16j + 7 gate rows n0 + 8j .., 16j + 8 .. the matching up rows) the gate
// half over the up half (gate row 8j + r % 8, up row kBN / 2 + 8j + r % 8).
// A pair's CTA holds one half (the leader the gate rows, the peer the up
// rows), loaded in order: itself.
template <class T>
__device__ __forceinline__ int widened_row(int r) {
  if constexpr (kSilu<T> && !kPair<T>) {
    return ((r / 8) % 2) * (kBN / 2) + 8 * (r / 16) + r % 8;
  } else {
    return r;
  }
}

// Where the transform releases a widened stage to the MMA thread: its CTA's
// `full` (128 arrivals), or in a pair the leader's (a shared::cluster
// address; 256 arrivals, both CTAs' transform warpgroups: the leader's MMAs
// read both CTAs' halves).
template <class T>
struct Full {
  u64* own;
  u32 leader;
  __device__ __forceinline__ explicit Full(const Smem<T>& s) : own(s.full), leader(0) {
    if constexpr (kPair<T>) {
      leader = gg::cluster_map_shared_addr(s.full, gg::cluster_ctarank() & ~1u);
    }
  }
  __device__ __forceinline__ void arrive(int st) const {
    if constexpr (kPair<T>) {
      gg::mbarrier_arrive_cluster(leader + 8u * static_cast<u32>(st));
    } else {
      gg::mbarrier_arrive(&own[st]);
    }
  }
};

// The transform warpgroup: for each K tile, wait for its raw weights (and
// A), widen them into the stage's B (thread t takes chunks t, t + 128, ...:
// 8 per thread, 4 in a pair's CTA, consecutive threads on consecutive
// chunks of a row), make the stores visible to the async proxy, release the
// stage to the MMA thread (Full).
template <class T, Rows L>
__device__ __forceinline__ void transform(const Smem<T>& s, int units, int items, int tiles_n,
                                          int m, int k, const Items& g) {
  const int t = threadIdx.x - 32 * kTransformWarp0;
  const Full<T> full(s);
  int it = 0;  // K tiles widened by this block so far (as the producer counts)
  for (int unit = sm100::first_unit<T>(); unit < units; unit += sm100::unit_step<T>()) {
    const TileWork w = sm100::unit_work<T, L>(unit, items, tiles_n, m, g);
    const int ktiles = sm90::ktiles_of<L>(w, (k + kBK - 1) / kBK);
    for (int kt = 0; kt < ktiles; ++kt, ++it) {
      const int st = it % T::kStages;
      gg::mbarrier_wait(&s.loaded[st], (it / T::kStages) & 1);
      const unsigned char* raw = s.raw + st * T::kRawStage;
      unsigned char* wide = s.b + st * T::kBStage;
      GG_UNROLL
      for (int i = 0; i < kCtaBRows<T> * 8 / 128; ++i) {
        const int idx = t + 128 * i, r = idx / 8, c = idx % 8;
        widen_chunk<T>(raw, wide, r, c, widened_row<T>(r));
      }
      gg::fence_proxy_async();  // the MMA reads the tile through the async proxy
      full.arrive(st);
    }
  }
}

// The weight row (rhs row) of accumulator column c of a tile: n0 + c, or
// for silu_mul gate column c < kBN / 2 or up column n / 2 + n0 + c - kBN / 2;
// false past n (past n / 2 for a silu_mul half).
template <class T>
__device__ __forceinline__ bool weight_row(const TileWork& w, int c, int n, int& row) {
  if constexpr (kSilu<T>) {
    const int local = c % (kBN / 2);
    row = (c < kBN / 2 ? w.n0 : n / 2 + w.n0) + local;
    return w.n0 + local < n / 2;
  } else {
    row = w.n0 + c;
    return row < n;
  }
}

// d += part times the K tile's scale of each column (its weight row's, at
// K tile k0), for the chunk of columns [c0, c0 + 32); every thread of the
// warpgroup reads the same 32 scales. e8m0 scales (kExactPromotion) go
// through gg::mul_scale, exact where the product leaves f32's normal range.
template <class T>
__device__ __forceinline__ void add_scaled_columns(float (&d)[kChunk], const float (&part)[kChunk],
                                                   int c0, const TileWork& w, const Operands<T>& o,
                                                   int n, int k, int k0) {
  constexpr float kOutside = kExactPromotion<T> ? 1.0f : 0.0f;
  GG_UNROLL
  for (int j = 0; j < kChunk; ++j) {
    int row = 0;
    const float sc = weight_row<T>(w, c0 + j, n, row)
                         ? rhs_scale_at<T>(o.rhs_scale, w.gl, row, n, k, k0)
                         : kOutside;
    if constexpr (kExactPromotion<T>) {
      d[j] += gg::mul_scale(part[j], sc);
    } else {
      d[j] += part[j] * sc;
    }
  }
}

// The MMAs of stage `st` into the accumulator at `d`: gg_gemm_sm100.cuh's
// (A the stage's lhs rows, B its widened weights), or for the decode tile
// the widened weights as A (M = 128) and the lhs rows as B (N = kBM), both
// K-major with the 128-byte swizzle, 4 MMAs of 16 K elements.
template <class T>
__device__ __forceinline__ void mma_stage(const Smem<T>& s, int st, u32 d, bool accumulate,
                                          u32 tmem) {
  if constexpr (!T::kSwapAB) {
    sm100::mma_stage<T>(s, st, d, accumulate, tmem);
  } else {
    using M = typename T::mma_t;
    constexpr u32 kIdesc = gg::umma::instr_desc(sm100::kUmmaType<M>, sm100::kUmmaType<M>, kBN,
                                                T::kBM, gg::umma::Major::K, gg::umma::Major::K);
    const unsigned char* sw = s.b + st * T::kBStage;
    const unsigned char* sl = s.a + st * T::kAStage;
    GG_UNROLL
    for (int kb = 0; kb < kRowBytes / 32; ++kb) {
      const u64 da = gg::make_umma_desc(sw + kb * 32, 16, 1024, gg::umma::Swizzle::b128);
      const u64 db = gg::make_umma_desc(sl + kb * 32, 16, 1024, gg::umma::Swizzle::b128);
      gg::tcgen05_mma_f16(d, da, db, kIdesc, accumulate || kb > 0);
    }
  }
}

// K tiles of a promoted unit: one scale block (kScaleBlockK, a multiple of
// the 64-element K tile); without per-K-block scales a unit is a tile (and
// this is unused).
template <class T>
constexpr int kUnitKTiles = kPromotion<T> ? T::kScaleBlockK / kBK : 1;

// The MMA warp's elected thread (gg_gemm_sm100.cuh's `issue`, with units of
// a scale block; a pair's leader's): for each unit, wait until its
// accumulator is free (a pair: both CTAs' epilogues, 256 arrivals on the
// leader's acc_empty), issue the MMAs of its K tiles (each stage released
// by a commit once its MMAs are done), then commit the accumulator to the
// epilogue (a pair: both CTAs', multicast).
template <class T, Rows L>
__device__ __forceinline__ void issue(const Smem<T>& s, u32 tmem, int units, int items, int tiles_n,
                                      int m, int k, const Items& g) {
  const sm100::Commits<T> commit;
  int it = 0;  // K tiles consumed so far (as the producer counts)
  int u = 0;   // units issued so far: accumulator u % 2, round u / 2
  for (int unit = sm100::first_unit<T>(); unit < units; unit += sm100::unit_step<T>()) {
    const TileWork w = sm100::unit_work<T, L>(unit, items, tiles_n, m, g);
    const int ktiles = sm90::ktiles_of<L>(w, (k + kBK - 1) / kBK);
    for (int kt = 0; kt < ktiles; ++kt, ++it) {
      const int acc = u % 2;
      const bool first = kPromotion<T> ? kt % kUnitKTiles<T> == 0 : kt == 0;
      const bool last =
          (kPromotion<T> && kt % kUnitKTiles<T> == kUnitKTiles<T> - 1) || kt == ktiles - 1;
      if (first) {
        gg::mbarrier_wait(&s.acc_empty[acc], ((u / 2) & 1) ^ 1);
        gg::tcgen05_fence_after_thread_sync();
      }
      const int st = it % T::kStages;
      // The widened B, and A: the transform's 128 threads each waited on
      // `loaded` (A's TMA bytes landed) before arriving on `full`, so this
      // wait orders A's load before the MMAs too (causality is transitive
      // through the two barriers; in a pair, both CTAs' transforms arrive
      // on the leader's `full`).
      gg::mbarrier_wait(&s.full[st], (it / T::kStages) & 1);
      gg::tcgen05_fence_after_thread_sync();
      sm100_mixed::mma_stage<T>(s, st, tmem + acc * kAccCols<T>, !first, tmem);
      commit.stage(&s.empty[st]);
      if (last) {
        commit.acc(&s.acc_full[acc]);
        ++u;
      }
    }
  }
}

// The epilogue warpgroup with per-K-block weight scales: each scale block
// of K is a unit of its own (`issue`'s units: accumulator u % 2, the last
// one of a tile possibly short of k); its sums, times each column's scale
// of that block, are added into the tile's f32 sums,
// which live in TMEM beside the accumulators (kSumCol: this thread's row,
// 32 columns at a time through registers, tcgen05.ld / st; 128 sums in
// registers would spill at 320 threads' 168 registers each), then stored
// as gg_gemm_sm100.cuh's promoted epilogue does.
template <class T, Rows L>
__device__ __forceinline__ void epilogue_promoted(const Smem<T>& s, u32 tmem, int units, int items,
                                                  int tiles_n, int m, int n, int k, const Items& g,
                                                  const Operands<T>& o) {
  const u32 sums = tmem + kSumCol;
  const sm100::AccBack<T> back(s);  // a pair's: the leader's acc_empty (256 arrivals)
  int u = 0;  // units consumed so far, as the MMA thread counts them
  for (int unit = sm100::first_unit<T>(); unit < units; unit += sm100::unit_step<T>()) {
    TileWork w = sm100::unit_work<T, L>(unit, items, tiles_n, m, g);
    const int ktiles = sm90::ktiles_of<L>(w, (k + kBK - 1) / kBK);
    w.m0 += kBM * sm100::cta_of_pair<T>();  // a pair's CTA: its rows (the bounds the pair's)
    for (int kt = 0; kt < ktiles; kt += kUnitKTiles<T>, ++u) {
      const int acc = u % 2;
      gg::mbarrier_wait(&s.acc_full[acc], (u / 2) & 1);
      gg::tcgen05_fence_after_thread_sync();
      for (int c0 = 0; c0 < kBN; c0 += kChunk) {
        float part[kChunk], d[kChunk];
        sm100::load_chunk(sm100::lane_addr(tmem + acc * kBN, c0), part);
        if (kt > 0) {
          sm100::load_chunk(sm100::lane_addr(sums, c0), d);
        } else {
          GG_UNROLL
          for (int j = 0; j < kChunk; ++j)
            d[j] = 0.0f;
        }
        add_scaled_columns<T>(d, part, c0, w, o, n, k, kt * kBK);
        u32 r[kChunk];
        GG_UNROLL
        for (int j = 0; j < kChunk; ++j)
          r[j] = gg::float_to_bits(d[j]);
        gg::tcgen05_st_32x32b(sm100::lane_addr(sums, c0), r);
        gg::tcgen05_wait_st();
      }
      back.arrive(acc);
    }
    for (int c0 = 0; c0 < T::kBNOut; c0 += kChunk) {
      float x[2][kChunk];
      GG_UNROLL
      for (int h = 0; h < (kSilu<T> ? 2 : 1); ++h) {
        if (ktiles > 0) {
          sm100::load_chunk(sm100::lane_addr(sums, h * (kBN / 2) + c0), x[h]);
        } else {
          GG_UNROLL
          for (int j = 0; j < kChunk; ++j)
            x[h][j] = 0.0f;
        }
      }
      sm100::store_chunk<T>(s, x, w, c0, o, n, 1.0f);
    }
  }
}

// The epilogue warpgroup of the decode tile: thread (quarter q, lane l)
// owns output column n0 + 32 q + l (TMEM lane 32 q + l) and the tile's kBM
// lhs rows (the accumulator's columns), summed in registers over the units
// (per-K-block scales: this column's scale of each unit's block; else one
// unit), then through gg_epilogue into the warp's slice (16 or 32 rows of
// its 32 columns) and out row by row.
template <class T, Rows L>
__device__ __forceinline__ void epilogue_swapped(const Smem<T>& s, u32 tmem, int tiles, int items,
                                                 int tiles_n, int m, int n, int k, const Items& g,
                                                 const Operands<T>& o) {
  using out_t = typename T::out_t;
  constexpr int kRows = T::kBM;
  constexpr int kC = kRows < kChunk ? kRows : kChunk;  // rows per tcgen05.ld
  constexpr float kOutside = kExactPromotion<T> ? 1.0f : 0.0f;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, quarter = warp % 4;
  out_t* slice = reinterpret_cast<out_t*>(s.c + (warp - sm100::kEpilogueWarp0) * T::kCWarpBytes);
  int u = 0;  // units consumed so far, as the MMA thread counts them
  for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
    int item, nt;
    raster<T>(t, items, tiles_n, item, nt);
    const TileWork w = sm90::work_of<T, L>(item, nt, m, g);
    const int ktiles = sm90::ktiles_of<L>(w, (k + kBK - 1) / kBK);
    const int col = w.n0 + 32 * quarter + lane;
    float d[kRows];
    GG_UNROLL
    for (int j = 0; j < kRows; ++j)
      d[j] = 0.0f;
    for (int kt = 0; kt < ktiles; kt += kPromotion<T> ? kUnitKTiles<T> : ktiles, ++u) {
      const int acc = u % 2;
      float sc = 1.0f;
      if constexpr (kPromotion<T>) {
        sc = col < n ? rhs_scale_at<T>(o.rhs_scale, w.gl, col, n, k, kt * kBK) : kOutside;
      }
      gg::mbarrier_wait(&s.acc_full[acc], (u / 2) & 1);
      gg::tcgen05_fence_after_thread_sync();
      GG_UNROLL
      for (int c0 = 0; c0 < kRows; c0 += kC) {
        float part[kC];
        sm100::load_chunk(sm100::lane_addr(tmem + acc * kRows, c0), part);
        GG_UNROLL
        for (int j = 0; j < kC; ++j) {
          if constexpr (!kPromotion<T>) {
            d[c0 + j] += part[j];
          } else if constexpr (kExactPromotion<T>) {
            d[c0 + j] += gg::mul_scale(part[j], sc);
          } else {
            d[c0 + j] += part[j] * sc;
          }
        }
      }
      gg::tcgen05_fence_before_thread_sync();
      gg::mbarrier_arrive(&s.acc_empty[acc]);
    }
    GG_UNROLL
    for (int c0 = 0; c0 < kRows; c0 += kC) {
      GG_UNROLL
      for (int j = 0; j < kC; ++j) {
        const int row = w.m0 + c0 + j;
        if (row >= w.row_hi && row < w.zero_hi && col < n) {
          slice[j * T::kCStride + lane] = gg::from_float<out_t>(0.0f);  // masked: past the count
        } else if (row >= w.row_lo && row < w.row_hi && col < n) {
          float v[1] = {d[c0 + j]};
          const int bcol[1] = {col};
          slice[j * T::kCStride + lane] =
              epilogue_element<T>(v, bcol, o.lhs_scale, o.rhs_scale, o.bias, row, w.gl, n, 1.0f);
        }
      }
      __syncwarp();
      for (int idx = lane; idx < kC * 32; idx += 32) {
        const int r = idx / 32, c = idx % 32;
        const int orow = w.m0 + c0 + r, ocol = w.n0 + 32 * quarter + c;
        if (orow >= w.row_lo && orow < w.zero_hi && ocol < n) {
          o.out[(long long)orow * n + ocol] = slice[r * T::kCStride + c];
        }
      }
      __syncwarp();  // the slice is free for the next rows
    }
  }
}

// A pair's producer thread (each CTA's): for each unit of its cluster (its
// pair's tile), each K tile: wait until its own stage is empty (every
// pair's leader's commit arrives on every CTA's `empty`), announce the
// stage's bytes on its own `loaded`, and load its 128 lhs rows (m0 + 128 v
// ..; with kClusterN > 1 pair 0's CTA v multicasts them to CTA v of every
// pair) and its 64 weight rows as raw bytes (n0 + 64 v ..; silu_mul: the
// leader the gate rows from n0, the peer the up rows from n / 2 + n0),
// which its own transform widens.
template <class T, Rows L>
__device__ __forceinline__ void produce_pair(const Smem<T>& s, const CUtensorMap* map_a,
                                             const CUtensorMap* map_b, int units, int items,
                                             int tiles_n, int m, int n, int k, const Items& g) {
  const int v = sm100::cta_of_pair<T>();
  int it = 0;  // K tiles issued by this CTA so far: stage it % S, round it / S
  for (int unit = sm100::first_unit<T>(); unit < units; unit += sm100::unit_step<T>()) {
    const TileWork w = sm100::unit_work<T, L>(unit, items, tiles_n, m, g);
    const int ktiles = sm90::ktiles_of<L>(w, (k + kBK - 1) / kBK);
    const int a_row = w.m0 + kBM * v;
    const int b_row = kSilu<T> ? (v == 0 ? w.n0 : n / 2 + w.n0) : w.n0 + kCtaBRows<T> * v;
    for (int kt = 0; kt < ktiles; ++kt, ++it) {
      const int st = it % T::kStages;
      gg::mbarrier_wait(&s.empty[st], ((it / T::kStages) & 1) ^ 1);
      gg::mbarrier_arrive_expect_tx(&s.loaded[st], T::kAStage + T::kRawStage);
      if constexpr (sm100::kClusterN<T> == 1) {
        gg::tma_load_2d(s.a + st * T::kAStage, map_a, &s.loaded[st], kt * kBK, a_row);
      } else if (sm100::pair_index() == 0) {
        // Pair 0's CTA v: A's half v to CTA v of every pair, each landing on
        // the destination's own `loaded` (whose producer announced its bytes).
        gg::tma_load_2d_multicast(s.a + st * T::kAStage, map_a, &s.loaded[st], kt * kBK, a_row,
                                  sm100::a_multicast_mask<T>(static_cast<unsigned>(v)));
      }
      unsigned char* raw = s.raw + st * T::kRawStage;
      if constexpr (L != Rows::kDense) {
        gg::tma_load_3d(raw, map_b, &s.loaded[st], kt * kRawRow<T>, b_row, w.gl);
      } else {
        gg::tma_load_2d(raw, map_b, &s.loaded[st], kt * kRawRow<T>, b_row);
      }
    }
  }
}

// The block: barriers (a pair's `full` and acc_empty count on the leader's:
// both CTAs' transform and epilogue warpgroups), the TMEM allocation
// (cta_group::2 in a pair, after a cluster barrier), the role split; a
// pair's CTAs free their columns after a cluster barrier and leave
// together (the leader's MMAs read the peer's shared memory and write its
// TMEM).
template <class T, Rows L>
__device__ __forceinline__ void run(unsigned char* smem, const CUtensorMap* map_a,
                                    const CUtensorMap* map_b, const Operands<T>& o, int m, int n,
                                    int k, int tiles, int items, int tiles_n, const Items& g) {
  static_assert(check_tile_mixed<T>(), "the weight-only tile's numbers follow from its shape");
  const Smem<T> s(smem);
  const int warp = threadIdx.x / 32;
  // The units the roles walk (gg_gemm_sm100.cuh's first_unit ..): the
  // tiles, on the pair its cluster's (256 rows x kClusterN n tiles).
  const int units = kPair<T> ? sm100::cluster_units<T>(items, tiles_n) : tiles;
  if (threadIdx.x == 0) {
    for (int st = 0; st < T::kStages; ++st) {
      gg::mbarrier_init(&s.loaded[st], 1);  // the producer's arrival + TMA bytes
      gg::mbarrier_init(&s.full[st], (kPair<T> ? 2 : 1) * 128);  // the transform warpgroup(s)
      gg::mbarrier_init(&s.empty[st], sm100::kClusterN<T>);  // each pair's leader's commit
    }
    for (int a = 0; a < 2; ++a) {
      gg::mbarrier_init(&s.acc_full[a], 1);
      gg::mbarrier_init(&s.acc_empty[a], (kPair<T> ? 2 : 1) * 128);
    }
    gg::fence_mbarrier_init();
  }
  if (warp == 1) {
    if constexpr (kPair<T>) {
      gg::tmem_alloc_pair(s.tmem_slot, T::kTmemCols);
      gg::tmem_relinquish_alloc_permit_pair();
    } else {
      gg::tmem_alloc(s.tmem_slot, T::kTmemCols);
      gg::tmem_relinquish_alloc_permit();
    }
  }
  gg::tcgen05_fence_before_thread_sync();
  if constexpr (kPair<T>) {
    gg::cluster_sync();  // both CTAs' barriers initialised, the columns allocated
  } else {
    __syncthreads();
  }
  gg::tcgen05_fence_after_thread_sync();
  const u32 tmem = *s.tmem_slot;
  if (warp == 0) {
    if (threadIdx.x == 0) {
      gg::prefetch_tensormap(map_a);
      gg::prefetch_tensormap(map_b);
      if constexpr (kPair<T>) {
        produce_pair<T, L>(s, map_a, map_b, units, items, tiles_n, m, n, k, g);
      } else {
        sm90::produce<RawTile<T>, L>(RawStages{s.a, s.raw, s.loaded, s.empty}, map_a, map_b, tiles,
                                     items, tiles_n, m, n, k, g);
      }
    }
  } else if (warp == 1) {
    if (threadIdx.x == 32 && sm100::cta_of_pair<T>() == 0) {
      sm100_mixed::issue<T, L>(s, tmem, units, items, tiles_n, m, k, g);
    }
  } else if (warp < kTransformWarp0) {
    if constexpr (T::kSwapAB) {
      sm100_mixed::epilogue_swapped<T, L>(s, tmem, tiles, items, tiles_n, m, n, k, g, o);
    } else if constexpr (kPromotion<T>) {
      sm100_mixed::epilogue_promoted<T, L>(s, tmem, units, items, tiles_n, m, n, k, g, o);
    } else {
      sm100::epilogue<T, L>(s, tmem, units, items, tiles_n, m, n, k, g, o,
                            sm100::Globals{nullptr, nullptr});
    }
  } else {
    sm100_mixed::transform<T, L>(s, units, items, tiles_n, m, k, g);
  }
  // Every accumulator has been read: the MMA warp frees the columns.
  gg::tcgen05_fence_before_thread_sync();
  if constexpr (kPair<T>) {
    gg::cluster_sync();
    if (warp == 1) {
      gg::tcgen05_fence_after_thread_sync();
      gg::tmem_dealloc_pair(tmem, T::kTmemCols);
    }
    gg::cluster_sync();
  } else {
    __syncthreads();
    if (warp == 1) {
      gg::tcgen05_fence_after_thread_sync();
      gg::tmem_dealloc(tmem, T::kTmemCols);
    }
  }
}

// Dense: out[m, n] = lhs[m, k] @ widen(rhs[n, k])^T, then the epilogue.
template <class T>
__device__ __forceinline__ void dense(unsigned char* smem, const CUtensorMap* map_a,
                                      const CUtensorMap* map_b,
                                      const typename T::lhs_scale_t* __restrict__ lhs_scale,
                                      const typename T::rhs_scale_t* __restrict__ rhs_scale,
                                      const typename T::bias_t* __restrict__ bias,
                                      typename T::out_t* __restrict__ out, int m, int n, int k) {
  const int tiles_m = (m + T::kBM - 1) / T::kBM, tiles_n = sm90::tiles_n_of<T>(n);
  sm100_mixed::run<T, Rows::kDense>(smem, map_a, map_b,
                                    Operands<T>{lhs_scale, rhs_scale, bias, out}, m, n, k,
                                    tiles_m * tiles_n, tiles_m, tiles_n, Items{});
}

template <class T>
__device__ __forceinline__ void dense(unsigned char* smem, const CUtensorMap* map_a,
                                      const CUtensorMap* map_b,
                                      const typename T::bias_t* __restrict__ bias,
                                      typename T::out_t* __restrict__ out, int m, int n, int k) {
  dense<T>(smem, map_a, map_b, nullptr, nullptr, bias, out, m, n, k);
}

// Grouped: the work items of gg::gemm::worklist times the n tiles; map_b is
// 3D over the raw weights [g, n, k bytes], the local group outermost.
template <class T>
__device__ __forceinline__ void grouped(unsigned char* smem, const CUtensorMap* map_a,
                                        const CUtensorMap* map_b,
                                        const typename T::lhs_scale_t* __restrict__ lhs_scale,
                                        const typename T::rhs_scale_t* __restrict__ rhs_scale,
                                        const typename T::bias_t* __restrict__ bias,
                                        typename T::out_t* __restrict__ out,
                                        const int* __restrict__ workspace, int m, int n, int k,
                                        int num_groups, int group_offset) {
  const int items = workspace[0], tiles_n = sm90::tiles_n_of<T>(n);
  const Items g{workspace + 2 + num_groups, workspace + 1, num_groups, group_offset, nullptr, 0};
  sm100_mixed::run<T, Rows::kGrouped>(smem, map_a, map_b,
                                      Operands<T>{lhs_scale, rhs_scale, bias, out}, m, n, k,
                                      items * tiles_n, items, tiles_n, g);
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

// Masked: lhs [g, cap, k] and out [g, cap, n_out] as g * cap rows.
template <class T>
__device__ __forceinline__ void masked(unsigned char* smem, const CUtensorMap* map_a,
                                       const CUtensorMap* map_b,
                                       const typename T::lhs_scale_t* __restrict__ lhs_scale,
                                       const typename T::rhs_scale_t* __restrict__ rhs_scale,
                                       const typename T::bias_t* __restrict__ bias,
                                       typename T::out_t* __restrict__ out,
                                       const int* __restrict__ masked_m, int n, int k, int g,
                                       int cap) {
  const int items = g * ((cap + T::kBM - 1) / T::kBM), tiles_n = sm90::tiles_n_of<T>(n);
  const Items it{nullptr, nullptr, g, 0, masked_m, cap};
  sm100_mixed::run<T, Rows::kMasked>(smem, map_a, map_b,
                                     Operands<T>{lhs_scale, rhs_scale, bias, out}, g * cap, n, k,
                                     items * tiles_n, items, tiles_n, it);
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

}  // namespace gg::gemm::sm100_mixed
