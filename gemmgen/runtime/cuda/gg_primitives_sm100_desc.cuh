// gg_primitives_sm100_desc.cuh: the tcgen05 descriptors and TMEM
// addresses (gg::umma: shared-memory matrix descriptors, instruction
// descriptors dense and block-scaled, the accumulator's and the scales' TMEM
// cells) and make_umma_desc.
// Part of gg_primitives_sm100.cuh, which includes it after defining
// GG_SM100_TCGEN05: include that header, not this one.
#pragma once

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

// Scales per row of one MMA of the block-scaled primitives, the N of their
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

}  // namespace gg
