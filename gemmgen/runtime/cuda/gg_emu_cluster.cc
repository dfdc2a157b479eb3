// gg_emu_cluster.cc: the cluster model behind gg_primitives_sm90.cuh's
// cluster primitives (docs/cuda-emulation.md, "Clusters"): the special
// registers, barrier.cluster, mapa and shared::cluster addresses, ld / st of
// a peer's shared memory, and the rule that a CTA's shared memory is gone
// once its threads have exited. The remote mbarrier arrive and the
// multicast TMA load are in gg_emu_sm90_tma.cc (they act on the Hopper model's
// barriers). Compiled once per build mode into the core objects.
#include "gg_emu_runner.h"

namespace gg::emu {

namespace {

BlockRunner& runner() { return *current().runner; }

// A launch without a cluster attribute is a cluster of one CTA per block.
unsigned cluster_size(const BlockRunner& r) {
  return r.cluster() != nullptr ? r.cluster()->size : 1;
}

std::string cta_name(const BlockRunner& r) {
  const uint3 b = r.block_index();
  const uint3 c = r.cluster_id();
  return format("CTA rank %u (block (%u,%u,%u)) of cluster (%u,%u,%u)", r.cluster_rank(), b.x, b.y, b.z, c.x, c.y,
                c.z);
}

// The CTA's dynamic shared memory, as the peer's worker thread sees it: TLS
// blocks of one module have one layout, so the offset from the region start
// is the same.
unsigned char* dynamic_smem_of(const BlockRunner& r) {
  const unsigned char* mine = runner().shared_region().begin;
  return r.shared_region().begin + (gg_emu_dynamic_smem - mine);
}

bool cluster_barrier_ready(const void* arg) {
  const ThreadCtx* t = static_cast<const ThreadCtx*>(arg);
  const Cluster* c = t->runner->cluster();
  return c == nullptr || c->barrier_phase > t->cluster_phase;
}

// Threads of the cluster that have not exited.
unsigned cluster_live_threads(const Cluster& c) {
  unsigned n = 0;
  for (const BlockRunner* r : c.ctas) n += r->live_threads();
  return n;
}

void maybe_complete_cluster_barrier(Cluster& c) {
  if (c.barrier_arrived == 0 || c.barrier_arrived < cluster_live_threads(c)) return;
  hopper_cluster_synced(c);
  ++c.barrier_phase;
  c.barrier_arrived = 0;
  c.barrier_clock.complete();
  for (BlockRunner* r : c.ctas) r->wake_waiters();
}

}  // namespace

void cluster_thread_exit(ThreadCtx& t) {
  Cluster* c = t.runner->cluster();
  if (c == nullptr) return;
  // live_threads() still counts this thread: it leaves after this hook.
  if (t.cluster_arrived) --c->barrier_arrived;
  if (c->barrier_arrived != 0 && c->barrier_arrived + 1 >= cluster_live_threads(*c)) {
    hopper_cluster_synced(*c);
    ++c->barrier_phase;
    c->barrier_arrived = 0;
    c->barrier_clock.complete();
    for (BlockRunner* r : c->ctas) r->wake_waiters();
  }
}

void cluster_cta_exited(BlockRunner& r) {
#if defined(GG_EMU_TSAN)
  (void)r;  // no cluster launches in TSan mode
#else
  const std::size_t page = page_bytes();
  unsigned char* dyn = r.shared_region().begin + (gg_emu_dynamic_smem - module_tbss().begin);
  const auto lo = reinterpret_cast<std::uintptr_t>(dyn);
  const std::uintptr_t begin = (lo + page - 1) / page * page;
  const std::uintptr_t end = (lo + kMaxDynamicSmem) / page * page;
  if (end <= begin) return;
  ExitedSmem e{dyn, reinterpret_cast<unsigned char*>(begin), reinterpret_cast<unsigned char*>(end), {}};
  const std::string what = format(
      "access to the shared memory of %s after every thread of that CTA exited: a CTA's shared memory is released "
      "when it exits, so a CTA whose peers may still read or write it (mapa, shared::cluster addresses) must wait "
      "for them first (barrier.cluster.arrive + barrier.cluster.wait before exiting)",
      cta_name(r).c_str());
  std::snprintf(e.what, sizeof(e.what), "%s", what.c_str());
  {
    Registry& reg = registry();
    std::lock_guard<std::mutex> lock(reg.mu);
    reg.exited_smem.push_back(e);
  }
  mprotect(e.begin, end - begin, PROT_NONE);
#endif
}

void cluster_cta_released(BlockRunner& r) {
#if defined(GG_EMU_TSAN)
  (void)r;
#else
  unsigned char* dyn = r.shared_region().begin + (gg_emu_dynamic_smem - module_tbss().begin);
  Registry& reg = registry();
  std::lock_guard<std::mutex> lock(reg.mu);
  std::erase_if(reg.exited_smem, [dyn](const ExitedSmem& e) {
    if (e.dyn != dyn) return false;
    mprotect(e.begin, static_cast<std::size_t>(e.end - e.begin), PROT_READ | PROT_WRITE);
    return true;
  });
#endif
}

namespace sm90 {

unsigned cluster_ctarank() { return runner().cluster_rank(); }
unsigned cluster_nctarank() { return cluster_size(runner()); }

uint3 cluster_id() {
  const BlockRunner& r = runner();
  return r.cluster() != nullptr ? r.cluster_id() : r.block_index();
}

dim3 cluster_nctaid() { return runner().launch().cluster; }

uint3 cluster_ctaid() {
  const dim3 d = runner().launch().cluster;
  const uint3 b = runner().block_index();
  return make_uint3(b.x % d.x, b.y % d.y, b.z % d.z);
}

dim3 cluster_nclusterid() {
  const Launch& l = runner().launch();
  return dim3(l.grid.x / l.cluster.x, l.grid.y / l.cluster.y, l.grid.z / l.cluster.z);
}

void cluster_arrive() {
  ThreadCtx& t = current();
  Cluster* c = t.runner->cluster();
  if (t.cluster_arrived) {
    fail("barrier.cluster.arrive: this thread already arrived (phase %llu) and has not waited "
         "(barrier.cluster.wait) yet; every arrive needs its wait before the next",
         t.cluster_phase);
  }
  if (c == nullptr) {
    // One CTA: the barrier is the block's threads; every live thread arrives.
    t.cluster_arrived = true;
    t.cluster_phase = 0;
    return;
  }
  t.cluster_arrived = true;
  t.cluster_phase = c->barrier_phase;
  if (!t.hb.empty()) order::release(t, c->barrier_clock.acc);
  ++c->barrier_arrived;
  maybe_complete_cluster_barrier(*c);
}

void cluster_wait() {
  ThreadCtx& t = current();
  if (!t.cluster_arrived) {
    fail("barrier.cluster.wait without a barrier.cluster.arrive of this thread before it (the wait "
         "would wait for the phase after the current one)");
  }
  t.cluster_arrived = false;
  Cluster* c = t.runner->cluster();
  if (c == nullptr) {
    syncthreads();  // a cluster of one: the barrier is the block's
    return;
  }
  if (c->barrier_phase <= t.cluster_phase)
    t.runner->wait_until(t, "barrier.cluster.wait", &cluster_barrier_ready, &t);
  order::acquire(t, c->barrier_clock.done);
}

// The CTA of rank `rank`, checked.
BlockRunner& cta(unsigned rank, const char* op) {
  BlockRunner& r = runner();
  const unsigned n = cluster_size(r);
  if (rank >= n) {
    fail("%s: CTA rank %u is not in the cluster (of %u CTAs: ranks 0..%u)", op, rank, n, n - 1);
  }
  return r.cluster() != nullptr ? *r.cluster()->ctas[rank] : r;
}

void check_alive(const BlockRunner& peer, const char* op) {
  if (peer.cta_exited()) {
    fail("%s: %s, whose threads have all exited: its shared memory is released; the CTA must "
         "wait for its peers' accesses (barrier.cluster.arrive + wait) before it exits",
         op, cta_name(peer).c_str());
  }
}

// [p, p + bytes) in `r`'s static shared memory or its launch's dynamic
// shared memory (`p` lies in r's shared region).
void check_allocation(const BlockRunner& r, const unsigned char* p, std::size_t bytes, const char* op) {
  const SharedRegion& s = r.shared_region();
  if (p < s.begin || p + bytes > s.end) {
    fail("%s: %zu bytes at %p are outside the shared memory of %s", op, bytes, static_cast<const void*>(p),
         cta_name(r).c_str());
  }
  const unsigned char* dyn = dynamic_smem_of(r);
  if (p + bytes > dyn && p < dyn + kMaxDynamicSmem) {
    const std::size_t off = static_cast<std::size_t>(p - dyn);
    if (p < dyn || off + bytes > r.launch().dynamic_smem) {
      fail("%s: bytes [%zu, %zu) of the dynamic shared memory of %s, but the launch gave each CTA %zu bytes", op,
           p < dyn ? std::size_t{0} : off, off + bytes, cta_name(r).c_str(), r.launch().dynamic_smem);
    }
  }
}

ClusterRef resolve_cluster(std::uint32_t addr, std::size_t bytes, const char* op) {
  BlockRunner& self = runner();
  unsigned rank = self.cluster_rank();
  std::uint32_t window = addr;
  if ((addr & kClusterTag) != 0) {
    rank = (addr >> 18) & 0x1F;
    window = addr & (kWindow - 1);
    if ((addr & ~(kClusterTag | (0x1Fu << 18) | (kWindow - 1))) != 0) {
      fail("%s: 0x%08x is not a shared::cluster address (mapa makes them)", op, addr);
    }
  } else if (addr >= kWindow) {
    fail("%s: 0x%08x is not a shared::cluster address (mapa makes them)", op, addr);
  }
  BlockRunner& peer = cta(rank, op);
  check_alive(peer, op);
  const SharedRegion& s = peer.shared_region();
  const std::size_t off = (window - addr_of(s.begin)) % kWindow;
  unsigned char* p = s.begin + off;
  check_allocation(peer, p, bytes, op);
  return {&peer, rank, p};
}

std::uint32_t map_shared_cluster(std::uint32_t addr, unsigned rank) {
  static constexpr const char* kOp = "mapa.shared::cluster";
  const ClusterRef own = resolve_cluster(addr, 1, kOp);
  BlockRunner& peer = cta(rank, kOp);
  const std::size_t off = static_cast<std::size_t>(own.p - own.cta->shared_region().begin);
  const std::uint32_t window = addr_of(peer.shared_region().begin + off);
  return kClusterTag | rank << 18 | window;
}

void* map_shared(const void* p, unsigned rank) {
  static constexpr const char* kOp = "mapa (generic)";
  BlockRunner& self = runner();
  if (!self.is_shared(p, 1)) fail("%s: %p is not in the calling CTA's shared memory", kOp, p);
  BlockRunner& peer = cta(rank, kOp);
  check_alive(peer, kOp);
  const std::size_t off = static_cast<std::size_t>(static_cast<const unsigned char*>(p) - self.shared_region().begin);
  return peer.shared_region().begin + off;
}

void load_cluster(std::uint32_t addr, void* out, unsigned bytes) {
  if (addr % bytes != 0) fail("ld.shared::cluster: address 0x%08x is not %u-byte aligned", addr, bytes);
  const ClusterRef r = resolve_cluster(addr, bytes, "ld.shared::cluster");
  std::memcpy(out, r.p, bytes);
}

void store_cluster(std::uint32_t addr, const void* in, unsigned bytes) {
  if (addr % bytes != 0) fail("st.shared::cluster: address 0x%08x is not %u-byte aligned", addr, bytes);
  const ClusterRef r = resolve_cluster(addr, bytes, "st.shared::cluster");
  std::memcpy(r.p, in, bytes);
}

}  // namespace sm90

}  // namespace gg::emu
