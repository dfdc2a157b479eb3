// gg_emu_sm90_wgmma.cc: wgmma (fence, mma_async, commit_group, wait_group;
// the operand checks, the accumulators' poison and the FP traps), the
// ordering of async-proxy reads that the sm100 tier shares, setmaxnreg, and
// the exported decoders the CuTe oracle tests call. Part of the emulator's
// Hopper model (gg_emu_sm90.h), compiled once per build mode into the core
// objects.
#include "gg_emu_sm90_state.h"

namespace gg::emu {

namespace sm90 {

// The A fragment of wgmma .m64nNk16 with A in registers: value j (0..7) of
// thread t, two 16-bit values per register, low half first.
void a_fragment_coord(unsigned t, unsigned j, unsigned* m, unsigned* k) {
  const unsigned warp = t / 32, lane = t % 32;
  *m = 16 * warp + lane / 4 + 8 * ((j / 2) % 2);
  *k = 2 * (lane % 4) + j % 2 + 8 * (j / 4);
}

// ---- wgmma -------------------------------------------------------------------

inline float wgmma_poison() {
  const std::uint32_t bits = 0x7fa0574du;  // a signalling NaN ("WM")
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

inline void on_fpe(int, siginfo_t* info, void*) {
  if (info->si_code == FPE_FLTINV) {
    if (const char* why = tcgen05_fpe_reason())
      fail_with_status(kExitKernelError, why);
    fail_with_status(
        kExitKernelError,
        "floating-point invalid operation while this thread has wgmma.mma_async in flight: an "
        "accumulator was read before wgmma.wait_group retired its wgmma (the accumulators hold "
        "signalling NaNs until then)");
  }
  fail_with_status(
      kExitKernelError,
      format("arithmetic exception (SIGFPE, code %d) in a CUDA thread", info->si_code));
}

inline void trap_invalid(bool on) {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction sa{};
    sa.sa_sigaction = &on_fpe;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGFPE, &sa, nullptr);
  });
  std::feclearexcept(FE_ALL_EXCEPT);
  if (on) {
    feenableexcept(FE_INVALID);
  } else {
    fedisableexcept(FE_INVALID);
  }
}

void set_invalid_trap(bool on) {
  trap_invalid(on);
}

// The generic writes an async-proxy read of [lo, hi) (by the calling
// thread, of the current CTA's shared memory) sees must be ordered before
// it: each tagged byte's fence epoch known to the reading thread's clock.
inline void check_ordered(std::uint32_t lo, std::uint32_t hi, const char* reader) {
  const HopperBlock& h = block();
  const ThreadCtx& t = current();
  std::uint32_t seen = 0;  // the last fence found ordered
  for (std::uint32_t i = lo; i < hi; ++i) {
    const std::uint32_t id = h.writer[i];
    if (id == 0 || id == seen)
      continue;
    const HopperBlock::Fence& f = h.fences[id];
    if (order::knows(t, f.thread, f.epoch)) {
      seen = id;
      continue;
    }
    const unsigned n = runner().num_threads();
    const std::uint32_t base = addr_of(runner().shared_region().begin);
    fail(
        "%s reads shared memory at 0x%05x of CTA rank %u that thread %u of CTA rank %u wrote "
        "(st.shared) and published with fence.proxy.async, but nothing orders that write before "
        "this read: no chain of mbarrier arrivals and waits (local or remote), __syncthreads or "
        "barrier.cluster leads from the writing thread, after its fence, to the reading thread %u "
        "of CTA rank %u (a missing arrival on, or wait for, the barrier the reader waits on?)",
        reader, (base + i) % kWindow, runner().cluster_rank(), f.thread % n, f.thread / n,
        t.hb_self % n, t.hb_self / n);
  }
}

// An async-proxy read of [lo, hi) by the sm100 tier (a tcgen05.mma operand
// through a descriptor of swizzle span `span`, 1 for the 128-byte swizzle
// with 32-byte atomicity, which no modelled TMA load writes): inside the block's shared
// memory, not filled by a TMA load still in flight, nor by one of another
// swizzle, and what the last fence.proxy.async left.
void check_async_read(std::uint32_t lo, std::uint32_t hi, unsigned span, const char* reader) {
  HopperBlock& h = block();
  const SharedRegion& s = runner().shared_region();
  const std::uint32_t base = addr_of(s.begin);
  if (hi > static_cast<std::size_t>(s.end - s.begin) || hi < lo) {
    fail("%s: shared address 0x%05x (+%u bytes) is outside the block's shared memory", reader,
         (base + lo) % kWindow, hi - lo);
  }
  for (const TmaLoad& l : h.loads) {
    const std::uint32_t llo = static_cast<std::uint32_t>(shadow_offset(l.dst)),
                        lhi = llo + static_cast<std::uint32_t>(l.bytes);
    if (lo < lhi && llo < hi) {
      fail(
          "%s reads shared memory at 0x%05x that a TMA load (mbarrier at 0x%05x, phase %llu) "
          "still fills: no thread has waited on that barrier phase (a missing wait on the full "
          "barrier?)",
          reader, (base + std::max(lo, llo)) % kWindow, l.barrier, l.phase);
    }
  }
  for (const HopperBlock::Filled& f : h.filled) {
    if (lo < f.hi && f.lo < hi && f.span != span) {
      fail(
          "%s: the descriptor says %s, but a TMA load with %s filled the shared memory it reads "
          "(at 0x%05x): the descriptor's swizzle mode must be the tensor map's",
          reader,
          span == 1   ? "a 128-byte swizzle with 32-byte atomicity"
          : span != 0 ? format("%u-byte swizzle", span).c_str()
                      : "no swizzle",
          f.span ? format("%u-byte swizzle", f.span).c_str() : "no swizzle",
          (base + std::max(lo, f.lo)) % kWindow);
    }
  }
  if (std::memcmp(s.begin + lo, h.shadow.data() + lo, hi - lo) != 0)
    check_async_view(s.begin + lo, hi - lo, reader);
  check_ordered(lo, hi, reader);
}

// The A fragment registers of the thread's in-flight wgmmas with A in
// registers must hold their values until the op retires (PTX ISA: accessing
// them before wgmma.wait_group is undefined; on a GPU an overwrite corrupts
// the product). Checked when the thread next touches wgmma (`where`) and when
// the op retires, at the wait_group that retires it.
inline void check_a_registers(const HopperThread& t, const char* where) {
  for (const WgmmaOp& op : t.wgmma) {
    if (op.a_addr == nullptr)
      continue;
    for (unsigned i = 0; i < 4; ++i) {
      std::uint32_t now;
      std::memcpy(&now, op.a_addr + i, sizeof now);
      if (now != op.a_vals[i]) {
        const unsigned tid = current().linear;
        fail(
            "the A fragment registers of a wgmma.mma_async (A in registers) were overwritten "
            "before wgmma.wait_group retired it (thread %u, warpgroup %u, commit group %u: a[%u] "
            "was 0x%08x at issue, 0x%08x at %s): build the next fragment in other registers, or "
            "wait first",
            tid, tid / 128, op.group, i, op.a_vals[i], now, where);
      }
    }
  }
}

void wgmma_fence() {
  HopperThread& t = me();
  check_a_registers(t, "the next wgmma.fence");
  t.fence_needed = false;
}

void wgmma_commit() {
  HopperThread& t = me();
  check_a_registers(t, "the next wgmma.commit_group");
  ++t.wgmma_committed;
}

// The shared memory a wgmma operand reads, as ranges of 16-byte chunks.
inline void operand_reads(std::vector<Range>& out, std::uint64_t desc, bool mn_major, unsigned eb,
                          unsigned rows, unsigned k) {
  const Desc d = decode_desc(desc);
  for (unsigned mn = 0; mn < rows; ++mn) {
    for (unsigned kk = 0; kk < k; ++kk) {
      const std::uint32_t a = rel(operand_address(d, mn_major, eb, mn, kk));
      if (!out.empty() && out.back().hi == a) {
        out.back().hi = a + eb;
      } else {
        out.push_back({a, a + eb});
      }
    }
  }
}

// The shared memory one wgmma operand reads (operand_reads), computed once
// per block for each (descriptor, major-ness, element size, shape): every
// thread of the warpgroup issues the same wgmma, and a pipelined kernel
// reuses its stages' descriptors.
inline const std::vector<Range>& cached_reads(std::uint64_t desc, bool mn_major, unsigned eb,
                                              unsigned rows, unsigned k) {
  HopperBlock& h = block();
  for (const HopperBlock::Reads& r : h.reads) {
    if (r.desc == desc && r.mn_major == mn_major && r.eb == eb && r.rows == rows && r.k == k)
      return r.ranges;
  }
  HopperBlock::Reads r{desc, mn_major, eb, rows, k, {}};
  operand_reads(r.ranges, desc, mn_major, eb, rows, k);
  h.reads.push_back(std::move(r));
  return h.reads.back().ranges;
}

// check_operand's test by ranges of bytes instead of element by element:
// true when the element-wise test cannot fail (every range inside the
// block's shared memory, no range overlapping a TMA fill of another swizzle,
// the async proxy's view equal to shared memory). False means "look
// closer": check_operand then finds the element and reports it.
inline bool operand_clean(const std::vector<Range>& ranges, std::uint64_t desc) {
  const Desc d = decode_desc(desc);
  if (d.base_offset != 0)
    return false;
  const HopperBlock& h = block();
  const SharedRegion& s = runner().shared_region();
  const std::size_t size = static_cast<std::size_t>(s.end - s.begin);
  const unsigned span = desc_span(d.mode);
  for (const Range& r : ranges) {
    if (r.hi > size || r.hi < r.lo)
      return false;
    for (const HopperBlock::Filled& f : h.filled) {
      if (r.lo < f.hi && f.lo < r.hi && f.span != span)
        return false;
    }
    if (std::memcmp(s.begin + r.lo, h.shadow.data() + r.lo, r.hi - r.lo) != 0)
      return false;
  }
  return true;
}

inline void check_operand(std::uint64_t desc, bool mn_major, unsigned eb, unsigned rows, unsigned k,
                          const char* what) {
  const Desc d = decode_desc(desc);
  if (d.base_offset != 0)
    fail("wgmma.mma_async: %s descriptor has base offset %u; only 0 is modelled", what,
         d.base_offset);
  const HopperBlock& h = block();
  for (unsigned mn = 0; mn < rows; ++mn) {
    for (unsigned kk = 0; kk < k; ++kk) {
      const std::uint32_t a = operand_address(d, mn_major, eb, mn, kk);
      for (const HopperBlock::Filled& f : h.filled) {
        if (rel(a) >= f.lo && rel(a) < f.hi && f.span != desc_span(d.mode)) {
          fail(
              "wgmma.mma_async: %s descriptor says %s, but a TMA load with %s filled the shared "
              "memory it reads "
              "(element (%u, %u) at 0x%05x): the descriptor's swizzle mode must be the tensor "
              "map's",
              what,
              desc_span(d.mode) ? format("%u-byte swizzle", desc_span(d.mode)).c_str()
                                : "no swizzle",
              f.span ? format("%u-byte swizzle", f.span).c_str() : "no swizzle", mn, kk, a);
        }
      }
      const unsigned char* p = at(a, eb, "wgmma.mma_async operand");
      check_async_view(p, eb,
                       mn_major ? "wgmma.mma_async (an MN-major operand)"
                                : "wgmma.mma_async (a K-major operand)");
    }
  }
}

// Issues one wgmma for the calling thread: checks, records the op, poisons
// the accumulators. `op` is complete but for `group`, `c`, `chained`, `reads`.
void wgmma_issue(WgmmaOp op, float* d) {
  HopperThread& t = me();
  check_a_registers(t, "the next wgmma.mma_async");
  if (t.fence_needed) {
    fail(
        "wgmma.mma_async without a wgmma.fence before it: every batch of wgmma (the first of the "
        "kernel, and the "
        "first after a wgmma.wait_group or after the accumulators were touched) needs wgmma.fence");
  }
  if (current().block_dim.x * current().block_dim.y * current().block_dim.z % 128 != 0) {
    fail("wgmma.mma_async: the block has %u threads, not whole warpgroups of 128",
         current().block_dim.x * current().block_dim.y * current().block_dim.z);
  }
  const unsigned m = 64, nv = op.n / 2;
  if (!op.a_regs) {
    const std::vector<Range>& a = cached_reads(op.desc_a, op.trans_a, op.eb, m, op.k);
    if (!operand_clean(a, op.desc_a))
      check_operand(op.desc_a, op.trans_a, op.eb, m, op.k, "the A");
    op.reads.insert(op.reads.end(), a.begin(), a.end());
  }
  const std::vector<Range>& b = cached_reads(op.desc_b, op.trans_b, op.eb, op.n, op.k);
  if (!operand_clean(b, op.desc_b))
    check_operand(op.desc_b, op.trans_b, op.eb, op.n, op.k, "the B");
  op.reads.insert(op.reads.end(), b.begin(), b.end());
  for (const TmaLoad& l : block().loads) {
    const std::uint32_t lo = static_cast<std::uint32_t>(shadow_offset(l.dst)),
                        hi = lo + static_cast<std::uint32_t>(l.bytes);
    for (const Range& r : op.reads) {
      if (r.lo < hi && lo < r.hi) {
        fail(
            "wgmma.mma_async reads shared memory at 0x%05x that a TMA load (mbarrier at 0x%05x, "
            "phase %llu) still "
            "fills: no thread has waited on that barrier phase (a missing wait on the full "
            "barrier?)",
            addr_of(l.dst), l.barrier, l.phase);
      }
    }
  }
  op.group = t.wgmma_committed;
  op.d = d;
  for (int i = static_cast<int>(t.wgmma.size()) - 1; i >= 0; --i) {
    if (t.wgmma[static_cast<std::size_t>(i)].d == d) {
      op.chained = i;
      break;
    }
  }
  if (op.chained < 0)
    op.c.assign(d, d + nv);
  const float poison = wgmma_poison();
  for (unsigned i = 0; i < nv; ++i)
    d[i] = poison;
  t.wgmma.push_back(std::move(op));
  trap_invalid(true);
}

GG_EMU_UNCHECKED inline void wgmma_compute(WgmmaOp& op, const float* c, unsigned tid) {
  const Desc da = decode_desc(op.desc_a), db = decode_desc(op.desc_b);
  const unsigned nv = op.n / 2;
  // The operands' values, decoded once: an 8-bit type through a table of its
  // 256 values; the thread's two A rows and N/4 B columns (its accumulator
  // fragment's), each read from shared memory once (wgmma_issue checked
  // every address is inside the block's shared memory).
  const SharedRegion& s = runner().shared_region();
  const std::uint32_t base = addr_of(s.begin);
  auto bits_at = [&](std::uint32_t a) {
    unsigned v = 0;
    std::memcpy(&v, s.begin + (a - base) % kWindow, op.eb);
    return v;
  };
  double table[256];
  if (op.eb == 1) {
    for (unsigned v = 0; v < 256; ++v)
      table[v] = op.value(v);
  }
  auto decode = [&](unsigned v) { return op.eb == 1 ? table[v & 0xFF] : op.value(v); };
  std::vector<double> a_rows(2 * op.k), b_cols(static_cast<std::size_t>(op.n) * op.k);
  std::vector<bool> b_done(op.n, false);
  unsigned rows[2] = {~0u, ~0u};
  for (unsigned i = 0; i < nv; ++i) {
    unsigned row, col;
    accumulator_coord(tid % 128, i, &row, &col);
    const unsigned slot = (i / 2) % 2;
    if (rows[slot] != row) {
      rows[slot] = row;
      for (unsigned kk = 0; kk < op.k; ++kk) {
        a_rows[slot * op.k + kk] = op.a_regs ? decode(op.a_tile[row % 16][kk])
                                             : decode(bits_at(operand_address(da, op.trans_a, op.eb, row, kk)));
      }
    }
    if (!b_done[col]) {
      b_done[col] = true;
      for (unsigned kk = 0; kk < op.k; ++kk)
        b_cols[static_cast<std::size_t>(col) * op.k + kk] =
            decode(bits_at(operand_address(db, op.trans_b, op.eb, col, kk)));
    }
    const double* a = &a_rows[slot * op.k];
    const double* b = &b_cols[static_cast<std::size_t>(col) * op.k];
    double acc = 0.0;
    for (unsigned kk = 0; kk < op.k; ++kk)
      acc += a[kk] * b[kk];
    op.d[i] = static_cast<float>((op.scale_d ? static_cast<double>(c[i]) : 0.0) + acc);
  }
}

// wgmma.wait_group keep: retires every op of the groups older than the newest
// `keep`, in issue order. The thread first waits until the block stalls, so
// that everything else that can run, runs while the ops are in flight.
void wgmma_wait(unsigned keep) {
  HopperThread& t = me();
  // The thread's registers cannot change while it waits: this is the check at
  // retirement, before anything the thread does after the wait.
  check_a_registers(t, "wgmma.wait_group");
  const unsigned limit = t.wgmma_committed >= keep ? t.wgmma_committed - keep : 0u;
  bool any = false;
  for (const WgmmaOp& op : t.wgmma)
    any = any || op.group < limit;
  if (any) {
    t.stalled = false;
    t.wait_text = format("wgmma.wait_group %u", keep);
    runner().wait_until(
        current(), t.wait_text.c_str(), [](const void* p) { return *static_cast<const bool*>(p); },
        &t.stalled);
  }
  HopperThread& u = me();
  trap_invalid(false);
  const unsigned tid = current().linear;
  std::vector<WgmmaOp> kept;
  std::vector<std::vector<float>> results(u.wgmma.size());
  for (std::size_t i = 0; i < u.wgmma.size(); ++i) {
    WgmmaOp& op = u.wgmma[i];
    if (op.group >= limit) {
      kept.push_back(std::move(op));
      continue;
    }
    const std::vector<float>& c =
        op.chained >= 0 ? results[static_cast<std::size_t>(op.chained)] : op.c;
    std::vector<float> scratch(op.n / 2);
    float* d = op.d;
    op.d = scratch.data();
    wgmma_compute(op, c.data(), tid);
    op.d = d;
    results[i] = std::move(scratch);
    bool later = false;
    for (std::size_t j = i + 1; j < u.wgmma.size(); ++j)
      later = later || (u.wgmma[j].d == d && u.wgmma[j].group < limit);
    bool pending_later = false;
    for (std::size_t j = i + 1; j < u.wgmma.size(); ++j)
      pending_later = pending_later || (u.wgmma[j].d == d && u.wgmma[j].group >= limit);
    if (!later && !pending_later)
      std::memcpy(d, results[i].data(), results[i].size() * sizeof(float));
    // A later op that stays in flight takes this result as its C.
    for (std::size_t j = i + 1; j < u.wgmma.size(); ++j) {
      if (u.wgmma[j].chained == static_cast<int>(i) && u.wgmma[j].group >= limit) {
        u.wgmma[j].c = results[i];
        u.wgmma[j].chained = -1;
      }
    }
  }
  // Re-index the chains of the ops kept in flight.
  for (WgmmaOp& op : kept)
    op.chained = -1;
  for (std::size_t i = 0; i < kept.size(); ++i) {
    for (std::size_t j = 0; j < i; ++j) {
      if (kept[j].d == kept[i].d && kept[i].c.empty())
        kept[i].chained = static_cast<int>(j);
    }
  }
  u.wgmma = std::move(kept);
  u.fence_needed = true;
  trap_invalid(!u.wgmma.empty());
}

// setmaxnreg: checks only (registers are not modelled).
void setmaxnreg(unsigned regs) {
  if (regs < 24 || regs > 256 || regs % 8 != 0)
    fail("setmaxnreg: %u registers is not a multiple of 8 in 24..256", regs);
}

}  // namespace sm90

}  // namespace gg::emu

// The emulator's decoding, for tests that compare it with CuTe and the PTX
// ISA (tests/cuda/sm90/test_cuda_sm90_cute_oracle.py): the shared address of element
// (mn, k) of a wgmma operand, and the (m, n) of accumulator value i of
// warpgroup thread t.
GG_EMU_API unsigned gg_emu_sm90_operand_address(unsigned long long desc, int mn_major,
                                                unsigned elem_bytes, unsigned mn, unsigned k) {
  return gg::emu::sm90::operand_address(gg::emu::sm90::decode_desc(desc), mn_major != 0, elem_bytes,
                                        mn, k);
}
GG_EMU_API void gg_emu_sm90_accumulator_coord(unsigned t, unsigned i, unsigned* m, unsigned* n) {
  gg::emu::sm90::accumulator_coord(t, i, m, n);
}
GG_EMU_API void gg_emu_sm90_a_fragment_coord(unsigned t, unsigned j, unsigned* m, unsigned* k) {
  gg::emu::sm90::a_fragment_coord(t, j, m, k);
}
