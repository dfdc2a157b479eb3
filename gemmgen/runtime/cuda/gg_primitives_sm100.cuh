// gg_primitives_sm100.cuh: the datacenter Blackwell (sm_100a / sm_103a)
// tensor-core primitives: tensor memory (TMEM) and tcgen05.mma. As in the
// other primitives headers, each primitive has its PTX under __CUDA_ARCH__
// (for the `a` / `f` targets of compute capability 10.x: GG_SM100_TCGEN05
// below; a static_assert in a kernel of another arch that calls it) and a CPU
// body under GG_EMU, whose model is gg_emu_sm100.h. It needs nothing of the
// Hopper header but mbarriers, which it takes as `u64*` (gg::mbarrier_init /
// _wait of gg_primitives_sm90.cuh, reused). docs/cuda-sm100.md describes the
// protocol; every bit position below is the PTX ISA's (section names cited).
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

namespace gg {

namespace umma {

// ---------------------------------------------------------------------------
// Shared-memory matrix descriptors (PTX ISA, "Shared Memory Descriptor" of
// the tcgen05 "Matrix Descriptors"), 64 bits:
//   bits  0-13  start address >> 4
//   bits 16-29  leading dimension byte offset (LBO) >> 4
//   bits 32-45  stride dimension byte offset (SBO) >> 4
//   bits 46-48  fixed constant 0b001 (the "version": sm_90's wgmma
//               descriptor has 0 there)
//   bits 49-51  matrix base offset (0 for a pattern-aligned start)
//   bit  52     leading dimension stride mode (0: LBO is relative)
//   bits 53-60  fixed constant 0
//   bits 61-63  swizzling mode (Swizzle below)
// The canonical layouts the offsets describe are "Shared Memory Matrix
// Layout"'s (the same as wgmma's); gg_emu_sm100.h decodes them.
enum class Swizzle : unsigned {
  none = 0,
  b128_base32b = 1,  // 128-byte swizzle with 32-byte atomicity (MN-major only)
  b128 = 2,
  b64 = 4,
  b32 = 6,
};

inline constexpr unsigned long long kDescVersion = 1ull << 46;

__host__ __device__ constexpr unsigned long long smem_desc(unsigned smem_address,
                                                           unsigned lbo_bytes, unsigned sbo_bytes,
                                                           Swizzle swizzle,
                                                           unsigned base_offset = 0) {
  return static_cast<unsigned long long>((smem_address & 0x3FFFFu) >> 4) |
         (static_cast<unsigned long long>((lbo_bytes & 0x3FFFFu) >> 4) << 16) |
         (static_cast<unsigned long long>((sbo_bytes & 0x3FFFFu) >> 4) << 32) | kDescVersion |
         (static_cast<unsigned long long>(base_offset & 7u) << 49) |
         (static_cast<unsigned long long>(swizzle) << 61);
}

// ---------------------------------------------------------------------------
// The instruction descriptor (PTX ISA, "Instruction descriptor" of
// tcgen05.mma, the table for .kind::f16, .kind::tf32, .kind::f8f6f4 and
// .kind::i8), 32 bits:
//   bits  0-1   sparsity selector (0)       bit  2   sparsity (0: dense)
//   bit   3     saturate (integer kinds; 0) bits 4-5 D format (1: f32)
//   bit   6     reserved                    bits 7-9 A format
//   bits 10-12  B format                    bit 13   negate A
//   bit  14     negate B                    bit 15   transpose A (1: MN-major)
//   bit  16     transpose B (1: MN-major)   bits 17-22 N >> 3
//   bit  23     reserved                    bits 24-28 M >> 4
//   bit  29     reserved                    bits 30-31 maximum shift (.ws; 0)
// A / B format codes: kind::f16: f16 0, bf16 1; kind::f8f6f4: e4m3 0, e5m2 1.
enum class Type : unsigned { f16, bf16, e4m3, e5m2 };
enum class Major : unsigned { K = 0, MN = 1 };

__host__ __device__ constexpr unsigned type_code(Type t) {
  return t == Type::bf16 || t == Type::e5m2 ? 1u : 0u;
}

// K of one tcgen05.mma: 16 for the 16-bit types (kind::f16), 32 for FP8.
__host__ __device__ constexpr int mma_k(Type t) {
  return t == Type::f16 || t == Type::bf16 ? 16 : 32;
}

// The one builder of instruction descriptors: D in f32, dense, no
// saturation or shift. A and B must be of the same kind (16-bit or FP8).
__host__ __device__ constexpr unsigned instr_desc(Type a, Type b, int m, int n, Major a_major,
                                                  Major b_major, bool negate_a = false,
                                                  bool negate_b = false) {
  return (1u << 4) | (type_code(a) << 7) | (type_code(b) << 10) | ((negate_a ? 1u : 0u) << 13) |
         ((negate_b ? 1u : 0u) << 14) | (static_cast<unsigned>(a_major) << 15) |
         (static_cast<unsigned>(b_major) << 16) | ((static_cast<unsigned>(n) >> 3) << 17) |
         ((static_cast<unsigned>(m) >> 4) << 24);
}

// ---------------------------------------------------------------------------
// Tensor memory addresses (PTX ISA, "Tensor Memory Addressing"): lane in
// bits 16-31, column in bits 0-15.
__host__ __device__ constexpr unsigned tmem_addr(unsigned base, unsigned lane, unsigned column) {
  return base + (lane << 16) + column;
}
__host__ __device__ constexpr unsigned tmem_lane(unsigned addr) {
  return addr >> 16;
}
__host__ __device__ constexpr unsigned tmem_column(unsigned addr) {
  return addr & 0xFFFFu;
}

// The TMEM lane of row m of a cta_group::1 accumulator of M rows ("Data
// path layout organization": layout D, M = 128: lane m; layout F, M = 64:
// the first 16 lanes of each warp's 32). Its column is col(d) + n.
__host__ __device__ constexpr unsigned d_lane(int m_total, int m) {
  return m_total == 64 ? 32u * static_cast<unsigned>(m / 16) + static_cast<unsigned>(m % 16)
                       : static_cast<unsigned>(m);
}

// ---------------------------------------------------------------------------
// Block-scaled MMA (PTX ISA, tcgen05.mma "Block Scaling" and the instruction
// descriptor tables "for .kind::mxf8f6f4" and "for .kind::mxf4 and
// .kind::mxf4nvf4"), 32 bits:
//   bits  0-1   reserved                    bit  2   sparsity (0: dense)
//   bit   3     reserved                    bits 4-5 scale factor B id
//   bit   6     reserved                    bits 7-9 A format
//   bits 10-12  B format (kind::mxf4 / mxf4nvf4: bits 10-11, bit 12 reserved)
//   bit  13     negate A                    bit 14   negate B
//   bit  15     transpose A (1: MN-major)   bit 16   transpose B
//   bits 17-22  N >> 3                      bit 23   scale format (0 ue4m3, 1 ue8m0)
//   bits 24-26  reserved                    bits 27-28 M >> 7
//   bits 29-30  scale factor A id
//   bit  31     reserved (kind::mxf8f6f4); K = 96 (kind::mxf4*, cta_group::2 only)
// Format codes: kind::mxf8f6f4: e4m3 0, e5m2 1, e2m1 5 (its fp4 operands K-major,
// 16 elements in the first 8 bytes of each 16, "Optional Decompression");
// kind::mxf4 / mxf4nvf4: e2m1 1 (two per byte, K-major only). The scale ids
// pick the bytes of each 32-bit TMEM word the MMA takes: scale_vec::1X
// (mxf8f6f4, K = 32, one scale a row) byte id (0..3); 2X (mxf4, K = 64, two)
// bytes id, id + 1 (id 0 or 2); 4X (mxf4nvf4, K = 64, four) all four (id 0). cta_group::1 takes M =
// 128 only, N a multiple of 8 in 8..256.
enum class BsKind : unsigned { mxf8f6f4 = 0, mxf4 = 1, mxf4nvf4 = 2 };
enum class BsType : unsigned { e4m3, e5m2, e2m1 };
enum class ScaleFormat : unsigned { ue4m3 = 0, ue8m0 = 1 };

__host__ __device__ constexpr unsigned bs_type_code(BsKind kind, BsType t) {
  return kind != BsKind::mxf8f6f4 ? 1u : t == BsType::e4m3 ? 0u : t == BsType::e5m2 ? 1u : 5u;
}

// Scales per row of one MMA of the primitives below, the N of their
// scale_vec::NX: 1 (mxf8f6f4, one per 32 elements), 2 (mxf4, one per 32), 4
// (mxf4nvf4, one per 16; ue4m3 or ue8m0).
__host__ __device__ constexpr int scale_vec(BsKind kind) {
  return kind == BsKind::mxf8f6f4 ? 1 : kind == BsKind::mxf4 ? 2 : 4;
}

// K of one block-scaled MMA: 32 (mxf8f6f4), 64 (mxf4, mxf4nvf4).
__host__ __device__ constexpr int mma_k(BsKind kind) {
  return kind == BsKind::mxf8f6f4 ? 32 : 64;
}

// The one builder of block-scaled instruction descriptors: D in f32,
// dense, M = 128 (cta_group::1).
__host__ __device__ constexpr unsigned instr_desc_block_scaled(
    BsKind kind, BsType a, BsType b, ScaleFormat sf, int m, int n, unsigned sfa_id, unsigned sfb_id,
    Major a_major = Major::K, Major b_major = Major::K, bool negate_a = false,
    bool negate_b = false) {
  return ((sfb_id & 3u) << 4) | (bs_type_code(kind, a) << 7) | (bs_type_code(kind, b) << 10) |
         ((negate_a ? 1u : 0u) << 13) | ((negate_b ? 1u : 0u) << 14) |
         (static_cast<unsigned>(a_major) << 15) | (static_cast<unsigned>(b_major) << 16) |
         ((static_cast<unsigned>(n) >> 3) << 17) | (static_cast<unsigned>(sf) << 23) |
         ((static_cast<unsigned>(m) >> 7) << 27) | ((sfa_id & 3u) << 29);
}

// The scale factors in TMEM (PTX ISA, "Scale Factor A ID" / "B ID" layouts,
// as tcgen05.cp.32x128b.warpx4 leaves them; CuTe's tmem_sf_frg): the scale
// of row r (A: m, B: n) and block j of an MMA whose scale address has column
// c is byte id + j of the word at column c + r / 32 of lane r % 32, and the
// same in each of the 4 lane quarters (lanes r % 32 + 32 q).
__host__ __device__ constexpr unsigned sf_column(unsigned row) {
  return row / 32;
}
__host__ __device__ constexpr unsigned sf_lane(unsigned row, unsigned quarter) {
  return row % 32 + 32 * quarter;
}

}  // namespace umma

namespace sm100_detail {
// A shared address (as sm90_detail::smem_addr: this header must compile
// where the Hopper header is not copied, for a spec without sm_90a).
__device__ __forceinline__ unsigned smem_addr(const void* p) {
#if defined(__CUDA_ARCH__)
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
#elif defined(GG_EMU)
  return gg::emu::sm100::addr_of(p);
#else
  (void)p;
  return 0;
#endif
}
}  // namespace sm100_detail

// The matrix descriptor of the operand tile at `smem` (shared memory).
__device__ __forceinline__ unsigned long long make_umma_desc(const void* smem, unsigned lbo_bytes,
                                                             unsigned sbo_bytes,
                                                             umma::Swizzle swizzle) {
  return umma::smem_desc(sm100_detail::smem_addr(smem), lbo_bytes, sbo_bytes, swizzle);
}

// ---------------------------------------------------------------------------
// TMEM allocation (PTX ISA "tcgen05.alloc / dealloc / relinquish_alloc_permit").

template <int kNever = 0>
__device__ __forceinline__ void tmem_alloc(unsigned* slot, unsigned ncols) {
#if defined(__CUDA_ARCH__)
#if defined(GG_SM100_TCGEN05)
  asm volatile("tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [%0], %1;\n" ::"r"(
                   sm100_detail::smem_addr(slot)),
               "r"(ncols)
               : "memory");
#else
  static_assert(kNever != 0, "gg::tmem_alloc needs sm_100a / sm_103a");
#endif
#elif defined(GG_EMU)
  gg::emu::sm100::tmem_alloc(slot, ncols);
#endif
}

template <int kNever = 0>
__device__ __forceinline__ void tmem_dealloc(unsigned taddr, unsigned ncols) {
#if defined(__CUDA_ARCH__)
#if defined(GG_SM100_TCGEN05)
  asm volatile("tcgen05.dealloc.cta_group::1.sync.aligned.b32 %0, %1;\n" ::"r"(taddr), "r"(ncols)
               : "memory");
#else
  static_assert(kNever != 0, "gg::tmem_dealloc needs sm_100a / sm_103a");
#endif
#elif defined(GG_EMU)
  gg::emu::sm100::tmem_dealloc(taddr, ncols);
#endif
}

template <int kNever = 0>
__device__ __forceinline__ void tmem_relinquish_alloc_permit() {
#if defined(__CUDA_ARCH__)
#if defined(GG_SM100_TCGEN05)
  asm volatile("tcgen05.relinquish_alloc_permit.cta_group::1.sync.aligned;\n" ::: "memory");
#else
  static_assert(kNever != 0, "gg::tmem_relinquish_alloc_permit needs sm_100a / sm_103a");
#endif
#elif defined(GG_EMU)
  gg::emu::sm100::tmem_relinquish();
#endif
}

// ---------------------------------------------------------------------------
// Fences (PTX ISA "tcgen05.fence").

template <int kNever = 0>
__device__ __forceinline__ void tcgen05_fence_before_thread_sync() {
#if defined(__CUDA_ARCH__)
#if defined(GG_SM100_TCGEN05)
  asm volatile("tcgen05.fence::before_thread_sync;\n" ::: "memory");
#else
  static_assert(kNever != 0, "gg::tcgen05_fence_before_thread_sync needs sm_100a / sm_103a");
#endif
#elif defined(GG_EMU)
  gg::emu::sm100::fence_before();
#endif
}

template <int kNever = 0>
__device__ __forceinline__ void tcgen05_fence_after_thread_sync() {
#if defined(__CUDA_ARCH__)
#if defined(GG_SM100_TCGEN05)
  asm volatile("tcgen05.fence::after_thread_sync;\n" ::: "memory");
#else
  static_assert(kNever != 0, "gg::tcgen05_fence_after_thread_sync needs sm_100a / sm_103a");
#endif
#elif defined(GG_EMU)
  gg::emu::sm100::fence_after();
#endif
}

// ---------------------------------------------------------------------------
// tcgen05.mma.cta_group::1 and tcgen05.commit.

template <int kNever = 0>
__device__ __forceinline__ void tcgen05_mma_f16(unsigned d_tmem, unsigned long long adesc,
                                                unsigned long long bdesc, unsigned idesc,
                                                bool accumulate) {
#if defined(__CUDA_ARCH__)
#if defined(GG_SM100_TCGEN05)
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %4, 0;\n"
      "tcgen05.mma.cta_group::1.kind::f16 [%0], %1, %2, %3, p;\n}\n" ::"r"(d_tmem),
      "l"(adesc), "l"(bdesc), "r"(idesc), "r"(accumulate ? 1u : 0u)
      : "memory");
#else
  static_assert(kNever != 0, "gg::tcgen05_mma_f16 needs sm_100a / sm_103a");
#endif
#elif defined(GG_EMU)
  gg::emu::sm100::mma(0, d_tmem, adesc, bdesc, idesc, accumulate);
#endif
}

template <int kNever = 0>
__device__ __forceinline__ void tcgen05_mma_f8f6f4(unsigned d_tmem, unsigned long long adesc,
                                                   unsigned long long bdesc, unsigned idesc,
                                                   bool accumulate) {
#if defined(__CUDA_ARCH__)
#if defined(GG_SM100_TCGEN05)
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %4, 0;\n"
      "tcgen05.mma.cta_group::1.kind::f8f6f4 [%0], %1, %2, %3, p;\n}\n" ::"r"(d_tmem),
      "l"(adesc), "l"(bdesc), "r"(idesc), "r"(accumulate ? 1u : 0u)
      : "memory");
#else
  static_assert(kNever != 0, "gg::tcgen05_mma_f8f6f4 needs sm_100a / sm_103a");
#endif
#elif defined(GG_EMU)
  gg::emu::sm100::mma(1, d_tmem, adesc, bdesc, idesc, accumulate);
#endif
}

// ---------------------------------------------------------------------------
// Block-scaled tcgen05.mma.cta_group::1 (PTX ISA "tcgen05.mma", "Block
// Scaling"): D[128 x N] = (A * scale_A) (B * scale_B)^T + (accumulate ? D :
// 0), the scales in TMEM at sfa_tmem / sfb_tmem (filled by
// tcgen05_cp_32x128b_warpx4; their bytes chosen by the descriptor's scale
// ids, umma::instr_desc_block_scaled). Issued by one thread, completed by
// tcgen05_commit as the other MMAs.
//   tcgen05_mma_mxf8f6f4_block_scaled: kind::mxf8f6f4.block_scale.scale_vec::1X,
//     e4m3 / e5m2 / e2m1 A and B, ue8m0 scales, K = 32;
//   tcgen05_mma_mxf4: kind::mxf4.block_scale.scale_vec::2X, e2m1, ue8m0, K = 64;
//   tcgen05_mma_mxf4nvf4: kind::mxf4nvf4.block_scale.scale_vec::4X, e2m1,
//     ue4m3 (NVFP4) or ue8m0 scales per 16 elements, K = 64.
// nvcc 13.5 takes the scale_vec::NX spelling for sm_100a / sm_103a and
// only the .block32 / .block16 aliases for sm_100f / sm_103f (GG_SM100_BS_*).
// The arch-specific targets (sm_100a / sm_103a) take .scale_vec::NX, the
// family targets (sm_100f / sm_103f) only the .block32 / .block16 aliases.
#if defined(__CUDA_ARCH_FEAT_SM100_ALL) || defined(__CUDA_ARCH_FEAT_SM103_ALL) || \
    defined(__CUDA_ARCH_SPECIFIC__)
#define GG_SM100_BS_1X ".scale_vec::1X"
#define GG_SM100_BS_2X ".scale_vec::2X"
#define GG_SM100_BS_4X ".scale_vec::4X"
#else
#define GG_SM100_BS_1X ".block32"
#define GG_SM100_BS_2X ".block32"
#define GG_SM100_BS_4X ".block16"
#endif

template <int kNever = 0>
__device__ __forceinline__ void tcgen05_mma_mxf8f6f4_block_scaled(
    unsigned d_tmem, unsigned long long adesc, unsigned long long bdesc, unsigned idesc,
    unsigned sfa_tmem, unsigned sfb_tmem, bool accumulate) {
#if defined(__CUDA_ARCH__)
#if defined(GG_SM100_TCGEN05)
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %6, 0;\n"
      "tcgen05.mma.cta_group::1.kind::mxf8f6f4.block_scale" GG_SM100_BS_1X
      " [%0], %1, %2, %3, [%4], [%5], p;\n}\n" ::"r"(d_tmem),
      "l"(adesc), "l"(bdesc), "r"(idesc), "r"(sfa_tmem), "r"(sfb_tmem), "r"(accumulate ? 1u : 0u)
      : "memory");
#else
  static_assert(kNever != 0, "gg::tcgen05_mma_mxf8f6f4_block_scaled needs sm_100a / sm_103a");
#endif
#elif defined(GG_EMU)
  gg::emu::sm100::mma_block_scaled(0, d_tmem, adesc, bdesc, idesc, sfa_tmem, sfb_tmem, accumulate);
#else
  (void)d_tmem, (void)adesc, (void)bdesc, (void)idesc, (void)sfa_tmem, (void)sfb_tmem,
      (void)accumulate;
#endif
}

template <int kNever = 0>
__device__ __forceinline__ void tcgen05_mma_mxf4(unsigned d_tmem, unsigned long long adesc,
                                                 unsigned long long bdesc, unsigned idesc,
                                                 unsigned sfa_tmem, unsigned sfb_tmem,
                                                 bool accumulate) {
#if defined(__CUDA_ARCH__)
#if defined(GG_SM100_TCGEN05)
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %6, 0;\n"
      "tcgen05.mma.cta_group::1.kind::mxf4.block_scale" GG_SM100_BS_2X
      " [%0], %1, %2, %3, [%4], [%5], p;\n}\n" ::"r"(d_tmem),
      "l"(adesc), "l"(bdesc), "r"(idesc), "r"(sfa_tmem), "r"(sfb_tmem), "r"(accumulate ? 1u : 0u)
      : "memory");
#else
  static_assert(kNever != 0, "gg::tcgen05_mma_mxf4 needs sm_100a / sm_103a");
#endif
#elif defined(GG_EMU)
  gg::emu::sm100::mma_block_scaled(1, d_tmem, adesc, bdesc, idesc, sfa_tmem, sfb_tmem, accumulate);
#else
  (void)d_tmem, (void)adesc, (void)bdesc, (void)idesc, (void)sfa_tmem, (void)sfb_tmem,
      (void)accumulate;
#endif
}

template <int kNever = 0>
__device__ __forceinline__ void tcgen05_mma_mxf4nvf4(unsigned d_tmem, unsigned long long adesc,
                                                     unsigned long long bdesc, unsigned idesc,
                                                     unsigned sfa_tmem, unsigned sfb_tmem,
                                                     bool accumulate) {
#if defined(__CUDA_ARCH__)
#if defined(GG_SM100_TCGEN05)
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %6, 0;\n"
      "tcgen05.mma.cta_group::1.kind::mxf4nvf4.block_scale" GG_SM100_BS_4X
      " [%0], %1, %2, %3, [%4], [%5], p;\n}\n" ::"r"(d_tmem),
      "l"(adesc), "l"(bdesc), "r"(idesc), "r"(sfa_tmem), "r"(sfb_tmem), "r"(accumulate ? 1u : 0u)
      : "memory");
#else
  static_assert(kNever != 0, "gg::tcgen05_mma_mxf4nvf4 needs sm_100a / sm_103a");
#endif
#elif defined(GG_EMU)
  gg::emu::sm100::mma_block_scaled(2, d_tmem, adesc, bdesc, idesc, sfa_tmem, sfb_tmem, accumulate);
#else
  (void)d_tmem, (void)adesc, (void)bdesc, (void)idesc, (void)sfa_tmem, (void)sfb_tmem,
      (void)accumulate;
#endif
}

#undef GG_SM100_BS_1X
#undef GG_SM100_BS_2X
#undef GG_SM100_BS_4X

// tcgen05.cp.cta_group::1.32x128b.warpx4 (PTX ISA "tcgen05.cp", "Data
// Movement Shape"): copies 32 rows of 16 bytes from shared memory (the
// matrix descriptor `sdesc`, a K-major operand of 16 one-byte elements a
// row: row r at (r % 8) * 16 + (r / 8) * SBO without swizzle) into TMEM
// columns col(taddr) .. + 3 of lanes r + 32 q for each quarter q (the
// .warpx4 multicast): bytes 4 g .. 4 g + 3 of row r are the word at column
// col(taddr) + g. One 128 x 4 scale atom (512 bytes, Sm1xxBlockScaledConfig:
// byte (r % 32) * 16 + (r / 32) * 4 + kblock) is one copy, whose words
// hold row r's 4 K-block scales at column r / 32 (umma::sf_column). lane(taddr)
// is 0. Issued by one thread; asynchronous: ordered before that thread's
// later tcgen05.mma, completed (its shared memory free) by tcgen05_commit.
template <int kNever = 0>
__device__ __forceinline__ void tcgen05_cp_32x128b_warpx4(unsigned taddr,
                                                          unsigned long long sdesc) {
#if defined(__CUDA_ARCH__)
#if defined(GG_SM100_TCGEN05)
  asm volatile("tcgen05.cp.cta_group::1.32x128b.warpx4 [%0], %1;\n" ::"r"(taddr), "l"(sdesc)
               : "memory");
#else
  static_assert(kNever != 0, "gg::tcgen05_cp_32x128b_warpx4 needs sm_100a / sm_103a");
#endif
#elif defined(GG_EMU)
  gg::emu::sm100::cp_32x128b_warpx4(taddr, sdesc);
#else
  (void)taddr, (void)sdesc;
#endif
}

// The mbarrier `bar` gets one arrival once every tcgen05.mma this thread
// issued before has completed (PTX ISA "tcgen05.commit").
template <int kNever = 0>
__device__ __forceinline__ void tcgen05_commit(unsigned long long* bar) {
#if defined(__CUDA_ARCH__)
#if defined(GG_SM100_TCGEN05)
  asm volatile(
      "tcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster.b64 [%0];\n" ::"r"(
          sm100_detail::smem_addr(bar))
      : "memory");
#else
  static_assert(kNever != 0, "gg::tcgen05_commit needs sm_100a / sm_103a");
#endif
#elif defined(GG_EMU)
  gg::emu::sm100::commit(bar);
#endif
}

// ---------------------------------------------------------------------------
// tcgen05.ld / st, shape 32x32b, and their waits.

template <int kNever = 0>
__device__ __forceinline__ void tcgen05_wait_ld() {
#if defined(__CUDA_ARCH__)
#if defined(GG_SM100_TCGEN05)
  asm volatile("tcgen05.wait::ld.sync.aligned;\n" ::: "memory");
#else
  static_assert(kNever != 0, "gg::tcgen05_wait_ld needs sm_100a / sm_103a");
#endif
#elif defined(GG_EMU)
  gg::emu::sm100::wait_ld();
#endif
}

template <int kNever = 0>
__device__ __forceinline__ void tcgen05_wait_st() {
#if defined(__CUDA_ARCH__)
#if defined(GG_SM100_TCGEN05)
  asm volatile("tcgen05.wait::st.sync.aligned;\n" ::: "memory");
#else
  static_assert(kNever != 0, "gg::tcgen05_wait_st needs sm_100a / sm_103a");
#endif
#elif defined(GG_EMU)
  gg::emu::sm100::wait_st();
#endif
}

#if defined(__CUDA_ARCH__) && defined(GG_SM100_TCGEN05)
namespace sm100_detail {
using u32 = unsigned;
template <int N>
struct TmemAsm;
template <>
struct TmemAsm<1> {
  static __device__ __forceinline__ void ld(u32 (&r)[1], u32 taddr) {
    asm volatile("tcgen05.ld.sync.aligned.32x32b.x1.b32 {%0}, [%1];\n" : "=r"(r[0]) : "r"(taddr));
  }
  static __device__ __forceinline__ void st(u32 taddr, const u32 (&r)[1]) {
    asm volatile("tcgen05.st.sync.aligned.32x32b.x1.b32 [%0], {%1};\n" ::"r"(taddr), "r"(r[0])
                 : "memory");
  }
};
template <>
struct TmemAsm<2> {
  static __device__ __forceinline__ void ld(u32 (&r)[2], u32 taddr) {
    asm volatile("tcgen05.ld.sync.aligned.32x32b.x2.b32 {%0, %1}, [%2];\n"
                 : "=r"(r[0]), "=r"(r[1])
                 : "r"(taddr));
  }
  static __device__ __forceinline__ void st(u32 taddr, const u32 (&r)[2]) {
    asm volatile("tcgen05.st.sync.aligned.32x32b.x2.b32 [%0], {%1, %2};\n" ::"r"(taddr), "r"(r[0]),
                 "r"(r[1])
                 : "memory");
  }
};
template <>
struct TmemAsm<4> {
  static __device__ __forceinline__ void ld(u32 (&r)[4], u32 taddr) {
    asm volatile("tcgen05.ld.sync.aligned.32x32b.x4.b32 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(taddr));
  }
  static __device__ __forceinline__ void st(u32 taddr, const u32 (&r)[4]) {
    asm volatile("tcgen05.st.sync.aligned.32x32b.x4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(taddr),
                 "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3])
                 : "memory");
  }
};
template <>
struct TmemAsm<8> {
  static __device__ __forceinline__ void ld(u32 (&r)[8], u32 taddr) {
    asm volatile("tcgen05.ld.sync.aligned.32x32b.x8.b32 {%0, %1, %2, %3, %4, %5, %6, %7}, [%8];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]), "=r"(r[4]), "=r"(r[5]),
                   "=r"(r[6]), "=r"(r[7])
                 : "r"(taddr));
  }
  static __device__ __forceinline__ void st(u32 taddr, const u32 (&r)[8]) {
    asm volatile(
        "tcgen05.st.sync.aligned.32x32b.x8.b32 [%0], {%1, %2, %3, %4, %5, %6, %7, %8};\n" ::"r"(
            taddr),
        "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3]), "r"(r[4]), "r"(r[5]), "r"(r[6]), "r"(r[7])
        : "memory");
  }
};
template <>
struct TmemAsm<16> {
  static __device__ __forceinline__ void ld(u32 (&r)[16], u32 taddr) {
    asm volatile(
        "tcgen05.ld.sync.aligned.32x32b.x16.b32 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, "
        "%12, %13, %14, %15}, [%16];\n"
        : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]), "=r"(r[4]), "=r"(r[5]), "=r"(r[6]),
          "=r"(r[7]), "=r"(r[8]), "=r"(r[9]), "=r"(r[10]), "=r"(r[11]), "=r"(r[12]), "=r"(r[13]),
          "=r"(r[14]), "=r"(r[15])
        : "r"(taddr));
  }
  static __device__ __forceinline__ void st(u32 taddr, const u32 (&r)[16]) {
    asm volatile(
        "tcgen05.st.sync.aligned.32x32b.x16.b32 [%0], {%1, %2, %3, %4, %5, %6, %7, %8, %9, %10, "
        "%11, %12, %13, %14, %15, %16};\n" ::"r"(taddr),
        "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3]), "r"(r[4]), "r"(r[5]), "r"(r[6]), "r"(r[7]),
        "r"(r[8]), "r"(r[9]), "r"(r[10]), "r"(r[11]), "r"(r[12]), "r"(r[13]), "r"(r[14]), "r"(r[15])
        : "memory");
  }
};
template <>
struct TmemAsm<32> {
  static __device__ __forceinline__ void ld(u32 (&r)[32], u32 taddr) {
    asm volatile(
        "tcgen05.ld.sync.aligned.32x32b.x32.b32 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, "
        "%12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, "
        "%30, %31}, [%32];\n"
        : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]), "=r"(r[4]), "=r"(r[5]), "=r"(r[6]),
          "=r"(r[7]), "=r"(r[8]), "=r"(r[9]), "=r"(r[10]), "=r"(r[11]), "=r"(r[12]), "=r"(r[13]),
          "=r"(r[14]), "=r"(r[15]), "=r"(r[16]), "=r"(r[17]), "=r"(r[18]), "=r"(r[19]), "=r"(r[20]),
          "=r"(r[21]), "=r"(r[22]), "=r"(r[23]), "=r"(r[24]), "=r"(r[25]), "=r"(r[26]), "=r"(r[27]),
          "=r"(r[28]), "=r"(r[29]), "=r"(r[30]), "=r"(r[31])
        : "r"(taddr));
  }
  static __device__ __forceinline__ void st(u32 taddr, const u32 (&r)[32]) {
    asm volatile(
        "tcgen05.st.sync.aligned.32x32b.x32.b32 [%0], {%1, %2, %3, %4, %5, %6, %7, %8, %9, %10, "
        "%11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, "
        "%29, %30, %31, %32};\n" ::"r"(taddr),
        "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3]), "r"(r[4]), "r"(r[5]), "r"(r[6]), "r"(r[7]),
        "r"(r[8]), "r"(r[9]), "r"(r[10]), "r"(r[11]), "r"(r[12]), "r"(r[13]), "r"(r[14]),
        "r"(r[15]), "r"(r[16]), "r"(r[17]), "r"(r[18]), "r"(r[19]), "r"(r[20]), "r"(r[21]),
        "r"(r[22]), "r"(r[23]), "r"(r[24]), "r"(r[25]), "r"(r[26]), "r"(r[27]), "r"(r[28]),
        "r"(r[29]), "r"(r[30]), "r"(r[31])
        : "memory");
  }
};
template <>
struct TmemAsm<64> {
  static __device__ __forceinline__ void ld(u32 (&r)[64], u32 taddr) {
    asm volatile(
        "tcgen05.ld.sync.aligned.32x32b.x64.b32 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, "
        "%12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, "
        "%30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, [%64];\n"
        : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]), "=r"(r[4]), "=r"(r[5]), "=r"(r[6]),
          "=r"(r[7]), "=r"(r[8]), "=r"(r[9]), "=r"(r[10]), "=r"(r[11]), "=r"(r[12]), "=r"(r[13]),
          "=r"(r[14]), "=r"(r[15]), "=r"(r[16]), "=r"(r[17]), "=r"(r[18]), "=r"(r[19]), "=r"(r[20]),
          "=r"(r[21]), "=r"(r[22]), "=r"(r[23]), "=r"(r[24]), "=r"(r[25]), "=r"(r[26]), "=r"(r[27]),
          "=r"(r[28]), "=r"(r[29]), "=r"(r[30]), "=r"(r[31]), "=r"(r[32]), "=r"(r[33]), "=r"(r[34]),
          "=r"(r[35]), "=r"(r[36]), "=r"(r[37]), "=r"(r[38]), "=r"(r[39]), "=r"(r[40]), "=r"(r[41]),
          "=r"(r[42]), "=r"(r[43]), "=r"(r[44]), "=r"(r[45]), "=r"(r[46]), "=r"(r[47]), "=r"(r[48]),
          "=r"(r[49]), "=r"(r[50]), "=r"(r[51]), "=r"(r[52]), "=r"(r[53]), "=r"(r[54]), "=r"(r[55]),
          "=r"(r[56]), "=r"(r[57]), "=r"(r[58]), "=r"(r[59]), "=r"(r[60]), "=r"(r[61]), "=r"(r[62]),
          "=r"(r[63])
        : "r"(taddr));
  }
  static __device__ __forceinline__ void st(u32 taddr, const u32 (&r)[64]) {
    asm volatile(
        "tcgen05.st.sync.aligned.32x32b.x64.b32 [%0], {%1, %2, %3, %4, %5, %6, %7, %8, %9, %10, "
        "%11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, "
        "%29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, "
        "%47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
        "%64};\n" ::"r"(taddr),
        "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3]), "r"(r[4]), "r"(r[5]), "r"(r[6]), "r"(r[7]),
        "r"(r[8]), "r"(r[9]), "r"(r[10]), "r"(r[11]), "r"(r[12]), "r"(r[13]), "r"(r[14]),
        "r"(r[15]), "r"(r[16]), "r"(r[17]), "r"(r[18]), "r"(r[19]), "r"(r[20]), "r"(r[21]),
        "r"(r[22]), "r"(r[23]), "r"(r[24]), "r"(r[25]), "r"(r[26]), "r"(r[27]), "r"(r[28]),
        "r"(r[29]), "r"(r[30]), "r"(r[31]), "r"(r[32]), "r"(r[33]), "r"(r[34]), "r"(r[35]),
        "r"(r[36]), "r"(r[37]), "r"(r[38]), "r"(r[39]), "r"(r[40]), "r"(r[41]), "r"(r[42]),
        "r"(r[43]), "r"(r[44]), "r"(r[45]), "r"(r[46]), "r"(r[47]), "r"(r[48]), "r"(r[49]),
        "r"(r[50]), "r"(r[51]), "r"(r[52]), "r"(r[53]), "r"(r[54]), "r"(r[55]), "r"(r[56]),
        "r"(r[57]), "r"(r[58]), "r"(r[59]), "r"(r[60]), "r"(r[61]), "r"(r[62]), "r"(r[63])
        : "memory");
  }
};
template <>
struct TmemAsm<128> {
  static __device__ __forceinline__ void ld(u32 (&r)[128], u32 taddr) {
    asm volatile(
        "tcgen05.ld.sync.aligned.32x32b.x128.b32 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, "
        "%11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, "
        "%29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, "
        "%47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, "
        "%65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, "
        "%83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, "
        "%100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, "
        "%115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, [%128];\n"
        : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]), "=r"(r[4]), "=r"(r[5]), "=r"(r[6]),
          "=r"(r[7]), "=r"(r[8]), "=r"(r[9]), "=r"(r[10]), "=r"(r[11]), "=r"(r[12]), "=r"(r[13]),
          "=r"(r[14]), "=r"(r[15]), "=r"(r[16]), "=r"(r[17]), "=r"(r[18]), "=r"(r[19]), "=r"(r[20]),
          "=r"(r[21]), "=r"(r[22]), "=r"(r[23]), "=r"(r[24]), "=r"(r[25]), "=r"(r[26]), "=r"(r[27]),
          "=r"(r[28]), "=r"(r[29]), "=r"(r[30]), "=r"(r[31]), "=r"(r[32]), "=r"(r[33]), "=r"(r[34]),
          "=r"(r[35]), "=r"(r[36]), "=r"(r[37]), "=r"(r[38]), "=r"(r[39]), "=r"(r[40]), "=r"(r[41]),
          "=r"(r[42]), "=r"(r[43]), "=r"(r[44]), "=r"(r[45]), "=r"(r[46]), "=r"(r[47]), "=r"(r[48]),
          "=r"(r[49]), "=r"(r[50]), "=r"(r[51]), "=r"(r[52]), "=r"(r[53]), "=r"(r[54]), "=r"(r[55]),
          "=r"(r[56]), "=r"(r[57]), "=r"(r[58]), "=r"(r[59]), "=r"(r[60]), "=r"(r[61]), "=r"(r[62]),
          "=r"(r[63]), "=r"(r[64]), "=r"(r[65]), "=r"(r[66]), "=r"(r[67]), "=r"(r[68]), "=r"(r[69]),
          "=r"(r[70]), "=r"(r[71]), "=r"(r[72]), "=r"(r[73]), "=r"(r[74]), "=r"(r[75]), "=r"(r[76]),
          "=r"(r[77]), "=r"(r[78]), "=r"(r[79]), "=r"(r[80]), "=r"(r[81]), "=r"(r[82]), "=r"(r[83]),
          "=r"(r[84]), "=r"(r[85]), "=r"(r[86]), "=r"(r[87]), "=r"(r[88]), "=r"(r[89]), "=r"(r[90]),
          "=r"(r[91]), "=r"(r[92]), "=r"(r[93]), "=r"(r[94]), "=r"(r[95]), "=r"(r[96]), "=r"(r[97]),
          "=r"(r[98]), "=r"(r[99]), "=r"(r[100]), "=r"(r[101]), "=r"(r[102]), "=r"(r[103]),
          "=r"(r[104]), "=r"(r[105]), "=r"(r[106]), "=r"(r[107]), "=r"(r[108]), "=r"(r[109]),
          "=r"(r[110]), "=r"(r[111]), "=r"(r[112]), "=r"(r[113]), "=r"(r[114]), "=r"(r[115]),
          "=r"(r[116]), "=r"(r[117]), "=r"(r[118]), "=r"(r[119]), "=r"(r[120]), "=r"(r[121]),
          "=r"(r[122]), "=r"(r[123]), "=r"(r[124]), "=r"(r[125]), "=r"(r[126]), "=r"(r[127])
        : "r"(taddr));
  }
  static __device__ __forceinline__ void st(u32 taddr, const u32 (&r)[128]) {
    asm volatile(
        "tcgen05.st.sync.aligned.32x32b.x128.b32 [%0], {%1, %2, %3, %4, %5, %6, %7, %8, %9, %10, "
        "%11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, "
        "%29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, "
        "%47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, "
        "%65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, "
        "%83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, "
        "%100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, "
        "%115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127, %128};\n" ::
            "r"(taddr),
        "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3]), "r"(r[4]), "r"(r[5]), "r"(r[6]), "r"(r[7]),
        "r"(r[8]), "r"(r[9]), "r"(r[10]), "r"(r[11]), "r"(r[12]), "r"(r[13]), "r"(r[14]),
        "r"(r[15]), "r"(r[16]), "r"(r[17]), "r"(r[18]), "r"(r[19]), "r"(r[20]), "r"(r[21]),
        "r"(r[22]), "r"(r[23]), "r"(r[24]), "r"(r[25]), "r"(r[26]), "r"(r[27]), "r"(r[28]),
        "r"(r[29]), "r"(r[30]), "r"(r[31]), "r"(r[32]), "r"(r[33]), "r"(r[34]), "r"(r[35]),
        "r"(r[36]), "r"(r[37]), "r"(r[38]), "r"(r[39]), "r"(r[40]), "r"(r[41]), "r"(r[42]),
        "r"(r[43]), "r"(r[44]), "r"(r[45]), "r"(r[46]), "r"(r[47]), "r"(r[48]), "r"(r[49]),
        "r"(r[50]), "r"(r[51]), "r"(r[52]), "r"(r[53]), "r"(r[54]), "r"(r[55]), "r"(r[56]),
        "r"(r[57]), "r"(r[58]), "r"(r[59]), "r"(r[60]), "r"(r[61]), "r"(r[62]), "r"(r[63]),
        "r"(r[64]), "r"(r[65]), "r"(r[66]), "r"(r[67]), "r"(r[68]), "r"(r[69]), "r"(r[70]),
        "r"(r[71]), "r"(r[72]), "r"(r[73]), "r"(r[74]), "r"(r[75]), "r"(r[76]), "r"(r[77]),
        "r"(r[78]), "r"(r[79]), "r"(r[80]), "r"(r[81]), "r"(r[82]), "r"(r[83]), "r"(r[84]),
        "r"(r[85]), "r"(r[86]), "r"(r[87]), "r"(r[88]), "r"(r[89]), "r"(r[90]), "r"(r[91]),
        "r"(r[92]), "r"(r[93]), "r"(r[94]), "r"(r[95]), "r"(r[96]), "r"(r[97]), "r"(r[98]),
        "r"(r[99]), "r"(r[100]), "r"(r[101]), "r"(r[102]), "r"(r[103]), "r"(r[104]), "r"(r[105]),
        "r"(r[106]), "r"(r[107]), "r"(r[108]), "r"(r[109]), "r"(r[110]), "r"(r[111]), "r"(r[112]),
        "r"(r[113]), "r"(r[114]), "r"(r[115]), "r"(r[116]), "r"(r[117]), "r"(r[118]), "r"(r[119]),
        "r"(r[120]), "r"(r[121]), "r"(r[122]), "r"(r[123]), "r"(r[124]), "r"(r[125]), "r"(r[126]),
        "r"(r[127])
        : "memory");
  }
};
template <int kNum>
struct Tmem16x256bAsm;
template <>
struct Tmem16x256bAsm<1> {
  static __device__ __forceinline__ void ld(u32 (&r)[4], u32 taddr) {
    asm volatile("tcgen05.ld.sync.aligned.16x256b.x1.b32 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(taddr));
  }
};
template <>
struct Tmem16x256bAsm<2> {
  static __device__ __forceinline__ void ld(u32 (&r)[8], u32 taddr) {
    asm volatile("tcgen05.ld.sync.aligned.16x256b.x2.b32 {%0, %1, %2, %3, %4, %5, %6, %7}, [%8];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]), "=r"(r[4]), "=r"(r[5]),
                   "=r"(r[6]), "=r"(r[7])
                 : "r"(taddr));
  }
};
template <>
struct Tmem16x256bAsm<4> {
  static __device__ __forceinline__ void ld(u32 (&r)[16], u32 taddr) {
    asm volatile(
        "tcgen05.ld.sync.aligned.16x256b.x4.b32 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, "
        "%12, %13, %14, %15}, [%16];\n"
        : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]), "=r"(r[4]), "=r"(r[5]), "=r"(r[6]),
          "=r"(r[7]), "=r"(r[8]), "=r"(r[9]), "=r"(r[10]), "=r"(r[11]), "=r"(r[12]), "=r"(r[13]),
          "=r"(r[14]), "=r"(r[15])
        : "r"(taddr));
  }
};
template <>
struct Tmem16x256bAsm<8> {
  static __device__ __forceinline__ void ld(u32 (&r)[32], u32 taddr) {
    asm volatile(
        "tcgen05.ld.sync.aligned.16x256b.x8.b32 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, "
        "%12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, "
        "%30, %31}, [%32];\n"
        : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]), "=r"(r[4]), "=r"(r[5]), "=r"(r[6]),
          "=r"(r[7]), "=r"(r[8]), "=r"(r[9]), "=r"(r[10]), "=r"(r[11]), "=r"(r[12]), "=r"(r[13]),
          "=r"(r[14]), "=r"(r[15]), "=r"(r[16]), "=r"(r[17]), "=r"(r[18]), "=r"(r[19]), "=r"(r[20]),
          "=r"(r[21]), "=r"(r[22]), "=r"(r[23]), "=r"(r[24]), "=r"(r[25]), "=r"(r[26]), "=r"(r[27]),
          "=r"(r[28]), "=r"(r[29]), "=r"(r[30]), "=r"(r[31])
        : "r"(taddr));
  }
};
template <>
struct Tmem16x256bAsm<16> {
  static __device__ __forceinline__ void ld(u32 (&r)[64], u32 taddr) {
    asm volatile(
        "tcgen05.ld.sync.aligned.16x256b.x16.b32 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, "
        "%11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, "
        "%29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, "
        "%47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
        "[%64];\n"
        : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]), "=r"(r[4]), "=r"(r[5]), "=r"(r[6]),
          "=r"(r[7]), "=r"(r[8]), "=r"(r[9]), "=r"(r[10]), "=r"(r[11]), "=r"(r[12]), "=r"(r[13]),
          "=r"(r[14]), "=r"(r[15]), "=r"(r[16]), "=r"(r[17]), "=r"(r[18]), "=r"(r[19]), "=r"(r[20]),
          "=r"(r[21]), "=r"(r[22]), "=r"(r[23]), "=r"(r[24]), "=r"(r[25]), "=r"(r[26]), "=r"(r[27]),
          "=r"(r[28]), "=r"(r[29]), "=r"(r[30]), "=r"(r[31]), "=r"(r[32]), "=r"(r[33]), "=r"(r[34]),
          "=r"(r[35]), "=r"(r[36]), "=r"(r[37]), "=r"(r[38]), "=r"(r[39]), "=r"(r[40]), "=r"(r[41]),
          "=r"(r[42]), "=r"(r[43]), "=r"(r[44]), "=r"(r[45]), "=r"(r[46]), "=r"(r[47]), "=r"(r[48]),
          "=r"(r[49]), "=r"(r[50]), "=r"(r[51]), "=r"(r[52]), "=r"(r[53]), "=r"(r[54]), "=r"(r[55]),
          "=r"(r[56]), "=r"(r[57]), "=r"(r[58]), "=r"(r[59]), "=r"(r[60]), "=r"(r[61]), "=r"(r[62]),
          "=r"(r[63])
        : "r"(taddr));
  }
};
template <>
struct Tmem16x256bAsm<32> {
  static __device__ __forceinline__ void ld(u32 (&r)[128], u32 taddr) {
    asm volatile(
        "tcgen05.ld.sync.aligned.16x256b.x32.b32 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, "
        "%11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, "
        "%29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, "
        "%47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, "
        "%65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, "
        "%83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, "
        "%100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, "
        "%115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, [%128];\n"
        : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]), "=r"(r[4]), "=r"(r[5]), "=r"(r[6]),
          "=r"(r[7]), "=r"(r[8]), "=r"(r[9]), "=r"(r[10]), "=r"(r[11]), "=r"(r[12]), "=r"(r[13]),
          "=r"(r[14]), "=r"(r[15]), "=r"(r[16]), "=r"(r[17]), "=r"(r[18]), "=r"(r[19]), "=r"(r[20]),
          "=r"(r[21]), "=r"(r[22]), "=r"(r[23]), "=r"(r[24]), "=r"(r[25]), "=r"(r[26]), "=r"(r[27]),
          "=r"(r[28]), "=r"(r[29]), "=r"(r[30]), "=r"(r[31]), "=r"(r[32]), "=r"(r[33]), "=r"(r[34]),
          "=r"(r[35]), "=r"(r[36]), "=r"(r[37]), "=r"(r[38]), "=r"(r[39]), "=r"(r[40]), "=r"(r[41]),
          "=r"(r[42]), "=r"(r[43]), "=r"(r[44]), "=r"(r[45]), "=r"(r[46]), "=r"(r[47]), "=r"(r[48]),
          "=r"(r[49]), "=r"(r[50]), "=r"(r[51]), "=r"(r[52]), "=r"(r[53]), "=r"(r[54]), "=r"(r[55]),
          "=r"(r[56]), "=r"(r[57]), "=r"(r[58]), "=r"(r[59]), "=r"(r[60]), "=r"(r[61]), "=r"(r[62]),
          "=r"(r[63]), "=r"(r[64]), "=r"(r[65]), "=r"(r[66]), "=r"(r[67]), "=r"(r[68]), "=r"(r[69]),
          "=r"(r[70]), "=r"(r[71]), "=r"(r[72]), "=r"(r[73]), "=r"(r[74]), "=r"(r[75]), "=r"(r[76]),
          "=r"(r[77]), "=r"(r[78]), "=r"(r[79]), "=r"(r[80]), "=r"(r[81]), "=r"(r[82]), "=r"(r[83]),
          "=r"(r[84]), "=r"(r[85]), "=r"(r[86]), "=r"(r[87]), "=r"(r[88]), "=r"(r[89]), "=r"(r[90]),
          "=r"(r[91]), "=r"(r[92]), "=r"(r[93]), "=r"(r[94]), "=r"(r[95]), "=r"(r[96]), "=r"(r[97]),
          "=r"(r[98]), "=r"(r[99]), "=r"(r[100]), "=r"(r[101]), "=r"(r[102]), "=r"(r[103]),
          "=r"(r[104]), "=r"(r[105]), "=r"(r[106]), "=r"(r[107]), "=r"(r[108]), "=r"(r[109]),
          "=r"(r[110]), "=r"(r[111]), "=r"(r[112]), "=r"(r[113]), "=r"(r[114]), "=r"(r[115]),
          "=r"(r[116]), "=r"(r[117]), "=r"(r[118]), "=r"(r[119]), "=r"(r[120]), "=r"(r[121]),
          "=r"(r[122]), "=r"(r[123]), "=r"(r[124]), "=r"(r[125]), "=r"(r[126]), "=r"(r[127])
        : "r"(taddr));
  }
};

}  // namespace sm100_detail
#endif

#define GG_TMEM_CHECK_N(N)                                                                \
  static_assert((N) == 1 || (N) == 2 || (N) == 4 || (N) == 8 || (N) == 16 || (N) == 32 || \
                    (N) == 64 || (N) == 128,                                              \
                "gg::tcgen05_ld/st_32x32b: N must be a power of two in 1..128")

// r[j] of thread i of the warp = the cell at lane lane(taddr) + i, column
// col(taddr) + j; valid after tcgen05_wait_ld().
template <int N, int kNever = 0>
__device__ __forceinline__ void tcgen05_ld_32x32b(unsigned (&r)[N], unsigned taddr) {
  GG_TMEM_CHECK_N(N);
#if defined(__CUDA_ARCH__)
#if defined(GG_SM100_TCGEN05)
  sm100_detail::TmemAsm<N>::ld(r, taddr);
#else
  static_assert(kNever != 0, "gg::tcgen05_ld_32x32b needs sm_100a / sm_103a");
#endif
#elif defined(GG_EMU)
  gg::emu::sm100::tmem_ld(r, N, taddr);
#endif
}

template <int N, int kNever = 0>
__device__ __forceinline__ void tcgen05_st_32x32b(unsigned taddr, const unsigned (&r)[N]) {
  GG_TMEM_CHECK_N(N);
#if defined(__CUDA_ARCH__)
#if defined(GG_SM100_TCGEN05)
  sm100_detail::TmemAsm<N>::st(taddr, r);
#else
  static_assert(kNever != 0, "gg::tcgen05_st_32x32b needs sm_100a / sm_103a");
#endif
#elif defined(GG_EMU)
  gg::emu::sm100::tmem_st(r, N, taddr);
#endif
}

#undef GG_TMEM_CHECK_N

// Shape 16x256b, .num kNum (1..32, a power of two): 16 lanes x 8 columns per
// .num (PTX ISA, "Matrix fragments for tcgen05.ld", the .16x256b figure):
// thread t of the warp gets, for each repetition i, r[4i], r[4i + 1] from
// lane lane(taddr) + t / 4, columns col(taddr) + 8i + 2 (t % 4) and + 1,
// and r[4i + 2], r[4i + 3] from the lane 8 further: the accumulator pattern
// of mma.sync, the natural read of an M = 64 accumulator's 16 lanes a warp
// (lane(taddr) = 32 (w % 4), or + 16). Valid after tcgen05_wait_ld().
template <int kNum, int kNever = 0>
__device__ __forceinline__ void tcgen05_ld_16x256b(unsigned (&r)[4 * kNum], unsigned taddr) {
  static_assert(kNum == 1 || kNum == 2 || kNum == 4 || kNum == 8 || kNum == 16 || kNum == 32,
                "gg::tcgen05_ld_16x256b: .num must be a power of two in 1..32");
#if defined(__CUDA_ARCH__)
#if defined(GG_SM100_TCGEN05)
  sm100_detail::Tmem16x256bAsm<kNum>::ld(r, taddr);
#else
  static_assert(kNever != 0, "gg::tcgen05_ld_16x256b needs sm_100a / sm_103a");
#endif
#elif defined(GG_EMU)
  gg::emu::sm100::tmem_ld_16x256b(r, kNum, taddr);
#endif
}

// ---------------------------------------------------------------------------
// cta_group::2: the 2-CTA MMA over a CTA pair (PTX ISA, tcgen05 "CTA pair":
// ranks 2i and 2i + 1 of a cluster; docs/cuda-sm100.md, "The 2-CTA MMA").
//
// - tmem_alloc_pair(slot, ncols) / tmem_dealloc_pair(addr, ncols) /
//   tmem_relinquish_alloc_permit_pair(): tcgen05.alloc / dealloc /
//   relinquish_alloc_permit .cta_group::2, issued by a warp of the same warp
//   id in each CTA of the pair, with the same slot: the same columns in both.
// - tcgen05_mma_f16_pair / tcgen05_mma_f8f6f4_pair(d, adesc, bdesc, idesc,
//   accumulate): tcgen05.mma.cta_group::2, issued by ONE thread of the even
//   CTA, M = 128 or 256 per pair (umma::instr_desc's M), N a multiple of 16 in
//   16..256. The descriptors name the same shared-memory offsets in both
//   CTAs: CTA v holds A's rows [v M/2, (v + 1) M/2) and B's rows
//   [v N/2, (v + 1) N/2) (CuTe's SM100_MMA_*_2x1SM_SS: ALayout, BLayout) and
//   gets D's rows [v M/2, (v + 1) M/2) in its TMEM at the same address
//   (tmem_frg_2sm: M = 256: row m at lane m, column n; M = 128: umma::
//   pair_d_cell).
// - tcgen05_commit_pair_multicast(bar, mask): tcgen05.commit.cta_group::2
//   ... .multicast::cluster: one arrival on the mbarrier at bar's offset in
//   every CTA of the 16-bit ctaMask once every earlier MMA of the thread has
//   completed (both CTAs' halves).
// - tma_load_2d_pair(dst, &map, bar, c0, c1) (tma_load_3d_pair: c0, c1, c2)
//   and tma_load_2d_multicast_pair
//   (..., mask): cp.async.bulk.tensor.2d.cta_group::2: the box lands at dst
//   (in the calling CTA, or at dst's offset in every CTA of the mask) and
//   completes on the mbarrier at bar's offset in the pair leader (the even
//   CTA) of each destination, so that the leader's one wait covers both
//   halves (CUTLASS's SM100_TMA_2SM_LOAD: the barrier address with the peer
//   bit, 1 << 24, cleared).

namespace umma {
// The TMEM (lane, column offset) of element (m, n) of CTA v's half of a
// cta_group::2 accumulator of m_total x n_total (m < m_total / 2).
__host__ __device__ constexpr unsigned pair_d_lane(int m_total, int n_total, int m, int n) {
  return m_total == 256 ? static_cast<unsigned>(m)
                        : static_cast<unsigned>(m + 64 * (n / (n_total / 2)));
}
__host__ __device__ constexpr unsigned pair_d_column(int m_total, int n_total, int n) {
  return m_total == 256 ? static_cast<unsigned>(n) : static_cast<unsigned>(n % (n_total / 2));
}
}  // namespace umma

namespace sm100_detail {
// CUTLASS's Sm100MmaPeerBitMask: a shared::cta address with this bit cleared
// names the same offset in the pair leader.
inline constexpr unsigned kPeerBitMask = 0xFEFFFFFFu;
}  // namespace sm100_detail

template <int kNever = 0>
__device__ __forceinline__ void tmem_alloc_pair(unsigned* slot, unsigned ncols) {
#if defined(__CUDA_ARCH__)
#if defined(GG_SM100_TCGEN05)
  asm volatile("tcgen05.alloc.cta_group::2.sync.aligned.shared::cta.b32 [%0], %1;\n" ::"r"(
                   sm100_detail::smem_addr(slot)),
               "r"(ncols)
               : "memory");
#else
  static_assert(kNever != 0, "gg::tmem_alloc_pair needs sm_100a / sm_103a");
#endif
#elif defined(GG_EMU)
  gg::emu::sm100::tmem_alloc_pair(slot, ncols);
#endif
}

template <int kNever = 0>
__device__ __forceinline__ void tmem_dealloc_pair(unsigned taddr, unsigned ncols) {
#if defined(__CUDA_ARCH__)
#if defined(GG_SM100_TCGEN05)
  asm volatile("tcgen05.dealloc.cta_group::2.sync.aligned.b32 %0, %1;\n" ::"r"(taddr), "r"(ncols)
               : "memory");
#else
  static_assert(kNever != 0, "gg::tmem_dealloc_pair needs sm_100a / sm_103a");
#endif
#elif defined(GG_EMU)
  gg::emu::sm100::tmem_dealloc_pair(taddr, ncols);
#endif
}

template <int kNever = 0>
__device__ __forceinline__ void tmem_relinquish_alloc_permit_pair() {
#if defined(__CUDA_ARCH__)
#if defined(GG_SM100_TCGEN05)
  asm volatile("tcgen05.relinquish_alloc_permit.cta_group::2.sync.aligned;\n" ::: "memory");
#else
  static_assert(kNever != 0, "gg::tmem_relinquish_alloc_permit_pair needs sm_100a / sm_103a");
#endif
#elif defined(GG_EMU)
  gg::emu::sm100::tmem_relinquish_pair();
#endif
}

template <int kNever = 0>
__device__ __forceinline__ void tcgen05_mma_f16_pair(unsigned d_tmem, unsigned long long adesc,
                                                     unsigned long long bdesc, unsigned idesc,
                                                     bool accumulate) {
#if defined(__CUDA_ARCH__)
#if defined(GG_SM100_TCGEN05)
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %4, 0;\n"
      "tcgen05.mma.cta_group::2.kind::f16 [%0], %1, %2, %3, p;\n}\n" ::"r"(d_tmem),
      "l"(adesc), "l"(bdesc), "r"(idesc), "r"(accumulate ? 1u : 0u)
      : "memory");
#else
  static_assert(kNever != 0, "gg::tcgen05_mma_f16_pair needs sm_100a / sm_103a");
#endif
#elif defined(GG_EMU)
  gg::emu::sm100::mma_pair(0, d_tmem, adesc, bdesc, idesc, accumulate);
#endif
}

template <int kNever = 0>
__device__ __forceinline__ void tcgen05_mma_f8f6f4_pair(unsigned d_tmem, unsigned long long adesc,
                                                        unsigned long long bdesc, unsigned idesc,
                                                        bool accumulate) {
#if defined(__CUDA_ARCH__)
#if defined(GG_SM100_TCGEN05)
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %4, 0;\n"
      "tcgen05.mma.cta_group::2.kind::f8f6f4 [%0], %1, %2, %3, p;\n}\n" ::"r"(d_tmem),
      "l"(adesc), "l"(bdesc), "r"(idesc), "r"(accumulate ? 1u : 0u)
      : "memory");
#else
  static_assert(kNever != 0, "gg::tcgen05_mma_f8f6f4_pair needs sm_100a / sm_103a");
#endif
#elif defined(GG_EMU)
  gg::emu::sm100::mma_pair(1, d_tmem, adesc, bdesc, idesc, accumulate);
#endif
}

template <int kNever = 0>
__device__ __forceinline__ void tcgen05_commit_pair_multicast(unsigned long long* bar,
                                                              unsigned short cta_mask) {
#if defined(__CUDA_ARCH__)
#if defined(GG_SM100_TCGEN05)
  asm volatile(
      "tcgen05.commit.cta_group::2.mbarrier::arrive::one.shared::cluster.multicast::cluster.b64 "
      "[%0], %1;\n" ::"r"(sm100_detail::smem_addr(bar)),
      "h"(cta_mask)
      : "memory");
#else
  static_assert(kNever != 0, "gg::tcgen05_commit_pair_multicast needs sm_100a / sm_103a");
#endif
#elif defined(GG_EMU)
  gg::emu::sm100::commit_pair(bar, cta_mask);
#endif
}

// (Map: CUtensorMap, a template parameter so that this header needs no
// <cuda.h>.)
template <class Map, int kNever = 0>
__device__ __forceinline__ void tma_load_2d_pair(void* smem_dst, const Map* map,
                                                 unsigned long long* bar, int c0, int c1) {
#if defined(__CUDA_ARCH__)
#if defined(GG_SM100_TCGEN05)
  asm volatile(
      "cp.async.bulk.tensor.2d.cta_group::2.shared::cluster.global.mbarrier::complete_tx::bytes "
      "[%0], [%1, {%3, %4}], [%2];\n" ::"r"(sm100_detail::smem_addr(smem_dst)),
      "l"(reinterpret_cast<unsigned long long>(map)),
      "r"(sm100_detail::smem_addr(bar) & sm100_detail::kPeerBitMask), "r"(c0), "r"(c1)
      : "memory");
#else
  static_assert(kNever != 0, "gg::tma_load_2d_pair needs sm_100a / sm_103a");
#endif
#elif defined(GG_EMU)
  const int c[2] = {c0, c1};
  gg::emu::sm90::tma_load_pair(smem_dst, map, bar, c, 2, 0);
#endif
}

// The 3-D form (a grouped rhs [g, ...]: the local group outermost).
template <class Map, int kNever = 0>
__device__ __forceinline__ void tma_load_3d_pair(void* smem_dst, const Map* map,
                                                 unsigned long long* bar, int c0, int c1, int c2) {
#if defined(__CUDA_ARCH__)
#if defined(GG_SM100_TCGEN05)
  asm volatile(
      "cp.async.bulk.tensor.3d.cta_group::2.shared::cluster.global.mbarrier::complete_tx::bytes "
      "[%0], [%1, {%3, %4, %5}], [%2];\n" ::"r"(sm100_detail::smem_addr(smem_dst)),
      "l"(reinterpret_cast<unsigned long long>(map)),
      "r"(sm100_detail::smem_addr(bar) & sm100_detail::kPeerBitMask), "r"(c0), "r"(c1), "r"(c2)
      : "memory");
#else
  static_assert(kNever != 0, "gg::tma_load_3d_pair needs sm_100a / sm_103a");
#endif
#elif defined(GG_EMU)
  const int c[3] = {c0, c1, c2};
  gg::emu::sm90::tma_load_pair(smem_dst, map, bar, c, 3, 0);
#endif
}

template <class Map, int kNever = 0>
__device__ __forceinline__ void tma_load_2d_multicast_pair(void* smem_dst, const Map* map,
                                                           unsigned long long* bar, int c0, int c1,
                                                           unsigned short cta_mask) {
#if defined(__CUDA_ARCH__)
#if defined(GG_SM100_TCGEN05)
  asm volatile(
      "cp.async.bulk.tensor.2d.cta_group::2.shared::cluster.global.mbarrier::complete_tx::bytes."
      "multicast::cluster [%0], [%1, {%3, %4}], [%2], %5;\n" ::"r"(
          sm100_detail::smem_addr(smem_dst)),
      "l"(reinterpret_cast<unsigned long long>(map)),
      "r"(sm100_detail::smem_addr(bar) & sm100_detail::kPeerBitMask), "r"(c0), "r"(c1),
      "h"(cta_mask)
      : "memory");
#else
  static_assert(kNever != 0, "gg::tma_load_2d_multicast_pair needs sm_100a / sm_103a");
#endif
#elif defined(GG_EMU)
  const int c[2] = {c0, c1};
  gg::emu::sm90::tma_load_pair(smem_dst, map, bar, c, 2, cta_mask);
#endif
}

// ---------------------------------------------------------------------------
// Block-scaled cta_group::2 (docs/cuda-sm100.md, "Block-scaled 2-CTA MMA"):
// M = 256 per pair, issued by ONE thread of the even CTA like
// tcgen05_mma_f8f6f4_pair, completed by tcgen05_commit_pair_multicast.
//
// - tcgen05_cp_32x128b_warpx4_pair(taddr, sdesc):
//   tcgen05.cp.cta_group::2.32x128b.warpx4. Each CTA of the pair copies the
//   512-byte atom at the descriptor's offset of ITS OWN shared memory into
//   ITS OWN TMEM at taddr (lanes and columns as tcgen05_cp_32x128b_warpx4;
//   CuTe's SM100_UTCCP_4x32dp128bit_2cta: ThrID 2, the same source and
//   destination layout in both CTAs). taddr's columns come from
//   tmem_alloc_pair.
// - tcgen05_mma_mxf8f6f4_block_scaled_pair / tcgen05_mma_mxf4_pair
//   / tcgen05_mma_mxf4nvf4_pair(d, adesc, bdesc, idesc, sfa, sfb, acc): the
//   cta_group::2 forms of the block-scaled MMAs (umma::instr_desc_block_scaled
//   with m = 256). A, B and D split as for tcgen05_mma_f8f6f4_pair; CTA v
//   reads the scales of ITS 128 rows of A at sfa and of ALL N rows of B at
//   sfb in ITS OWN TMEM (CuTe's SM100_MMA_MXF8F6F4_2x1SM_SS /
//   MXF4_2x1SM_SS traits at M = 256: tmem_sf_frg "4x1", MMA_ScaleFactor
//   the cta_group::1 MMA of M / 2 x round_up(N, 128)). So each CTA stages
//   its own SFA atom and the whole N's SFB atoms (CUTLASS's TileShape_SF).
// nvcc 13.5 (sm_100a, sm_100f): UTCCP.T.S.2CTA.4, UTCQMMA.2CTA (mxf8f6f4),
// UTCOMMA.2CTA (mxf4), UTCOMMA.2CTA.4X (mxf4nvf4).
#if defined(__CUDA_ARCH_FEAT_SM100_ALL) || defined(__CUDA_ARCH_FEAT_SM103_ALL) || \
    defined(__CUDA_ARCH_SPECIFIC__)
#define GG_SM100_BS2_1X ".scale_vec::1X"
#define GG_SM100_BS2_2X ".scale_vec::2X"
#define GG_SM100_BS2_4X ".scale_vec::4X"
#else
#define GG_SM100_BS2_1X ".block32"
#define GG_SM100_BS2_2X ".block32"
#define GG_SM100_BS2_4X ".block16"
#endif

template <int kNever = 0>
__device__ __forceinline__ void tcgen05_cp_32x128b_warpx4_pair(unsigned taddr,
                                                               unsigned long long sdesc) {
#if defined(__CUDA_ARCH__)
#if defined(GG_SM100_TCGEN05)
  asm volatile("tcgen05.cp.cta_group::2.32x128b.warpx4 [%0], %1;\n" ::"r"(taddr), "l"(sdesc)
               : "memory");
#else
  static_assert(kNever != 0, "gg::tcgen05_cp_32x128b_warpx4_pair needs sm_100a / sm_103a");
#endif
#elif defined(GG_EMU)
  gg::emu::sm100::cp_32x128b_warpx4_pair(taddr, sdesc);
#else
  (void)taddr, (void)sdesc;
#endif
}

#define GG_SM100_BS_PAIR(NAME, KIND_PTX, VEC, KIND)                                                \
  template <int kNever = 0>                                                                        \
  __device__ __forceinline__ void NAME(unsigned d_tmem, unsigned long long adesc,                  \
                                       unsigned long long bdesc, unsigned idesc,                   \
                                       unsigned sfa_tmem, unsigned sfb_tmem, bool accumulate) {    \
    GG_SM100_BS_PAIR_BODY(NAME, KIND_PTX, VEC, KIND)                                               \
  }
#if defined(__CUDA_ARCH__)
#if defined(GG_SM100_TCGEN05)
#define GG_SM100_BS_PAIR_BODY(NAME, KIND_PTX, VEC, KIND)                                           \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %6, 0;\n"                                         \
               "tcgen05.mma.cta_group::2.kind::" KIND_PTX ".block_scale" VEC                       \
               " [%0], %1, %2, %3, [%4], [%5], p;\n}\n" ::"r"(d_tmem),                             \
               "l"(adesc), "l"(bdesc), "r"(idesc), "r"(sfa_tmem), "r"(sfb_tmem),                   \
               "r"(accumulate ? 1u : 0u)                                                           \
               : "memory");
#else
#define GG_SM100_BS_PAIR_BODY(NAME, KIND_PTX, VEC, KIND) \
  static_assert(kNever != 0, "gg::" #NAME " needs sm_100a / sm_103a");
#endif
#elif defined(GG_EMU)
#define GG_SM100_BS_PAIR_BODY(NAME, KIND_PTX, VEC, KIND)                                     \
  gg::emu::sm100::mma_block_scaled_pair(KIND, d_tmem, adesc, bdesc, idesc, sfa_tmem, sfb_tmem, \
                                        accumulate);
#else
#define GG_SM100_BS_PAIR_BODY(NAME, KIND_PTX, VEC, KIND)                                   \
  (void)d_tmem, (void)adesc, (void)bdesc, (void)idesc, (void)sfa_tmem, (void)sfb_tmem, \
      (void)accumulate;
#endif

// kind::mxf8f6f4.block_scale.scale_vec::1X: e4m3 / e5m2 / e2m1, ue8m0, K = 32.
GG_SM100_BS_PAIR(tcgen05_mma_mxf8f6f4_block_scaled_pair, "mxf8f6f4", GG_SM100_BS2_1X, 0)
// kind::mxf4.block_scale.scale_vec::2X: e2m1, ue8m0, K = 64.
GG_SM100_BS_PAIR(tcgen05_mma_mxf4_pair, "mxf4", GG_SM100_BS2_2X, 1)
// kind::mxf4nvf4.block_scale.scale_vec::4X: e2m1, ue4m3 or ue8m0 per 16, K = 64.
GG_SM100_BS_PAIR(tcgen05_mma_mxf4nvf4_pair, "mxf4nvf4", GG_SM100_BS2_4X, 2)

#undef GG_SM100_BS_PAIR
#undef GG_SM100_BS_PAIR_BODY
#undef GG_SM100_BS2_1X
#undef GG_SM100_BS2_2X
#undef GG_SM100_BS2_4X

}  // namespace gg
