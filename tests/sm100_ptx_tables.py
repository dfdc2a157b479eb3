"""The PTX ISA's tables for sm_100 tcgen05, stated independently of CuTe and of
the emulator (the second authority of tests/cuda/sm100/test_cuda_sm100_cute_oracle.py).

Written from the PTX ISA (version 9.x), chapter 9.7.16 "TensorCore 5th
Generation Family Instructions"; each block names the section it restates
(section names are stable; the table and figure numbers are those of PTX ISA
9.1 / 9.2 and shift in other versions):

- "Shared Memory Descriptor" (9.7.16.4.1, Table 40 "Shared memory descriptor
  layout", Table 41 "Starting address of repeating pattern for various
  swizzling modes");
- "Major-ness supported by Strides" (9.7.16.3: 9.7.16.3.1.1 "Relative offset
  mode" for the leading dimension byte offset, 9.7.16.3.2 "Stride Dimension
  Byte Offset");
- "Shared Memory Layout and Swizzling" (9.7.16.10.6, Table 53 "Layout for
  swizzle atoms"; the swizzle patterns are the figures 219-227, restated in
  the canonical-layout form of 9.7.15.5.1.2 "Shared Memory Matrix Layout"
  that the wgmma chapter writes out);
- "Instruction Descriptor" (9.7.16.4.2, Table 42 "Instruction descriptor
  format for .kind::tf32, .kind::f16, .kind::f8f6f4 and .kind::i8");
- "Matrix Shape" (9.7.16.2.1, Table 39 "Various combinations of .kind and
  shapes") and "Transpose and Negate operations" (9.7.16.10.1, Table 50
  "Various combinations of N shape with .cta_group qualifier for 8bit
  transpose B");
- "Data Path Layout Organization" (9.7.16.10.5: the layout table; Layout D
  "M = 128 + cta-group::1", Layout F "M = 64 + non .ws mode") and the access
  restriction of tcgen05.ld / tcgen05.st (a warp reaches the 32 lanes of its
  position in the warpgroup);
- "Packing format for matrix D in Tensor Memory" (9.7.16.10.4.1: one element
  per 32-bit word);
- "Data Movement Shape" (9.7.16.2.3) and "Matrix fragments for shape
  .32x32b / .16x64b / .16x128b / .16x256b / .16x32bx2" (9.7.16.2.3.1.1-5,
  Figures 183-186 and the .16x32bx2 one), with the .num counts of the table
  "tcgen05-num-shapes-ld" (numbered 47 to 52 across PTX ISA versions).

The layouts of the data path and the tcgen05.ld fragments are figures in the
PTX ISA, not tables: the rules below are their transcription (which thread
holds which lane and column), and the oracle test checks the transcription
against CuTe's atoms, so a misreading of either shows up as a disagreement.
"""

from __future__ import annotations

# ---------------------------------------------------------------------------
# Shared memory descriptor (9.7.16.4.1, Table 40).

SMEM_DESC_FIELDS: dict[str, tuple[int, int]] = {  # name -> (lowest bit, width)
    "start_address": (0, 14),  # matrix-descriptor-encode(start address)
    "reserved_14": (14, 2),
    "leading_byte_offset": (16, 14),  # matrix-descriptor-encode(LBO), or an absolute address
    "reserved_30": (30, 2),
    "stride_byte_offset": (32, 14),  # matrix-descriptor-encode(SBO)
    "fixed_46": (46, 3),  # "Fixed constant value of 0b001"
    "base_offset": (49, 3),  # "Matrix base offset"
    "lbo_mode": (52, 1),  # 0: byte offset relative; 1: byte address absolute (sm_103a)
    "fixed_53": (53, 8),  # "Fixed constant value of 0"
    "swizzle": (61, 3),
}
# Swizzling mode field: 0 none, 1 128-byte with 32-byte atomicity, 2 128-byte,
# 4 64-byte, 6 32-byte; "Values 3, 5 and 7 are invalid".
SWIZZLE_MODES = {0: "none", 1: "128B_base32B", 2: "128B", 4: "64B", 6: "32B"}
SWIZZLE_BYTES = {0: 0, 1: 128, 2: 128, 4: 64, 6: 32}
# Table 41: the repeating pattern starts on these boundaries (base offset 0).
PATTERN_BOUNDARY = {2: 1024, 4: 512, 6: 256}


def matrix_descriptor_encode(x: int) -> int:
    """Table 40's note: matrix-descriptor-encode(x) = (x & 0x3FFFF) >> 4."""
    return (x & 0x3FFFF) >> 4


def field(word: int, lo: int, width: int) -> int:
    return (word >> lo) & ((1 << width) - 1)


def decode_smem_desc(desc: int) -> dict[str, int]:
    return {name: field(desc, lo, w) for name, (lo, w) in SMEM_DESC_FIELDS.items()}


def encode_smem_desc(start: int, lbo: int, sbo: int, swizzle: int, base_offset: int = 0) -> int:
    """A descriptor from byte quantities (start address, LBO, SBO)."""
    values = {"start_address": matrix_descriptor_encode(start),
              "leading_byte_offset": matrix_descriptor_encode(lbo),
              "stride_byte_offset": matrix_descriptor_encode(sbo), "fixed_46": 0b001,
              "base_offset": base_offset, "swizzle": swizzle}
    word = 0
    for name, v in values.items():
        lo, w = SMEM_DESC_FIELDS[name]
        assert 0 <= v < (1 << w), (name, v)
        word |= v << lo
    return word


def smem_desc_problems(desc: int) -> list[str]:
    """What Table 40 forbids in `desc` (relative LBO mode, as on sm_100a)."""
    f = decode_smem_desc(desc)
    problems = []
    if f["fixed_46"] != 0b001:
        problems.append(f"bits 46-48 are {f['fixed_46']:#05b}, the fixed constant is 0b001")
    if f["fixed_53"] != 0:
        problems.append("bits 53-60 are not 0")
    if f["reserved_14"] or f["reserved_30"]:
        problems.append("reserved bits 14-15 / 30-31 set")
    if f["swizzle"] not in SWIZZLE_MODES:
        problems.append(f"swizzling mode {f['swizzle']} is invalid (3, 5 and 7 are)")
    if f["lbo_mode"]:
        problems.append("absolute leading-dimension address mode (sm_103a only)")
    return problems


def ptx_operand_address(desc: int, mn_major: bool, elem_bits: int, mn: int, k: int) -> int:
    """The shared-memory byte address of operand element (mn, k) (mn: the row
    of A or the column of B; k along K) that `desc` describes, base offset 0.

    T = 128 / elem_bits elements make one 128-bit (16-byte) unit, the unit the
    strides are defined in (9.7.16.3). S = the swizzle width in bytes.

    K-major (9.7.16.3.1.1, 9.7.16.3.2): 8-row groups SBO apart. Without
    swizzle an 8 x 16-byte core matrix is 128 contiguous bytes, and LBO is
    "the stride from the first column to the second column of the 8x2 tile in
    the 128-bit element type normalized matrix"; swizzled, a row of the atom
    (Table 53: 8 x S/16 units) is S contiguous bytes and the LBO is "not used,
    assumed to be 1" (one MMA's K, 32 bytes, stays within the row).

    MN-major: without swizzle ("Interleave") the 16-byte MN units are SBO
    apart ("offset from the first row to the next row") and 8-column K groups
    LBO apart ("stride from the first 8 columns to the next 8 columns"), a
    K column being 16 bytes on from the previous; swizzled, the atom (Table 53:
    S/16 x 8 units) holds S contiguous bytes of MN per K column, K columns S
    bytes apart, LBO "from the first (swizzle-byte-size/16) rows to the next"
    (the next S bytes of MN) and SBO "from the first 8 columns to the next 8
    columns" (the next 8 K). 128-byte swizzle with 32-byte atomicity (Table
    53: 8 x 4 units, MN-major only) has 4 K columns of 128 bytes per atom.

    The swizzle (Figures 219-227; the canonical layouts Swizzle<log2(S/16),4,3>
    of 9.7.15.5.1.2) XORs the 16-byte chunk index within an S-byte row (bits
    4 ..) with the row index within the pattern (bits 7 ..); with 32-byte
    atomicity the 32-byte chunk index (bits 5-6) with bits 7-8.
    """
    f = decode_smem_desc(desc)
    assert not smem_desc_problems(desc), smem_desc_problems(desc)
    assert f["base_offset"] == 0, "only patterns on their boundary are modelled"
    eb = elem_bits // 8
    t = 128 // elem_bits
    start, lbo, sbo = (f["start_address"] << 4, f["leading_byte_offset"] << 4,
                       f["stride_byte_offset"] << 4)
    mode = f["swizzle"]
    s = SWIZZLE_BYTES[mode]
    if not mn_major:
        assert mode != 1, "128B with 32B atomicity is MN-major only (Table 52)"
        if mode == 0:
            addr = start + (mn % 8) * 16 + (mn // 8) * sbo + (k // t) * lbo + (k % t) * eb
        else:
            addr = start + (mn % 8) * s + (mn // 8) * sbo + k * eb
    else:
        if mode == 0:
            addr = start + (mn % t) * eb + (mn // t) * sbo + (k % 8) * 16 + (k // 8) * lbo
        else:
            per_row = s // eb  # MN elements in one S-byte row
            kgroup = 4 if mode == 1 else 8
            addr = (start + (mn % per_row) * eb + (mn // per_row) * lbo + (k % kgroup) * s
                    + (k // kgroup) * sbo)
    if mode == 1:
        return addr ^ (((addr >> 7) & 3) << 5)
    if mode:
        return addr ^ (((addr >> 7) & (s // 16 - 1)) << 4)
    return addr


# ---------------------------------------------------------------------------
# Instruction descriptor (9.7.16.4.2, Table 42), kinds f16 and f8f6f4.

IDESC_FIELDS: dict[str, tuple[int, int]] = {
    "sparsity_selector": (0, 2),
    "sparsity": (2, 1),  # dense 0, sparse 1
    "saturate": (3, 1),  # integer kinds only; 0 here
    "dtype": (4, 2),
    "reserved_6": (6, 1),
    "atype": (7, 3),
    "btype": (10, 3),
    "negate_a": (13, 1),
    "negate_b": (14, 1),
    "transpose_a": (15, 1),  # 1: A is M-major (9.7.16.10.6)
    "transpose_b": (16, 1),  # 1: B is N-major
    "n": (17, 6),  # N >> 3
    "reserved_23": (23, 1),
    "m": (24, 5),  # M >> 4
    "reserved_29": (29, 1),
    "max_shift": (30, 2),  # .ws only
}
# Table 42 lists F32 = 1 alone for kind::f8f6f4 (Table 39's row for it, as
# transcribed, also names .f16 beside .f32: only f32 is compared here).
DTYPES = {"f16": {"f16": 0, "f32": 1}, "f8f6f4": {"f32": 1}}
ATYPES = {"f16": {"f16": 0, "bf16": 1},
          "f8f6f4": {"e4m3": 0, "e5m2": 1, "e2m3": 3, "e3m2": 4, "e2m1": 5}}
K_OF_KIND = {"f16": 16, "f8f6f4": 32}  # Table 39, dense


def encode_idesc(kind: str, atype: str, btype: str, dtype: str, m: int, n: int,
                 a_mn_major: bool, b_mn_major: bool, negate_a: bool = False,
                 negate_b: bool = False) -> int:
    values = {"dtype": DTYPES[kind][dtype], "atype": ATYPES[kind][atype],
              "btype": ATYPES[kind][btype], "negate_a": int(negate_a), "negate_b": int(negate_b),
              "transpose_a": int(a_mn_major), "transpose_b": int(b_mn_major), "n": n >> 3,
              "m": m >> 4}
    word = 0
    for name, v in values.items():
        lo, w = IDESC_FIELDS[name]
        assert 0 <= v < (1 << w), (name, v)
        word |= v << lo
    return word


def decode_idesc(word: int) -> dict[str, int]:
    return {name: field(word, lo, w) for name, (lo, w) in IDESC_FIELDS.items()}


def idesc_problems(word: int, kind: str) -> list[str]:
    """What Tables 39, 42 and 50 forbid for a dense cta_group::1 MMA."""
    f = decode_idesc(word)
    problems = []
    for name in ("reserved_6", "reserved_23", "reserved_29", "sparsity", "sparsity_selector",
                 "saturate", "max_shift"):
        if f[name]:
            problems.append(f"{name} is {f[name]}")
    if f["dtype"] not in DTYPES[kind].values():
        problems.append(f"dtype {f['dtype']} is not one of kind::{kind}")
    for ab in ("atype", "btype"):
        if f[ab] not in ATYPES[kind].values():
            problems.append(f"{ab} {f[ab]} is not one of kind::{kind}")
    m, n = f["m"] << 4, f["n"] << 3
    if m not in (64, 128):
        problems.append(f"M = {m} (cta_group::1: 64 or 128)")
    if not 8 <= n <= 256:
        problems.append(f"N = {n} (8 .. 256 in steps of 8)")
    eight_bit = kind == "f8f6f4"
    if eight_bit and f["transpose_b"] and n % 16:
        problems.append(f"N = {n} with an 8-bit N-major B (16 .. 256 in steps of 16)")
    return problems


def valid_n(kind: str, b_mn_major: bool) -> list[int]:
    """Table 39 (N = 8 .. 256 in steps of 8) and Table 50 (8-bit transpose B,
    cta_group::1: 16 .. 256 in steps of 16)."""
    step = 16 if kind == "f8f6f4" and b_mn_major else 8
    return list(range(step, 257, step))


# ---------------------------------------------------------------------------
# Tensor memory: the accumulator's data path layout (9.7.16.10.5).


def warp_lanes(warp: int) -> range:
    """The TMEM lanes warp `warp` of a CTA reaches with tcgen05.ld / st: the
    32 lanes of its position in its warpgroup."""
    q = warp % 4
    return range(32 * q, 32 * q + 32)


def ptx_d_cell(m_shape: int, row: int, col: int, lane_align: int = 0) -> tuple[int, int]:
    """(lane, column) of accumulator element (row, col) of a cta_group::1
    dense MMA whose D address is lane `lane_align`, column 0. Layout D
    (M = 128): row i in lane i. Layout F (M = 64, "4x1 (1/2 datapath
    utilized)", lane alignment 0 or 16): 16 rows in each 32-lane
    subpartition, from the aligned lane. f32 elements, one per 32-bit column
    (9.7.16.10.4.1)."""
    if m_shape == 128:
        assert lane_align == 0
        return row, col
    assert m_shape == 64 and lane_align in (0, 16)
    return 32 * (row // 16) + lane_align + row % 16, col


# ---------------------------------------------------------------------------
# tcgen05.ld fragments (9.7.16.2.3.1, Figures 183-186 and the .16x32bx2 one).

# .num values (Table "tcgen05-num-shapes-ld") and 32-bit registers per .x1.
LD_NUMS = {"32x32b": 128, "16x64b": 128, "16x128b": 64, "16x256b": 32, "16x32bx2": 128}
LD_REGS_PER_NUM = {"32x32b": 1, "16x64b": 1, "16x128b": 2, "16x256b": 4, "16x32bx2": 1}
LD_COLS_PER_NUM = {"32x32b": 1, "16x64b": 2, "16x128b": 4, "16x256b": 8, "16x32bx2": 1}


def ptx_ld(shape: str, num: int, thread: int, reg: int, half_split: int = 0) -> tuple[int, int]:
    """(lane, column), relative to the warp's address, of register `reg` of
    thread `thread` of tcgen05.ld.<shape>.x<num>. The .x1 pattern repeats
    .num times along the columns, COLS_PER_NUM columns apart, registers
    REGS_PER_NUM at a time:

    - .32x32b (Figure 183): thread t holds lane t, register r column r.
    - .16x64b (Figure 184): 16 lanes x 2 columns, one register a thread:
      thread t at lane t/4 + 8 (t%2), column (t/2) % 2.
    - .16x128b (Figure 185): 16 lanes x 4 columns, two registers: r0 at lane
      t/4, r1 at lane t/4 + 8, both column t%4.
    - .16x256b (Figure 186): 16 lanes x 8 columns, four registers: r0, r1 at
      lane t/4, columns 2 (t%4) and 2 (t%4) + 1; r2, r3 the same at lane
      t/4 + 8 (the mma.sync accumulator pattern).
    - .16x32bx2 (the figure after 186): threads 0-15 lanes 0-15 at the address,
      threads 16-31 lanes 0-15 at the address + immHalfSplitoff columns.
    """
    assert 1 <= num <= LD_NUMS[shape] and num & (num - 1) == 0
    per = LD_REGS_PER_NUM[shape]
    assert 0 <= reg < per * num and 0 <= thread < 32
    rep, j = divmod(reg, per)
    base = rep * LD_COLS_PER_NUM[shape]
    t = thread
    if shape == "32x32b":
        return t, base
    if shape == "16x64b":
        return t // 4 + 8 * (t % 2), base + (t // 2) % 2
    if shape == "16x128b":
        return t // 4 + 8 * j, base + t % 4
    if shape == "16x256b":
        return t // 4 + 8 * (j // 2), base + 2 * (t % 4) + j % 2
    assert shape == "16x32bx2"
    return t % 16, base + (half_split if t >= 16 else 0)


# ---------------------------------------------------------------------------
# Block-scaled MMA (9.7.16.10.7 "Block Scaling"; 9.7.16.4.2, Table 43
# "Instruction descriptor format for .kind::mxf8f6f4" and Table 44 "... for
# .kind::mxf4 and .kind::mxf4nvf4"; Table 54 / 55, the valid combinations of
# scale_vectorsize, kind and types; Table 39's rows for the three kinds).

BS_IDESC_FIELDS: dict[str, tuple[int, int]] = {  # name -> (lowest bit, width)
    "reserved_0": (0, 2),
    "sparsity": (2, 1),
    "reserved_3": (3, 1),
    "sfb_id": (4, 2),  # "Matrix B Scale Factor Data ID"
    "reserved_6": (6, 1),
    "atype": (7, 3),
    "btype": (10, 3),  # Table 44: bits 10-11, bit 12 reserved
    "negate_a": (13, 1),
    "negate_b": (14, 1),
    "transpose_a": (15, 1),
    "transpose_b": (16, 1),
    "n": (17, 6),  # N >> 3
    "scale_type": (23, 1),  # "Scale Matrix Type, for both scale_A / scale_B": UE8M0 = 1, UE4M3 = 0
    "reserved_24": (24, 3),
    "m": (27, 2),  # M >> 7 ("7 LSBs not included")
    "sfa_id": (29, 2),  # "Matrix A Scale Factor Data ID"
    "bit_31": (31, 1),  # Table 43: reserved; Table 44: K dimension (dense K = 96: 1)
}
BS_ATYPES = {"mxf8f6f4": {"e4m3": 0, "e5m2": 1, "e2m3": 3, "e3m2": 4, "e2m1": 5},
             "mxf4": {"e2m1": 1}, "mxf4nvf4": {"e2m1": 1}}
BS_SCALE_TYPES = {"mxf8f6f4": {"ue8m0": 1}, "mxf4": {"ue8m0": 1}, "mxf4nvf4": {"ue8m0": 1, "ue4m3": 0}}
BS_K = {"mxf8f6f4": 32, "mxf4": 64, "mxf4nvf4": 64}  # Table 39, dense, cta_group::1
# Table 54: scales per row of one MMA (scale_vec::1X / 2X / 4X) and the K
# block each covers; the ids a vector size allows (9.7.16.10.7.2 / .3: a
# byte, a half word, the whole word).
BS_VEC = {"mxf8f6f4": 1, "mxf4": 2, "mxf4nvf4": 4}
BS_IDS = {1: (0, 1, 2, 3), 2: (0, 2), 4: (0,)}


def encode_bs_idesc(kind: str, atype: str, btype: str, scale: str, m: int, n: int, a_mn: bool, b_mn: bool,
                    sfa_id: int = 0, sfb_id: int = 0) -> int:
    values = {"sfb_id": sfb_id, "atype": BS_ATYPES[kind][atype], "btype": BS_ATYPES[kind][btype],
              "transpose_a": int(a_mn), "transpose_b": int(b_mn), "n": n >> 3,
              "scale_type": BS_SCALE_TYPES[kind][scale], "m": m >> 7, "sfa_id": sfa_id}
    word = 0
    for name, v in values.items():
        lo, w = BS_IDESC_FIELDS[name]
        assert 0 <= v < (1 << w), (name, v)
        word |= v << lo
    return word


def decode_bs_idesc(word: int) -> dict[str, int]:
    return {name: field(word, lo, w) for name, (lo, w) in BS_IDESC_FIELDS.items()}


def bs_idesc_problems(word: int, kind: str) -> list[str]:
    """What Tables 39, 43 / 44, 54 and 55 forbid for a dense cta_group::1
    block-scaled MMA (scale_vec of the kind's primitive: 1X, 2X, 4X)."""
    f = decode_bs_idesc(word)
    problems = [f"{name} is {f[name]}" for name in ("reserved_0", "sparsity", "reserved_3", "reserved_6",
                                                    "reserved_24", "bit_31") if f[name]]
    if kind != "mxf8f6f4" and f["btype"] & 4:
        problems.append("bit 12 (reserved in Table 44) is set")
    for ab in ("atype", "btype"):
        if f[ab] not in BS_ATYPES[kind].values():
            problems.append(f"{ab} {f[ab]} is not one of kind::{kind}")
    if f["scale_type"] not in BS_SCALE_TYPES[kind].values():
        problems.append(f"scale type {f['scale_type']} is not one of kind::{kind}")
    for ab, t in (("atype", "transpose_a"), ("btype", "transpose_b")):
        # Table 44: no transpose; 4-bit operands K-major (9.7.16.10.3).
        if f[t] and (kind != "mxf8f6f4" or f[ab] == 5):
            problems.append(f"{t} with a 4-bit operand")
    m, n = f["m"] << 7, f["n"] << 3
    if m != 128:
        problems.append(f"M = {m} (cta_group::1: 128)")
    step = 16 if kind == "mxf8f6f4" and f["transpose_b"] else 8
    if not (step <= n <= 256 and n % step == 0):
        problems.append(f"N = {n}")
    for which in ("sfa_id", "sfb_id"):
        if f[which] not in BS_IDS[BS_VEC[kind]]:
            problems.append(f"{which} {f[which]} with scale_vec::{BS_VEC[kind]}X")
    return problems


def ptx_sf_cell(row: int, block: int, sf_id: int, quarter: int) -> tuple[int, int, int]:
    """The (lane, column relative to the scale address, byte of the 32-bit
    word) of the scale of row `row` (A: m, B: n) and K block `block` of one
    MMA (9.7.16.10.7.2 / .3, "Layout of the Scale Factor A / B Matrix": the
    ID picks the byte (1X), half word (2X) or word (4X) of each column;
    "Scale factors for A and B matrices need to be duplicated to all 32 lane
    partitions": the same in each lane quarter). Rows are 32 a column, lane
    row % 32: the figures, transcribed (checked against CuTe's tmem_sf_frg)."""
    return row % 32 + 32 * quarter, row // 32, sf_id + block


def ptx_cp_cell(row: int, bit: int, quarter: int) -> tuple[int, int, int]:
    """tcgen05.cp .32x128b.warpx4 (9.7.16.9.2; "Data Movement Shape": 32
    lanes x 128 bits, multicast to all 4 warps' lane quarters): source row
    `row`, bit `bit` lands in lane row + 32 quarter, column bit / 32, bit
    bit % 32 of the word."""
    return row + 32 * quarter, bit // 32, bit % 32


def pair_bs_idesc_problems(word: int, kind: str) -> list[str]:
    """bs_idesc_problems for a dense cta_group::2 MMA at M = 256 per pair (the
    shape the emulator models; Table 39: N a multiple of 16 in 16..256)."""
    problems = [p for p in bs_idesc_problems(word, kind) if not p.startswith(("M = ", "N = "))]
    f = decode_bs_idesc(word)
    m, n = f["m"] << 7, f["n"] << 3
    if m != 256:
        problems.append(f"M = {m} (cta_group::2 as modelled: 256)")
    if not (16 <= n <= 256 and n % 16 == 0):
        problems.append(f"N = {n}")
    return problems


def pair_sf_cell(which: str, m_total: int, row: int, block: int, sf_id: int,
                 quarter: int) -> tuple[int, int, int, int]:
    """Where a cta_group::2 block-scaled MMA of m_total = 256 rows per pair
    reads the scale of row `row` (A: the pair's m, 0..255; B: n) and K block
    `block`: (the CTA of the pair whose TMEM holds it, -1 for both; lane,
    column, byte as ptx_sf_cell). A: CTA row // 128 holds its 128 rows, as
    for its half of A; B: each CTA holds all N rows, since its half of D
    spans every column (CuTe's 2x1SM traits: MMA_ScaleFactor is the
    one-CTA MMA of M / 2 x round_up(N, 128), tmem_sf_frg "4x1")."""
    assert m_total == 256
    if which == "A":
        return (row // 128,) + ptx_sf_cell(row % 128, block, sf_id, quarter)
    return (-1,) + ptx_sf_cell(row, block, sf_id, quarter)
