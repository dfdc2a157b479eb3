// gg_emu_sm100_pair_bs.cc: block-scaled cta_group::2: tcgen05.cp and the
// block-scaled MMAs at M = 256 per CTA pair. Part of the emulator's model of
// tensor memory and tcgen05 (gg_emu_sm100.h), compiled once per build mode
// into the core objects.
#include "gg_emu_sm100_state.h"

namespace gg::emu {

namespace sm100 {

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

}  // namespace sm100

}  // namespace gg::emu
