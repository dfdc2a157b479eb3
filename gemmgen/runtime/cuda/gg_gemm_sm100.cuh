// gg_gemm_sm100.cuh: the datacenter Blackwell (sm_100a) tile GEMM: TMA +
// tcgen05.mma with the accumulator in tensor memory, warp specialized,
// persistent; dense, grouped and masked.
//
// One body for the 16-bit and FP8 GEMMs on sm_100a, templated on a tile
// struct T: a Config (gg_gemm_config.cuh) plus the tile's numbers
// (check_tile_sm100 below). docs/cuda-sm100.md ("The sm_100a GEMM")
// describes the pipeline and the barrier protocol:
//   - 192 threads in three roles: warp 0 is the producer (one elected
//     thread issues the TMA loads, gg_gemm_sm90.cuh's `produce`), warp 1
//     allocates the tensor memory and one of its threads issues every
//     tcgen05.mma (128 x kBN x 16 for 16-bit types, x 32 for FP8, both
//     operands from shared memory through matrix descriptors), warps 2..5
//     are the epilogue warpgroup; warp w reads TMEM lanes 32 (w % 4) ..
//     32 (w % 4) + 31, which are rows of the tile (the M = 128
//     accumulator's row r is lane r, its column c column c);
//   - a kStages ring of (A, B) stages, each with a `full` mbarrier (1
//     arrival + the TMA bytes) and an `empty` one, which the MMA thread's
//     tcgen05.commit arrives on once the MMAs that read the stage are done;
//   - two accumulators in TMEM (columns [0, kBN) and [kBN, 2 kBN)), each
//     with an `acc_full` barrier (the MMA thread's commit after the last
//     MMA into it) and an `acc_empty` one (128 epilogue arrivals once its
//     columns are read), so the epilogue of one unit overlaps the MMAs of
//     the next. A unit is a whole output tile, or, for FP8 with DeepSeek
//     block scales (the FP32 promotion), one K tile: its partial sums go
//     through registers, times the K tile's scales, into an f32 accumulator
//     the epilogue warps hold;
//   - a persistent grid walking the tiles in gg_gemm_sm90.cuh's rasterized
//     order (kGroupM m tiles at a time, for L2 reuse);
//   - edges: TMA zero-fills boxes past m, n and k; the epilogue masks;
//   - epilogue: 32 columns at a time, tcgen05.ld 32x32b.x32 gives each
//     thread 32 consecutive columns of its row; gg_epilogue's element
//     function (scales, alpha, bias, activation; silu_mul pairs gate column
//     c with up column c + kBN / 2, both in the thread's row) in registers,
//     into the warp's shared-memory slice (32 rows x 32 columns, 16-byte
//     pieces, no bank conflicts: store_chunk), then out 16 bytes a lane
//     (coalesced), rows outside [row_lo, row_hi) and columns past n skipped.
// A K tile is one 128-byte swizzle row (kBK = 64 16-bit or 128 FP8
// elements); A and B are loaded exactly as gg_gemm_sm90.cuh loads them (A
// K-major; B K-major for rhs [n, k], MN-major boxes of 64 columns for
// 16-bit rhs [k, n]), so the two bodies share the producer.
// Block-scaled tiles (kBlockScaledMma: MXFP8, MXFP4, NVFP4, W4A8; "The
// block-scaled path" in docs/cuda-sm100.md) have a producer of their own,
// the whole warp 0 (produce_scaled): it gathers each K tile's 128 x 4 scale
// atoms (and W4A8's unpacked weights) into the stage beside the TMA loads,
// or brings whole atoms of layout=atom128x4 scales by bulk copy; the MMA
// thread copies the atoms into TMEM after the accumulators (tcgen05.cp) and
// issues the block-scaled tcgen05.mma. DeepSeek's e8m0 block scales take
// the same path when promoted in hardware (runs_deepseek_mma,
// gather_ds_atoms), MXFP8 also with rhs [k, n] (B MN-major, load_b_kn).
// The 2-CTA tile (kPair: 256-row tiles over a CTA pair, cta_group::2) is
// gg_gemm_sm100_pair.cuh's block on these pieces, the block-scaled kinds
// included (each CTA's producer warp gathers its A rows' and every B row's
// scale atoms; mma_stage and copy_scales issue the cta_group::2 forms).
#pragma once

#include "gg_gemm_sm90.cuh"
#include "gg_primitives_sm100.cuh"
#include "gg_scales.cuh"

namespace gg::gemm::sm100 {

using sm90::Items;
using sm90::k16Bit;
using sm90::kFp8;
using sm90::kSilu;
using sm90::Operands;
using sm90::raster;
using sm90::Rows;
using sm90::TileWork;

// The block's fixed shape: a producer warp, an MMA warp and an epilogue
// warpgroup; 128-row tiles (the cta_group::1 M = 128 MMA: row r in TMEM lane
// r); K tiles of one 128-byte swizzle row; the epilogue's 32-column chunks.
constexpr int kThreads = 192;
constexpr int kBM = 128;
constexpr int kRowBytes = 128;
constexpr int kEpilogueWarp0 = 2;
constexpr int kChunk = 32;

template <class C>
constexpr int kBKFor = kRowBytes * 8 / kMmaBits<C>;

// Whether this body computes a Config: gg_gemm_sm90.cuh's runs_one_type,
// B in either layout (tcgen05 transposes FP8 too, unlike wgmma).
template <class C>
__host__ __device__ constexpr bool runs() {
  return sm90::runs_one_type<C>();
}

// Whether this body runs a Config on the block-scaled tcgen05.mma (the
// hardware applying the scales; ir.Kernel.tcgen05_block_scaled): what the
// block-scaled mma.sync body runs (kMxSupported) with rhs [n, k]: MXFP8
// (e4m3 or e5m2 on both sides, e8m0 scales of 32), MXFP4 (packed fp4, e8m0
// of 32), NVFP4 (packed fp4, ue4m3 of 16) and W4A8 (e4m3 x packed fp4,
// MXFP8's scales: kind::mxf8f6f4 with B in its padded fp4 layout).
template <class C>
__host__ __device__ constexpr bool runs_block_scaled() {
  // (issue 30) MXFP8 also with rhs [k, n]: B MN-major (8-bit, so N % 16).
  return kMxSupported<C> && (C::kRhsNK || (kMmaBits<C> == 8 && !kW4A8<C>)) &&
         (kW4A8<C> || ((kFp8<typename C::mma_t> || kMmaBits<C> == 4) &&
                       kSame<typename C::rhs_t, typename C::mma_t>));
}

// (issue 30) Whether this body runs a Config's DeepSeek block scales on the
// block-scaled tcgen05.mma (`promotion hardware | auto`; ir.Kernel.
// hardware_promotion_obstacle states the same in Python): FP8 of one type on
// both sides, rhs either layout, lhs per_token_group and rhs block scales, both
// e8m0 (kind::mxf8f6f4 reads ue8m0 scale bytes), K blocks of whole K tiles;
// each scale is repeated over its 32-wide K blocks (scale_vec::1X) and, for
// rhs, over the block's n rows (docs/cuda-sm100.md, "DeepSeek's scales in
// hardware").
template <class C>
__host__ __device__ constexpr bool runs_deepseek_mma() {
  return runs<C>() && !kMxSupported<C> && kFp8<typename C::mma_t> &&
         C::kLhsScale == ScaleMode::kPerTokenGroup && C::kRhsScale == ScaleMode::kBlock &&
         C::kLhsScaleFormat == Format::kE8M0 && C::kRhsScaleFormat == Format::kE8M0 &&
         !C::kFoldScales && divides(kRowBytes, C::kLhsScaleBlockK) &&
         divides(kRowBytes, C::kRhsScaleBlockK);
}

// Columns of one MN-major B box (rhs [k, n]): a 128-byte row, 64 16-bit or
// 128 FP8 columns.
template <class C>
constexpr int kBoxCols = kRowBytes / static_cast<int>(sizeof(typename C::mma_t));

// Whether the generator routes a Config to this body on sm_100a (`mma auto
// | tcgen05`; ir.Kernel.tcgen05_obstacle states the same in Python): what
// `runs` computes, with block scales whose K blocks are whole K tiles and
// whose N blocks hold a 64-column tile.
template <class C>
__host__ __device__ constexpr bool qualifies() {
  if constexpr (runs_block_scaled<C>()) {
    return C::kActivation != Activation::kSwigluClamped;  // not on the block-scaled MMAs yet
  } else if constexpr (sm90::runs_mixed<C>()) {
    // The weight-only tile (gg_gemm_sm100_mixed.cuh: per-K-block scales
    // in whole 64-element K tiles).
    return !kPromotion<C> || C::kScaleBlockK % 64 == 0;
  } else if constexpr (!runs<C>()) {
    return false;
  } else if constexpr (kPromotion<C>) {
    return sm90::promotion_fits<C, kBKFor<C>>();
  } else {
    return true;
  }
}

// A tile on the block-scaled tcgen05.mma (its struct sets kBlockScaledMma).
template <class T>
constexpr bool kBs = kBlockScaledMma<T>;

// A unit is one K tile (the FP32 promotion of block-scaled FP8) or a tile.
template <class C>
constexpr bool kPromoted = kPromotion<C> && !kBs<C>;

// (issue 30) The 2-CTA tile (docs/cuda-sm100.md, "The 2-CTA tile"): a tile
// struct with kCtaPair = true is computed by a 2-CTA cluster (a CTA pair)
// with tcgen05.mma.cta_group::2: kBM = 256 rows of A and D, CTA v of the
// pair holding rows [128 v, 128 v + 128) of them and B's rows [kBN / 2 v,
// kBN / 2 (v + 1)) (silu_mul: CTA 0 the gate half, CTA 1 the up half); the
// others have no such member.
template <class T>
__host__ __device__ constexpr auto cta_pair_member(int) -> decltype(T::kCtaPair) {
  return T::kCtaPair;
}
template <class T>
__host__ __device__ constexpr bool cta_pair_member(long) {
  return false;
}
template <class T>
constexpr bool kPair = cta_pair_member<T>(0);
// (issue 30) TMA multicast across CTA pairs (docs/cuda-sm100.md, "The 2-CTA
// tile", the cluster): a pair tile struct with kClusterN = P > 1 is computed
// by clusters of 2P CTAs, P pairs along N sharing the same 256 rows of A
// (the spec's `cluster_n=P`); the others have no such member (P = 1).
template <class T>
__host__ __device__ constexpr auto cluster_n_member(int) -> decltype(T::kClusterN) {
  return T::kClusterN;
}
template <class T>
__host__ __device__ constexpr int cluster_n_member(long) {
  return 1;
}
template <class T>
constexpr int kClusterN = cluster_n_member<T>(0);
template <class T>
constexpr int kClusterCtas = 2 * kClusterN<T>;
// A CTA's rows of the tile and of B.
template <class T>
constexpr int kCtaRows = kPair<T> ? T::kBM / 2 : T::kBM;
template <class T>
constexpr int kCtaBRows = kPair<T> ? T::kBN / 2 : T::kBN;
// The pair's (leader, peer) rank and the multicast mask of both. A template,
// as the primitives are: a non-template caller of gg::cluster_ctarank would
// instantiate its "needs sm_90" assertion in every arch's compile.
template <int kNever = 0>
__device__ __forceinline__ unsigned pair_rank() {
  return gg::cluster_ctarank<kNever>() & 1u;
}
constexpr unsigned short kPairMask = 3;
// This CTA's place v in its pair (0 on the 1-CTA tile).
template <class T>
__device__ __forceinline__ int cta_of_pair() {
  if constexpr (kPair<T>) {
    return static_cast<int>(pair_rank());
  } else {
    return 0;
  }
}

// The block-scaled tile's scales (docs/cuda-sm100.md, "The block-scaled
// path"): per K tile, kSfAtomsK 128 x 4 atoms (512 bytes, 4 K blocks of 128
// rows each) of A's 128 rows, and as many of each 128 rows of B
// (kSfAtomsB of them); in shared memory one kSfStage per stage (A's atoms,
// then B's: K atom a, B rows 128 b.. at atom kSfAtomsK + a kSfAtomsB + b),
// in TMEM kSfCols columns after the two accumulators (A's atom a at 4 a, B's
// at 4 kSfAtomsK + 4 (a kSfAtomsB + b): an MMA's B rows 128.. are the 4
// columns after its rows 0..127).
template <class T>
constexpr bool kDsMma = kBs<T> && !kMxSupported<T>;  // DeepSeek's scales in hardware
template <class T>
constexpr int kSfBlockK = kDsMma<T> ? 32 : T::kLhsScaleBlockK;  // K per scale byte
template <class T>
constexpr int kSfAtomsK = kBs<T> ? T::kBK / (4 * kSfBlockK<T>) : 0;
template <class T>
constexpr int kSfAtomsB = (T::kBN + kBM - 1) / kBM;
template <class T>
constexpr int kSfStage = 512 * kSfAtomsK<T> * (1 + kSfAtomsB<T>);
template <class T>
constexpr int kSfCols = 4 * kSfAtomsK<T> * (1 + kSfAtomsB<T>);

// The TMEM columns of a tile's two accumulators: a power of two of at least
// 2 kBN and 32 (tcgen05.alloc's granule).
template <int kCols>
constexpr int kPow2Cols = kCols <= 32 ? 32 : 2 * kPow2Cols<(kCols + 1) / 2>;

// Whether a tile's numbers (computed by the plan, backends/cuda/gemm/
// tcgen05.py) follow from its shape: B's N is an M = 128 MMA's N (a
// multiple of 16, at most 256; of 64 for the MN-major boxes; the output a
// whole number of 32-column chunks), a promoted tile holds its kBN f32 per
// thread in registers (kBN <= 128), the two accumulators fit TMEM, each
// epilogue warp's slice holds 32 rows of a chunk, and everything fits
// after the 1024-byte alignment.
template <class T>
__host__ __device__ constexpr bool check_tile_sm100() {
  constexpr int kOut = static_cast<int>(sizeof(typename T::out_t));
  if (!check_config<T>() ||
      !(kBs<T> ? runs_block_scaled<T>() || runs_deepseek_mma<T>() : runs<T>()) ||
      T::kBM != (kPair<T> ? 2 * kBM : kBM) || T::kBK != kBKFor<T> || T::kThreads != kThreads ||
      T::kStages < 2 || T::kGroupM < 1) {
    return false;
  }
  if (T::kBN % 16 != 0 || T::kBN < 32 || T::kBN > 256 ||
      (!T::kRhsNK && T::kBN % kBoxCols<T> != 0) ||
      T::kBNOut != (kPaired<T> ? T::kBN / 2 : T::kBN) || T::kBNOut % kChunk != 0 ||
      (kPaired<T> && !T::kRhsNK && T::kBNOut % kBoxCols<T> != 0)) {
    return false;
  }
  // The pair: each CTA's half of B a whole number of 8-row groups (of
  // MN-major boxes). Promoted units are the 1-CTA tile's (each CTA's
  // epilogue holds its 128 rows' kBN sums). Block-scaled pairs stage every
  // B row's scale atoms in both CTAs (kSfStage, kSfCols as the 1-CTA tile's).
  if (kPair<T> && (T::kBN % 32 != 0 || (!T::kRhsNK && (T::kBN / 2) % kBoxCols<T> != 0))) {
    return false;
  }
  // The cluster: 1 to 4 pairs (at most 8 CTAs, the portable cluster size),
  // more than one only on the pair (ir.Kernel.tcgen05_multicast_obstacle;
  // the weight-only tile refuses it in check_tile_mixed).
  if (kClusterN<T> < 1 || kClusterCtas<T> > 8 || (kClusterN<T> > 1 && !kPair<T>)) {
    return false;
  }
  if (kPromoted<T> && (T::kBN > 128 || !divides(T::kBK, T::kScaleBlockK) ||
                       (T::kRhsScale == ScaleMode::kBlock &&
                        !divides(T::kBNOut, T::kRhsScaleBlockN)))) {
    return false;
  }
  if (T::kTmemCols != kPow2Cols<2 * T::kBN + kSfCols<T>> || T::kTmemCols > 512) {
    return false;
  }
  if (T::kAStage != kBM * kRowBytes || T::kBStage != kCtaBRows<T> * kRowBytes ||
      T::kCStride != kChunk + 16 / kOut || T::kCWarpBytes != 32 * T::kCStride * kOut) {
    return false;
  }
  return T::kSmemBytes == 1024 + T::kStages * (T::kAStage + T::kBStage + kSfStage<T>) +
                              4 * T::kCWarpBytes +
                              (2 * T::kStages + 4) * 8 + 16;
}

// The shared-memory carve-up: the 1024-aligned base, the A stages, the B
// stages, the scale stages (block-scaled tiles), the 4 epilogue warps' slices, the stage barriers, the two
// accumulators' barriers and the slot tcgen05.alloc writes the TMEM address
// to.
template <class T>
struct Smem {
  unsigned char* a;
  unsigned char* b;
  unsigned char* sf;
  unsigned char* c;
  u64* full;
  u64* empty;
  u64* acc_full;
  u64* acc_empty;
  u32* tmem_slot;
  __device__ __forceinline__ explicit Smem(unsigned char* raw) {
    // An offset from raw (not an integer cast back), so that the compiler
    // still knows the pointers are shared memory.
    a = raw + ((1024 - (static_cast<unsigned>(reinterpret_cast<unsigned long long>(raw)) & 1023u)) & 1023);
    b = a + T::kStages * T::kAStage;
    sf = b + T::kStages * T::kBStage;
    c = sf + T::kStages * kSfStage<T>;
    full = reinterpret_cast<u64*>(c + 4 * T::kCWarpBytes);
    empty = full + T::kStages;
    acc_full = empty + T::kStages;
    acc_empty = acc_full + 2;
    tmem_slot = reinterpret_cast<u32*>(acc_empty + 2);
  }
};

// The tcgen05 operand type of a tensor-core element type.
template <class M>
constexpr gg::umma::Type kUmmaType =
    kSame<M, __nv_bfloat16>  ? gg::umma::Type::bf16
    : kSame<M, __half>       ? gg::umma::Type::f16
    : kSame<M, __nv_fp8_e4m3> ? gg::umma::Type::e4m3
                              : gg::umma::Type::e5m2;

// The instruction descriptor of the tile's MMA: f32 accumulator, A and B of
// the tile's type, A K-major, B K-major ([n, k]) or MN-major ([k, n]),
// M = kBM (128; the pair's 256), N = kBN.
template <class T>
constexpr u32 kIdesc =
    gg::umma::instr_desc(kUmmaType<typename T::mma_t>, kUmmaType<typename T::mma_t>, T::kBM, T::kBN,
                         gg::umma::Major::K, T::kRhsNK ? gg::umma::Major::K : gg::umma::Major::MN);

// The block-scaled MMA of a tile: its kind and operand types (MXFP8:
// kind::mxf8f6f4, e4m3 / e5m2; MXFP4: kind::mxf4, NVFP4: kind::mxf4nvf4,
// e2m1, whose type code there is 1, not kind::mxf8f6f4's 5), and the
// instruction descriptor of its MMA kb (0..3) of a K tile: the scale ids of
// the MMA's first scale byte in its atom (1X: kb; 2X: 0, 2, 0, 2; 4X: 0).
template <class M>
constexpr gg::umma::BsType kBsType = kSame<M, __nv_fp8_e4m3>   ? gg::umma::BsType::e4m3
                                     : kSame<M, __nv_fp8_e5m2> ? gg::umma::BsType::e5m2
                                                               : gg::umma::BsType::e2m1;
template <class T>
constexpr gg::umma::BsKind kBsKind = kMmaBits<T> == 8 ? gg::umma::BsKind::mxf8f6f4
                                     : T::kLhsScaleFormat == Format::kUE4M3
                                         ? gg::umma::BsKind::mxf4nvf4
                                         : gg::umma::BsKind::mxf4;
// Scale blocks (of 32 or 16 elements) one MMA reads per row: its scale_vec.
template <class T>
constexpr int kBsVec = gg::umma::scale_vec(kBsKind<T>);
// B's type: the tile's, or e2m1 for W4A8 (code 5 of kind::mxf8f6f4).
template <class T>
constexpr gg::umma::BsType kBsTypeB =
    kW4A8<T> ? gg::umma::BsType::e2m1 : kBsType<typename T::mma_t>;
template <class T>
__device__ __forceinline__ constexpr u32 bs_idesc(int kb) {
  const unsigned id = static_cast<unsigned>((kb * kBsVec<T>) % 4);
  return gg::umma::instr_desc_block_scaled(
      kBsKind<T>, kBsType<typename T::mma_t>, kBsTypeB<T>,
      T::kLhsScaleFormat == Format::kUE4M3 ? gg::umma::ScaleFormat::ue4m3
                                           : gg::umma::ScaleFormat::ue8m0,
      T::kBM, T::kBN, id, id, gg::umma::Major::K,
      T::kRhsNK ? gg::umma::Major::K : gg::umma::Major::MN);
}

// The block-scaled tile's scales of stage `st` into TMEM (the columns after
// the two accumulators, kSfCols of them): one tcgen05.cp.32x128b.warpx4 per
// 128 x 4 atom, from the stage's atoms (32 rows of 16 bytes: a K-major
// operand without swizzle, SBO 128). Issued by the MMA thread before the
// stage's MMAs, which read them in order; the stage's commit releases the
// atoms with the operands. The pair's leader copies with cta_group::2: each
// CTA's atoms at the descriptor's offset into its own TMEM (CTA v's MMA half
// reads its A rows' scales and every B row's there).
template <class T>
__device__ __forceinline__ void copy_scales(const Smem<T>& s, int st, u32 tmem) {
  const unsigned char* sf = s.sf + st * kSfStage<T>;
  GG_UNROLL
  for (int a = 0; a < kSfAtomsK<T> * (1 + kSfAtomsB<T>); ++a) {
    const u64 desc = gg::make_umma_desc(sf + 512 * a, 16, 128, gg::umma::Swizzle::none);
    if constexpr (kPair<T>) {
      gg::tcgen05_cp_32x128b_warpx4_pair(tmem + 2 * T::kBN + 4 * a, desc);
    } else {
      gg::tcgen05_cp_32x128b_warpx4(tmem + 2 * T::kBN + 4 * a, desc);
    }
  }
}

// The MMA thread's MMAs on stage `st` into the accumulator at TMEM address
// `d`: 4 instructions of 32 bytes of K each. kb = 0 overwrites d unless
// `accumulate` (the tile's first K tile, or a promoted unit, starts fresh).
// Block-scaled tiles: the scales of the stage first (copy_scales), then
// each MMA names the atom of its K blocks (A's at column 2 kBN + 4 atom,
// B's at 2 kBN + 4 kSfAtomsK + 4 kSfAtomsB atom) and their ids. The pair's
// leader issues the cta_group::2 forms (M = 256: both CTAs' halves at the
// same offsets).
template <class T>
__device__ __forceinline__ void mma_stage(const Smem<T>& s, int st, u32 d, bool accumulate,
                                          u32 tmem) {
  const unsigned char* sa = s.a + st * T::kAStage;
  const unsigned char* sb = s.b + st * T::kBStage;
  if constexpr (kBs<T>) {
    copy_scales<T>(s, st, tmem);
  }
  GG_UNROLL
  for (int kb = 0; kb < kRowBytes / 32; ++kb) {
    // A, K-major, 128B swizzle: rows of 128 bytes, 8-row groups 1024 apart;
    // k block kb starts 32 bytes into the (swizzled) row.
    const u64 da = gg::make_umma_desc(sa + kb * 32, 16, 1024, gg::umma::Swizzle::b128);
    u64 db;
    if constexpr (T::kRhsNK) {
      db = gg::make_umma_desc(sb + kb * 32, 16, 1024, gg::umma::Swizzle::b128);
    } else {
      // B, MN-major, 128B swizzle: k rows of 128 bytes (kBoxCols columns),
      // 8-row groups 1024 apart (SBO), boxes kRowBytes * kBK apart (LBO); k
      // block kb starts one MMA's K (16 or 32 rows) further.
      constexpr int kMmaRows = 32 / static_cast<int>(sizeof(typename T::mma_t));
      db = gg::make_umma_desc(sb + kb * kMmaRows * kRowBytes, kRowBytes * T::kBK, 1024,
                              gg::umma::Swizzle::b128);
    }
    if constexpr (kBs<T>) {
      const int atom = kb * kBsVec<T> / 4;
      const u32 sfa = tmem + 2 * T::kBN + 4 * atom;
      const u32 sfb = tmem + 2 * T::kBN + 4 * kSfAtomsK<T> + 4 * kSfAtomsB<T> * atom;
      const u32 id = bs_idesc<T>(kb);
      const bool acc = accumulate || kb > 0;
      if constexpr (kBsKind<T> == gg::umma::BsKind::mxf8f6f4 && kPair<T>) {
        gg::tcgen05_mma_mxf8f6f4_block_scaled_pair(d, da, db, id, sfa, sfb, acc);
      } else if constexpr (kBsKind<T> == gg::umma::BsKind::mxf8f6f4) {
        gg::tcgen05_mma_mxf8f6f4_block_scaled(d, da, db, id, sfa, sfb, acc);
      } else if constexpr (kBsKind<T> == gg::umma::BsKind::mxf4 && kPair<T>) {
        gg::tcgen05_mma_mxf4_pair(d, da, db, id, sfa, sfb, acc);
      } else if constexpr (kBsKind<T> == gg::umma::BsKind::mxf4) {
        gg::tcgen05_mma_mxf4(d, da, db, id, sfa, sfb, acc);
      } else if constexpr (kPair<T>) {
        gg::tcgen05_mma_mxf4nvf4_pair(d, da, db, id, sfa, sfb, acc);
      } else {
        gg::tcgen05_mma_mxf4nvf4(d, da, db, id, sfa, sfb, acc);
      }
    } else if constexpr (k16Bit<typename T::mma_t> && kPair<T>) {
      gg::tcgen05_mma_f16_pair(d, da, db, kIdesc<T>, accumulate || kb > 0);
    } else if constexpr (k16Bit<typename T::mma_t>) {
      gg::tcgen05_mma_f16(d, da, db, kIdesc<T>, accumulate || kb > 0);
    } else if constexpr (kPair<T>) {
      gg::tcgen05_mma_f8f6f4_pair(d, da, db, kIdesc<T>, accumulate || kb > 0);
    } else {
      gg::tcgen05_mma_f8f6f4(d, da, db, kIdesc<T>, accumulate || kb > 0);
    }
  }
}

// One 128 x 4 atom of a K tile's scales into shared memory at `dst`, by the
// 32 lanes of the producer warp: lane l writes source row l (16 bytes: rows
// l, l + 32, l + 64, l + 96 of the atom, 4 K blocks from kb0 each), read
// from either global layout with gg::gemm::mx_scale_word (rows `row_of`
// says are outside, and K blocks past kblocks, read 1.0: the operands there
// are TMA's zeros, which a NaN scale would spoil).
template <ScaleLayout kLayout, unsigned char kOne, class RowOf>
__device__ __forceinline__ void gather_atom(unsigned char* dst,
                                            const unsigned char* __restrict__ src, int kb0,
                                            int kblocks, RowOf row_of) {
  const int lane = threadIdx.x % 32;
  u32 w[4];
  GG_UNROLL
  for (int q = 0; q < 4; ++q) {
    int row = 0;
    const bool inside = row_of(lane + 32 * q, row);
    w[q] = mx_scale_word<kLayout, kOne>(src, inside, row, kb0, kblocks);
  }
  *reinterpret_cast<uint4*>(dst + 16 * lane) = make_uint4(w[0], w[1], w[2], w[3]);
}

// W4A8's B tile of K tile kt into the stage at `sb`, by the producer warp's
// 32 lanes: kind::mxf8f6f4 reads an fp4 operand as 16 elements (8 packed
// bytes, element 2i in the low nibble, gemmgen's packing) then 8 bytes of
// padding per 16-byte chunk (PTX ISA, "Optional Decompression"), so a K
// tile row is 128 bytes, as for FP8, and the stage is the FP8 one: chunk c
// of tile row r at the 128-byte swizzle's (r / 8) 1024 + (r % 8) 128 +
// (c ^ r % 8) 16. `src` is rhs [n, k / 2] of the group; chunks past k and
// rows `row_of` says are outside are zeros (the padding too). The stage holds
// kCtaBRows rows: all of B's, or on the pair this CTA's half (row_of maps
// the stage's row to rhs).
template <class T, class RowOf>
__device__ __forceinline__ void gather_b_fp4(unsigned char* sb, const unsigned char* __restrict__ src,
                                             int kt, int k, RowOf row_of) {
  const int lane = threadIdx.x % 32;
  // Not unrolled: kBN / 4 iterations of 64-bit addresses would take the
  // registers the epilogue warps need (one kernel, one register budget).
#if defined(__CUDACC__)
#pragma unroll 1
#endif
  for (int idx = lane; idx < kCtaBRows<T> * 8; idx += 32) {
    const int tr = idx / 8, c = idx % 8;
    int row = 0;
    const bool inside = row_of(tr, row);
    const int k0 = kt * T::kBK + 16 * c;  // the chunk's first K element
    uint2 v = make_uint2(0u, 0u);
    if (inside && k0 < k) {  // k % 16 == 0: a chunk is all inside or all past k
      v = *reinterpret_cast<const uint2*>(src + (long long)row * (k / 2) + k0 / 2);
    }
    *reinterpret_cast<uint4*>(sb + (tr / 8) * 1024 + (tr % 8) * 128 + ((c ^ (tr % 8)) * 16)) =
        make_uint4(v.x, v.y, 0u, 0u);
  }
}

// (issue 30) DeepSeek's e8m0 scales of K tile kt into the stage's atoms at
// `sf` (A's, then B's per 128 rows: the layout gather_atom leaves), by the
// producer warp's 32 lanes: lane l writes source row l of each atom (rows l,
// l + 32, l + 64, l + 96). The MMA reads one scale byte per 32-wide K block
// (scale_vec::1X, ids 0..3), and a K tile lies in one scale block (kBK
// divides both blocks), so a row's word is its K tile's scale in all four
// bytes; B row j takes the scale of rhs block j / kRhsScaleBlockN (silu_mul:
// gate row n0 + r, up row n / 2 + n0 + r). Rows outside the matrix (and the
// tile's rows past kBN) read 1.0, 0x7F: the operands there are TMA's zeros.
template <class T>
__device__ __forceinline__ void gather_ds_atoms(unsigned char* sf, const Operands<T>& o,
                                                const TileWork& w, int kt, int m, int n, int k) {
  constexpr int kRunRows = T::kBN / (kSilu<T> ? 2 : 1);
  constexpr u32 kOnes = 0x7F7F7F7Fu, kRepeat = 0x01010101u;
  const int lane = threadIdx.x % 32;
  const int k0 = kt * T::kBK;
  const int kblocks_a = (k + T::kLhsScaleBlockK - 1) / T::kLhsScaleBlockK;
  const int kblocks_b = (k + T::kRhsScaleBlockK - 1) / T::kRhsScaleBlockK;
  const int nblocks = (n + T::kRhsScaleBlockN - 1) / T::kRhsScaleBlockN;
  const auto* sa = reinterpret_cast<const unsigned char*>(o.lhs_scale);
  const auto* sb = reinterpret_cast<const unsigned char*>(o.rhs_scale) +
                   (long long)w.gl * nblocks * kblocks_b + k0 / T::kRhsScaleBlockK;
  u32 word[4];
  GG_UNROLL
  for (int q = 0; q < 4; ++q) {
    const int row = w.m0 + lane + 32 * q;
    word[q] = row < m ? kRepeat * sa[scale_offset<T::kLhsScaleLayout>(
                                      row, k0 / T::kLhsScaleBlockK, kblocks_a)]
                      : kOnes;
  }
  *reinterpret_cast<uint4*>(sf + 16 * lane) = make_uint4(word[0], word[1], word[2], word[3]);
  GG_UNROLL
  for (int b = 0; b < kSfAtomsB<T>; ++b) {
    GG_UNROLL
    for (int q = 0; q < 4; ++q) {
      const int tr = kBM * b + lane + 32 * q;  // the tile's B row
      const int local = tr % kRunRows;         // silu_mul: gate or up column n0 + local
      const int row = (tr < kRunRows ? w.n0 : n / 2 + w.n0) + local;
      const bool inside = tr < T::kBN && (kSilu<T> ? w.n0 + local < n / 2 : row < n);
      word[q] = inside ? kRepeat * sb[(long long)(row / T::kRhsScaleBlockN) * kblocks_b] : kOnes;
    }
    *reinterpret_cast<uint4*>(sf + 512 * (1 + b) + 16 * lane) =
        make_uint4(word[0], word[1], word[2], word[3]);
  }
}

// (issue 30) The global address of a K tile's scale atom when one bulk copy
// can bring it (layout=atom128x4: the matrix's own 512-byte atom), else
// null (gathered): the atom's 128 rows from `row0` (a multiple of 128; not
// silu_mul's two B halves, which are not contiguous) and its 4 K blocks from
// kb0 all inside the matrix. The padding of the layout (rows past `rows`, K
// blocks past kblocks) may hold any byte (docs/semantics.md): a NaN byte
// would spoil the zero-filled operands, a ue4m3 byte with bit 7 set is not
// a scale, so an atom with any is gathered (1.0 there).
template <ScaleLayout kLayout>
__device__ __forceinline__ const unsigned char* atom_source(const unsigned char* src, int row0,
                                                            int rows, int kb0, int kblocks,
                                                            bool contiguous) {
  if constexpr (kLayout == ScaleLayout::kAtom128x4) {
    if (contiguous && row0 % kBM == 0 && row0 + kBM <= rows && kb0 + 4 <= kblocks) {
      return src + scale_offset<kLayout>(row0, kb0, kblocks);
    }
  }
  return nullptr;
}

// (issue 30) f(i, source) for each scale atom of K tile kt that comes by
// bulk copy (atom_source): i is its place in the stage (A's atom a at a,
// B's (a, b) at kSfAtomsK + a kSfAtomsB + b, as gather_atom's). The
// producer's lanes skip those in the gather; its lane 0 announces their
// bytes on the stage's `full` barrier and issues the copies.
template <class T, class F>
__device__ __forceinline__ void for_bulk_atoms(const unsigned char* lhs_sf,
                                               const unsigned char* rhs_sf, const TileWork& w,
                                               int m, int n, int kt, int kblocks, F f) {
  GG_UNROLL
  for (int a = 0; a < kSfAtomsK<T>; ++a) {
    const int kb0 = 4 * (kt * kSfAtomsK<T> + a);
    if (const unsigned char* p =
            atom_source<T::kLhsScaleLayout>(lhs_sf, w.m0, m, kb0, kblocks, true)) {
      f(a, p);
    }
    GG_UNROLL
    for (int b = 0; b < kSfAtomsB<T>; ++b) {
      if (const unsigned char* p = atom_source<T::kRhsScaleLayout>(
              rhs_sf, w.n0 + kBM * b, n, kb0, kblocks, !kSilu<T>)) {
        f(kSfAtomsK<T> + a * kSfAtomsB<T> + b, p);
      }
    }
  }
}

// (issue 30) MXFP8's B tile of K tile kt from rhs [k, n] (or [g, k, n]):
// MN-major boxes of one 128-byte row of columns x kBK rows, kRowBytes * kBK
// bytes apart, as gg_gemm_sm90.cuh's `produce` loads them (no silu_mul: its
// halves would need 256 columns).
template <class T, bool kGrouped>
__device__ __forceinline__ void load_b_kn(unsigned char* sb, const CUtensorMap* map_b, u64* bar,
                                          int kt, int n0, int gl) {
  GG_UNROLL
  for (int j = 0; j < T::kBN / kBoxCols<T>; ++j) {
    unsigned char* dst = sb + j * kRowBytes * T::kBK;
    if constexpr (kGrouped) {
      gg::tma_load_3d(dst, map_b, bar, n0 + kBoxCols<T> * j, kt * T::kBK, gl);
    } else {
      gg::tma_load_2d(dst, map_b, bar, n0 + kBoxCols<T> * j, kt * T::kBK);
    }
  }
}

// (issue 30) The K tile's first column in the operands' tensor maps:
// elements, or bytes for packed fp4 (its maps are uint8 over k / 2).
template <class T>
constexpr int kMapK = kMmaBits<T> == 4 ? kRowBytes : T::kBK;

// The pair's index in its cluster (kClusterN pairs along N sharing A by
// TMA multicast; docs/cuda-sm100.md, "The 2-CTA tile"), and the multicast
// masks: every CTA of the cluster, CTA v of every pair.
template <int kNever = 0>
__device__ __forceinline__ int pair_index() {
  return static_cast<int>(gg::cluster_ctarank<kNever>() / 2u);
}
__host__ __device__ constexpr unsigned short ctas_mask(int ctas) {
  return static_cast<unsigned short>((1u << ctas) - 1u);
}
template <class T>
constexpr unsigned short kClusterMask = ctas_mask(kClusterCtas<T>);
template <class T>
__host__ __device__ constexpr unsigned short a_multicast_mask(unsigned v) {
  return static_cast<unsigned short>(kClusterMask<T> & (v == 0 ? 0x5555u : 0xAAAAu));
}

// The units of a cluster (items times the groups of kClusterN n tiles) and
// pair p's tile of unit u: n tile kClusterN ng + p of the unit's item, past
// the last n tile when the n tiles do not fill the unit (its columns from
// n0 >= n_out: the idle pair's tile).
template <class T>
__device__ __forceinline__ int cluster_units(int items, int tiles_n) {
  return items * ((tiles_n + kClusterN<T> - 1) / kClusterN<T>);
}
template <class T, Rows L>
__device__ __forceinline__ TileWork pair_work(int u, int items, int tiles_n, int m, const Items& g,
                                              int p) {
  int item, ng;
  raster<T>(u, items, (tiles_n + kClusterN<T> - 1) / kClusterN<T>, item, ng);
  return sm90::work_of<T, L>(item, kClusterN<T> * ng + p, m, g);
}

// The units every role of a block walks, one iteration scheme for the
// 1-CTA tile and the pair (docs/cuda-sm100.md, "The 2-CTA tile"): its
// cluster's units (the block's own tiles on the 1-CTA tile, a cluster of
// one), c = first_unit, c + unit_step, ... up to cluster_units, and this
// block's tile of unit u (unit_work: its pair's n tile of the unit; on the
// 1-CTA tile tile u).
template <class T>
__device__ __forceinline__ int first_unit() {
  return static_cast<int>(blockIdx.x / (kPair<T> ? kClusterCtas<T> : 1));
}
template <class T>
__device__ __forceinline__ int unit_step() {
  return static_cast<int>(gridDim.x / (kPair<T> ? kClusterCtas<T> : 1));
}
template <class T, Rows L>
__device__ __forceinline__ TileWork unit_work(int u, int items, int tiles_n, int m,
                                              const Items& g) {
  if constexpr (kPair<T>) {
    return pair_work<T, L>(u, items, tiles_n, m, g, pair_index());
  } else {
    return pair_work<T, L>(u, items, tiles_n, m, g, 0);
  }
}

// (issue 30) The 2-CTA tile's loads of K tile kt into this CTA's stage (sa,
// sb): its 128 rows of A (m0 + 128 v ..) and, unless kLoadB is false (W4A8
// gathers its B), its kBN / 2 rows of B (K-major: n0 + kBN / 2 v ..;
// silu_mul: the gate half from n0 for v = 0, the up half from n / 2 + n0 for
// v = 1; MN-major: boxes of the same columns). 2-CTA TMA loads: each lands
// in this CTA and completes on the barrier at `bar`'s offset in the leader.
// With kClusterN > 1 pairs, A's half v is pair 0's CTA v's multicast to CTA
// v of every pair (each completing on its own leader's barrier).
template <class T, bool kGrouped, bool kLoadB = true>
__device__ __forceinline__ void load_pair_stage(unsigned char* sa, unsigned char* sb,
                                                const CUtensorMap* map_a, const CUtensorMap* map_b,
                                                u64* bar, int kt, const TileWork& w, int n, int v) {
  constexpr int kHalf = T::kBN / 2;
  const int b_row = kSilu<T>               ? (v == 0 ? w.n0 : n / 2 + w.n0)
                    : kInterleavedPairs<T> ? 2 * w.n0 + kHalf * v
                                           : w.n0 + kHalf * v;
  if constexpr (kClusterN<T> == 1) {
    gg::tma_load_2d_pair(sa, map_a, bar, kt * kMapK<T>, w.m0 + kBM * v);
  } else if (pair_index() == 0) {
    gg::tma_load_2d_multicast_pair(sa, map_a, bar, kt * kMapK<T>, w.m0 + kBM * v,
                                   a_multicast_mask<T>(static_cast<unsigned>(v)));
  }
  if constexpr (!kLoadB) {
    return;
  } else if constexpr (T::kRhsNK) {
    if constexpr (kGrouped) {
      gg::tma_load_3d_pair(sb, map_b, bar, kt * kMapK<T>, b_row, w.gl);
    } else {
      gg::tma_load_2d_pair(sb, map_b, bar, kt * kMapK<T>, b_row);
    }
  } else {
    GG_UNROLL
    for (int j = 0; j < kHalf / kBoxCols<T>; ++j) {
      unsigned char* dst = sb + j * kRowBytes * T::kBK;
      if constexpr (kGrouped) {
        gg::tma_load_3d_pair(dst, map_b, bar, b_row + kBoxCols<T> * j, kt * T::kBK, w.gl);
      } else {
        gg::tma_load_2d_pair(dst, map_b, bar, b_row + kBoxCols<T> * j, kt * T::kBK);
      }
    }
  }
}

// The producer warp of a block-scaled tile: for each K tile, all 32 lanes
// wait until the stage is empty and gather the K tile's scale atoms (A's
// rows of the tile, B's rows: the tile's columns) into the stage with
// ordinary loads and stores, then fence.proxy.async (the tcgen05.cp that
// reads them is in the async proxy) and arrive on the stage's `full`
// barrier (32 arrivals: each lane's arrival releases its own stores); lane
// 0's arrival announces the TMA bytes of A and B, whose loads it then
// issues (A K-major; B [n, k] in one run, or two for silu_mul's gate and
// up halves, as gg_gemm_sm90.cuh's `produce`).
// On the pair (issue 30; docs/cuda-sm100.md, "The 2-CTA tile") each CTA's
// warp does this for its pair's tiles with its own A rows (m0 + 128 v ..)
// and ALL kBN B rows' atoms (CTA v's MMA half reads the scales of every B
// row from its own TMEM), and its half of B (W4A8: gathered, the others
// 2-CTA TMA loads completing on the leader's `full`). The leader's lane 0
// announces both CTAs' TMA bytes and its own bulk copies on the leader's
// `full`, whose other arrivals are the leader's 32 lanes and the peer's
// relay (relay_pair); the peer's lanes arrive on the peer's own `full`,
// which its bulk copies complete, and the relay carries that phase to the
// leader's barrier before the leader's MMA thread copies the atoms.
template <class T, Rows L>
__device__ __forceinline__ void produce_scaled(const Smem<T>& s, const CUtensorMap* map_a,
                                               const CUtensorMap* map_b,
                                               const unsigned char* __restrict__ rhs_fp4,
                                               const Operands<T>& o, int units, int items,
                                               int tiles_n, int m, int n, int k, const Items& g) {
  constexpr bool kGrouped = L != Rows::kDense;
  constexpr unsigned char kOne = T::kLhsScaleFormat == Format::kUE4M3 ? 0x38 : 0x7F;
  constexpr int kBlocksPerTile = 4 * kSfAtomsK<T>;
  constexpr int kRuns = kSilu<T> ? 2 : 1;
  constexpr int kRunRows = T::kBN / kRuns;
  // The TMA bytes of one CTA's stage (W4A8's B is gathered).
  constexpr int kOperandTx = T::kAStage + (kW4A8<T> ? 0 : T::kBStage);
  const int lane = threadIdx.x % 32, v = cta_of_pair<T>();
  // This CTA's TMA bytes to announce: both CTAs' on the pair's leader (the
  // peer's loads complete on its barrier), none on the peer.
  const int operand_tx = kPair<T> ? (v == 0 ? 2 * kOperandTx : 0) : kOperandTx;
  const int kblocks = (k + T::kLhsScaleBlockK - 1) / T::kLhsScaleBlockK;
  int it = 0;  // K tiles issued by this block so far: stage it % S, round it / S
  for (int u = first_unit<T>(); u < units; u += unit_step<T>()) {
    const TileWork w = unit_work<T, L>(u, items, tiles_n, m, g);
    const int ktiles = sm90::ktiles_of<L>(w, (k + T::kBK - 1) / T::kBK);
    // wa: the tile as this CTA's A rows see it (m0 + 128 v on the pair).
    TileWork wa = w;
    wa.m0 += kBM * v;
    const int b0[2] = {w.n0, n / 2 + w.n0};
    const unsigned char* rhs_sf =
        o.rhs_scale + w.gl * scale_matrix_size<T::kRhsScaleLayout>(n, kblocks);
    // A row r of the tile is lhs row m0 + r (this CTA's); B row r is rhs row
    // b0[run] + r % kRunRows (the tile's rows past kBN, and rows past m or n,
    // are outside).
    const auto a_row = [&](int r, int& row) {
      row = wa.m0 + r;
      return row < m;
    };
    const auto b_row = [&](int tr, int& row) {
      if (tr >= T::kBN) {
        return false;
      }
      const int local = tr % kRunRows;                // silu_mul: gate or up column n0 + local
      row = (tr < kRunRows ? b0[0] : b0[1]) + local;  // a select, not a local array
      return kSilu<T> ? w.n0 + local < n / 2 : row < n;
    };
    for (int kt = 0; kt < ktiles; ++kt, ++it) {
      const int st = it % T::kStages;
      gg::mbarrier_wait(&s.empty[st], ((it / T::kStages) & 1) ^ 1);
      unsigned char* sf = s.sf + st * kSfStage<T>;
      if constexpr (kDsMma<T>) {
        gather_ds_atoms<T>(sf, o, wa, kt, m, n, k);
      } else {
        // Atoms that come by bulk copy (layout=atom128x4; lane 0 issues
        // them below) are not gathered.
        u32 bulk = 0;
        for_bulk_atoms<T>(o.lhs_scale, rhs_sf, wa, m, n, kt, kblocks,
                          [&](int i, const unsigned char*) { bulk |= 1u << i; });
        GG_UNROLL
        for (int a = 0; a < kSfAtomsK<T>; ++a) {
          const int kb0 = kt * kBlocksPerTile + 4 * a;
          if (!((bulk >> a) & 1u)) {
            gather_atom<T::kLhsScaleLayout, kOne>(sf + 512 * a, o.lhs_scale, kb0, kblocks, a_row);
          }
          GG_UNROLL
          for (int b = 0; b < kSfAtomsB<T>; ++b) {
            const int i = kSfAtomsK<T> + a * kSfAtomsB<T> + b;
            if (!((bulk >> i) & 1u)) {
              gather_atom<T::kRhsScaleLayout, kOne>(
                  sf + 512 * i, rhs_sf, kb0, kblocks,
                  [&](int r, int& row) { return b_row(kBM * b + r, row); });
            }
          }
        }
      }
      if constexpr (kW4A8<T>) {
        // This CTA's B rows: the tile's, or its half on the pair.
        gather_b_fp4<T>(s.b + st * T::kBStage, rhs_fp4 + (long long)w.gl * n * (k / 2), kt, k,
                        [&](int r, int& row) { return b_row(kCtaBRows<T> * v + r, row); });
      }
      gg::fence_proxy_async();
      if (lane == 0) {
        int tx = 0;  // the bulk-copied atoms' bytes
        if constexpr (!kDsMma<T>) {
          for_bulk_atoms<T>(o.lhs_scale, rhs_sf, wa, m, n, kt, kblocks,
                            [&](int, const unsigned char*) { tx += 512; });
        }
        gg::mbarrier_arrive_expect_tx(&s.full[st], operand_tx + tx);
        if constexpr (!kDsMma<T>) {
          for_bulk_atoms<T>(o.lhs_scale, rhs_sf, wa, m, n, kt, kblocks,
                            [&](int i, const unsigned char* src) {
                              gg::bulk_load(sf + 512 * i, src, 512, &s.full[st]);
                            });
        }
        unsigned char* sa = s.a + st * T::kAStage;
        unsigned char* sb = s.b + st * T::kBStage;
        if constexpr (kPair<T>) {
          load_pair_stage<T, kGrouped, !kW4A8<T>>(sa, sb, map_a, map_b, &s.full[st], kt, w, n, v);
        } else {
          gg::tma_load_2d(sa, map_a, &s.full[st], kt * kRowBytes, w.m0);  // bytes: fp4 packed
          if constexpr (!T::kRhsNK) {
            load_b_kn<T, kGrouped>(sb, map_b, &s.full[st], kt, w.n0, w.gl);
          }
          GG_UNROLL
          for (int r = 0; r < (kW4A8<T> || !T::kRhsNK ? 0 : kRuns); ++r) {
            unsigned char* dst = sb + r * kRunRows * kRowBytes;
            if constexpr (kGrouped) {
              gg::tma_load_3d(dst, map_b, &s.full[st], kt * kRowBytes, b0[r], w.gl);
            } else {
              gg::tma_load_2d(dst, map_b, &s.full[st], kt * kRowBytes, b0[r]);
            }
          }
        }
      } else {
        gg::mbarrier_arrive(&s.full[st]);
      }
    }
  }
}

// The MMA thread's commits (tcgen05.commit, after its MMAs): on the 1-CTA
// tile to its own barriers; on the pair the leader's, multicast (docs/
// cuda-sm100.md, "The 2-CTA tile"): a stage's release to every CTA of the
// cluster (a CTA's stage is read by its pair's MMAs and, with kClusterN >
// 1, refilled by pair 0's A multicast: `empty` takes one arrival a pair), an
// accumulator's to both CTAs of its pair.
template <class T>
struct Commits {
  unsigned short acc_mask = kPairMask;
  __device__ __forceinline__ Commits() {
    if constexpr (kPair<T>) {
      acc_mask = static_cast<unsigned short>(kPairMask << (2 * pair_index()));
    }
  }
  __device__ __forceinline__ void stage(u64* bar) const {
    if constexpr (kPair<T>) {
      gg::tcgen05_commit_pair_multicast(bar, kClusterMask<T>);
    } else {
      gg::tcgen05_commit(bar);
    }
  }
  __device__ __forceinline__ void acc(u64* bar) const {
    if constexpr (kPair<T>) {
      gg::tcgen05_commit_pair_multicast(bar, acc_mask);
    } else {
      gg::tcgen05_commit(bar);
    }
  }
};

// The MMA warp's elected thread (on the pair the leader's): for each unit,
// wait until its accumulator is free (the pair: both CTAs' epilogues, 256
// arrivals on the leader's acc_empty), issue the MMAs of its K tiles (the
// pair: mma_stage's cta_group::2 forms; block-scaled tiles copy their scale
// atoms first), each stage released by a commit once its MMAs are done, then
// commit the accumulator to the epilogue (promoted: every K tile is a unit
// of its own).
template <class T, Rows L>
__device__ __forceinline__ void issue(const Smem<T>& s, u32 tmem, int units, int items,
                                      int tiles_n, int m, int k, const Items& g) {
  const Commits<T> commit;
  int it = 0;  // K tiles consumed so far (as the producer counts)
  int a = 0;   // accumulators committed so far: a % 2, round a / 2
  for (int u = first_unit<T>(); u < units; u += unit_step<T>()) {
    const TileWork w = unit_work<T, L>(u, items, tiles_n, m, g);
    const int ktiles = sm90::ktiles_of<L>(w, (k + T::kBK - 1) / T::kBK);
    for (int kt = 0; kt < ktiles; ++kt, ++it) {
      const int acc = a % 2;
      if (kPromoted<T> || kt == 0) {
        gg::mbarrier_wait(&s.acc_empty[acc], ((a / 2) & 1) ^ 1);
        gg::tcgen05_fence_after_thread_sync();
      }
      const int st = it % T::kStages;
      gg::mbarrier_wait(&s.full[st], (it / T::kStages) & 1);
      gg::tcgen05_fence_after_thread_sync();
      sm100::mma_stage<T>(s, st, tmem + acc * T::kBN, !kPromoted<T> && kt > 0, tmem);
      commit.stage(&s.empty[st]);
      if (kPromoted<T> || kt == ktiles - 1) {
        commit.acc(&s.acc_full[acc]);
        ++a;
      }
    }
  }
}

}  // namespace gg::gemm::sm100

// The epilogue warps and the 1-CTA tile's block (run_cta).
#include "gg_gemm_sm100_epilogue.cuh"
// The 2-CTA tile's block (run_pair) and the body's entry points (run,
// dense, grouped, masked) on the pieces above.
#include "gg_gemm_sm100_entry.cuh"
