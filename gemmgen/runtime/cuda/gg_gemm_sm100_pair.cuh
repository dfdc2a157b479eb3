// gg_gemm_sm100_pair.cuh: the 2-CTA tile of the sm_100a GEMM (kPair;
// docs/cuda-sm100.md, "The 2-CTA tile"), CUTLASS's 2SM kernels' protocol on
// the cta_group::2 primitives. Included by gg_gemm_sm100.cuh, whose pieces
// (the stage layout, the MMAs and scale copies, the block-scaled producer,
// the MMA thread's `issue`, the `epilogue`, all walking units: first_unit,
// unit_step, unit_work) it shares; here the pair's own producer, the peer's
// relay and the block:
//   - a cluster of 2P x 1 x 1 blocks (P = kClusterN, the spec's
//     `cluster_n`, 1 by default) is P CTA pairs (ranks 2p and 2p + 1; rank
//     v = 0 of a pair its leader, 1 its peer); cluster c = blockIdx.x / 2P
//     of gridDim.x / 2P walks the units c, c + gridDim.x / 2P, ... in
//     raster order, a unit 256 rows of one item times P n tiles, pair p
//     taking n tile P ng + p of it (pair_work); past the last n tile a pair
//     still takes part in every barrier of the unit: its B loads are TMA's
//     zeros, its epilogue stores nothing;
//   - each CTA's producer loads its kBN / 2 rows of B and its 128 rows of A
//     (load_pair_stage: 2-CTA TMA loads; with P > 1 CTA v of pair 0 loads
//     A's half v once for CTA v of every pair, tma_load_2d_multicast_pair)
//     into its own stage; every load completes on the `full` barrier of its
//     destination's leader, whose arrival (the leader's producer) announces
//     both CTAs' bytes;
//   - block-scaled tiles (kBs: MXFP8, MXFP4, NVFP4, W4A8, DeepSeek's e8m0
//     in hardware) have the 1-CTA tile's producer warp in each CTA
//     (produce_scaled): CTA v gathers (or bulk-copies) the scale atoms of
//     its own 128 A rows and of ALL kBN B rows, since CTA v's MMA half reads
//     A's scales of its rows and B's of every row from its own TMEM
//     (W4A8: it also unpacks its half of B). The leader's `full` counts its
//     32 lanes and one arrival of the peer's relay (relay_pair), which waits
//     on the peer's own `full` (the peer's 32 lanes, after their
//     fence.proxy.async, and its bulk copies' bytes) and arrives remotely:
//     so one wait of the leader's MMA thread orders both CTAs' gathers and
//     copies before its tcgen05.cp.cta_group::2, which copies each CTA's
//     atoms into that CTA's TMEM;
//   - each leader's MMA thread (`issue`) issues 256 x kBN x (32 bytes of K)
//     tcgen05.mma.cta_group::2 on the stage (the same offsets in both CTAs)
//     into the accumulator (the same TMEM columns in both: CTA v's lane r is
//     row 128 v + r); its stage commits multicast to every CTA of the
//     cluster (a CTA's stage is read by its pair's MMAs and, with P > 1,
//     refilled by pair 0's A multicast, so `empty` takes P arrivals, one a
//     pair), its accumulator commits to both CTAs of its pair (`acc_full`;
//     `Commits`);
//   - each CTA's epilogue warpgroup (`epilogue`) reads its own TMEM (its
//     128 rows), then arrives on its leader's `acc_empty` (256 arrivals:
//     both warpgroups; `AccBack`);
//   - FP8 promoted in software (kPromoted): a unit per K tile, as the 1-CTA
//     tile's: the leader's MMA thread waits for both epilogues before each
//     K tile's MMAs and commits each K tile's accumulator to both CTAs,
//     whose epilogues add its sums times the K tile's scales into their
//     rows' registers;
//   - the weight-only tile's pair (gg_gemm_sm100_mixed.cuh) has its own
//     producer, transform and MMA loop but this epilogue;
//   - TMEM is allocated with cta_group::2 by warp 1 of both CTAs of a pair
//     and freed by both after a cluster barrier (every epilogue done), and
//     no CTA exits before the cluster barrier after the deallocation: the
//     leaders' MMAs read their peers' shared memory and write their TMEM,
//     pair 0's multicasts write every pair's shared memory.
#pragma once

#include "gg_gemm_sm100.cuh"

namespace gg::gemm::sm100 {

// Each CTA's producer thread (tiles without block scales): for each unit of
// its cluster, each K tile of its pair's tile: wait until its own stage is
// empty (every pair's leader commits to every CTA of the cluster), the
// leader announces both CTAs' bytes on its `full` barrier, then this CTA's
// loads (load_pair_stage), completing on the destination's leader's barrier.
template <class T, Rows L>
__device__ __forceinline__ void produce_pair(const Smem<T>& s, const CUtensorMap* map_a,
                                             const CUtensorMap* map_b, int units, int items,
                                             int tiles_n, int m, int n, int k, const Items& g) {
  const int v = static_cast<int>(pair_rank());
  int it = 0;
  for (int u = first_unit<T>(); u < units; u += unit_step<T>()) {
    const TileWork w = unit_work<T, L>(u, items, tiles_n, m, g);
    const int ktiles = sm90::ktiles_of<L>(w, (k + T::kBK - 1) / T::kBK);
    for (int kt = 0; kt < ktiles; ++kt, ++it) {
      const int st = it % T::kStages;
      gg::mbarrier_wait(&s.empty[st], ((it / T::kStages) & 1) ^ 1);
      if (v == 0) {
        gg::mbarrier_arrive_expect_tx(&s.full[st], 2 * (T::kAStage + T::kBStage));
      }
      load_pair_stage<T, L != Rows::kDense>(s.a + st * T::kAStage, s.b + st * T::kBStage, map_a,
                                            map_b, &s.full[st], kt, w, n, v);
    }
  }
}

// (issue 30) The peer's relay on block-scaled tiles (its warp 1's thread
// 32; the peer issues no MMA): for each K tile, wait on the peer's own
// `full[s]` (its producer warp's 32 arrivals, each after the lane's scale
// gather and fence.proxy.async, and its bulk copies' bytes), then arrive
// on the leader's `full[s]` (mbarrier.arrive.release.cluster): the leader's
// MMA thread, waiting there, is ordered after the peer's gathers and copies
// before it copies their atoms (tcgen05.cp.cta_group::2 reads the peer's
// shared memory).
template <class T, Rows L>
__device__ __forceinline__ void relay_pair(const Smem<T>& s, int units, int items, int tiles_n,
                                           int m, int k, const Items& g) {
  const u32 leader_full = gg::cluster_map_shared_addr(s.full, gg::cluster_ctarank() & ~1u);
  int it = 0;
  for (int u = first_unit<T>(); u < units; u += unit_step<T>()) {
    const TileWork w = unit_work<T, L>(u, items, tiles_n, m, g);
    const int ktiles = sm90::ktiles_of<L>(w, (k + T::kBK - 1) / T::kBK);
    for (int kt = 0; kt < ktiles; ++kt, ++it) {
      const int st = it % T::kStages;
      gg::mbarrier_wait(&s.full[st], (it / T::kStages) & 1);
      gg::mbarrier_arrive_cluster(leader_full + 8u * static_cast<u32>(st));
    }
  }
}

// The pair's block: barriers, the cta_group::2 TMEM allocation, the cluster
// barrier before any peer signals a barrier, the role split over the
// cluster's units (with P = 1 the pair's tiles), and the cluster barrier
// before exit.
template <class T, Rows L>
__device__ __forceinline__ void run_pair(unsigned char* smem, const CUtensorMap* map_a,
                                         const CUtensorMap* map_b, const Operands<T>& o, int m,
                                         int n, int k, int items, int tiles_n, const Items& g,
                                         const Globals& gs,
                                         const unsigned char* __restrict__ rhs_fp4) {
  const Smem<T> s(smem);
  const int warp = threadIdx.x / 32;
  const unsigned v = pair_rank();
  const int units = cluster_units<T>(items, tiles_n);  // the tiles with P = 1
  if (threadIdx.x == 0) {
    // `full`: the leader's producer arrival (block-scaled: its warp's 32
    // and the peer relay's); the peer's, block-scaled, its warp's 32 (the
    // relay waits on them), else unused.
    const unsigned full = kBs<T> ? 32 + (v == 0 ? 1 : 0) : 1;
    for (int st = 0; st < T::kStages; ++st) {
      gg::mbarrier_init(&s.full[st], full);
      gg::mbarrier_init(&s.empty[st], kClusterN<T>);  // each pair's leader's multicast commit
    }
    for (int a = 0; a < 2; ++a) {
      gg::mbarrier_init(&s.acc_full[a], 1);
      gg::mbarrier_init(&s.acc_empty[a], 2 * 128);  // the leader's: both epilogue warpgroups
    }
    gg::fence_mbarrier_init();
  }
  if (warp == 1) {
    gg::tmem_alloc_pair(s.tmem_slot, T::kTmemCols);
    gg::tmem_relinquish_alloc_permit_pair();
  }
  gg::tcgen05_fence_before_thread_sync();
  gg::cluster_sync();  // every CTA's barriers initialised, the columns allocated
  gg::tcgen05_fence_after_thread_sync();
  const u32 tmem = *s.tmem_slot;
  if (warp == 0) {
    if (threadIdx.x == 0) {
      gg::prefetch_tensormap(map_a);
      if (map_b != nullptr) {  // W4A8 reads rhs through a pointer
        gg::prefetch_tensormap(map_b);
      }
    }
    if constexpr (kBs<T>) {
      produce_scaled<T, L>(s, map_a, map_b, rhs_fp4, o, units, items, tiles_n, m, n, k, g);
    } else if (threadIdx.x == 0) {
      produce_pair<T, L>(s, map_a, map_b, units, items, tiles_n, m, n, k, g);
    }
  } else if (warp == 1) {
    if (threadIdx.x == 32 && v == 0) {
      issue<T, L>(s, tmem, units, items, tiles_n, m, k, g);
    } else if (threadIdx.x == 32 && kBs<T>) {
      relay_pair<T, L>(s, units, items, tiles_n, m, k, g);
    }
  } else {
    epilogue<T, L>(s, tmem, units, items, tiles_n, m, n, k, g, o, gs);
  }
  // Both CTAs' epilogues have read their accumulators before either CTA's
  // warp 1 takes part in the pair's deallocation.
  gg::tcgen05_fence_before_thread_sync();
  gg::cluster_sync();
  if (warp == 1) {
    gg::tcgen05_fence_after_thread_sync();
    gg::tmem_dealloc_pair(tmem, T::kTmemCols);
  }
  // No CTA leaves while a peer's MMAs may read its shared memory or write
  // its TMEM, or pair 0's multicasts may still land in it.
  gg::cluster_sync();
}

}  // namespace gg::gemm::sm100
