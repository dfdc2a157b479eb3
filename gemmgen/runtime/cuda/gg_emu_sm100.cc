// gg_emu_sm100.cc: the emulator's model of tensor memory and tcgen05.mma
// (gg_emu_sm100.h describes it; docs/cuda-sm100.md has the full story),
// compiled once per build mode into the core objects. The mbarriers, the
// async proxy and the TMA loads are the sm90 tier's (gg_emu_sm90.cc).
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
// Descriptor"; the bit table is in gg_primitives_sm100.cuh). Pure
// functions: the tests compare them with CuTe (the exports at the end).

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
// gg_primitives_sm100.cuh).

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
// bits in gg_primitives_sm100.cuh). Kinds: 0 mxf8f6f4 (scale_vec::1X), 1
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

// ---------------------------------------------------------------------------
// Per-block state.

struct Alloc {
  unsigned column, ncols, warp;
  unsigned group = 1;  // tcgen05.alloc.cta_group::<group>
};

struct Commit {
  std::uint32_t barrier;
  unsigned long long phase;  // the barrier phase the commit's arrival counts in
  // The CTA of the barrier (a cta_group::2 multicast commit arrives in other
  // CTAs of the cluster); null: the CTA that keeps the op.
  const BlockRunner* cta = nullptr;
};

struct MmaOp {
  unsigned id, thread, m, n, column, lane0;
  int kind;
  std::vector<sm90::Range> reads;    // block offsets the op read
  std::vector<unsigned char> bytes;  // what it read there
  std::vector<Commit> commits;       // every tcgen05.commit of its thread after it
  const char* name = "tcgen05.mma";  // or "tcgen05.cp"
  std::vector<std::size_t> cells;    // a tcgen05.cp's cells (an MMA's are its D, m x n)
  // A cta_group::2 op: the cluster rank of the CTA whose thread issued it
  // (its record in each CTA of the pair holds that CTA's reads and cells);
  // -1 for an op of this CTA.
  int issuer = -1;
};

// A cta_group::2 op retired (its commit's phase waited on), kept by the CTA
// whose shared memory it read until a CTA that observed that phase writes
// there: the CTAs whose threads waited on a phase covering it. A TMA load
// into that memory issued by a CTA not among them is reported (its stage
// was released to it by no commit covering the op).
struct PairRetired {
  std::vector<sm90::Range> reads;
  const char* name;
  unsigned thread;
  std::vector<Commit> commits;
  std::vector<const BlockRunner*> observers;
  std::uint32_t lo, hi;  // the span of `reads`
};

struct LdPending {
  unsigned* r;
  unsigned n;
  std::vector<std::uint32_t> values;
};

// TMEM columns [lo, hi) that thread `thread` read or wrote (tcgen05.ld /
// st) before it arrived on `barrier` in `phase` with no
// tcgen05.fence::before_thread_sync in between.
struct Unfenced {
  std::uint32_t barrier;
  unsigned long long phase;
  unsigned thread, lo, hi;
  const char* op;
};

struct Sm100Thread {
  std::vector<LdPending> lds;
  // tcgen05.ld / st column ranges since the last fence::before_thread_sync.
  std::vector<Unfenced> unfenced;
  // The unfenced accesses of the arrivals this thread's waits observed.
  std::vector<Unfenced> inherited;
  bool st_pending = false;
  unsigned fence_epoch = 0;  // the block's retirement epoch at its last fence::after_thread_sync
  std::string wait_text;
};

}  // namespace sm100

struct Sm100Block {
  std::vector<std::uint32_t> cells;    // kLanes x kColumns, lane-major
  std::vector<unsigned> pending;       // per cell: the id of the op that still writes it (0: none)
  std::vector<unsigned> epoch;         // per cell: the retirement epoch that wrote it
  std::vector<unsigned char> written;  // per cell: written since its allocation (st, mma, cp)
  std::vector<unsigned char> unread;   // per cell: an MMA's result no tcgen05.ld has read yet
  std::vector<sm100::Alloc> allocs;    // live allocations
  std::vector<sm100::Alloc> freed;     // freed ones (for the double-free report)
  std::vector<sm100::MmaOp> ops;       // in flight, in issue order
  std::vector<sm100::Sm100Thread> threads;
  std::vector<sm100::Unfenced> arrivals;  // unfenced accesses before an mbarrier arrival
  std::vector<sm100::PairRetired> pair_retired;
  unsigned next_id = 1;
  unsigned retire_epoch = 0;
  // Per TMEM lane: the last retirement epoch handed back, the fence_epoch of
  // the latest tcgen05.fence::before_thread_sync of a thread whose lane it
  // is (32 (warp % 4) + lane: an epilogue thread's, after it waited on the
  // accumulator's commit and fenced, before its arrival that gives the
  // accumulator back). A cell of that lane an MMA retired into at or before
  // it may be overwritten unread: the thread gave up its values (the idle
  // pair of a cluster, whose tile lies past n, stores nothing).
  std::vector<unsigned> handback;
  bool relinquished = false;
  // A warp waiting in tcgen05.alloc: its columns (0: none), for the report.
  std::vector<unsigned> alloc_waits;
  bool used = false;
};

namespace sm100 {

[[noreturn]] inline void tsan_unsupported() {
  fail(
      "the tcgen05 primitives (TMEM, tcgen05.mma) are modelled in fiber mode only, not in TSan "
      "mode");
}

inline BlockRunner& runner() {
  return *current().runner;
}

inline void require_arch(const char* op) {
  static const bool ok = [] {
    const std::string a = device_arch();
    return a == "sm_100a" || a == "sm_103a" || a == "sm_100f" || a == "sm_103f";
  }();
  if (!ok)
    fail("%s needs sm_100a or sm_103a; the emulated device is %s", op, device_arch());
}

inline Sm100Block& block() {
#if defined(GG_EMU_TSAN)
  tsan_unsupported();
#else
  BlockRunner& r = runner();
  if (r.sm100 == nullptr)
    r.sm100 = new Sm100Block();
  Sm100Block& b = *r.sm100;
  if (!b.used) {
    // A new block on this runner: nothing of the last one's TMEM carries over.
    b.allocs.clear();
    b.freed.clear();
    b.ops.clear();
    b.arrivals.clear();
    b.pair_retired.clear();
    b.next_id = 1;
    b.retire_epoch = 0;
    b.handback.assign(kLanes, 0);
    b.relinquished = false;
    b.cells.assign(kLanes * kColumns, kCellPoison);
    b.pending.assign(kLanes * kColumns, 0);
    b.epoch.assign(kLanes * kColumns, 0);
    b.written.assign(kLanes * kColumns, 0);
    b.unread.assign(kLanes * kColumns, 0);
    b.threads.assign(r.num_threads(), Sm100Thread{});
    b.alloc_waits.assign((r.num_threads() + 31) / 32, 0);
    b.used = true;
  }
  return b;
#endif
}

inline Sm100Thread& me() {
  return block().threads[current().linear];
}

inline std::size_t cell(unsigned lane, unsigned column) {
  return static_cast<std::size_t>(lane) * kColumns + column;
}

// The live allocation holding `column`, or null.
inline const Alloc* allocation_of(const Sm100Block& b, unsigned column) {
  for (const Alloc& a : b.allocs) {
    if (column >= a.column && column < a.column + a.ncols)
      return &a;
  }
  return nullptr;
}

inline std::string describe_allocs(const Sm100Block& b) {
  if (b.allocs.empty())
    return "no columns are allocated";
  std::string s;
  unsigned total = 0;
  for (const Alloc& a : b.allocs) {
    s += format("%s[%u, %u) by warp %u", s.empty() ? "" : ", ", a.column, a.column + a.ncols,
                a.warp);
    total += a.ncols;
  }
  return format("%u of 512 columns are allocated: %s", total, s.c_str());
}

// Columns [column, column + n) must lie in live allocations.
inline void check_columns(const Sm100Block& b, unsigned column, unsigned n, const char* op) {
  for (unsigned c = column; c < column + n; ++c) {
    if (c >= kColumns || allocation_of(b, c) == nullptr) {
      fail("%s accesses TMEM column %u (columns %u..%u), outside every allocation (%s)", op, c,
           column, column + n - 1, describe_allocs(b).c_str());
    }
  }
}

inline void check_ncols(unsigned ncols, const char* op) {
  if (ncols < 32 || ncols > 512 || (ncols & (ncols - 1)) != 0)
    fail("%s: %u columns is not a power of two in 32..512", op, ncols);
}

// A tcgen05.mma / st / dealloc by this thread writing TMEM columns [lo, hi)
// after it waited on a barrier phase that another thread arrived on right
// after tcgen05.ld / st of those columns, without
// tcgen05.fence::before_thread_sync (PTX ISA, "tcgen05.fence": the
// thread-sync orders nothing of the earlier asynchronous tcgen05 accesses).
inline void check_inherited(unsigned lo, unsigned hi, const char* op) {
  for (const Unfenced& u : me().inherited) {
    if (u.lo < hi && lo < u.hi && u.thread != current().linear) {
      fail(
          "missing tcgen05.fence::before_thread_sync: thread %u accessed TMEM columns [%u, %u) "
          "with %s, then arrived on the mbarrier at 0x%05x (phase %llu) without a "
          "tcgen05.fence::before_thread_sync; this thread waited on that phase and its %s writes "
          "columns [%u, %u), unordered with that access",
          u.thread, u.lo, u.hi, u.op, u.barrier, u.phase, op, lo, hi);
    }
  }
}

// An MMA starting a fresh accumulation (enable-input-d false) overwrites its D
// cells; cell `c` (lane, column) must not hold an earlier MMA's result that
// no thread has read since (tcgen05.ld) nor handed back (the lane's
// handback epoch: its thread waited on the commit, fenced after and before
// thread sync, and so gave the values up unread): that accumulator went
// back to the MMA thread before its epilogue had read it. (A wait on the
// commit's phase alone retires the op but does not read it: in a CTA pair
// the leader's MMAs overwrite the peer's accumulator whatever the leader's
// own epilogue did.) `where`: the CTA of the cell, for the report ("" in a
// 1-CTA block).
inline void check_overwrite(const Sm100Block& b, std::size_t c, const char* op, const char* where) {
  if (b.unread[c] == 0 ||
      (b.pending[c] == 0 && b.epoch[c] != 0 && b.epoch[c] <= b.handback[c / kColumns]))
    return;
  fail(
      "%s overwrites TMEM lane %zu column %zu%s (a fresh accumulation, enable-input-d false), "
      "which holds an earlier MMA's result that no thread%s has read with tcgen05.ld: the "
      "accumulator went back to the MMA thread before its epilogue read it (the MMA thread's "
      "wait for the epilogue's arrivals missing or short of some, or an epilogue that read "
      "before waiting for the accumulator's commit)",
      op, c / kColumns, c % kColumns, where, where);
}

// .sync.aligned: every lane of the (whole) warp executes it with the same operands.
struct Agree {
  const char* op;
  unsigned a, b;
};

inline void agree(const char* op, unsigned a, unsigned b) {
  const ThreadCtx& t = current();
  if (active_lanes(t) != 0xffffffffu)
    fail("%s: warp %u of the block is not a whole warp of 32 threads", op, t.warp);
  warp_collective<Agree, int>(
      op, 0xffffffffu, Agree{op, a, b}, [](unsigned lane, const Agree* const* ins) -> int {
        for (unsigned l = 0; l < 32; ++l) {
          if (ins[l]->a != ins[lane]->a || ins[l]->b != ins[lane]->b) {
            fail(
                "%s: lanes %u and %u of the warp pass different operands "
                "(0x%x, %u and 0x%x, %u); .sync.aligned needs the same",
                ins[lane]->op, l, lane, ins[l]->a, ins[l]->b, ins[lane]->a, ins[lane]->b);
          }
        }
        return 0;
      });
}

// ---------------------------------------------------------------------------
// TMEM allocation.

struct FitArg {
  const Sm100Block* b;
  unsigned ncols;
};

// The lowest column of a free run of `ncols` columns aligned to ncols, or kColumns.
inline unsigned find_free(const Sm100Block& b, unsigned ncols) {
  for (unsigned c = 0; c + ncols <= kColumns; c += ncols) {
    bool free = true;
    for (const Alloc& a : b.allocs)
      free = free && (a.column + a.ncols <= c || c + ncols <= a.column);
    if (free)
      return c;
  }
  return kColumns;
}

void tmem_alloc_group(unsigned* slot, unsigned ncols, unsigned group, const char* kOp) {
  require_arch(kOp);
  agree(kOp, addr_of(slot), ncols);
  const ThreadCtx& t = current();
  if (t.lane == 0) {
    check_ncols(ncols, kOp);
    if (!runner().is_shared(slot, 4) || reinterpret_cast<std::uintptr_t>(slot) % 4 != 0)
      fail("%s: the address slot %p is not 4-byte aligned shared memory", kOp,
           static_cast<void*>(slot));
    Sm100Block& b = block();
    if (b.relinquished) {
      fail(
          "%s after tcgen05.relinquish_alloc_permit: the block gave up its right to allocate TMEM "
          "(warp %u asks for %u columns)",
          kOp, t.warp, ncols);
    }
    if (find_free(b, ncols) == kColumns) {
      b.alloc_waits[t.warp] = ncols;
      Sm100Thread& u = me();
      u.wait_text =
          format("tcgen05.alloc of %u TMEM columns (%s)", ncols, describe_allocs(b).c_str());
      const FitArg arg{&b, ncols};
      runner().wait_until(
          current(), u.wait_text.c_str(),
          [](const void* p) {
            const auto* f = static_cast<const FitArg*>(p);
            return find_free(*f->b, f->ncols) != kColumns;
          },
          &arg);
      b.alloc_waits[t.warp] = 0;
    }
    const unsigned column = find_free(b, ncols);
    if (group == 2) {
      // The pair's allocation: the same columns in both CTAs (each CTA's
      // warp of the same warp id issues it; the emulator allocates in each
      // CTA's own TMEM when its warp does, and checks that they agree).
      const BlockRunner& peer = *runner().cluster()->ctas[runner().cluster_rank() ^ 1u];
      if (peer.sm100 != nullptr && peer.sm100->used) {
        for (const Alloc& a : peer.sm100->allocs) {
          if (a.group == 2 && a.warp == t.warp && a.ncols == ncols && a.column != column) {
            fail("%s: this CTA's free columns give [%u, %u), but the pair peer (CTA rank %u) got "
                 "[%u, %u): a CTA pair allocates the same columns in both",
                 kOp, column, column + ncols, runner().cluster_rank() ^ 1u, a.column,
                 a.column + ncols);
          }
        }
      }
    }
    b.allocs.push_back({column, ncols, t.warp, group});
    std::erase_if(b.freed, [&](const Alloc& a) {
      return a.column < column + ncols && column < a.column + a.ncols;
    });
    for (unsigned lane = 0; lane < kLanes; ++lane) {
      for (unsigned c = column; c < column + ncols; ++c) {
        b.cells[cell(lane, c)] = kCellPoison;
        b.epoch[cell(lane, c)] = 0;
        b.written[cell(lane, c)] = 0;
        b.unread[cell(lane, c)] = 0;
      }
    }
    *slot = column;  // lane 0, the first column
  }
  syncwarp(0xffffffffu);  // the other lanes see the slot after lane 0 wrote it
}

void tmem_alloc(unsigned* slot, unsigned ncols) {
  tmem_alloc_group(slot, ncols, 1, "tcgen05.alloc");
}

void tmem_dealloc_named(unsigned taddr, unsigned ncols, const char* kOp) {
  require_arch(kOp);
  agree(kOp, taddr, ncols);
  const ThreadCtx& t = current();
  if (t.lane == 0) {
    check_ncols(ncols, kOp);
    Sm100Block& b = block();
    const unsigned column = taddr & 0xFFFFu, lane = taddr >> 16;
    if (lane != 0)
      fail("%s: the address 0x%08x names lane %u; an allocation starts at lane 0", kOp, taddr,
           lane);
    auto it = std::find_if(b.allocs.begin(), b.allocs.end(),
                           [&](const Alloc& a) { return a.column == column && a.ncols == ncols; });
    if (it == b.allocs.end()) {
      for (const Alloc& a : b.freed) {
        if (a.column == column && a.ncols == ncols) {
          fail(
              "%s of TMEM columns [%u, %u), which were already freed (allocated by warp %u): a "
              "double free (%s)",
              kOp, column, column + ncols, a.warp, describe_allocs(b).c_str());
        }
      }
      fail("%s of TMEM columns [%u, %u), which are not one allocation (%s)", kOp, column,
           column + ncols, describe_allocs(b).c_str());
    }
    check_inherited(column, column + ncols, kOp);
    for (unsigned l = 0; l < kLanes; ++l) {
      for (unsigned c = column; c < column + ncols; ++c) {
        if (b.pending[cell(l, c)] != 0) {
          fail(
              "%s of TMEM columns [%u, %u) while a tcgen05.mma still writes lane %u column %u: "
              "wait on its tcgen05.commit's mbarrier phase first",
              kOp, column, column + ncols, l, c);
        }
      }
    }
    b.freed.push_back(*it);
    b.allocs.erase(it);
    runner().wake_waiters();
  }
  syncwarp(0xffffffffu);
}

void tmem_dealloc(unsigned taddr, unsigned ncols) {
  tmem_dealloc_named(taddr, ncols, "tcgen05.dealloc");
}

void tmem_relinquish() {
  static constexpr const char* kOp = "tcgen05.relinquish_alloc_permit";
  require_arch(kOp);
  agree(kOp, 0, 0);
  if (current().lane == 0)
    block().relinquished = true;
  syncwarp(0xffffffffu);
}

void fence_before() {
  require_arch("tcgen05.fence::before_thread_sync");
  Sm100Block& b = block();
  Sm100Thread& t = b.threads[current().linear];
  t.unfenced.clear();
  const unsigned lane = 32 * ((current().linear / 32) % 4) + current().linear % 32;
  b.handback[lane] = std::max(b.handback[lane], t.fence_epoch);
}

void fence_after() {
  require_arch("tcgen05.fence::after_thread_sync");
  Sm100Block& b = block();
  b.threads[current().linear].fence_epoch = b.retire_epoch;
}

// ---------------------------------------------------------------------------
// tcgen05.mma.

// The shared memory an operand reads: ranges of block offsets.
inline void operand_reads(std::vector<sm90::Range>& out, const Desc& d, bool mn_major, unsigned eb,
                          unsigned rows, unsigned k, std::uint32_t base) {
  for (unsigned mn = 0; mn < rows; ++mn) {
    for (unsigned kk = 0; kk < k; ++kk) {
      const std::uint32_t a = (operand_address(d, mn_major, eb, mn, kk) - base) % sm90::kWindow;
      if (!out.empty() && out.back().hi == a) {
        out.back().hi = a + eb;
      } else {
        out.push_back({a, a + eb});
      }
    }
  }
}

inline std::string commits_text(const std::vector<Commit>& commits) {
  if (commits.empty())
    return "it has no tcgen05.commit yet";
  std::string s;
  for (const Commit& c : commits) {
    s += format("%smbarrier at 0x%05x phase %llu", s.empty() ? "" : ", ", c.barrier, c.phase);
    if (c.cta != nullptr)
      s += format(" of CTA rank %u", c.cta->cluster_rank());
  }
  return "its tcgen05.commit arrives on the " + s;
}

inline std::string commits_text(const MmaOp& op) {
  return commits_text(op.commits);
}

inline const MmaOp* op_by_id(const Sm100Block& b, unsigned id) {
  for (const MmaOp& op : b.ops) {
    if (op.id == id)
      return &op;
  }
  return nullptr;
}

void mma(int kind, unsigned d_tmem, unsigned long long adesc, unsigned long long bdesc,
         unsigned idesc, bool accumulate) {
  const char* op_name = kind_name(kind);
  require_arch(op_name);
  const std::string bad = check_idesc(idesc, kind);
  if (!bad.empty())
    fail("%s: instruction descriptor 0x%08x: %s", op_name, idesc, bad.c_str());
  const Idesc id = decode_idesc(idesc);
  const bool a_mn = id.a_mn != 0, b_mn = id.b_mn != 0;
  for (int which = 0; which < 2; ++which) {
    const std::string why = check_desc(which == 0 ? adesc : bdesc, which == 0 ? a_mn : b_mn);
    if (!why.empty()) {
      fail("%s: the %s matrix descriptor 0x%016llx: %s", op_name, which == 0 ? "A" : "B",
           which == 0 ? adesc : bdesc, why.c_str());
    }
  }
  Sm100Block& b = block();
  const unsigned tid = current().linear;
  const unsigned lane0 = d_tmem >> 16, column = d_tmem & 0xFFFFu;
  if (!(lane0 == 0 || (id.m == 64 && lane0 == 16))) {
    fail("%s: the D address 0x%08x names lane %u; an M = %u accumulator starts at lane 0%s",
         op_name, d_tmem, lane0, id.m, id.m == 64 ? " or 16" : "");
  }
  check_columns(b, column, id.n, op_name);
  check_inherited(column, column + id.n, op_name);
  for (unsigned m = 0; m < id.m; ++m) {
    for (unsigned n = 0; n < id.n; ++n) {
      const unsigned p = b.pending[cell(lane0 + d_lane(id.m, m), column + n)];
      const MmaOp* other = p != 0 ? op_by_id(b, p) : nullptr;
      if (other != nullptr && other->thread != tid) {
        fail(
            "%s writes TMEM lane %u column %u, which a tcgen05.mma of thread %u still writes "
            "(tcgen05.mma of different threads are not ordered)",
            op_name, lane0 + d_lane(id.m, m), column + n, other->thread);
      }
    }
  }
  // The operands: checked like every async-proxy read of shared memory
  // (bounds, fence.proxy.async, TMA loads in flight or of another swizzle).
  const unsigned k = kind == 0 ? 16 : 32, eb = kind == 0 ? 2 : 1;
  const SharedRegion& s = runner().shared_region();
  const std::uint32_t base = addr_of(s.begin);
  MmaOp op{b.next_id++, tid, id.m, id.n, column, lane0, kind, {}, {}, {}, "tcgen05.mma", {}};
  const Desc da = decode_desc(adesc), db = decode_desc(bdesc);
  operand_reads(op.reads, da, a_mn, eb, id.m, k, base);
  const std::size_t a_ranges = op.reads.size();
  operand_reads(op.reads, db, b_mn, eb, id.n, k, base);
  for (std::size_t i = 0; i < op.reads.size(); ++i) {
    const sm90::Range& r = op.reads[i];
    const bool is_a = i < a_ranges;
    const std::string reader = format("%s (its %s operand, %s)", op_name, is_a ? "A" : "B",
                                      layout_name((is_a ? da : db).layout));
    const unsigned layout = (is_a ? da : db).layout;
    sm90::check_async_read(r.lo, r.hi, layout == 1 ? 1u : layout_span(layout), reader.c_str());
    op.bytes.insert(op.bytes.end(), s.begin + r.lo, s.begin + r.hi);
  }
  // The product, now (the cells stay pending until the op retires).
  double (*value)(unsigned) = kind == 0 ? (id.a_format == 1 ? bf16_value : f16_value) : nullptr;
  auto decode = [&](unsigned fmt, unsigned bits) {
    if (kind == 0)
      return value(bits);
    return fmt == 0 ? e4m3_value(bits) : e5m2_value(bits);
  };
  auto bits_at = [&](std::uint32_t a) {
    unsigned v = 0;
    std::memcpy(&v, s.begin + (a - base) % sm90::kWindow, eb);
    return v;
  };
  std::vector<double> av(static_cast<std::size_t>(id.m) * k),
      bv(static_cast<std::size_t>(id.n) * k);
  const double sa = id.negate_a ? -1.0 : 1.0, sb = id.negate_b ? -1.0 : 1.0;
  for (unsigned m = 0; m < id.m; ++m)
    for (unsigned kk = 0; kk < k; ++kk)
      av[m * k + kk] = sa * decode(id.a_format, bits_at(operand_address(da, a_mn, eb, m, kk)));
  for (unsigned n = 0; n < id.n; ++n)
    for (unsigned kk = 0; kk < k; ++kk)
      bv[n * k + kk] = sb * decode(id.b_format, bits_at(operand_address(db, b_mn, eb, n, kk)));
  for (unsigned m = 0; m < id.m; ++m) {
    for (unsigned n = 0; n < id.n; ++n) {
      double acc = 0.0;
      for (unsigned kk = 0; kk < k; ++kk)
        acc += av[m * k + kk] * bv[n * k + kk];
      const std::size_t c = cell(lane0 + d_lane(id.m, m), column + n);
      if (!accumulate)
        check_overwrite(b, c, op_name, "");
      float prev;
      std::memcpy(&prev, &b.cells[c], sizeof prev);
      const float result = static_cast<float>((accumulate ? static_cast<double>(prev) : 0.0) + acc);
      std::memcpy(&b.cells[c], &result, sizeof result);
      b.pending[c] = op.id;
      b.written[c] = 1;
      b.unread[c] = 1;
    }
  }
  b.ops.push_back(std::move(op));
}

// The shared memory of an operand's bytes at byte-K positions `pos` (an
// 8-bit element, or the byte holding a 4-bit one), rows 0..rows-1.
inline void operand_reads_at(std::vector<sm90::Range>& out, const Desc& d, unsigned rows,
                             const std::vector<unsigned>& pos, std::uint32_t base) {
  for (unsigned mn = 0; mn < rows; ++mn) {
    for (unsigned p : pos) {
      const std::uint32_t a = (operand_address(d, false, 1, mn, p) - base) % sm90::kWindow;
      if (!out.empty() && out.back().hi == a) {
        out.back().hi = a + 1;
      } else {
        out.push_back({a, a + 1});
      }
    }
  }
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

void mma_block_scaled(int kind, unsigned d_tmem, unsigned long long adesc, unsigned long long bdesc,
                      unsigned idesc, unsigned sfa_tmem, unsigned sfb_tmem, bool accumulate) {
  const char* op_name = bs_kind_name(kind);
  require_arch(op_name);
  const std::string bad = check_bs_idesc(idesc, kind);
  if (!bad.empty())
    fail("%s: instruction descriptor 0x%08x: %s", op_name, idesc, bad.c_str());
  const BsIdesc id = decode_bs_idesc(idesc, kind);
  const bool a_mn = id.a_mn != 0, b_mn = id.b_mn != 0;
  for (int which = 0; which < 2; ++which) {
    const std::string why = check_desc(which == 0 ? adesc : bdesc, which == 0 ? a_mn : b_mn);
    if (!why.empty()) {
      fail("%s: the %s matrix descriptor 0x%016llx: %s", op_name, which == 0 ? "A" : "B",
           which == 0 ? adesc : bdesc, why.c_str());
    }
  }
  // PTX ISA, "Transpose and Negate operations": no transpose with the
  // 128-byte swizzle with 32-byte atomicity but for kind::tf32.
  if ((a_mn && decode_desc(adesc).layout == 1) || (b_mn && decode_desc(bdesc).layout == 1)) {
    fail(
        "%s: an MN-major operand with the 128-byte swizzle with 32-byte atomicity (only "
        "kind::tf32 transposes with it)",
        op_name);
  }
  Sm100Block& b = block();
  const unsigned tid = current().linear;
  const unsigned lane0 = d_tmem >> 16, column = d_tmem & 0xFFFFu;
  if (lane0 != 0)
    fail("%s: the D address 0x%08x names lane %u; an M = 128 accumulator starts at lane 0", op_name,
         d_tmem, lane0);
  check_columns(b, column, id.n, op_name);
  check_inherited(column, column + id.n, op_name);
  for (unsigned m = 0; m < id.m; ++m) {
    for (unsigned n = 0; n < id.n; ++n) {
      const unsigned p = b.pending[cell(m, column + n)];
      const MmaOp* other = p != 0 ? op_by_id(b, p) : nullptr;
      if (other != nullptr && other->thread != tid) {
        fail(
            "%s writes TMEM lane %u column %u, which a %s of thread %u still writes "
            "(tcgen05 operations of different threads are not ordered)",
            op_name, m, column + n, other->name, other->thread);
      }
    }
  }
  // The scales: rows x vec bytes at the scale addresses (all 4 lane quarters
  // the same, written, no other thread's copy in flight), outside D.
  const unsigned vec = bs_vec(kind), k = bs_k(kind), block_k = k / vec;
  const bool ue4m3 = id.scale_format == 0;
  auto scales = [&](const char* which, unsigned addr, unsigned rows, unsigned sf_id) {
    const unsigned sl = addr >> 16, sc = addr & 0xFFFFu, ncols = (rows + 31) / 32;
    if (sl != 0) {
      fail(
          "%s: the scale factor %s address 0x%08x names lane %u; scale factors fill all 128 lanes "
          "from lane 0",
          op_name, which, addr, sl);
    }
    check_columns(b, sc, ncols, op_name);
    if (sc < column + id.n && column < sc + ncols) {
      fail("%s: the scale factor %s columns [%u, %u) overlap the accumulator's [%u, %u)", op_name,
           which, sc, sc + ncols, column, column + id.n);
    }
    std::vector<double> v(static_cast<std::size_t>(rows) * vec);
    for (unsigned r = 0; r < rows; ++r) {
      for (unsigned j = 0; j < vec; ++j) {
        unsigned byte0 = 0;
        for (unsigned q = 0; q < 4; ++q) {
          unsigned lane, col, byte;
          sf_cell(r, j, sf_id, q, &lane, &col, &byte);
          const std::size_t c = cell(lane, sc + col);
          if (b.written[c] == 0) {
            fail(
                "%s reads the scale factor %s of row %u (K block %u) at TMEM lane %u column %u "
                "byte %u, which nothing wrote since its allocation (no tcgen05.cp or tcgen05.st "
                "put "
                "scales there)",
                op_name, which, r, j, lane, sc + col, byte);
          }
          const MmaOp* other = b.pending[c] != 0 ? op_by_id(b, b.pending[c]) : nullptr;
          if (other != nullptr && other->thread != tid) {
            fail(
                "%s reads the scale factor %s at TMEM lane %u column %u, which a %s of thread %u "
                "still writes (%s)",
                op_name, which, lane, sc + col, other->name, other->thread,
                commits_text(*other).c_str());
          }
          const unsigned value = (b.cells[c] >> (8 * byte)) & 0xFFu;
          if (q == 0) {
            byte0 = value;
          } else if (value != byte0) {
            fail(
                "%s: the scale factor %s of row %u (K block %u) is 0x%02x in lane %u but 0x%02x "
                "in lane %u (column %u byte %u): scale factors must be duplicated in all 4 lane "
                "quarters (tcgen05.cp .warpx4)",
                op_name, which, r, j, byte0, r % 32, value, lane, sc + col, byte);
          }
        }
        if (ue4m3 && (byte0 & 0x80u) != 0) {
          fail(
              "%s: the ue4m3 scale factor %s of row %u (K block %u) is 0x%02x, which has bit 7 "
              "set: not a ue4m3 value",
              op_name, which, r, j, byte0);
        }
        v[r * vec + j] = ue4m3 ? (byte0 == 0x7F ? NAN : e4m3_value(byte0)) : e8m0_value(byte0);
      }
    }
    return v;
  };
  const std::vector<double> sa = scales("A", sfa_tmem, id.m, id.sfa_id);
  const std::vector<double> sb = scales("B", sfb_tmem, id.n, id.sfb_id);
  // The operands through the async-proxy checks.
  const SharedRegion& s = runner().shared_region();
  const std::uint32_t base = addr_of(s.begin);
  MmaOp op{b.next_id++, tid, id.m, id.n, column, lane0, 3 + kind, {}, {}, {}, "tcgen05.mma", {}};
  const Desc da = decode_desc(adesc), db = decode_desc(bdesc);
  auto positions = [&](unsigned format) {
    std::vector<unsigned> pos;
    for (unsigned kk = 0; kk < k; ++kk) {
      bool high;
      const unsigned p = bs_pos(kind, format, kk, &high);
      if (pos.empty() || pos.back() != p)
        pos.push_back(p);
    }
    return pos;
  };
  if (a_mn)
    operand_reads(op.reads, da, true, 1, id.m, k, base);
  else
    operand_reads_at(op.reads, da, id.m, positions(id.a_format), base);
  const std::size_t a_ranges = op.reads.size();
  if (b_mn)
    operand_reads(op.reads, db, true, 1, id.n, k, base);
  else
    operand_reads_at(op.reads, db, id.n, positions(id.b_format), base);
  for (std::size_t i = 0; i < op.reads.size(); ++i) {
    const sm90::Range& r = op.reads[i];
    const bool is_a = i < a_ranges;
    const std::string reader = format("%s (its %s operand, %s)", op_name, is_a ? "A" : "B",
                                      layout_name((is_a ? da : db).layout));
    const unsigned layout = (is_a ? da : db).layout;
    sm90::check_async_read(r.lo, r.hi, layout == 1 ? 1u : layout_span(layout), reader.c_str());
    op.bytes.insert(op.bytes.end(), s.begin + r.lo, s.begin + r.hi);
  }
  auto element = [&](const Desc& d, bool mn, unsigned format, unsigned row, unsigned kk) {
    if (mn) {  // 8-bit MN-major (kind::mxf8f6f4, e4m3 / e5m2)
      const unsigned v = s.begin[(operand_address(d, true, 1, row, kk) - base) % sm90::kWindow];
      return format == 0 ? e4m3_value(v) : e5m2_value(v);
    }
    bool high;
    const unsigned p = bs_pos(kind, format, kk, &high);
    const unsigned v = s.begin[(operand_address(d, false, 1, row, p) - base) % sm90::kWindow];
    if (kind != 0 || format == 5)
      return e2m1_value(high ? v >> 4 : v & 15u);
    return format == 0 ? e4m3_value(v) : e5m2_value(v);
  };
  std::vector<double> av(static_cast<std::size_t>(id.m) * k),
      bv(static_cast<std::size_t>(id.n) * k);
  const double na = id.negate_a ? -1.0 : 1.0, nb = id.negate_b ? -1.0 : 1.0;
  for (unsigned m = 0; m < id.m; ++m)
    for (unsigned kk = 0; kk < k; ++kk)
      av[m * k + kk] = na * element(da, a_mn, id.a_format, m, kk) * sa[m * vec + kk / block_k];
  for (unsigned n = 0; n < id.n; ++n)
    for (unsigned kk = 0; kk < k; ++kk)
      bv[n * k + kk] = nb * element(db, b_mn, id.b_format, n, kk) * sb[n * vec + kk / block_k];
  for (unsigned m = 0; m < id.m; ++m) {
    for (unsigned n = 0; n < id.n; ++n) {
      double acc = 0.0;
      for (unsigned kk = 0; kk < k; ++kk)
        acc += av[m * k + kk] * bv[n * k + kk];
      const std::size_t c = cell(m, column + n);
      if (!accumulate)
        check_overwrite(b, c, op_name, "");
      float prev;
      std::memcpy(&prev, &b.cells[c], sizeof prev);
      const float result = static_cast<float>((accumulate ? static_cast<double>(prev) : 0.0) + acc);
      std::memcpy(&b.cells[c], &result, sizeof result);
      b.pending[c] = op.id;
      b.written[c] = 1;
      b.unread[c] = 1;
    }
  }
  b.ops.push_back(std::move(op));
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

void cp_32x128b_warpx4(unsigned taddr, unsigned long long sdesc) {
  static constexpr const char* kOp = "tcgen05.cp.cta_group::1.32x128b.warpx4";
  require_arch(kOp);
  const unsigned lane0 = taddr >> 16, column = taddr & 0xFFFFu;
  if (lane0 != 0) {
    fail(
        "%s: the TMEM address 0x%08x names lane %u; .32x128b.warpx4 fills all 128 lanes from "
        "lane 0",
        kOp, taddr, lane0);
  }
  const std::string why = check_desc(sdesc, false);
  if (!why.empty())
    fail("%s: the source matrix descriptor 0x%016llx: %s", kOp, sdesc, why.c_str());
  Sm100Block& b = block();
  const unsigned tid = current().linear;
  check_columns(b, column, 4, kOp);
  if (const Alloc* a = allocation_of(b, column); a != nullptr && a->group == 2) {
    fail(
        "%s into TMEM columns [%u, %u), which tcgen05.alloc.cta_group::2 allocated (warp %u): the "
        "scale factors of a CTA pair's MMA are copied with tcgen05.cp.cta_group::2, into both "
        "CTAs' TMEM (and a kernel's tcgen05 instructions take one .cta_group)",
        kOp, a->column, a->column + a->ncols, a->warp);
  }
  check_inherited(column, column + 4, kOp);
  const SharedRegion& s = runner().shared_region();
  const std::uint32_t base = addr_of(s.begin);
  MmaOp op{b.next_id++, tid, 0, 0, column, 0, -1, {}, {}, {}, "tcgen05.cp", {}};
  const Desc d = decode_desc(sdesc);
  std::vector<unsigned> pos(16);
  for (unsigned i = 0; i < 16; ++i)
    pos[i] = i;
  operand_reads_at(op.reads, d, 32, pos, base);
  for (const sm90::Range& r : op.reads) {
    const std::string reader = format("%s (its source, %s)", kOp, layout_name(d.layout));
    sm90::check_async_read(r.lo, r.hi, d.layout == 1 ? 1u : layout_span(d.layout), reader.c_str());
    op.bytes.insert(op.bytes.end(), s.begin + r.lo, s.begin + r.hi);
  }
  for (unsigned row = 0; row < 32; ++row) {
    for (unsigned byte = 0; byte < 16; ++byte) {
      const unsigned v = s.begin[(operand_address(d, false, 1, row, byte) - base) % sm90::kWindow];
      for (unsigned q = 0; q < 4; ++q) {
        unsigned lane, col, bw;
        cp_cell(row, byte, q, &lane, &col, &bw);
        const std::size_t c = cell(lane, column + col);
        const MmaOp* other = b.pending[c] != 0 ? op_by_id(b, b.pending[c]) : nullptr;
        if (other != nullptr && other->thread != tid) {
          fail("%s writes TMEM lane %u column %u, which a %s of thread %u still writes", kOp, lane,
               column + col, other->name, other->thread);
        }
        if (bw == 0) {
          b.cells[c] = 0;
          op.cells.push_back(c);
        }
        b.cells[c] |= v << (8 * bw);
        b.pending[c] = op.id;
        b.written[c] = 1;
        b.epoch[c] = 0;
      }
    }
  }
  b.ops.push_back(std::move(op));
}

void commit(void* bar) {
  static constexpr const char* kOp = "tcgen05.commit";
  require_arch(kOp);
  Sm100Block& b = block();
  const unsigned tid = current().linear;
  // The arrival counts in the barrier's current phase (the token it returns).
  const unsigned long long phase = sm90::mbarrier_phase(bar, kOp);
  for (MmaOp& op : b.ops) {
    if (op.thread == tid)
      op.commits.push_back({addr_of(bar), phase});
  }
  // tcgen05.commit implies tcgen05.fence::before_thread_sync (PTX ISA,
  // "tcgen05.commit").
  b.threads[tid].unfenced.clear();
  sm90::mbarrier_arrive(bar, 0);
}

// ---------------------------------------------------------------------------
// tcgen05.ld / st.

// The lanes [lane(addr), + span) a warp's access touches must lie in the
// warp's quarter of TMEM (PTX ISA, tcgen05 "Access restrictions": warp w of
// a warpgroup reaches lanes 32 * (w % 4) .. + 31); a 32-lane shape starts
// at the quarter's first lane, a 16-lane one at its first or 17th.
inline void check_lanes(unsigned taddr, unsigned span, const char* op) {
  const ThreadCtx& t = current();
  const unsigned lane = taddr >> 16, quarter = t.warp % 4;
  if (lane < 32 * quarter || lane + span > 32 * quarter + 32 || lane % span != 0) {
    fail(
        "%s: warp %u (position %u in its warpgroup) accesses TMEM lanes %u..%u, but it reaches "
        "only lanes %u..%u (PTX ISA, tcgen05 \"Access restrictions\")%s",
        op, t.warp, quarter, lane, lane + span - 1, 32 * quarter, 32 * quarter + 31,
        lane % span != 0 ? format(", from a lane that is a multiple of %u", span).c_str() : "");
  }
}

// The shapes of tcgen05.ld (PTX ISA, "Matrix fragments for tcgen05.ld /
// st", the figures of .32x32b and .16x256b): the lane and column, relative
// to the address, of register `reg` of lane `t` of the warp.
enum class LdShape { s32x32b, s16x256b };

inline void ld_cell(LdShape shape, unsigned t, unsigned reg, unsigned* lane, unsigned* column) {
  if (shape == LdShape::s32x32b) {
    *lane = t;
    *column = reg;
    return;
  }
  // .16x256b: 16 lanes x 8 columns per .num; registers 0, 1 at lane t / 4,
  // columns 2 (t % 4) and + 1; registers 2, 3 the same 8 lanes further.
  const unsigned rep = reg / 4, j = reg % 4;
  *lane = t / 4 + 8 * (j / 2);
  *column = 8 * rep + 2 * (t % 4) + j % 2;
}

inline void load(LdShape shape, const char* op, unsigned* r, unsigned nregs, unsigned taddr) {
  require_arch(op);
  agree(op, taddr, nregs);
  const unsigned span = shape == LdShape::s32x32b ? 32 : 16;
  const unsigned ncols =
      shape == LdShape::s32x32b ? nregs : 2 * nregs;  // 16x256b: 8 columns per 4 registers
  check_lanes(taddr, span, op);
  Sm100Block& b = block();
  const unsigned column0 = taddr & 0xFFFFu, lane0 = taddr >> 16, me_lane = current().lane;
  check_columns(b, column0, ncols, op);
  Sm100Thread& t = b.threads[current().linear];
  LdPending p{r, nregs, std::vector<std::uint32_t>(nregs)};
  for (unsigned j = 0; j < nregs; ++j) {
    unsigned dl, dc;
    ld_cell(shape, me_lane, j, &dl, &dc);
    const unsigned lane = lane0 + dl, column = column0 + dc;
    const std::size_t c = cell(lane, column);
    if (b.pending[c] != 0) {
      const MmaOp* mma_op = op_by_id(b, b.pending[c]);
      fail(
          "%s reads TMEM lane %u column %u, which a %s issued by thread %u still writes "
          "(%s): the %s is read before a thread waited on the mbarrier phase of a "
          "tcgen05.commit after that %s",
          op, lane, column, mma_op->name, mma_op->thread, commits_text(*mma_op).c_str(),
          mma_op->kind < 0 ? "copy's destination" : "accumulator",
          mma_op->kind < 0 ? "copy" : "MMA");
    }
    if (b.epoch[c] > t.fence_epoch) {
      fail(
          "missing tcgen05.fence::after_thread_sync: %s reads TMEM lane %u column %u, which a "
          "tcgen05.mma completed into after this thread's last tcgen05.fence::after_thread_sync "
          "(wait on the commit's mbarrier, then fence, then tcgen05.ld)",
          op, lane, column);
    }
    p.values[j] = b.cells[c];
    b.unread[c] = 0;
    r[j] = kLdPoison;
  }
  t.lds.push_back(std::move(p));
  t.unfenced.push_back({0, 0, current().linear, column0, column0 + ncols, op});
  sm90::set_invalid_trap(true);
}

void tmem_ld(unsigned* r, unsigned n, unsigned taddr) {
  load(LdShape::s32x32b, "tcgen05.ld.32x32b", r, n, taddr);
}

void tmem_ld_16x256b(unsigned* r, unsigned num, unsigned taddr) {
  load(LdShape::s16x256b, "tcgen05.ld.16x256b", r, 4 * num, taddr);
}

void wait_ld() {
  require_arch("tcgen05.wait::ld");
  agree("tcgen05.wait::ld", 0, 0);
  Sm100Thread& t = me();
  for (const LdPending& p : t.lds) {
    for (unsigned j = 0; j < p.n; ++j) {
      if (p.r[j] != kLdPoison) {
        fail(
            "the destination registers of a tcgen05.ld (r[%u] of %u) were written before "
            "tcgen05.wait::ld",
            j, p.n);
      }
      p.r[j] = p.values[j];
    }
  }
  const bool had = !t.lds.empty();
  t.lds.clear();
  if (had)
    sm90::set_invalid_trap(false);
}

void tmem_st(const unsigned* r, unsigned n, unsigned taddr) {
  static constexpr const char* kOp = "tcgen05.st.32x32b";
  require_arch(kOp);
  agree(kOp, taddr, n);
  check_lanes(taddr, 32, kOp);
  Sm100Block& b = block();
  const unsigned column = taddr & 0xFFFFu, lane = (taddr >> 16) + current().lane;
  check_columns(b, column, n, kOp);
  check_inherited(column, column + n, kOp);
  for (unsigned j = 0; j < n; ++j) {
    const std::size_t c = cell(lane, column + j);
    if (b.pending[c] != 0) {
      fail("%s writes TMEM lane %u column %u, which a tcgen05.mma issued by thread %u still writes",
           kOp, lane, column + j, op_by_id(b, b.pending[c])->thread);
    }
    b.cells[c] = r[j];
    b.epoch[c] = 0;
    b.written[c] = 1;
    b.unread[c] = 0;
  }
  Sm100Thread& t = me();
  t.st_pending = true;
  t.unfenced.push_back({0, 0, current().linear, column, column + n, kOp});
}

void wait_st() {
  require_arch("tcgen05.wait::st");
  agree("tcgen05.wait::st", 0, 0);
  me().st_pending = false;
}

// ---------------------------------------------------------------------------
// Retirement: a thread's wait on barrier `bar` saw `phase` phases complete.

// Retires the ops of the current CTA (runner()) whose commit arrived on the
// barrier `bar` of CTA `waiter` in a phase before `phase`.
void retire(std::uint32_t bar, unsigned long long phase, const BlockRunner* waiter) {
  Sm100Block& b = *runner().sm100;
  const SharedRegion& s = runner().shared_region();
  const std::uint32_t base = addr_of(s.begin);
  auto covers = [&](const std::vector<Commit>& commits) {
    for (const Commit& c : commits) {
      if (c.barrier == bar && c.phase < phase && (c.cta != nullptr ? c.cta : &runner()) == waiter)
        return true;
    }
    return false;
  };
  for (PairRetired& p : b.pair_retired) {
    if (covers(p.commits) &&
        std::find(p.observers.begin(), p.observers.end(), waiter) == p.observers.end())
      p.observers.push_back(waiter);
  }
  bool any = false;
  std::size_t kept = 0;
  for (std::size_t i = 0; i < b.ops.size(); ++i) {
    MmaOp& op = b.ops[i];
    const bool done = covers(op.commits);
    if (!done) {
      if (kept != i)
        b.ops[kept] = std::move(op);
      ++kept;
      continue;
    }
    if (!any)
      ++b.retire_epoch;
    any = true;
    std::size_t at = 0;
    for (const sm90::Range& r : op.reads) {
      if (std::memcmp(s.begin + r.lo, op.bytes.data() + at, r.hi - r.lo) != 0) {
        std::uint32_t x = r.lo;
        while (s.begin[x] == op.bytes[at + (x - r.lo)])
          ++x;
        fail(
            "shared memory at 0x%05x that a %s issued by thread %u reads was overwritten "
            "before its tcgen05.commit's mbarrier phase completed and was waited on (%s): the "
            "stage was released before the %s finished reading it",
            (base + x) % sm90::kWindow, op.name, op.thread, commits_text(op).c_str(),
            op.kind < 0 ? "copy" : "MMA");
      }
      at += r.hi - r.lo;
    }
    if (op.issuer >= 0 && !op.reads.empty()) {
      std::uint32_t span_lo = op.reads.front().lo, span_hi = op.reads.front().hi;
      for (const sm90::Range& r : op.reads) {
        span_lo = std::min(span_lo, r.lo);
        span_hi = std::max(span_hi, r.hi);
      }
      b.pair_retired.push_back(
          {op.reads, op.name, op.thread, op.commits, {waiter}, span_lo, span_hi});
    }
    for (const std::size_t c : op.cells) {
      if (b.pending[c] == op.id) {
        b.pending[c] = 0;
        b.epoch[c] = b.retire_epoch;
      }
    }
    for (unsigned m = 0; m < op.m; ++m) {
      for (unsigned n = 0; n < op.n; ++n) {
        const std::size_t c = cell(op.lane0 + d_lane(op.m, m), op.column + n);
        if (b.pending[c] == op.id) {
          b.pending[c] = 0;
          b.epoch[c] = b.retire_epoch;
        }
      }
    }
  }
  b.ops.resize(kept);
}


// ---------------------------------------------------------------------------
// cta_group::2: the pair of CTAs (ranks 2i and 2i + 1 of a cluster) that one
// tcgen05.mma.cta_group::2 spans (PTX ISA, tcgen05 "CTA pair"; CuTe's
// SM100_MMA_*_2x1SM_SS traits). Each CTA keeps its own TMEM and its own
// record of the op (its reads, its D cells), so that the stage release rule
// and the retirement work per CTA as for cta_group::1.

inline BlockRunner& pair_peer(const char* op) {
  BlockRunner& self = runner();
  const Cluster* c = self.cluster();
  const unsigned rank = self.cluster_rank();
  if (c == nullptr || (rank ^ 1u) >= c->size) {
    fail("%s needs a cluster whose CTAs pair up (ranks 2i and 2i + 1); this CTA is rank %u of a "
         "cluster of %u",
         op, rank, c == nullptr ? 1u : c->size);
  }
  BlockRunner& peer = *c->ctas[rank ^ 1u];
  if (peer.cta_exited()) {
    fail("%s: the pair peer (CTA rank %u) has exited; a CTA pair's TMEM and shared memory live "
         "until both are done (barrier.cluster before exiting)",
         op, rank ^ 1u);
  }
  return peer;
}

void tmem_alloc_pair(unsigned* slot, unsigned ncols) {
  static constexpr const char* kOp = "tcgen05.alloc.cta_group::2";
  pair_peer(kOp);
  tmem_alloc_group(slot, ncols, 2, kOp);
}

void tmem_dealloc_pair(unsigned taddr, unsigned ncols) {
  static constexpr const char* kOp = "tcgen05.dealloc.cta_group::2";
  require_arch(kOp);
  if (current().lane == 0) {
    const Alloc* a = allocation_of(block(), taddr & 0xFFFFu);
    if (a != nullptr && a->group != 2) {
      fail("%s of TMEM columns [%u, %u), which tcgen05.alloc.cta_group::1 allocated (warp %u)", kOp,
           a->column, a->column + a->ncols, a->warp);
    }
  }
  tmem_dealloc_named(taddr, ncols, kOp);
}

void tmem_relinquish_pair() {
  pair_peer("tcgen05.relinquish_alloc_permit.cta_group::2");
  tmem_relinquish();
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

void mma_pair(int kind, unsigned d_tmem, unsigned long long adesc, unsigned long long bdesc,
              unsigned idesc, bool accumulate) {
  const char* op_name =
      kind == 0 ? "tcgen05.mma.cta_group::2.kind::f16" : "tcgen05.mma.cta_group::2.kind::f8f6f4";
  require_arch(op_name);
  BlockRunner& self = runner();
  BlockRunner& peer = pair_peer(op_name);
  const unsigned rank = self.cluster_rank();
  if (rank % 2 != 0) {
    fail("%s issued by CTA rank %u, an odd CTA: a cta_group::2 MMA is issued by one thread of "
         "the even (leader) CTA of the pair (ranks %u and %u)",
         op_name, rank, rank - 1, rank);
  }
  const std::string bad = check_idesc(idesc, kind, 2);
  if (!bad.empty())
    fail("%s: instruction descriptor 0x%08x: %s", op_name, idesc, bad.c_str());
  const Idesc id = decode_idesc(idesc);
  const bool a_mn = id.a_mn != 0, b_mn = id.b_mn != 0;
  for (int which = 0; which < 2; ++which) {
    const std::string why = check_desc(which == 0 ? adesc : bdesc, which == 0 ? a_mn : b_mn);
    if (!why.empty()) {
      fail("%s: the %s matrix descriptor 0x%016llx: %s", op_name, which == 0 ? "A" : "B",
           which == 0 ? adesc : bdesc, why.c_str());
    }
  }
  if ((d_tmem >> 16) != 0)
    fail("%s: the D address 0x%08x names lane %u; a cta_group::2 accumulator starts at lane 0",
         op_name, d_tmem, d_tmem >> 16);
  const unsigned column = d_tmem & 0xFFFFu;
  const unsigned mh = id.m / 2, nh = id.n / 2;
  const unsigned ncols = id.m == 256 ? id.n : nh;
  const unsigned k = kind == 0 ? 16 : 32, eb = kind == 0 ? 2 : 1;
  const unsigned tid = current().linear;
  // Each CTA's half of A (mh rows) and of B (nh rows), at the descriptors'
  // addresses in its own shared memory.
  std::vector<double> av[2], bv[2];
  BlockRunner* ctas[2] = {&self, &peer};
  // The descriptors name shared::cta addresses, the same offsets in both
  // CTAs; the emulator's window address of an offset differs per CTA.
  const std::uint32_t base0 = addr_of(self.shared_region().begin);
  if ((reinterpret_cast<std::uintptr_t>(self.shared_region().begin) -
       reinterpret_cast<std::uintptr_t>(peer.shared_region().begin)) % 1024 != 0) {
    fail("internal: the shared memory of the two CTAs of the pair is not laid out alike (1024-byte "
         "alignment of the worker threads' TLS)");
  }
  const auto rebase = [&](unsigned long long desc, const BlockRunner& to) {
    const std::uint32_t start = static_cast<std::uint32_t>(desc & 0x3FFFu) << 4;
    const std::uint32_t moved = (start - base0 + addr_of(to.shared_region().begin)) % sm90::kWindow;
    return (desc & ~0x3FFFull) | ((moved >> 4) & 0x3FFFu);
  };
  MmaOp ops[2];
  for (unsigned v = 0; v < 2; ++v) {
    OnPeer on(ctas[v]);
    Sm100Block& b = block();
    for (unsigned c = column; c < column + ncols; ++c) {
      const Alloc* a = c < kColumns ? allocation_of(b, c) : nullptr;
      if (a == nullptr) {
        fail("%s writes TMEM columns %u..%u of CTA rank %u, outside every allocation of that CTA "
             "(%s)",
             op_name, column, column + ncols - 1, rank + v, describe_allocs(b).c_str());
      }
      if (a->group != 2) {
        fail("%s writes TMEM columns %u..%u of CTA rank %u, which tcgen05.alloc.cta_group::1 "
             "allocated (warp %u, columns [%u, %u)): a cta_group::2 MMA writes D in both CTAs of "
             "the pair and needs their columns from tcgen05.alloc.cta_group::2",
             op_name, column, column + ncols - 1, rank + v, a->warp, a->column, a->column + a->ncols);
      }
    }
    check_inherited(column, column + ncols, op_name);
    const SharedRegion& s = runner().shared_region();
    const std::uint32_t base = addr_of(s.begin);
    const Desc da = decode_desc(rebase(adesc, *ctas[v])), db = decode_desc(rebase(bdesc, *ctas[v]));
    MmaOp& op = ops[v];
    op.id = b.next_id++;
    op.thread = tid;
    op.m = op.n = 0;  // its cells are listed
    op.column = column;
    op.lane0 = 0;
    op.kind = kind;
    op.name = op_name;
    op.issuer = static_cast<int>(rank);
    operand_reads(op.reads, da, a_mn, eb, mh, k, base);
    const std::size_t a_ranges = op.reads.size();
    operand_reads(op.reads, db, b_mn, eb, nh, k, base);
    for (std::size_t i = 0; i < op.reads.size(); ++i) {
      const sm90::Range& r = op.reads[i];
      const bool is_a = i < a_ranges;
      const std::string reader =
          format("%s (its %s operand in CTA rank %u, %s)", op_name, is_a ? "A" : "B", rank + v,
                 layout_name((is_a ? da : db).layout));
      const unsigned layout = (is_a ? da : db).layout;
      sm90::check_async_read(r.lo, r.hi, layout == 1 ? 1u : layout_span(layout), reader.c_str());
      hopper_check_ordered_read(self, r.lo, r.hi, reader.c_str());
      op.bytes.insert(op.bytes.end(), s.begin + r.lo, s.begin + r.hi);
    }
    auto bits_at = [&](std::uint32_t a) {
      unsigned x = 0;
      std::memcpy(&x, s.begin + (a - base) % sm90::kWindow, eb);
      return x;
    };
    auto decode = [&](unsigned fmt, unsigned bits) {
      if (kind == 0)
        return id.a_format == 1 ? bf16_value(bits) : f16_value(bits);
      return fmt == 0 ? e4m3_value(bits) : e5m2_value(bits);
    };
    const double sa = id.negate_a ? -1.0 : 1.0, sb = id.negate_b ? -1.0 : 1.0;
    av[v].resize(static_cast<std::size_t>(mh) * k);
    bv[v].resize(static_cast<std::size_t>(nh) * k);
    for (unsigned m = 0; m < mh; ++m)
      for (unsigned kk = 0; kk < k; ++kk)
        av[v][m * k + kk] = sa * decode(id.a_format, bits_at(operand_address(da, a_mn, eb, m, kk)));
    for (unsigned n = 0; n < nh; ++n)
      for (unsigned kk = 0; kk < k; ++kk)
        bv[v][n * k + kk] = sb * decode(id.b_format, bits_at(operand_address(db, b_mn, eb, n, kk)));
  }
  // D in CTA v: its rows of A times all of B (B's rows n < N / 2 from the
  // even CTA, the others from the odd one).
  for (unsigned v = 0; v < 2; ++v) {
    OnPeer on(ctas[v]);
    Sm100Block& b = block();
    MmaOp& op = ops[v];
    for (unsigned m = 0; m < mh; ++m) {
      for (unsigned n = 0; n < id.n; ++n) {
        const std::vector<double>& bsrc = bv[n / nh];
        const unsigned nn = n % nh;
        double acc = 0.0;
        for (unsigned kk = 0; kk < k; ++kk)
          acc += av[v][m * k + kk] * bsrc[nn * k + kk];
        unsigned lane, col;
        pair_d_cell(id.m, id.n, m, n, &lane, &col);
        const std::size_t c = cell(lane, column + col);
        const unsigned p = b.pending[c];
        const MmaOp* other = p != 0 ? op_by_id(b, p) : nullptr;
        if (other != nullptr && (other->thread != tid || other->issuer != op.issuer)) {
          fail("%s writes TMEM lane %u column %u of CTA rank %u, which a %s of thread %u still "
               "writes (tcgen05.mma of different threads are not ordered)",
               op_name, lane, column + col, rank + v, other->name, other->thread);
        }
        if (!accumulate)
          check_overwrite(b, c, op_name, format(" of CTA rank %u", rank + v).c_str());
        float prev;
        std::memcpy(&prev, &b.cells[c], sizeof prev);
        const float result =
            static_cast<float>((accumulate ? static_cast<double>(prev) : 0.0) + acc);
        std::memcpy(&b.cells[c], &result, sizeof result);
        b.pending[c] = op.id;
        b.written[c] = 1;
        b.unread[c] = 1;
        op.cells.push_back(c);
      }
    }
    b.ops.push_back(std::move(op));
  }
}

void commit_pair(void* bar, unsigned short mask) {
  static constexpr const char* kOp =
      "tcgen05.commit.cta_group::2.mbarrier::arrive::one.shared::cluster.multicast::cluster";
  require_arch(kOp);
  BlockRunner& self = runner();
  pair_peer(kOp);
  const unsigned n = sm90::cluster_nctarank();
  const unsigned rank = self.cluster_rank();
  if (mask == 0)
    fail("%s: ctaMask is 0 (no CTA gets the arrival)", kOp);
  if ((mask >> n) != 0) {
    fail("%s: ctaMask 0x%04x names CTA rank %u, but the cluster has %u CTAs", kOp, mask,
         31 - __builtin_clz(static_cast<unsigned>(mask)), n);
  }
  if (!self.is_shared(bar, 8))
    fail("%s: %p is not the calling CTA's shared memory", kOp, bar);
  const unsigned tid = current().linear;
  const std::size_t off = static_cast<std::size_t>(static_cast<unsigned char*>(bar) -
                                                   self.shared_region().begin);
  // The arrival on each CTA of the mask covers every earlier op of this
  // thread, in both CTAs of the pair (each keeps its half).
  BlockRunner* pair[2] = {&self, self.cluster()->ctas[rank ^ 1u]};
  for (unsigned r = 0; r < n; ++r) {
    if (((mask >> r) & 1u) == 0)
      continue;
    BlockRunner* cta = self.cluster()->ctas[r];
    unsigned long long phase;
    {
      OnPeer on(cta);
      phase = sm90::mbarrier_phase(cta->shared_region().begin + off, kOp);
    }
    const std::uint32_t at = addr_of(cta->shared_region().begin + off);
    for (BlockRunner* x : pair) {
      if (x->sm100 == nullptr || !x->sm100->used)
        continue;
      for (MmaOp& op : x->sm100->ops) {
        const bool mine = op.thread == tid && (op.issuer == static_cast<int>(rank) ||
                                               (x == &self && op.issuer < 0));
        if (mine)
          op.commits.push_back({at, phase, cta});
      }
    }
  }
  for (unsigned r = 0; r < n; ++r) {
    if (((mask >> r) & 1u) != 0)
      sm90::mbarrier_arrive_cluster(sm90::map_shared_cluster(addr_of(bar), r));
  }
  // tcgen05.commit implies tcgen05.fence::before_thread_sync.
  me().unfenced.clear();
}

// ---------------------------------------------------------------------------
// Block-scaled cta_group::2 (docs/cuda-sm100.md, "Block-scaled 2-CTA MMA"):
// tcgen05.cp.cta_group::2.32x128b.warpx4 and the kind::mxf8f6f4 / mxf4 /
// mxf4nvf4 MMAs at M = 256 per pair. CuTe's SM100_UTCCP_4x32dp128bit_2cta
// (ThrID 2, the source and destination layouts the same in both CTAs) and
// the 2x1SM traits' tmem_sf_frg ("4x1": MMA_ScaleFactor is the cta_group::1
// MMA of M / 2 x round_up(N, 128)): the copy issued by the leader moves each
// CTA's shared memory at the descriptor's offset into that CTA's TMEM at
// the same address; CTA v's MMA half reads the scales of its 128 rows of A
// and of all N rows of B from its own TMEM (B's scales are in both CTAs).

// The pair's cta_group::2 allocation of TMEM columns [column, column + n)
// in the current CTA (`rank` names it in the report).
inline void check_pair_columns(const Sm100Block& b, unsigned column, unsigned n, unsigned rank,
                               const char* op_name, const char* what) {
  for (unsigned c = column; c < column + n; ++c) {
    const Alloc* a = c < kColumns ? allocation_of(b, c) : nullptr;
    if (a == nullptr) {
      fail("%s: %s in TMEM columns %u..%u of CTA rank %u, outside every allocation of that CTA (%s)",
           op_name, what, column, column + n - 1, rank, describe_allocs(b).c_str());
    }
    if (a->group != 2) {
      fail("%s: %s in TMEM columns %u..%u of CTA rank %u, which tcgen05.alloc.cta_group::1 "
           "allocated (warp %u, columns [%u, %u)): a cta_group::2 op uses both CTAs' TMEM and "
           "needs columns from tcgen05.alloc.cta_group::2",
           op_name, what, column, column + n - 1, rank, a->warp, a->column, a->column + a->ncols);
    }
  }
}

inline BlockRunner& pair_leader_check(const char* op_name) {
  BlockRunner& peer = pair_peer(op_name);
  const unsigned rank = runner().cluster_rank();
  if (rank % 2 != 0) {
    fail("%s issued by CTA rank %u, an odd CTA: a cta_group::2 op is issued by one thread of the "
         "even (leader) CTA of the pair (ranks %u and %u)",
         op_name, rank, rank - 1, rank);
  }
  return peer;
}

// The descriptor `desc` (a shared::cta address of the issuing CTA) moved to
// the same offset of CTA `to`.
inline unsigned long long rebase_desc(unsigned long long desc, const BlockRunner& from,
                                      const BlockRunner& to) {
  const std::uint32_t base0 = addr_of(from.shared_region().begin);
  const std::uint32_t start = static_cast<std::uint32_t>(desc & 0x3FFFu) << 4;
  const std::uint32_t moved = (start - base0 + addr_of(to.shared_region().begin)) % sm90::kWindow;
  return (desc & ~0x3FFFull) | ((moved >> 4) & 0x3FFFu);
}

void cp_32x128b_warpx4_pair(unsigned taddr, unsigned long long sdesc) {
  static constexpr const char* kOp = "tcgen05.cp.cta_group::2.32x128b.warpx4";
  require_arch(kOp);
  BlockRunner& self = runner();
  BlockRunner& peer = pair_leader_check(kOp);
  const unsigned rank = self.cluster_rank();
  const unsigned lane0 = taddr >> 16, column = taddr & 0xFFFFu;
  if (lane0 != 0) {
    fail(
        "%s: the TMEM address 0x%08x names lane %u; .32x128b.warpx4 fills all 128 lanes from "
        "lane 0",
        kOp, taddr, lane0);
  }
  const std::string why = check_desc(sdesc, false);
  if (!why.empty())
    fail("%s: the source matrix descriptor 0x%016llx: %s", kOp, sdesc, why.c_str());
  const unsigned tid = current().linear;
  BlockRunner* ctas[2] = {&self, &peer};
  for (unsigned v = 0; v < 2; ++v) {
    const unsigned long long desc = rebase_desc(sdesc, self, *ctas[v]);
    OnPeer on(ctas[v]);
    Sm100Block& b = block();
    check_pair_columns(b, column, 4, rank + v, kOp, "the scale factors land");
    check_inherited(column, column + 4, kOp);
    const SharedRegion& s = runner().shared_region();
    const std::uint32_t base = addr_of(s.begin);
    MmaOp op{b.next_id++, tid, 0, 0, column, 0, -1, {}, {}, {}, kOp, {}};
    op.issuer = static_cast<int>(rank);
    const Desc d = decode_desc(desc);
    std::vector<unsigned> pos(16);
    for (unsigned i = 0; i < 16; ++i)
      pos[i] = i;
    operand_reads_at(op.reads, d, 32, pos, base);
    for (const sm90::Range& r : op.reads) {
      const std::string reader =
          format("%s (its source in CTA rank %u, %s)", kOp, rank + v, layout_name(d.layout));
      sm90::check_async_read(r.lo, r.hi, d.layout == 1 ? 1u : layout_span(d.layout),
                             reader.c_str());
      hopper_check_ordered_read(self, r.lo, r.hi, reader.c_str());
      op.bytes.insert(op.bytes.end(), s.begin + r.lo, s.begin + r.hi);
    }
    for (unsigned row = 0; row < 32; ++row) {
      for (unsigned byte = 0; byte < 16; ++byte) {
        const unsigned x = s.begin[(operand_address(d, false, 1, row, byte) - base) % sm90::kWindow];
        for (unsigned q = 0; q < 4; ++q) {
          unsigned lane, col, bw;
          cp_cell(row, byte, q, &lane, &col, &bw);
          const std::size_t c = cell(lane, column + col);
          const MmaOp* other = b.pending[c] != 0 ? op_by_id(b, b.pending[c]) : nullptr;
          if (other != nullptr && (other->thread != tid || other->issuer != op.issuer)) {
            fail("%s writes TMEM lane %u column %u of CTA rank %u, which a %s of thread %u still "
                 "writes",
                 kOp, lane, column + col, rank + v, other->name, other->thread);
          }
          if (bw == 0) {
            b.cells[c] = 0;
            op.cells.push_back(c);
          }
          b.cells[c] |= x << (8 * bw);
          b.pending[c] = op.id;
          b.written[c] = 1;
          b.epoch[c] = 0;
        }
      }
    }
    b.ops.push_back(std::move(op));
  }
}

void mma_block_scaled_pair(int kind, unsigned d_tmem, unsigned long long adesc,
                           unsigned long long bdesc, unsigned idesc, unsigned sfa_tmem,
                           unsigned sfb_tmem, bool accumulate) {
  const char* op_name = bs_kind_name(kind, 2);
  require_arch(op_name);
  BlockRunner& self = runner();
  BlockRunner& peer = pair_leader_check(op_name);
  const unsigned rank = self.cluster_rank();
  const std::string bad = check_bs_idesc(idesc, kind, 2);
  if (!bad.empty())
    fail("%s: instruction descriptor 0x%08x: %s", op_name, idesc, bad.c_str());
  const BsIdesc id = decode_bs_idesc(idesc, kind);
  const bool a_mn = id.a_mn != 0, b_mn = id.b_mn != 0;
  for (int which = 0; which < 2; ++which) {
    const std::string why = check_desc(which == 0 ? adesc : bdesc, which == 0 ? a_mn : b_mn);
    if (!why.empty()) {
      fail("%s: the %s matrix descriptor 0x%016llx: %s", op_name, which == 0 ? "A" : "B",
           which == 0 ? adesc : bdesc, why.c_str());
    }
  }
  if ((a_mn && decode_desc(adesc).layout == 1) || (b_mn && decode_desc(bdesc).layout == 1)) {
    fail(
        "%s: an MN-major operand with the 128-byte swizzle with 32-byte atomicity (only "
        "kind::tf32 transposes with it)",
        op_name);
  }
  if ((d_tmem >> 16) != 0)
    fail("%s: the D address 0x%08x names lane %u; a cta_group::2 accumulator starts at lane 0",
         op_name, d_tmem, d_tmem >> 16);
  const unsigned column = d_tmem & 0xFFFFu;
  const unsigned mh = id.m / 2, nh = id.n / 2;  // M = 256: 128 rows of A and D a CTA
  const unsigned vec = bs_vec(kind), k = bs_k(kind), block_k = k / vec;
  const bool ue4m3 = id.scale_format == 0;
  const unsigned tid = current().linear;
  BlockRunner* ctas[2] = {&self, &peer};
  // Per CTA: its A half and B half (unscaled), its scales of A (mh rows) and
  // of B (all N rows).
  std::vector<double> av[2], bv[2], sa[2], sb[2];
  MmaOp ops[2];
  for (unsigned v = 0; v < 2; ++v) {
    const unsigned long long a_desc = rebase_desc(adesc, self, *ctas[v]);
    const unsigned long long b_desc = rebase_desc(bdesc, self, *ctas[v]);
    OnPeer on(ctas[v]);
    Sm100Block& b = block();
    const unsigned cr = rank + v;
    check_pair_columns(b, column, id.n, cr, op_name, "D");
    check_inherited(column, column + id.n, op_name);
    auto scales = [&](const char* which, unsigned addr, unsigned rows, unsigned sf_id) {
      const unsigned sl = addr >> 16, sc = addr & 0xFFFFu, ncols = (rows + 31) / 32;
      if (sl != 0) {
        fail("%s: the scale factor %s address 0x%08x names lane %u; scale factors fill all 128 "
             "lanes from lane 0",
             op_name, which, addr, sl);
      }
      check_pair_columns(b, sc, ncols, cr, op_name,
                         which[0] == 'A' ? "the scale factors of A" : "the scale factors of B");
      if (sc < column + id.n && column < sc + ncols) {
        fail("%s: the scale factor %s columns [%u, %u) overlap the accumulator's [%u, %u)",
             op_name, which, sc, sc + ncols, column, column + id.n);
      }
      std::vector<double> out(static_cast<std::size_t>(rows) * vec);
      for (unsigned r = 0; r < rows; ++r) {
        for (unsigned j = 0; j < vec; ++j) {
          unsigned byte0 = 0;
          for (unsigned q = 0; q < 4; ++q) {
            unsigned lane, col, byte;
            sf_cell(r, j, sf_id, q, &lane, &col, &byte);
            const std::size_t c = cell(lane, sc + col);
            if (b.written[c] == 0) {
              fail("%s reads the scale factor %s of row %u (K block %u) of CTA rank %u at its TMEM "
                   "lane %u column %u byte %u, which nothing wrote since its allocation (no "
                   "tcgen05.cp.cta_group::2 put scales there in that CTA)",
                   op_name, which, r, j, cr, lane, sc + col, byte);
            }
            const MmaOp* other = b.pending[c] != 0 ? op_by_id(b, b.pending[c]) : nullptr;
            if (other != nullptr &&
                (other->thread != tid || other->issuer != static_cast<int>(rank))) {
              fail("%s reads the scale factor %s at TMEM lane %u column %u of CTA rank %u, which "
                   "a %s of thread %u still writes (%s)",
                   op_name, which, lane, sc + col, cr, other->name, other->thread,
                   commits_text(*other).c_str());
            }
            const unsigned value = (b.cells[c] >> (8 * byte)) & 0xFFu;
            if (q == 0) {
              byte0 = value;
            } else if (value != byte0) {
              fail("%s: the scale factor %s of row %u (K block %u) of CTA rank %u is 0x%02x in "
                   "lane %u but 0x%02x in lane %u (column %u byte %u): scale factors must be "
                   "duplicated in all 4 lane quarters",
                   op_name, which, r, j, cr, byte0, r % 32, value, lane, sc + col, byte);
            }
          }
          if (ue4m3 && (byte0 & 0x80u) != 0) {
            fail("%s: the ue4m3 scale factor %s of row %u (K block %u) of CTA rank %u is 0x%02x, "
                 "which has bit 7 set: not a ue4m3 value",
                 op_name, which, r, j, cr, byte0);
          }
          out[r * vec + j] =
              ue4m3 ? (byte0 == 0x7F ? NAN : e4m3_value(byte0)) : e8m0_value(byte0);
        }
      }
      return out;
    };
    sa[v] = scales("A", sfa_tmem, mh, id.sfa_id);
    sb[v] = scales("B", sfb_tmem, id.n, id.sfb_id);
    const SharedRegion& s = runner().shared_region();
    const std::uint32_t base = addr_of(s.begin);
    MmaOp& op = ops[v];
    op.id = b.next_id++;
    op.thread = tid;
    op.m = op.n = 0;  // its cells are listed
    op.column = column;
    op.lane0 = 0;
    op.kind = 3 + kind;
    op.name = op_name;
    op.issuer = static_cast<int>(rank);
    const Desc da = decode_desc(a_desc), db = decode_desc(b_desc);
    auto positions = [&](unsigned format) {
      std::vector<unsigned> pos;
      for (unsigned kk = 0; kk < k; ++kk) {
        bool high;
        const unsigned p = bs_pos(kind, format, kk, &high);
        if (pos.empty() || pos.back() != p)
          pos.push_back(p);
      }
      return pos;
    };
    if (a_mn)
      operand_reads(op.reads, da, true, 1, mh, k, base);
    else
      operand_reads_at(op.reads, da, mh, positions(id.a_format), base);
    const std::size_t a_ranges = op.reads.size();
    if (b_mn)
      operand_reads(op.reads, db, true, 1, nh, k, base);
    else
      operand_reads_at(op.reads, db, nh, positions(id.b_format), base);
    for (std::size_t i = 0; i < op.reads.size(); ++i) {
      const sm90::Range& r = op.reads[i];
      const bool is_a = i < a_ranges;
      const std::string reader = format("%s (its %s operand in CTA rank %u, %s)", op_name,
                                        is_a ? "A" : "B", cr, layout_name((is_a ? da : db).layout));
      const unsigned layout = (is_a ? da : db).layout;
      sm90::check_async_read(r.lo, r.hi, layout == 1 ? 1u : layout_span(layout), reader.c_str());
      hopper_check_ordered_read(self, r.lo, r.hi, reader.c_str());
      op.bytes.insert(op.bytes.end(), s.begin + r.lo, s.begin + r.hi);
    }
    auto element = [&](const Desc& d, bool mn, unsigned format, unsigned row, unsigned kk) {
      if (mn) {
        const unsigned x = s.begin[(operand_address(d, true, 1, row, kk) - base) % sm90::kWindow];
        return format == 0 ? e4m3_value(x) : e5m2_value(x);
      }
      bool high;
      const unsigned p = bs_pos(kind, format, kk, &high);
      const unsigned x = s.begin[(operand_address(d, false, 1, row, p) - base) % sm90::kWindow];
      if (kind != 0 || format == 5)
        return e2m1_value(high ? x >> 4 : x & 15u);
      return format == 0 ? e4m3_value(x) : e5m2_value(x);
    };
    const double na = id.negate_a ? -1.0 : 1.0, nb = id.negate_b ? -1.0 : 1.0;
    av[v].resize(static_cast<std::size_t>(mh) * k);
    bv[v].resize(static_cast<std::size_t>(nh) * k);
    for (unsigned m = 0; m < mh; ++m)
      for (unsigned kk = 0; kk < k; ++kk)
        av[v][m * k + kk] = na * element(da, a_mn, id.a_format, m, kk);
    for (unsigned n = 0; n < nh; ++n)
      for (unsigned kk = 0; kk < k; ++kk)
        bv[v][n * k + kk] = nb * element(db, b_mn, id.b_format, n, kk);
  }
  // D in CTA v: its rows of A (its scales of A) times all of B (B's rows n <
  // N / 2 from the even CTA's shared memory, the others from the odd one's;
  // the scales of B from CTA v's TMEM).
  for (unsigned v = 0; v < 2; ++v) {
    OnPeer on(ctas[v]);
    Sm100Block& b = block();
    MmaOp& op = ops[v];
    for (unsigned m = 0; m < mh; ++m) {
      for (unsigned n = 0; n < id.n; ++n) {
        const std::vector<double>& bsrc = bv[n / nh];
        const unsigned nn = n % nh;
        double acc = 0.0;
        for (unsigned kk = 0; kk < k; ++kk) {
          acc += av[v][m * k + kk] * sa[v][m * vec + kk / block_k] * bsrc[nn * k + kk] *
                 sb[v][n * vec + kk / block_k];
        }
        unsigned lane, col;
        pair_d_cell(id.m, id.n, m, n, &lane, &col);
        const std::size_t c = cell(lane, column + col);
        const unsigned p = b.pending[c];
        const MmaOp* other = p != 0 ? op_by_id(b, p) : nullptr;
        if (other != nullptr && (other->thread != tid || other->issuer != op.issuer)) {
          fail("%s writes TMEM lane %u column %u of CTA rank %u, which a %s of thread %u still "
               "writes (tcgen05 ops of different threads are not ordered)",
               op_name, lane, column + col, rank + v, other->name, other->thread);
        }
        if (!accumulate)
          check_overwrite(b, c, op_name, format(" of CTA rank %u", rank + v).c_str());
        float prev;
        std::memcpy(&prev, &b.cells[c], sizeof prev);
        const float result =
            static_cast<float>((accumulate ? static_cast<double>(prev) : 0.0) + acc);
        std::memcpy(&b.cells[c], &result, sizeof result);
        b.pending[c] = op.id;
        b.written[c] = 1;
        b.unread[c] = 1;
        op.cells.push_back(c);
      }
    }
    b.ops.push_back(std::move(op));
  }
}

// A write of [lo, hi) (block offsets) by `writer` (a TMA load) while an
// in-flight tcgen05.mma reads it.
void check_writes(std::uint32_t lo, std::uint32_t hi, const char* writer) {
  Sm100Block& b = *runner().sm100;
  const std::uint32_t base = addr_of(runner().shared_region().begin);
  // The CTA whose thread issues the write: the baton holder (the write may
  // land in a peer's shared memory, a multicast).
  const Cluster* cl = runner().cluster();
  const BlockRunner* home =
      cl != nullptr && cl->baton >= 0 ? cl->ctas[static_cast<unsigned>(cl->baton)] : &runner();
  for (std::size_t i = 0; i < b.pair_retired.size();) {
    const PairRetired& p = b.pair_retired[i];
    bool overlaps = false;
    if (p.lo < hi && lo < p.hi) {
      for (const sm90::Range& r : p.reads)
        overlaps = overlaps || (r.lo < hi && lo < r.hi);
    }
    if (!overlaps) {
      ++i;
      continue;
    }
    if (std::find(p.observers.begin(), p.observers.end(), home) == p.observers.end()) {
      std::string seen;
      for (const BlockRunner* o : p.observers)
        seen += format("%sCTA rank %u", seen.empty() ? "" : ", ", o->cluster_rank());
      fail(
          "%s issued by CTA rank %u overwrites shared memory of CTA rank %u that a %s issued by "
          "thread %u read, but no thread of CTA rank %u waited on a phase of its "
          "tcgen05.commit (%s; waited on by %s): the stage was released to CTA rank %u before "
          "the pair's op had completed",
          writer, home->cluster_rank(), runner().cluster_rank(), p.name, p.thread,
          home->cluster_rank(), commits_text(p.commits).c_str(),
          seen.c_str(), home->cluster_rank());
    }
    b.pair_retired.erase(b.pair_retired.begin() + static_cast<std::ptrdiff_t>(i));
  }
  for (const MmaOp& op : b.ops) {
    for (const sm90::Range& r : op.reads) {
      if (r.lo < hi && lo < r.hi) {
        fail(
            "%s overwrites shared memory [0x%05x, 0x%05x) that a %s issued by thread %u "
            "still reads (%s): the stage was released before the %s's tcgen05.commit phase was "
            "waited on (or the %s was issued before its data had arrived)",
            writer, (base + std::max(lo, r.lo)) % sm90::kWindow,
            (base + std::min(hi, r.hi)) % sm90::kWindow, op.name, op.thread,
            commits_text(op).c_str(), op.kind < 0 ? "copy" : "MMA", op.kind < 0 ? "copy" : "MMA");
      }
    }
  }
}

}  // namespace sm100

// ---------------------------------------------------------------------------
// The hooks of the sm90 tier and of the BlockRunner (gg_emu_internal.h).

void tcgen05_retire(BlockRunner& r, std::uint32_t bar, unsigned long long phase) {
  if (r.sm100 == nullptr || !r.sm100->used)
    return;
  // The ops of every CTA of the cluster whose commit arrived on this barrier
  // (a cta_group::2 op is kept by both CTAs of its pair; a multicast commit
  // arrives in CTAs of other pairs too).
  const Cluster* c = r.cluster();
  const unsigned n = c != nullptr ? c->size : 1;
  for (unsigned i = 0; i < n; ++i) {
    BlockRunner* x = c != nullptr ? c->ctas[i] : &r;
    if (x->sm100 == nullptr || !x->sm100->used ||
        (x->sm100->ops.empty() && x->sm100->pair_retired.empty()))
      continue;
    if (x == &r) {
      sm100::retire(bar, phase, &r);
    } else {
      OnPeer on(x);
      sm100::retire(bar, phase, &r);
    }
  }
  // The waiting thread observed the arrivals of every completed phase.
  sm100::Sm100Thread& t = r.sm100->threads[current().linear];
  for (const sm100::Unfenced& u : r.sm100->arrivals) {
    if (u.barrier != bar || u.phase >= phase)
      continue;
    bool known = false;
    for (const sm100::Unfenced& v : t.inherited)
      known = known || (v.barrier == u.barrier && v.phase == u.phase && v.thread == u.thread &&
                        v.lo == u.lo && v.hi == u.hi);
    if (!known)
      t.inherited.push_back(u);
  }
}

void tcgen05_on_arrive(BlockRunner& r, std::uint32_t bar, unsigned long long phase) {
  if (r.sm100 == nullptr || !r.sm100->used)
    return;
  const sm100::Sm100Thread& t = r.sm100->threads[current().linear];
  for (sm100::Unfenced u : t.unfenced) {
    u.barrier = bar;
    u.phase = phase;
    r.sm100->arrivals.push_back(u);
  }
}

void tcgen05_check_writes(BlockRunner& r, std::uint32_t lo, std::uint32_t hi, const char* writer) {
  if (r.sm100 != nullptr && r.sm100->used)
    sm100::check_writes(lo, hi, writer);
}

const char* tcgen05_fpe_reason() {
  const ThreadCtx* t = tls.thread;
  if (t == nullptr || t->runner == nullptr || t->runner->sm100 == nullptr ||
      !t->runner->sm100->used)
    return nullptr;
  if (t->runner->sm100->threads[t->linear].lds.empty())
    return nullptr;
  return "floating-point invalid operation while this thread has a tcgen05.ld outstanding: its "
         "destination registers were read before tcgen05.wait::ld (they hold signalling NaNs "
         "until then)";
}

void sm100_block_begin(BlockRunner& r) {
  if (r.sm100 != nullptr)
    r.sm100->used = false;
}

void sm100_thread_exit(ThreadCtx& t) {
  Sm100Block* b = t.runner->sm100;
  if (b == nullptr || !b->used)
    return;
  const sm100::Sm100Thread& u = b->threads[t.linear];
  if (!u.lds.empty())
    fail("the thread exits with a tcgen05.ld never waited for (tcgen05.wait::ld)");
  if (u.st_pending)
    fail("the thread exits with a tcgen05.st never waited for (tcgen05.wait::st)");
}

void sm100_block_end(BlockRunner& r) {
  Sm100Block* b = r.sm100;
  if (b == nullptr || !b->used)
    return;
  for (const sm100::MmaOp& op : b->ops) {
    fail(
        "at the end of the block, a %s issued by thread %u (TMEM column %u, %u x %u) "
        "has not completed as far as the block can tell: %s, and no thread waited on a phase "
        "of it",
        op.name, op.thread, op.column, op.m, op.n, sm100::commits_text(op).c_str());
  }
  for (const sm100::Alloc& a : b->allocs) {
    fail(
        "TMEM leak: columns [%u, %u) allocated by warp %u (tcgen05.alloc) were never freed "
        "(tcgen05.dealloc) before the block ended",
        a.column, a.column + a.ncols, a.warp);
  }
}

void sm100_free(Sm100Block* b) {
  delete b;
}

std::string sm100_report(const BlockRunner& r) {
  const Sm100Block* b = r.sm100;
  if (b == nullptr || !b->used)
    return "";
  std::string out;
  for (unsigned w = 0; w < b->alloc_waits.size(); ++w) {
    if (b->alloc_waits[w] != 0) {
      out += format("  TMEM: warp %u waits in tcgen05.alloc for %u columns; %s\n", w,
                    b->alloc_waits[w], sm100::describe_allocs(*b).c_str());
    }
  }
  for (const sm100::MmaOp& op : b->ops) {
    out += format("  %s of thread %u (TMEM column %u, %u x %u) in flight: %s\n", op.name, op.thread,
                  op.column, op.m, op.n, sm100::commits_text(op).c_str());
  }
  return out;
}

}  // namespace gg::emu

// ---------------------------------------------------------------------------
// The emulator's decoding, for tests that compare it with CuTe and the PTX
// ISA (the signatures are documented in gg_emu_sm100.h).

namespace {
void copy_why(const std::string& s, char* why, int why_bytes) {
  if (why != nullptr && why_bytes > 0) {
    const std::size_t n = std::min(s.size(), static_cast<std::size_t>(why_bytes - 1));
    std::memcpy(why, s.data(), n);
    why[n] = '\0';
  }
}
}  // namespace

GG_EMU_API long long gg_emu_sm100_smem_desc_offset(unsigned long long desc, int major_mn,
                                                   int elem_bits, int row, int k) {
  if (!gg::emu::sm100::check_desc(desc, major_mn != 0).empty() ||
      (elem_bits != 8 && elem_bits != 16 && elem_bits != 32) || row < 0 || k < 0)
    return -1;
  return gg::emu::sm100::operand_address(gg::emu::sm100::decode_desc(desc), major_mn != 0,
                                         static_cast<unsigned>(elem_bits / 8),
                                         static_cast<unsigned>(row), static_cast<unsigned>(k));
}

GG_EMU_API int gg_emu_sm100_smem_desc_check(unsigned long long desc, int major_mn, char* why,
                                            int why_bytes) {
  const std::string s = gg::emu::sm100::check_desc(desc, major_mn != 0);
  copy_why(s, why, why_bytes);
  return s.empty() ? 0 : 1;
}

GG_EMU_API void gg_emu_sm100_idesc_decode(unsigned idesc, int* fields) {
  const gg::emu::sm100::Idesc d = gg::emu::sm100::decode_idesc(idesc);
  const unsigned v[14] = {d.d_format,   d.a_format, d.b_format,  d.negate_a, d.negate_b,
                          d.a_mn,       d.b_mn,     d.n,         d.m,        d.sparse,
                          d.sparse_sel, d.saturate, d.max_shift, d.reserved};
  for (int i = 0; i < 14; ++i)
    fields[i] = static_cast<int>(v[i]);
}

GG_EMU_API int gg_emu_sm100_idesc_check(unsigned idesc, int kind, char* why, int why_bytes) {
  const std::string s = gg::emu::sm100::check_idesc(idesc, kind);
  copy_why(s, why, why_bytes);
  return s.empty() ? 0 : 1;
}

GG_EMU_API int gg_emu_sm100_d_cell(int m_total, int n, int row, int col, int* lane, int* column) {
  if ((m_total != 64 && m_total != 128) || n < 8 || n > 256 || n % 8 != 0 || row < 0 ||
      row >= m_total || col < 0 || col >= n)
    return -1;
  *lane = static_cast<int>(
      gg::emu::sm100::d_lane(static_cast<unsigned>(m_total), static_cast<unsigned>(row)));
  *column = col;
  return 0;
}

GG_EMU_API int gg_emu_sm100_pair_d_cell(int m_total, int n, int row, int col, int* lane, int* column) {
  if ((m_total != 128 && m_total != 256) || n < 16 || n > 256 || n % 16 != 0 || row < 0 ||
      row >= m_total / 2 || col < 0 || col >= n)
    return -1;
  unsigned l, c;
  gg::emu::sm100::pair_d_cell(static_cast<unsigned>(m_total), static_cast<unsigned>(n),
                              static_cast<unsigned>(row), static_cast<unsigned>(col), &l, &c);
  *lane = static_cast<int>(l);
  *column = static_cast<int>(c);
  return 0;
}

GG_EMU_API int gg_emu_sm100_pair_idesc_check(unsigned idesc, int kind, char* why, int why_bytes) {
  const std::string s = gg::emu::sm100::check_idesc(idesc, kind, 2);
  copy_why(s, why, why_bytes);
  return s.empty() ? 0 : 1;
}

GG_EMU_API void gg_emu_sm100_bs_idesc_decode(unsigned idesc, int kind, int* fields) {
  const gg::emu::sm100::BsIdesc d = gg::emu::sm100::decode_bs_idesc(idesc, kind);
  const unsigned v[14] = {d.sfb_id, d.a_format, d.b_format, d.negate_a,     d.negate_b,
                          d.a_mn,   d.b_mn,     d.n,        d.scale_format, d.m,
                          d.sfa_id, d.sparse,   d.reserved, d.k96};
  for (int i = 0; i < 14; ++i)
    fields[i] = static_cast<int>(v[i]);
}

GG_EMU_API int gg_emu_sm100_bs_idesc_check(unsigned idesc, int kind, char* why, int why_bytes) {
  const std::string s = gg::emu::sm100::check_bs_idesc(idesc, kind);
  copy_why(s, why, why_bytes);
  return s.empty() ? 0 : 1;
}

GG_EMU_API int gg_emu_sm100_sf_cell(int row, int block, int sf_id, int vec, int quarter, int* lane,
                                    int* column, int* byte) {
  if (row < 0 || row >= 256 || quarter < 0 || quarter > 3 || block < 0 || block >= vec ||
      !(vec == 1 || vec == 2 || vec == 4) || sf_id < 0 || sf_id + vec > 4 || sf_id % vec != 0)
    return -1;
  unsigned l, c, b;
  gg::emu::sm100::sf_cell(static_cast<unsigned>(row), static_cast<unsigned>(block),
                          static_cast<unsigned>(sf_id), static_cast<unsigned>(quarter), &l, &c, &b);
  *lane = static_cast<int>(l);
  *column = static_cast<int>(c);
  *byte = static_cast<int>(b);
  return 0;
}

GG_EMU_API int gg_emu_sm100_cp_cell(int row, int byte, int quarter, int* lane, int* column,
                                    int* byte_in_word) {
  if (row < 0 || row >= 32 || byte < 0 || byte >= 16 || quarter < 0 || quarter > 3)
    return -1;
  unsigned l, c, b;
  gg::emu::sm100::cp_cell(static_cast<unsigned>(row), static_cast<unsigned>(byte),
                          static_cast<unsigned>(quarter), &l, &c, &b);
  *lane = static_cast<int>(l);
  *column = static_cast<int>(c);
  *byte_in_word = static_cast<int>(b);
  return 0;
}

GG_EMU_API int gg_emu_sm100_pair_bs_idesc_check(unsigned idesc, int kind, char* why,
                                                int why_bytes) {
  const std::string s = gg::emu::sm100::check_bs_idesc(idesc, kind, 2);
  copy_why(s, why, why_bytes);
  return s.empty() ? 0 : 1;
}

GG_EMU_API int gg_emu_sm100_pair_sf_cell(int which, int m_total, int n, int row, int block,
                                         int sf_id, int vec, int quarter, int* cta, int* lane,
                                         int* column, int* byte) {
  // which 0: A (row < m_total, held by CTA row / 128), 1: B (row < n, held
  // by both CTAs: cta = -1).
  if (m_total != 256 || n < 16 || n > 256 || n % 16 != 0 || row < 0 ||
      row >= (which == 0 ? m_total : n) || quarter < 0 || quarter > 3 || block < 0 ||
      block >= vec || !(vec == 1 || vec == 2 || vec == 4) || sf_id < 0 || sf_id + vec > 4 ||
      sf_id % vec != 0)
    return -1;
  const unsigned r = which == 0 ? static_cast<unsigned>(row % (m_total / 2))
                                : static_cast<unsigned>(row);
  unsigned l, c, b;
  gg::emu::sm100::sf_cell(r, static_cast<unsigned>(block), static_cast<unsigned>(sf_id),
                          static_cast<unsigned>(quarter), &l, &c, &b);
  *cta = which == 0 ? row / (m_total / 2) : -1;
  *lane = static_cast<int>(l);
  *column = static_cast<int>(c);
  *byte = static_cast<int>(b);
  return 0;
}
