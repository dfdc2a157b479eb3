// gg_emu_sm100_retire.cc: retirement of tcgen05 ops when a wait sees their
// commit's phase, the stage release check of writes into shared memory
// in-flight ops read, and the hooks of the sm90 tier and the BlockRunner.
// Part of the emulator's model of tensor memory and tcgen05
// (gg_emu_sm100.h), compiled once per build mode into the core objects.
#include "gg_emu_sm100_state.h"

namespace gg::emu {

namespace sm100 {

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
