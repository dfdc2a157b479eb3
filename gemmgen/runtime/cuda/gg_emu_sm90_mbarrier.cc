// gg_emu_sm90_mbarrier.cc: mbarriers (init, arrive, expect_tx, wait, the
// phases), the register work of a waiting thread, and the async-proxy fence
// (fence.proxy.async: the generic writes it publishes). Part of the
// emulator's Hopper model (gg_emu_sm90.h), compiled once per build mode into
// the core objects.
#include "gg_emu_sm90_state.h"

namespace gg::emu {

namespace sm90 {

// ---------------------------------------------------------------------------
// Operations behind gg_primitives_sm90.cuh.

void mbarrier_init(void* bar, unsigned count) {
  check_barrier_address(bar, "mbarrier.init");
  if (count == 0 || count > (1u << 20) - 1)
    fail("mbarrier.init: count %u is not in 1..2^20-1", count);
  HopperBlock& h = block();
  Barrier* b = find_barrier(bar);
  if (b == nullptr) {
    h.barriers.push_back({});
    b = &h.barriers.back();
  }
  *b = Barrier{};
  b->addr = addr_of(bar);
  b->count = b->pending = count;
  b->init_thread = current().linear;
  std::memset(bar, 0, 8);
}

void mbarrier_inval(void* bar) {
  barrier(bar, "mbarrier.inval");
  HopperBlock& h = block();
  const std::uint32_t a = addr_of(bar);
  for (const TmaLoad& l : h.loads) {
    if (l.barrier == a)
      fail("mbarrier.inval: TMA loads that signal the mbarrier at %s are still in flight",
           where_smem(bar).c_str());
  }
  std::erase_if(h.barriers, [a](const Barrier& b) { return b.addr == a; });
  runner().wake_waiters();
}

void fence_mbarrier_init() {
  const unsigned self = current().linear;
  for (Barrier& b : block().barriers) {
    if (b.init_thread == self)
      b.fenced = true;
  }
}

unsigned long long mbarrier_arrive(void* bar, unsigned long long tx) {
  Barrier& b = barrier(bar, tx != 0 ? "mbarrier.arrive.expect_tx" : "mbarrier.arrive");
  if (b.pending == 0)
    fail("mbarrier.arrive: more arrivals than the count of %s", describe_barrier(b).c_str());
  const unsigned long long token = b.phase;
  tcgen05_on_arrive(runner(), b.addr, token);
  order::release(current(), b.arrived);
  b.carry.merge(signal_of(runner()));
  b.tx += static_cast<long long>(tx);
  b.announced += static_cast<long long>(tx);
  --b.pending;
  maybe_complete(b);
  return token;
}

// Register work of the thread (`what`: widening weights into registers,
// spinning on an mbarrier) while one of its wgmmas with A in registers is in
// flight. The C++ arrays may all differ, but ptxas does not reserve an
// in-flight wgmma's A registers across code that branches, and gives their
// physical registers to the new values (docs/cuda-hopper.md, "Register-
// sourced wgmma hazards"): such a wgmma's batch must be waited for first.
void register_work(const char* what) {
  const HopperThread& t = me();
  for (const WgmmaOp& op : t.wgmma) {
    if (op.a_regs) {
      const unsigned tid = current().linear;
      fail(
          "%s while a wgmma.mma_async with A in registers is in flight (thread %u, warpgroup %u, "
          "commit group %u): ptxas may give the in-flight A fragment's registers to the new "
          "values; wgmma.wait_group first",
          what, tid, tid / 128, op.group);
    }
  }
}

bool mbarrier_wait(void* bar, unsigned parity, const char* op) {
  register_work("a spin on an mbarrier (mbarrier.try_wait)");
  Barrier* b = &barrier(bar, op);
  if (!phase_done(*b, parity)) {
    HopperThread& t = me();
    t.wait_text = format("%s (mbarrier at shared address 0x%05x, parity %u)", op, b->addr, parity);
    const WaitArg arg{&block(), b->addr, parity};
    runner().wait_until(current(), t.wait_text.c_str(), &wait_ready, &arg);
    b = &barrier(bar, op);
  }
  land_loads(*b);
  block().seen.merge(b->carried);
  tcgen05_retire(runner(), b->addr, b->phase);
  order::acquire(current(), b->done);
  return true;
}

unsigned long long mbarrier_phase(void* bar, const char* op) {
  return barrier(bar, op).phase;
}

void fence_proxy_async() {
  HopperBlock& h = block();
  const SharedRegion& s = runner().shared_region();
  // The bytes the generic proxy changed since the last fence are this
  // thread's to publish, in its present epoch (order::release ends it).
  const std::size_t size = static_cast<std::size_t>(s.end - s.begin);
  std::uint32_t id = 0;
  for (std::size_t lo = 0; lo < size; lo += 64) {
    const std::size_t n = std::min<std::size_t>(64, size - lo);
    if (std::memcmp(s.begin + lo, h.shadow.data() + lo, n) == 0)
      continue;
    if (id == 0) {
      ThreadCtx& t = current();
      id = static_cast<std::uint32_t>(h.fences.size());
      h.fences.push_back({t.hb_self, order::clock(t)[t.hb_self]});
    }
    for (std::size_t i = lo; i < lo + n; ++i) {
      if (s.begin[i] != h.shadow[i])
        h.writer[i] = id;
    }
  }
  // The cluster's write order (the CTA's numbered writes): the generic
  // stores it makes visible are one numbered write (the granules that
  // differ from the async proxy's view).
  bool any = false;
  for (std::size_t g = 0; g < size; g += 16) {
    const std::size_t n = std::min<std::size_t>(16, size - g);
    if (std::memcmp(s.begin + g, h.shadow.data() + g, n) != 0) {
      if (!any)
        ++h.writes;
      any = true;
      h.written_at[g / 16] = h.writes;
    }
  }
  std::memcpy(h.shadow.data(), s.begin, size);
  fence_mbarrier_init();  // the proxy fence also orders the thread's mbarrier.init
}

}  // namespace sm90

}  // namespace gg::emu
