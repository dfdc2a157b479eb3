// gg_emu_sm90_block.cc: the Hopper model's per-block life: the write order
// a cluster barrier merges, the ordered-read check of a peer CTA's shared
// memory, and the BlockRunner's hooks (block begin and end, a thread's exit,
// a stalled block, the deadlock report). Part of the emulator's Hopper model
// (gg_emu_sm90.h), compiled once per build mode into the core objects.
#include "gg_emu_sm90_state.h"

namespace gg::emu {

void hopper_cluster_synced(Cluster& c) {
  sm90::Seen all;
  for (const BlockRunner* r : c.ctas)
    all.merge(sm90::signal_of(*r));
  for (BlockRunner* r : c.ctas) {
    if (r->hopper != nullptr && r->hopper->used)
      r->hopper->seen.merge(all);
  }
}

void hopper_check_ordered_read(const BlockRunner& reader, std::uint32_t lo, std::uint32_t hi,
                               const char* what) {
  const BlockRunner& self = sm90::runner();
  if (&self == &reader || self.hopper == nullptr || !self.hopper->used || hi <= lo)
    return;
  const HopperBlock& h = *self.hopper;
  const unsigned rank = self.cluster_rank();
  const std::uint32_t known =
      reader.hopper != nullptr && reader.hopper->used ? reader.hopper->seen.at[rank] : 0;
  for (std::uint32_t g = lo / 16; g <= (hi - 1) / 16; ++g) {
    if (h.written_at[g] > known) {
      const std::uint32_t at = std::max(lo, 16 * g);
      fail(
          "%s reads shared memory at 0x%05x of CTA rank %u, which that CTA's write %u filled "
          "(a TMA load into it, or generic stores a fence.proxy.async made visible), but CTA "
          "rank %u has waited on no signal of CTA rank %u made after that write (it has seen "
          "its writes up to %u): the read is not ordered after the write (after writing, CTA "
          "rank %u must signal a barrier the reader waits on: an arrival, or its TMA load's "
          "completion)",
          what, (sm90::addr_of(self.shared_region().begin) + at) % sm90::kWindow, rank,
          h.written_at[g], reader.cluster_rank(), rank, known, rank);
    }
  }
}

// ---------------------------------------------------------------------------
// The BlockRunner's hooks (declared in gg_emu.h).

void hopper_block_begin(BlockRunner& r) {
  if (r.hopper != nullptr) {
    r.hopper->barriers.clear();
    r.hopper->loads.clear();
    r.hopper->filled.clear();
    r.hopper->reads.clear();
    r.hopper->used = false;
  }
}

void hopper_thread_exit(ThreadCtx& t) {
  HopperBlock* h = t.runner->hopper;
  if (h == nullptr || !h->used)
    return;
  sm90::HopperThread& u = h->threads[t.linear];
  if (!u.wgmma.empty()) {
    fail(
        "the thread exits with %zu wgmma.mma_async not retired by wgmma.wait_group (their "
        "accumulators were never "
        "valid)",
        u.wgmma.size());
  }
  // TMA stores still in flight complete, as on a GPU; their source must still hold.
  sm90::bulk_wait(0, false);
}

void hopper_block_end(BlockRunner& r) {
  HopperBlock* h = r.hopper;
  if (h == nullptr || !h->used)
    return;
  for (const sm90::TmaLoad& l : h->loads) {
    for (const sm90::Barrier& b : h->barriers) {
      if (b.addr != l.barrier)
        continue;
      if (l.phase < b.phase) {
        fail(
            "a TMA load into shared address 0x%05x (%zu bytes, issued by thread %u) completed "
            "phase %llu of the "
            "mbarrier at 0x%05x, but no thread waited on that phase: its data was never observed "
            "(a missing wait "
            "on the full barrier?)",
            sm90::addr_of(l.dst), l.bytes, l.thread, l.phase, b.addr);
      }
      fail(
          "a TMA load into shared address 0x%05x (%zu bytes, issued by thread %u) never completed "
          "at the end of the "
          "block: %s",
          sm90::addr_of(l.dst), l.bytes, l.thread, sm90::describe_barrier(b).c_str());
    }
  }
  for (const sm90::Barrier& b : h->barriers) {
    if (b.tx < 0)
      fail("at the end of the block, %s", sm90::describe_barrier(b).c_str());
  }
}

void hopper_free(HopperBlock* h) {
  delete h;
}

// Lets threads waiting at wgmma.wait_group go on once nothing else can run;
// true when one could. Called by BlockRunner when the block stalls.
bool hopper_on_stall(BlockRunner& r) {
  HopperBlock* h = r.hopper;
  if (h == nullptr || !h->used)
    return false;
  bool any = false;
  for (unsigned i = 0; i < h->threads.size(); ++i) {
    sm90::HopperThread& t = h->threads[i];
    if (r.thread(i).state == State::at_wait && !t.stalled && !t.wgmma.empty()) {
      t.stalled = true;
      any = true;
    }
  }
  if (any)
    r.wake_waiters();
  return any;
}

// What the block's mbarriers still miss, for a deadlock report.
std::string hopper_report(const BlockRunner& r) {
  const HopperBlock* h = r.hopper;
  if (h == nullptr || !h->used)
    return "";
  std::string out;
  for (const sm90::Barrier& b : h->barriers) {
    if (b.pending != b.count || b.tx != 0)
      out += "  " + sm90::describe_barrier(b) + "\n";
  }
  for (const sm90::Barrier& b : h->barriers) {
    if (b.pending == b.count && b.tx == 0) {
      out += format(
          "  mbarrier at shared address 0x%05x: phase %llu (parity %llu): none of %u arrivals "
          "yet\n",
          b.addr, b.phase, b.phase & 1, b.count);
    }
  }
  return out;
}

}  // namespace gg::emu
