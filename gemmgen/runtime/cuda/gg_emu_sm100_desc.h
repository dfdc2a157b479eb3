// gg_emu_sm100_desc.h: the decoding of the tcgen05 descriptors, pure
// functions shared by the parts of the emulator's sm_100a model
// (gg_emu_sm100_*.cc) and only they: shared-memory matrix descriptors and
// the canonical layouts, instruction descriptors (dense and block-scaled)
// with their checks, the accumulator's TMEM lanes, and element values.
// gg_emu_sm100.h describes the model; docs/cuda-sm100.md has the full story.
#pragma once

#include "gg_emu_runner.h"

#include <cfenv>

namespace gg::emu {

namespace sm100 {

inline constexpr unsigned kLanes = 128;
inline constexpr unsigned kColumns = 512;
inline constexpr std::uint32_t kCellPoison = 0xFFFFFFFFu;  // NaN: never written
inline constexpr std::uint32_t kLdPoison = 0x7fa51d1du;    // a signalling NaN ("LD")

// ---------------------------------------------------------------------------
// Matrix descriptors (PTX ISA, tcgen05 "Matrix Descriptors": "Shared Memory
// Descriptor"; the bit table is in gg_primitives_sm100_desc.cuh). Pure
// functions: the tests compare them with CuTe (gg_emu_sm100_decoders.cc).

struct Desc {
  std::uint32_t start, lbo, sbo;  // bytes
  unsigned version, base_offset, lbo_mode, fixed_zero, layout;
};

inline Desc decode_desc(std::uint64_t d) {
  return {static_cast<std::uint32_t>(d & 0x3FFF) << 4,
          static_cast<std::uint32_t>((d >> 16) & 0x3FFF) << 4,
          static_cast<std::uint32_t>((d >> 32) & 0x3FFF) << 4,
          static_cast<unsigned>((d >> 46) & 7),
          static_cast<unsigned>((d >> 49) & 7),
          static_cast<unsigned>((d >> 52) & 1),
          static_cast<unsigned>((d >> 53) & 0xFF),
          static_cast<unsigned>((d >> 61) & 7)};
}

// The swizzle span in bytes of a layout type: 0 none, 1 128B with 32-byte
// atomicity, 2 128B, 4 64B, 6 32B (3, 5, 7 are not layout types).
inline unsigned layout_span(unsigned layout) {
  switch (layout) {
    case 1:
    case 2:
      return 128;
    case 4:
      return 64;
    case 6:
      return 32;
    default:
      return 0;
  }
}

inline const char* layout_name(unsigned layout) {
  switch (layout) {
    case 0:
      return "no swizzle";
    case 1:
      return "128-byte swizzle with 32-byte atomicity";
    case 2:
      return "128-byte swizzle";
    case 4:
      return "64-byte swizzle";
    case 6:
      return "32-byte swizzle";
    default:
      return "a reserved layout type";
  }
}

// Why the emulator does not run descriptor `d` (empty: it does).
inline std::string check_desc(std::uint64_t desc, bool mn_major) {
  const Desc d = decode_desc(desc);
  if (d.version != 1) {
    return format(
        "bits 46-48 are %u, not the fixed constant 0b001 of an sm_100 matrix descriptor (an sm_90 "
        "wgmma descriptor has 0 there)",
        d.version);
  }
  if (d.fixed_zero != 0)
    return format("bits 53-60 are 0x%02x, not the fixed constant 0", d.fixed_zero);
  if (d.layout == 3 || d.layout == 5 || d.layout == 7)
    return format("the swizzling mode (bits 61-63) is %u, which is reserved", d.layout);
  if (d.layout == 1 && !mn_major)
    return "the 128-byte swizzle with 32-byte atomicity is for MN-major operands only";
  if (d.base_offset != 0) {
    return format(
        "the matrix base offset (bits 49-51) is %u; the emulator models only 0 (a start address "
        "on the swizzle pattern's boundary)",
        d.base_offset);
  }
  if (d.lbo_mode != 0)
    return "the leading dimension stride mode (bit 52) is 1 (absolute); the emulator models only 0";
  return "";
}

// The shared address of element (mn, k) of an operand (A: m x k, B: n x k)
// that `d` describes, MN-major when `mn_major` (transpose bit 1), elements
// of `eb` bytes. The canonical layouts (PTX ISA "Shared Memory Matrix
// Layout", in bytes; T = 16 / eb elements per 16 bytes, S the span):
//   K-major,  none:     (mn%8)*16 + (mn/8)*SBO + (k/T)*LBO + (k%T)*eb
//   K-major,  swizzled: (mn%8)*S  + (mn/8)*SBO + k*eb                  (LBO unused)
//   MN-major, none:     (mn%T)*eb + (mn/T)*SBO + (k%8)*16 + (k/8)*LBO
//   MN-major, swizzled: (mn%T)*eb + ((mn/T)%(S/16))*16 + (mn/(T*S/16))*LBO + (k%8)*S + (k/8)*SBO
//   MN-major, 128B with 32-byte atomicity: as the 128B swizzle but with 4
//     rows of K per pattern: ... + (k%4)*128 + (k/4)*SBO
// then the swizzle on the address: Swizzle<log2(S/16),4,3> (bits 4.. ^= bits
// 7..), or Swizzle<2,5,2> for the 32-byte atomicity (bits 5-6 ^= bits 7-8).
inline std::uint32_t operand_address(const Desc& d, bool mn_major, unsigned eb, unsigned mn,
                                     unsigned k) {
  const unsigned t = 16 / eb;
  const unsigned span = layout_span(d.layout);
  std::uint32_t off;
  if (!mn_major) {
    off = span == 0 ? (mn % 8) * 16 + (mn / 8) * d.sbo + (k / t) * d.lbo + (k % t) * eb
                    : (mn % 8) * span + (mn / 8) * d.sbo + k * eb;
  } else if (span == 0) {
    off = (mn % t) * eb + (mn / t) * d.sbo + (k % 8) * 16 + (k / 8) * d.lbo;
  } else if (d.layout == 1) {
    off = (mn % t) * eb + ((mn / t) % 8) * 16 + (mn / (t * 8)) * d.lbo + (k % 4) * 128 +
          (k / 4) * d.sbo;
  } else {
    const unsigned w = span / 16;
    off = (mn % t) * eb + ((mn / t) % w) * 16 + (mn / (t * w)) * d.lbo + (k % 8) * span +
          (k / 8) * d.sbo;
  }
  const std::uint32_t a = (d.start + off) % sm90::kWindow;
  if (span == 0)
    return a;
  if (d.layout == 1)
    return a ^ (((a >> 7) & 3u) << 5);
  return a ^ (((a >> 7) & (span / 16 - 1)) << 4);
}

// ---------------------------------------------------------------------------
// The instruction descriptor (PTX ISA, tcgen05.mma "Instruction descriptor",
// the table of .kind::f16 / tf32 / f8f6f4 / i8; bits in
// gg_primitives_sm100_desc.cuh).

struct Idesc {
  unsigned sparse_sel, sparse, saturate, d_format, a_format, b_format, negate_a, negate_b, a_mn,
      b_mn, n, m, max_shift, reserved;
};

inline Idesc decode_idesc(std::uint32_t i) {
  return {i & 3u,
          (i >> 2) & 1u,
          (i >> 3) & 1u,
          (i >> 4) & 3u,
          (i >> 7) & 7u,
          (i >> 10) & 7u,
          (i >> 13) & 1u,
          (i >> 14) & 1u,
          (i >> 15) & 1u,
          (i >> 16) & 1u,
          ((i >> 17) & 0x3Fu) << 3,
          ((i >> 24) & 0x1Fu) << 4,
          (i >> 30) & 3u,
          i & ((1u << 6) | (1u << 23) | (1u << 29))};
}

inline const char* kind_name(int kind) {
  return kind == 0 ? "tcgen05.mma.cta_group::1.kind::f16" : "tcgen05.mma.cta_group::1.kind::f8f6f4";
}

inline const char* format_name(int kind, unsigned f) {
  if (kind == 0)
    return f == 0 ? "f16" : f == 1 ? "bf16" : f == 2 ? "tf32" : "a reserved format";
  switch (f) {
    case 0:
      return "e4m3";
    case 1:
      return "e5m2";
    case 3:
      return "e2m3";
    case 4:
      return "e3m2";
    case 5:
      return "e2m1";
    default:
      return "a reserved format";
  }
}

// Why the hardware rejects (or the emulator does not model) instruction
// descriptor `idesc` for `kind` (empty: it runs).
inline std::string check_idesc(std::uint32_t idesc, int kind, int group = 1) {
  const Idesc d = decode_idesc(idesc);
  if (d.reserved != 0)
    return format("reserved bits are set (0x%08x of bits 6, 23, 29)", d.reserved);
  if (d.sparse != 0 || d.sparse_sel != 0)
    return "the sparsity bits (0-2) are set: sparse MMA is tcgen05.mma.sp, not modelled";
  if (d.saturate != 0)
    return "the saturate bit (3) is set: it applies to kind::i8 only";
  if (d.max_shift != 0)
    return "the maximum shift (bits 30-31) is set: it applies to tcgen05.mma.ws only";
  if (d.d_format != 1) {
    return d.d_format == 0 ? "D is f16 (bits 4-5 = 0); the emulator models D in f32 only"
                           : format(
                                 "the D format (bits 4-5) is %u, not f16 (0) or f32 (1) for "
                                 "this kind",
                                 d.d_format);
  }
  if (kind == 0) {
    if (d.a_format > 1 || d.b_format > 1) {
      return format(
          "the A / B formats (bits 7-9, 10-12) are %s / %s; kind::f16 takes f16 (0) and bf16 (1)%s",
          format_name(0, d.a_format), format_name(0, d.b_format),
          d.a_format == 2 || d.b_format == 2 ? " (tf32 is kind::tf32)" : "");
    }
    if (d.a_format != d.b_format) {
      return format("A is %s and B is %s: kind::f16 multiplies two operands of one type",
                    format_name(0, d.a_format), format_name(0, d.b_format));
    }
  } else {
    for (unsigned f : {d.a_format, d.b_format}) {
      if (f == 2 || f > 5)
        return format("the A / B format %u is not one of kind::f8f6f4's (bits 7-9, 10-12)", f);
      if (f >= 3) {
        return format("%s operands are not modelled (e4m3 and e5m2 are)", format_name(1, f));
      }
    }
  }
  if (group == 2) {
    // cta_group::2 with A and B in shared memory: M = 128 or 256 per pair,
    // N a multiple of 16 in 16..256 (PTX ISA, tcgen05.mma "Valid shapes";
    // CuTe's SM100_MMA_F16BF16_2x1SM_SS / F8F6F4_2x1SM_SS assert the same).
    if (d.m != 128 && d.m != 256) {
      return format("M = %u (bits 24-28 = %u): cta_group::2 takes M = 128 or 256 (per CTA pair)",
                    d.m, d.m >> 4);
    }
    if (d.n < 16 || d.n > 256 || d.n % 16 != 0) {
      return format("N = %u (bits 17-22 = %u) is not a multiple of 16 in 16..256 (cta_group::2)",
                    d.n, d.n >> 3);
    }
    return "";
  }
  if (d.m != 64 && d.m != 128) {
    return format(
        "M = %u (bits 24-28 = %u): cta_group::1 takes M = 64 or 128 (M = 256 needs cta_group::2)",
        d.m, d.m >> 4);
  }
  // N: a multiple of 8 from 8 to 256 for both M with A and B in shared
  // memory; a multiple of 16 for an 8-bit MN-major B (PTX ISA, tcgen05.mma
  // "Valid shapes"; CuTe's SM100_MMA_F16BF16_SS / SM100_MMA_F8F6F4_SS
  // state the same). The field holds N >> 3, so N = 0 and N > 256 are the
  // other encodings to refuse.
  const unsigned step = kind == 1 && d.b_mn != 0 ? 16 : 8;
  if (d.n < step || d.n > 256 || d.n % step != 0) {
    return format("N = %u (bits 17-22 = %u) is not a multiple of %u in %u..256 (M = %u%s)", d.n,
                  d.n >> 3, step, step, d.m, step == 16 ? ", an 8-bit MN-major B" : "");
  }
  return "";
}

// The TMEM lane of row `m` of a cta_group::1 accumulator of `m_total` rows
// (PTX ISA, "Data path layout organization": layout D for M = 128, row m at
// lane m; layout F for M = 64, the first 16 lanes of each 32-lane quarter);
// column n of D is at column n.
inline unsigned d_lane(unsigned m_total, unsigned m) {
  return m_total == 64 ? 32 * (m / 16) + m % 16 : m;
}

// ---------------------------------------------------------------------------
// Element values.

inline double f16_value(unsigned h) {
  const unsigned e = (h >> 10) & 31u, m = h & 1023u;
  const double s = (h & 0x8000u) ? -1.0 : 1.0;
  if (e == 31)
    return m ? NAN : s * INFINITY;
  return s * (e == 0 ? std::ldexp(m, -24) : std::ldexp(1024 + m, static_cast<int>(e) - 25));
}
inline double bf16_value(unsigned b) {
  const std::uint32_t bits = (b & 0xFFFFu) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}
inline double e4m3_value(unsigned v) {
  const unsigned e = (v >> 3) & 15u, m = v & 7u;
  const double s = (v & 0x80u) ? -1.0 : 1.0;
  if (e == 15 && m == 7)
    return NAN;
  return s * (e == 0 ? std::ldexp(m, -9) : std::ldexp(8 + m, static_cast<int>(e) - 10));
}
inline double e5m2_value(unsigned v) {
  const unsigned e = (v >> 2) & 31u, m = v & 3u;
  const double s = (v & 0x80u) ? -1.0 : 1.0;
  if (e == 31)
    return m ? NAN : s * INFINITY;
  return s * (e == 0 ? std::ldexp(m, -16) : std::ldexp(4 + m, static_cast<int>(e) - 17));
}

// ---------------------------------------------------------------------------
// Block-scaled MMAs (PTX ISA, tcgen05.mma "Block Scaling", the instruction
// descriptor tables for .kind::mxf8f6f4 and for .kind::mxf4 / mxf4nvf4;
// bits in gg_primitives_sm100_desc.cuh). Kinds: 0 mxf8f6f4 (scale_vec::1X), 1
// mxf4 (2X), 2 mxf4nvf4 (4X).

struct BsIdesc {
  unsigned sfb_id, a_format, b_format, negate_a, negate_b, a_mn, b_mn, n, scale_format, m, sfa_id,
      sparse, reserved, k96;
};

inline BsIdesc decode_bs_idesc(std::uint32_t i, int kind) {
  const std::uint32_t reserved_mask =
      3u | (1u << 3) | (1u << 6) | (7u << 24) | (kind == 0 ? (1u << 31) : (1u << 12));
  return {(i >> 4) & 3u,
          (i >> 7) & 7u,
          kind == 0 ? (i >> 10) & 7u : (i >> 10) & 3u,
          (i >> 13) & 1u,
          (i >> 14) & 1u,
          (i >> 15) & 1u,
          (i >> 16) & 1u,
          ((i >> 17) & 0x3Fu) << 3,
          (i >> 23) & 1u,
          ((i >> 27) & 3u) << 7,
          (i >> 29) & 3u,
          (i >> 2) & 1u,
          i & reserved_mask,
          kind == 0 ? 0u : (i >> 31) & 1u};
}

inline const char* bs_kind_name(int kind, int group = 1) {
  switch (kind) {
    case 0:
      return group == 2 ? "tcgen05.mma.cta_group::2.kind::mxf8f6f4.block_scale.scale_vec::1X"
                        : "tcgen05.mma.cta_group::1.kind::mxf8f6f4.block_scale.scale_vec::1X";
    case 1:
      return group == 2 ? "tcgen05.mma.cta_group::2.kind::mxf4.block_scale.scale_vec::2X"
                        : "tcgen05.mma.cta_group::1.kind::mxf4.block_scale.scale_vec::2X";
    default:
      return group == 2 ? "tcgen05.mma.cta_group::2.kind::mxf4nvf4.block_scale.scale_vec::4X"
                        : "tcgen05.mma.cta_group::1.kind::mxf4nvf4.block_scale.scale_vec::4X";
  }
}

// Scales per row of one MMA (the N of scale_vec::NX) and K of one MMA.
inline unsigned bs_vec(int kind) {
  return kind == 0 ? 1u : kind == 1 ? 2u : 4u;
}
inline unsigned bs_k(int kind) {
  return kind == 0 ? 32u : 64u;
}

// Why the hardware rejects (or the emulator does not model) block-scaled
// descriptor `idesc` for `kind` (empty: it runs).
// group 2: a cta_group::2 MMA (M = 256 per pair modelled; docs/cuda-sm100.md,
// "Block-scaled 2-CTA MMA").
inline std::string check_bs_idesc(std::uint32_t idesc, int kind, int group = 1) {
  const BsIdesc d = decode_bs_idesc(idesc, kind);
  if (d.reserved != 0)
    return format("reserved bits are set (0x%08x)", d.reserved);
  if (d.sparse != 0)
    return "the sparsity bit (2) is set: sparse MMA is tcgen05.mma.sp, not modelled";
  if (d.k96 != 0) {
    return group == 2 ? "bit 31 (K = 96) is set: the 256 x N x 96 shape is not modelled"
                      : "bit 31 (K = 96) is set: dense K = 96 is a cta_group::2 shape (256 x N x 96)";
  }
  if (kind == 0) {
    for (unsigned f : {d.a_format, d.b_format}) {
      if (f == 2 || f > 5)
        return format("the A / B format %u is not one of kind::mxf8f6f4's (bits 7-9, 10-12)", f);
      if (f == 3 || f == 4)
        return format("%s operands are not modelled (e4m3, e5m2 and e2m1 are)",
                      f == 3 ? "e2m3" : "e3m2");
    }
    if ((d.a_format == 5 && d.a_mn != 0) || (d.b_format == 5 && d.b_mn != 0))
      return "an e2m1 operand is MN-major (transpose bit 15 / 16 set): 4-bit operands are K-major "
             "only";
    if (d.scale_format != 1)
      return "the scale format (bit 23) is 0 (ue4m3): kind::mxf8f6f4 takes ue8m0 scales (bit 23 = "
             "1)";
  } else {
    if (d.a_format != 1 || d.b_format != 1) {
      return format("the A / B formats (bits 7-9, 10-11) are %u / %u: kind::%s takes e2m1, code 1",
                    d.a_format, d.b_format, kind == 1 ? "mxf4" : "mxf4nvf4");
    }
    if (d.a_mn != 0 || d.b_mn != 0)
      return format("a transpose bit (15 / 16) is set: kind::%s operands are K-major only",
                    kind == 1 ? "mxf4" : "mxf4nvf4");
    if (kind == 1 && d.scale_format != 1)
      return "the scale format (bit 23) is 0 (ue4m3): kind::mxf4 takes ue8m0 scales (bit 23 = 1)";
  }
  if (group == 2) {
    // cta_group::2: M = 256 per pair (each CTA 128 rows of A and of D, its
    // scale factors in CuTe's "4x1" TMEM layout); M = 128 per pair (the
    // "2x2" layout of B's scales) is not modelled. N a multiple of 16 in
    // 16..256 (each CTA holds N / 2 rows of B).
    if (d.m != 256) {
      return d.m == 128 ? "M = 128 per pair (bits 27-28 = 1): the 2x2 scale factor layout of a "
                          "cta_group::2 M = 128 MMA is not modelled (M = 256 is)"
                        : format("M (bits 27-28 = %u) is not 256: a cta_group::2 block-scaled MMA "
                                 "is modelled at M = 256 per pair",
                                 d.m >> 7);
    }
    if (d.n < 16 || d.n > 256 || d.n % 16 != 0) {
      return format("N = %u (bits 17-22 = %u) is not a multiple of 16 in 16..256 (cta_group::2)",
                    d.n, d.n >> 3);
    }
  } else if (d.m != 128) {
    return d.m == 256 ? "M = 256 (bits 27-28 = 2) needs cta_group::2"
                      : format(
                            "M (bits 27-28 = %u) is not 128: cta_group::1 block-scaled MMAs are "
                            "128 x N",
                            d.m >> 7);
  }
  const unsigned step = kind == 0 && d.b_mn != 0 ? 16 : 8;
  if (group == 1 && (d.n < step || d.n > 256 || d.n % step != 0)) {
    return format("N = %u (bits 17-22 = %u) is not a multiple of %u in %u..256", d.n, d.n >> 3,
                  step, step);
  }
  const unsigned vec = bs_vec(kind);
  for (int which = 0; which < 2; ++which) {
    const unsigned id = which == 0 ? d.sfa_id : d.sfb_id;
    if ((vec == 2 && id % 2 != 0) || (vec == 4 && id != 0)) {
      return format("the scale factor %s id (bits %s) is %u: scale_vec::%uX takes %s",
                    which == 0 ? "A" : "B", which == 0 ? "29-30" : "4-5", id, vec,
                    vec == 2 ? "0 or 2 (a half-word)" : "0 only");
    }
  }
  return "";
}

// The TMEM cell (lane, column relative to the scale address, byte of the
// word) of the scale of row `row` and K block `block` of one MMA (PTX ISA,
// "Scale Factor A ID" / "B ID"; CuTe's tmem_sf_frg): column row / 32, lane
// row % 32 in each lane quarter, byte id + block.
inline void sf_cell(unsigned row, unsigned block, unsigned id, unsigned quarter, unsigned* lane,
                    unsigned* column, unsigned* byte) {
  *lane = row % 32 + 32 * quarter;
  *column = row / 32;
  *byte = id + block;
}

inline double e8m0_value(unsigned v) {
  return v == 255 ? NAN : std::ldexp(1.0, static_cast<int>(v) - 127);
}
inline double e2m1_value(unsigned v) {
  static constexpr double kMag[8] = {0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0};
  return (v & 8u) ? -kMag[v & 7u] : kMag[v & 7u];
}

// The byte-K position of element k of a block-scaled operand and whether it
// is the high nibble: 8-bit elements at k; kind::mxf8f6f4's e2m1 16 to the
// first 8 bytes of each 16 ("Optional Decompression": 16 4-bit elements
// followed by 8 bytes of padding); kind::mxf4*'s e2m1 two a byte ("Packing
// format used for matrix A and B by .kind::mxf4 and .kind::mxf4nvf4 in
// Shared Memory"); the low nibble first.
inline unsigned bs_pos(int kind, unsigned format, unsigned k, bool* high) {
  if (kind == 0 && format != 5) {
    *high = false;
    return k;
  }
  *high = (k % 2) != 0;
  return kind == 0 ? (k / 16) * 16 + (k % 16) / 2 : k / 2;
}

// Where tcgen05.cp.32x128b.warpx4 puts byte `byte` (0..15) of source row
// `row` (0..31) in lane quarter `quarter` (PTX ISA "tcgen05.cp", shape
// .32x128b, multicast .warpx4; CuTe's SM100_UTCCP_4x32dp128bit traits):
// lane row + 32 quarter, column byte / 4, byte byte % 4 of the word.
inline void cp_cell(unsigned row, unsigned byte, unsigned quarter, unsigned* lane, unsigned* column,
                    unsigned* byte_in_word) {
  *lane = row + 32 * quarter;
  *column = byte / 4;
  *byte_in_word = byte % 4;
}

// The TMEM cell of element (m, n) of CTA v's half of a cta_group::2 D of
// m_total x n_total (m < m_total / 2): CuTe's tmem_frg_2sm ("4x1" for M =
// 256: lane m, column n; "2x2" for M = 128: the N halves side by side in
// lanes 0-63 and 64-127, column n % (N / 2)).
inline void pair_d_cell(unsigned m_total, unsigned n_total, unsigned m, unsigned n, unsigned* lane,
                        unsigned* column) {
  if (m_total == 256) {
    *lane = m;
    *column = n;
  } else {
    *lane = m + 64 * (n / (n_total / 2));
    *column = n % (n_total / 2);
  }
}

}  // namespace sm100

}  // namespace gg::emu
