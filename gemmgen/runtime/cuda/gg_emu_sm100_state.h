// gg_emu_sm100_state.h: the per-block state of the emulator's sm_100a model
// (TMEM cells and allocations, tcgen05 ops in flight, the threads' pending
// loads and unfenced accesses) and the helpers that reach it, shared by its
// parts (gg_emu_sm100_*.cc) and only they.
#pragma once

#include "gg_emu_sm100_desc.h"

namespace gg::emu {

namespace sm100 {

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

// The allocation and deallocation of both groups (gg_emu_sm100_tmem.cc).
void tmem_alloc_group(unsigned* slot, unsigned ncols, unsigned group, const char* kOp);
void tmem_dealloc_named(unsigned taddr, unsigned ncols, const char* kOp);

}  // namespace sm100

}  // namespace gg::emu
