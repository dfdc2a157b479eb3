// gg_emu_sm100.h: the emulator's model of the datacenter Blackwell (sm_100a /
// sm_103a) machinery that gg_primitives_sm100.cuh gives kernels: tensor
// memory (TMEM) and tcgen05.mma. Included by gg_emu.h only; the model is
// compiled once per build mode in gg_emu_sm100_*.cc, a file per instruction
// family (_tmem, _mma, _pair, _pair_bs; _retire: retirement and the hooks;
// _decoders: the exports), which share gg_emu_sm100_desc.h and _state.h.
// docs/cuda-sm100.md has the full story.
//
// Model, per block (Sm100Block, hung off the BlockRunner beside HopperBlock,
// with the same hooks):
// - TMEM: 128 lanes x 512 columns of 32-bit cells, poisoned (0xFFFFFFFF, NaN)
//   at every allocation. tcgen05.alloc takes the lowest free run of ncols
//   columns aligned to ncols (a power of two, 32..512) and blocks the warp
//   while none is free (a deadlock report names TMEM when no one frees);
//   after tcgen05.relinquish_alloc_permit it is an error. dealloc must name
//   exactly one live allocation (a double free and a free of columns never
//   allocated are reported). An allocation live at the end of the block is a
//   leak. Every tcgen05.ld / st / mma cell must lie in a live allocation, and
//   warp w reaches only lanes 32 * (w % 4) .. + 31.
// - tcgen05.mma is computed when issued (D = A * B [+ D], exact products
//   summed in double, rounded once to f32) into the cells, which stay
//   *pending* until the mbarrier phase of the tcgen05.commit that covers the
//   MMA has completed and some thread's wait has observed it (the op
//   retires). A tcgen05.ld of a pending cell is reported; so is one of a
//   cell that an op retired into after the reading thread's last
//   tcgen05.fence::after_thread_sync. A thread's tcgen05.ld / st columns
//   since its last tcgen05.fence::before_thread_sync travel with its next
//   mbarrier arrival; a thread that observed that phase and then writes
//   them (mma, st, dealloc) is reported. Until it retires, the shared memory
//   the op read must keep the bytes it read (checked at retirement, and a
//   TMA load into it is reported when issued): the stage release rule.
//   Operands are read through the sm90 tier's async-proxy checks (a missing
//   fence.proxy.async, a TMA load not yet waited for, a swizzle mismatch
//   with the TMA load that filled them).
// - tcgen05.ld delivers signalling NaNs (0x7fa51d1d) and turns on the
//   floating-point "invalid" trap for the thread; tcgen05.wait::ld writes
//   the values. Arithmetic on a register before the wait stops the kernel
//   with a report; a register merely copied out shows up as NaN.
// - Block-scaled tcgen05.mma (kind::mxf8f6f4 / mxf4 / mxf4nvf4) reads its
//   scales from TMEM where tcgen05.cp.32x128b.warpx4 put them (an async op
//   like the MMA: ordered before its thread's later MMAs, its cells pending
//   and its shared memory protected until a commit's phase is waited on);
//   scale cells never written, or not the same in all 4 lane quarters, are
//   reported, as are descriptor fields the hardware rejects.
// - cta_group::2 (alloc, dealloc, relinquish, kind::f16 / f8f6f4 MMAs of M =
//   128 / 256 per pair, the multicast commit) over the CTA pair of a cluster
//   (gg_emu_cluster.cc); docs/cuda-sm100.md, "The 2-CTA MMA".
// - Block-scaled cta_group::2 (M = 256 per pair) and
//   tcgen05.cp.cta_group::2.32x128b.warpx4: each CTA's scales in its own
//   TMEM (A: its 128 rows; B: all N rows); docs/cuda-sm100.md,
//   "Block-scaled 2-CTA MMA". A retired cta_group::2 op remembers which
//   CTAs waited on a phase of its commits; a TMA load by another CTA into
//   the shared memory it read is reported.
// Not modelled (reported when used): block-scaled cta_group::2 at M = 128
// per pair, A from TMEM, sparse,
// .ws kinds, D in f16, the fp6 / fp4 types of f8f6f4, fp6 in block-scaled
// kinds, a nonzero descriptor base offset or the absolute LBO mode, TSan
// mode.
//
// The decoders the tests compare with CuTe and the PTX ISA are exported with
// C linkage from every emulator library (tests/cuda/sm100/...):
//   long long gg_emu_sm100_smem_desc_offset(unsigned long long desc,
//       int major_mn, int elem_bits, int row, int k);
//     The shared address (14 + 4 bits, descriptor start included: with start
//     0 it is the byte offset) of element (row, k) of an operand (A: row m,
//     B: row n) the sm_100 matrix descriptor `desc` describes, MN-major
//     (transpose bit 1) when major_mn; -1 when the emulator rejects the
//     descriptor (gg_emu_sm100_smem_desc_check says why).
//   int gg_emu_sm100_smem_desc_check(unsigned long long desc, int major_mn,
//       char* why, int why_bytes);
//     0 when the descriptor is one the emulator runs, else 1 and the report.
//   void gg_emu_sm100_idesc_decode(unsigned idesc, int* fields);
//     fields[0..13] = D format, A format, B format, negate A, negate B,
//     A major (1: MN), B major, N, M, sparsity flag, sparsity selector,
//     saturate, maximum shift, reserved bits (idesc & the bits 6, 23, 29).
//   int gg_emu_sm100_idesc_check(unsigned idesc, int kind, char* why,
//       int why_bytes);
//     kind 0: kind::f16, 1: kind::f8f6f4. 0 when valid and modelled, else 1
//     and the report the emulator gives.
//   int gg_emu_sm100_d_cell(int m_total, int n, int row, int col, int* lane,
//       int* column);
//     The TMEM lane and column (relative to the D address) of accumulator
//     element (row, col) of a cta_group::1 MMA of m_total x n; 0, or -1 when
//     the shape or the element is out of range.
//   int gg_emu_sm100_pair_d_cell(int m_total, int n, int row, int col,
//       int* lane, int* column);
//     The TMEM lane and column (relative to the D address) of element (row,
//     col) of one CTA's half of a cta_group::2 accumulator of m_total (the
//     pair's M, 128 or 256) x n; row < m_total / 2; -1 when out of range.
//   int gg_emu_sm100_pair_idesc_check(unsigned idesc, int kind, char* why,
//       int why_bytes);
//     gg_emu_sm100_idesc_check for a cta_group::2 MMA.
//   void gg_emu_sm100_bs_idesc_decode(unsigned idesc, int kind, int* fields);
//     A block-scaled instruction descriptor (kind 0 mxf8f6f4, 1 mxf4, 2
//     mxf4nvf4): fields[0..13] = scale factor B id, A format, B format,
//     negate A, negate B, A major (1: MN), B major, N, scale format (0
//     ue4m3, 1 ue8m0), M, scale factor A id, sparsity, reserved bits, K = 96
//     bit (kind::mxf4*).
//   int gg_emu_sm100_bs_idesc_check(unsigned idesc, int kind, char* why,
//       int why_bytes);
//     0 when the emulator runs it, else 1 and the report.
//   int gg_emu_sm100_sf_cell(int row, int block, int sf_id, int vec,
//       int quarter, int* lane, int* column, int* byte);
//     The TMEM cell (lane, column relative to the scale address, byte of the
//     word) a block-scaled MMA with scale_vec::<vec>X and scale id sf_id
//     reads for the scale of row `row` (A: m, B: n) and K block `block` of
//     the MMA, in lane quarter `quarter` (the scales are duplicated in all
//     4); -1 when the id or block is out of range.
//   int gg_emu_sm100_pair_bs_idesc_check(unsigned idesc, int kind, char* why,
//       int why_bytes);
//     gg_emu_sm100_bs_idesc_check for a cta_group::2 MMA (M = 256 modelled).
//   int gg_emu_sm100_pair_sf_cell(int which, int m_total, int n, int row,
//       int block, int sf_id, int vec, int quarter, int* cta, int* lane,
//       int* column, int* byte);
//     Where a cta_group::2 block-scaled MMA of m_total (256) x n reads the
//     scale of row `row` of A (which 0; the pair's row, 0..255: *cta = the
//     CTA rank in the pair holding it) or of B (which 1; row 0..n-1, read
//     by each CTA from its own TMEM: *cta = -1); the cell as sf_cell.
//   int gg_emu_sm100_cp_cell(int row, int byte, int quarter, int* lane,
//       int* column, int* byte_in_word);
//     Where tcgen05.cp.32x128b.warpx4 puts byte `byte` (0..15) of source
//     row `row` (0..31) in lane quarter `quarter`.
#pragma once

namespace gg::emu {

namespace sm100 {

inline std::uint32_t addr_of(const void* p) {
  return sm90::addr_of(p);
}

// The entry points of gg_primitives_sm100.cuh's CPU bodies (gg_emu_sm100_*.cc).
// The warp-collective ones are called by every lane of a warp.
void tmem_alloc(unsigned* slot, unsigned ncols);
void tmem_dealloc(unsigned taddr, unsigned ncols);
void tmem_relinquish();
void fence_before();
void fence_after();
// kind 0: kind::f16, 1: kind::f8f6f4.
void mma(int kind, unsigned d_tmem, unsigned long long adesc, unsigned long long bdesc,
         unsigned idesc, bool accumulate);
// Block-scaled tcgen05.mma: kind 0 kind::mxf8f6f4 (scale_vec::1X), 1 kind::mxf4
// (2X), 2 kind::mxf4nvf4 (4X).
void mma_block_scaled(int kind, unsigned d_tmem, unsigned long long adesc, unsigned long long bdesc,
                      unsigned idesc, unsigned sfa_tmem, unsigned sfb_tmem, bool accumulate);
// tcgen05.cp.cta_group::1.32x128b.warpx4.
void cp_32x128b_warpx4(unsigned taddr, unsigned long long sdesc);
void commit(void* bar);
// cta_group::2 (the CTA pair of ranks 2i, 2i + 1 of a cluster): alloc /
// dealloc / relinquish in each CTA (a warp of each issues them), the MMA
// (issued by one thread of the even CTA; kind 0 kind::f16, 1 kind::f8f6f4;
// A's rows and B's rows split across the pair's shared memory, D's rows in
// each CTA's TMEM) and the multicast commit (an arrival on the barrier at
// bar's offset in every CTA of `mask` once the thread's earlier ops are done).
void tmem_alloc_pair(unsigned* slot, unsigned ncols);
void tmem_dealloc_pair(unsigned taddr, unsigned ncols);
void tmem_relinquish_pair();
void mma_pair(int kind, unsigned d_tmem, unsigned long long adesc, unsigned long long bdesc,
              unsigned idesc, bool accumulate);
void commit_pair(void* bar, unsigned short mask);
// Block-scaled cta_group::2 (M = 256 per pair): the copy (issued by one
// thread of the even CTA: each CTA's shared memory at the descriptor's
// offset into its own TMEM at taddr) and the MMA (kind as mma_block_scaled;
// CTA v's half reads the scales of its 128 rows of A and of all N rows of B
// from its own TMEM).
void cp_32x128b_warpx4_pair(unsigned taddr, unsigned long long sdesc);
void mma_block_scaled_pair(int kind, unsigned d_tmem, unsigned long long adesc,
                           unsigned long long bdesc, unsigned idesc, unsigned sfa_tmem,
                           unsigned sfb_tmem, bool accumulate);
void tmem_ld(unsigned* r, unsigned n, unsigned taddr);
// tcgen05.ld.16x256b.x<num>: 4 * num registers.
void tmem_ld_16x256b(unsigned* r, unsigned num, unsigned taddr);
void tmem_st(const unsigned* r, unsigned n, unsigned taddr);
void wait_ld();
void wait_st();

}  // namespace sm100

}  // namespace gg::emu
