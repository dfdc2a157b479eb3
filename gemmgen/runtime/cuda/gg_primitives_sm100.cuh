// gg_primitives_sm100.cuh: the datacenter Blackwell (sm_100a / sm_103a)
// tensor-core primitives: tensor memory (TMEM) and tcgen05.mma. As in the
// other primitives headers, each primitive has its PTX under __CUDA_ARCH__
// (for the `a` / `f` targets of compute capability 10.x: GG_SM100_TCGEN05
// below; a static_assert in a kernel of another arch that calls it) and a CPU
// body under GG_EMU, whose model is gg_emu_sm100.h. It needs nothing of the
// Hopper header but mbarriers, which it takes as `u64*` (gg::mbarrier_init /
// _wait of gg_primitives_sm90.cuh, reused). docs/cuda-sm100.md describes the
// protocol; every bit position in the parts is the PTX ISA's (section names
// cited).
//
// - TMEM (PTX ISA "Tensor Memory"): per CTA, 128 lanes x 512 columns of
//   32-bit cells; an address is lane << 16 | column. tmem_alloc(slot, ncols)
//   (a warp-collective: the whole warp calls it) allocates ncols columns (a
//   power of two, 32..512) of all 128 lanes and writes the address of its
//   first column (lane 0) to the u32 `slot` in shared memory; it waits while
//   the columns are taken. tmem_dealloc(addr, ncols) frees them (same warp
//   shape), tmem_relinquish_alloc_permit() says the CTA allocates no more.
//   Every allocation must be freed before the CTA exits.
// - tcgen05_ld_32x32b<N>(r, addr) / tcgen05_st_32x32b<N>(addr, r) (PTX ISA
//   "tcgen05.ld", "tcgen05.st", shape 32x32b, .num xN, N = 1..128 a power of
//   two; warp-collective): thread i of the warp moves lane lane(addr) + i,
//   columns col(addr) .. + N - 1, to / from r[0..N-1]. Warp w of the CTA
//   reaches only lanes 32 * (w % 4) .. + 31 ("Access restrictions": a warp
//   of a warpgroup reaches the quarter of the lanes its position names), so
//   lane(addr) must be 32 * (w % 4). The registers of an ld are valid only
//   after tcgen05_wait_ld(); an st's cells only after tcgen05_wait_st().
// - tcgen05.mma.cta_group::1 (PTX ISA "tcgen05.mma"), issued by ONE thread:
//   tcgen05_mma_f16(d, adesc, bdesc, idesc, accumulate) with bf16 / f16 A and
//   B (K = 16), tcgen05_mma_f8f6f4(...) with e4m3 / e5m2 (K = 32), D in f32:
//   D[M x N] = A[M x K] * B[K x N] + (accumulate ? D : 0), A and B in shared
//   memory through matrix descriptors (umma::smem_desc), the shape, types
//   and majors in the instruction descriptor (umma::instr_desc). D's TMEM
//   cells ("Data path layout organization", layout D for M = 128: row m at
//   lane m, column n at column col(d) + n; layout F for M = 64: row m at
//   lane 32 * (m / 16) + m % 16, column col(d) + n; umma::d_lane).
//   Asynchronous: it completes through tcgen05_commit(bar), which makes the
//   mbarrier `bar` get one arrival when every tcgen05.mma the thread issued
//   before it has completed ("tcgen05.commit"). Readers wait on that phase
//   (gg::mbarrier_wait), then tcgen05_fence_after_thread_sync() before
//   tcgen05_ld; the shared memory the MMAs read may be overwritten only
//   after that phase too.
// - tcgen05_ld_16x256b<NUM>(r, addr): shape 16x256b (16 lanes, 8 columns
//   per .num; the mma.sync accumulator pattern), for M = 64 accumulators.
// - tcgen05_fence_before_thread_sync() / _after_thread_sync() (PTX ISA
//   "tcgen05.fence"): order tcgen05 operations around a thread
//   synchronisation (__syncthreads, an mbarrier).
// - Block scaling (PTX ISA "Block Scaling"): tcgen05_cp_32x128b_warpx4
//   copies a 128 x 4 scale atom from shared memory into 4 TMEM columns of
//   all 128 lanes; tcgen05_mma_mxf8f6f4_block_scaled / _mxf4 / _mxf4nvf4
//   multiply with the scales at two TMEM addresses, the bytes they take
//   named by the scale ids of umma::instr_desc_block_scaled. Both are
//   issued by the MMA thread and completed by tcgen05_commit.
//
// The parts, by instruction family: gg_primitives_sm100_desc.cuh (the
// descriptors and TMEM addresses, gg::umma), _tmem.cuh (allocation, fences,
// tcgen05.ld / st), _mma.cuh (cta_group::1 MMAs, tcgen05.cp, commit) and
// _pair.cuh (cta_group::2); this header defines GG_SM100_TCGEN05 and includes
// them.
#pragma once

// Defined where tcgen05 exists: a device pass for sm_100a / sm_103a (nvcc's
// __CUDA_ARCH_FEAT_SM100_ALL / _SM103_ALL) or their family targets
// sm_100f / sm_103f (__CUDA_ARCH_FAMILY_SPECIFIC__ 1000 / 1030).
#if defined(__CUDA_ARCH_FEAT_SM100_ALL) || defined(__CUDA_ARCH_FEAT_SM103_ALL) || \
    (defined(__CUDA_ARCH_SPECIFIC__) &&                                           \
     (__CUDA_ARCH_SPECIFIC__ == 1000 || __CUDA_ARCH_SPECIFIC__ == 1030)) ||       \
    (defined(__CUDA_ARCH_FAMILY_SPECIFIC__) &&                                    \
     (__CUDA_ARCH_FAMILY_SPECIFIC__ == 1000 || __CUDA_ARCH_FAMILY_SPECIFIC__ == 1030))
#define GG_SM100_TCGEN05 1
#endif

#include "gg_primitives_sm100_desc.cuh"
#include "gg_primitives_sm100_tmem.cuh"
#include "gg_primitives_sm100_mma.cuh"
#include "gg_primitives_sm100_pair.cuh"
