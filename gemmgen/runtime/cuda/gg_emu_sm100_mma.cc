// gg_emu_sm100_mma.cc: tcgen05.mma.cta_group::1 (kind::f16, f8f6f4 and the
// block-scaled kinds), tcgen05.cp of scale atoms, and tcgen05.commit. Part
// of the emulator's model of tensor memory and tcgen05 (gg_emu_sm100.h),
// compiled once per build mode into the core objects.
#include "gg_emu_sm100_state.h"

namespace gg::emu {

namespace sm100 {

// ---------------------------------------------------------------------------
// tcgen05.mma.

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

}  // namespace sm100

}  // namespace gg::emu
