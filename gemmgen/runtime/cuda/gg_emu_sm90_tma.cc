// gg_emu_sm90_tma.cc: TMA (cp.async.bulk.tensor) loads into shared memory,
// their multicast and 2-CTA forms, the remote mbarrier arrive of a cluster,
// TMA stores with their bulk groups, and the non-tensor bulk copy. Part of
// the emulator's Hopper model (gg_emu_sm90.h), compiled once per build mode
// into the core objects.
#include "gg_emu_sm90_state.h"

namespace gg::emu {

namespace sm90 {

// Shared memory that an in-flight wgmma of some thread reads, overlapping
// [lo, hi): a report, or nothing.
inline void check_no_wgmma_reads(std::uint32_t lo, std::uint32_t hi, const char* writer) {
  const HopperBlock& h = block();
  for (unsigned t = 0; t < h.threads.size(); ++t) {
    for (const WgmmaOp& op : h.threads[t].wgmma) {
      for (const Range& r : op.reads) {
        if (r.lo < hi && lo < r.hi) {
          const std::uint32_t base = addr_of(runner().shared_region().begin);
          fail(
              "%s overwrites shared memory [0x%05x, 0x%05x) that a wgmma.mma_async of thread %u "
              "(warpgroup %u, "
              "commit group %u) still reads: the stage was released before wgmma.wait_group "
              "retired that wgmma (or "
              "the wgmma was issued before the data it reads had arrived: no wait on the full "
              "barrier)",
              writer, (base + std::max(lo, r.lo)) % kWindow, (base + std::min(hi, r.hi)) % kWindow,
              t, t / 128, op.group);
        }
      }
    }
  }
}

// A TMA load into `dst` (the current CTA's shared memory) completing on
// `bar` in CTA `bar_cta` (the current one, or its pair peer for a 2-CTA load).
// Fails when [dst, dst + bytes) of `dst_cta`'s shared memory is still being
// filled by an earlier TMA or bulk load no thread waited for. Loads in flight
// are kept with their barrier: a 2-CTA load into this CTA's shared memory may
// be kept by its pair peer.
void check_no_load_in_flight(const BlockRunner* dst_cta, const void* dst, std::size_t bytes, const char* op) {
  const auto* d0 = static_cast<const unsigned char*>(dst);
  const Cluster* c = dst_cta->cluster();
  const unsigned n = c != nullptr ? c->size : 1;
  for (unsigned r = 0; r < n; ++r) {
    const BlockRunner* holder = c != nullptr ? c->ctas[r] : dst_cta;
    if (holder->hopper == nullptr || !holder->hopper->used) continue;
    for (const TmaLoad& l : holder->hopper->loads) {
      if (l.dst_cta != dst_cta) continue;
      if (l.dst < d0 + bytes && d0 < l.dst + l.bytes) {
        fail(
            "%s into shared memory at 0x%05x that an earlier TMA load (mbarrier at 0x%05x, phase "
            "%llu) still fills: "
            "no thread waited for it",
            op, addr_of(dst), l.barrier, l.phase);
      }
    }
  }
}

void tma_load_into(void* dst, const CUtensorMap* map, BlockRunner* bar_cta, void* bar, const int* coords,
                   unsigned rank, const char* kOp);

void tma_load(void* dst, const CUtensorMap* map, void* bar, const int* coords,
                     unsigned rank) {
  tma_load_into(dst, map, &runner(), bar, coords, rank, "cp.async.bulk.tensor (TMA load)");
}

void tma_load_into(void* dst, const CUtensorMap* map, BlockRunner* bar_cta, void* bar, const int* coords,
                   unsigned rank, const char* kOp) {
  const MapBits& m = map_bits(map, kOp);
  if (m.rank != rank)
    fail("%s: a %uD copy through a tensor map of rank %u", kOp, rank, m.rank);
  if (reinterpret_cast<std::uintptr_t>(dst) % 128 != 0)
    fail("%s: destination %p is not 128-byte aligned", kOp, dst);
  const std::size_t bytes = box_bytes(m);
  check_shared(dst, bytes, kOp);
  BlockRunner* dst_cta = &runner();
  std::optional<OnPeer> on_bar;
  if (bar_cta != dst_cta) on_bar.emplace(bar_cta);
  Barrier& b = barrier(bar, kOp);
  on_bar.reset();
  if (!b.fenced) {
    fail(
        "missing fence.mbarrier_init: a TMA load signals the mbarrier at shared address 0x%05x, "
        "but thread %u "
        "initialised it and no fence.mbarrier_init (or fence.proxy.async) of that thread followed, "
        "so the async "
        "proxy may not see the initialisation",
        b.addr, b.init_thread);
  }
  const std::uint32_t lo = static_cast<std::uint32_t>(shadow_offset(dst));
  check_no_wgmma_reads(lo, lo + static_cast<std::uint32_t>(bytes), "a TMA load");
  tcgen05_check_writes(runner(), lo, lo + static_cast<std::uint32_t>(bytes), "a TMA load");
  HopperBlock& h = block();
  check_no_load_in_flight(dst_cta, dst, bytes, kOp);
  auto* d = static_cast<unsigned char*>(dst);
  std::memset(d, kPoison, bytes);
  std::memset(&h.shadow[shadow_offset(d)], kPoison, bytes);
  std::fill_n(&h.writer[shadow_offset(d)], bytes, 0u);
  note_write(h, shadow_offset(d), bytes);
  const Seen sig = signal_of(*dst_cta);
  TmaLoad l{m, {}, dst_cta, d, bytes, b.addr, b.phase, current().linear};
  for (unsigned i = 0; i < rank; ++i)
    l.coords[i] = coords[i];
  // The load is kept (and lands) where its barrier is: a wait on it lands it.
  if (bar_cta != dst_cta) on_bar.emplace(bar_cta);
  block().loads.push_back(l);
  b.carry.merge(sig);
  b.tx -= static_cast<long long>(bytes);
  b.delivered += static_cast<long long>(bytes);
  maybe_complete(b);
}

void mbarrier_arrive_cluster(std::uint32_t addr) {
  static constexpr const char* kOp = "mbarrier.arrive.release.cluster.shared::cluster";
  const ClusterRef r = resolve_cluster(addr, 8, kOp);
  if (r.cta == &runner()) {
    mbarrier_arrive(r.p, 0);
    return;
  }
  const Seen sig = signal_of(runner());
  OnPeer on(r.cta);
  Barrier& b = barrier(r.p, kOp);
  if (b.pending == 0)
    fail("%s: more arrivals than the count of %s in CTA rank %u", kOp, describe_barrier(b).c_str(), r.rank);
  order::release(current(), b.arrived);
  b.carry.merge(sig);
  --b.pending;
  maybe_complete(b);
}

void tma_load_multicast(void* dst, const CUtensorMap* map, void* bar, const int* coords, unsigned rank,
                        std::uint16_t mask) {
  static constexpr const char* kOp = "cp.async.bulk.tensor .multicast::cluster (TMA multicast load)";
  BlockRunner& self = runner();
  const unsigned n = cluster_nctarank();
  if (mask == 0) fail("%s: ctaMask is 0 (no destination CTA)", kOp);
  if ((mask >> n) != 0) {
    fail("%s: ctaMask 0x%04x names CTA rank %u, but the cluster has %u CTAs (ranks 0..%u)", kOp, mask,
         31 - __builtin_clz(static_cast<unsigned>(mask)), n, n - 1);
  }
  check_shared(dst, 1, kOp);
  check_shared(bar, 8, kOp);
  const std::size_t dst_off = shadow_offset(dst);
  const std::size_t bar_off = shadow_offset(bar);
  for (unsigned r = 0; r < n; ++r) {
    if (((mask >> r) & 1u) == 0) continue;
    BlockRunner* peer = self.cluster() != nullptr ? self.cluster()->ctas[r] : &self;
    if (peer == &self) {
      tma_load_into(dst, map, &self, bar, coords, rank, kOp);
      continue;
    }
    const std::uint32_t where = addr_of(peer->shared_region().begin + dst_off);
    resolve_cluster(kClusterTag | r << 18 | where, box_bytes(map_bits(map, kOp)), kOp);
    OnPeer on(peer);
    unsigned char* base = peer->shared_region().begin;
    tma_load_into(base + dst_off, map, peer, base + bar_off, coords, rank, kOp);
  }
}

void tma_load_pair(void* dst, const CUtensorMap* map, void* bar, const int* coords, unsigned rank,
                   std::uint16_t mask) {
  const char* kOp = mask == 0 ? "cp.async.bulk.tensor .cta_group::2 (2-CTA TMA load)"
                              : "cp.async.bulk.tensor .cta_group::2 .multicast::cluster (2-CTA TMA multicast load)";
  BlockRunner& self = runner();
  const Cluster* c = self.cluster();
  const unsigned n = c != nullptr ? c->size : 1, me_rank = self.cluster_rank();
  if (c == nullptr || (me_rank ^ 1u) >= n) {
    fail("%s needs a cluster whose CTAs pair up (ranks 2i and 2i + 1); this CTA is rank %u of a cluster of %u",
         kOp, me_rank, n);
  }
  if (mask == 0) mask = static_cast<std::uint16_t>(1u << me_rank);
  if ((mask >> n) != 0) {
    fail("%s: ctaMask 0x%04x names CTA rank %u, but the cluster has %u CTAs (ranks 0..%u)", kOp, mask,
         31 - __builtin_clz(static_cast<unsigned>(mask)), n, n - 1);
  }
  check_shared(dst, 1, kOp);
  check_shared(bar, 8, kOp);
  const std::size_t dst_off = shadow_offset(dst), bar_off = shadow_offset(bar);
  for (unsigned r = 0; r < n; ++r) {
    if (((mask >> r) & 1u) == 0) continue;
    // The box lands in CTA r; its bytes complete on the barrier of r's pair
    // leader (the even CTA), at bar's offset.
    BlockRunner* dst_cta = c->ctas[r];
    BlockRunner* bar_cta = c->ctas[r & ~1u];
    for (BlockRunner* x : {dst_cta, bar_cta}) {
      if (x->cta_exited()) {
        fail("%s: CTA rank %u has exited; its shared memory is released", kOp, x->cluster_rank());
      }
    }
    unsigned char* d = dst_cta->shared_region().begin + dst_off;
    std::optional<OnPeer> on;
    if (dst_cta != &self) on.emplace(dst_cta);
    tma_load_into(d, map, bar_cta, bar_cta->shared_region().begin + bar_off, coords, rank, kOp);
  }
}

void tma_store(const CUtensorMap* map, const void* src, const int* coords, unsigned rank) {
  static constexpr const char* kOp = "cp.async.bulk.tensor (TMA store)";
  const MapBits& m = map_bits(map, kOp);
  if (m.rank != rank)
    fail("%s: a %uD copy through a tensor map of rank %u", kOp, rank, m.rank);
  if (reinterpret_cast<std::uintptr_t>(src) % 128 != 0)
    fail("%s: source %p is not 128-byte aligned", kOp, src);
  const std::size_t bytes = box_bytes(m);
  check_shared(src, bytes, kOp);
  const auto* s = static_cast<const unsigned char*>(src);
  check_async_view(s, bytes, "a TMA store");
  HopperThread& t = me();
  TmaStore st{m, {}, s, std::vector<unsigned char>(s, s + bytes), t.bulk_committed};
  for (unsigned i = 0; i < rank; ++i)
    st.coords[i] = coords[i];
  t.stores.push_back(std::move(st));
}

void bulk_commit() {
  ++me().bulk_committed;
}

GG_EMU_UNCHECKED inline void write_store(const TmaStore& st) {
  const MapBits& m = st.map;
  auto* g = reinterpret_cast<unsigned char*>(static_cast<std::uintptr_t>(m.address));
  for_box(m, st.coords, [&](std::size_t e, const long long* c, bool inside) {
    if (!inside)
      return;
    const unsigned char* s =
        box_byte(const_cast<unsigned char*>(st.src), e * m.elem_bytes, m.swizzle);
    std::size_t go = 0;
    for (unsigned d = 0; d < m.rank; ++d)
      go += static_cast<std::size_t>(c[d]) * m.strides[d];
    std::memcpy(g + go, st.data.data() + (s - st.src), m.elem_bytes);
  });
}

// cp.async.bulk.wait_group[.read] keep: the stores of every group older than
// the newest `keep` have read their source (.read) or are complete.
void bulk_wait(unsigned keep, bool read_only) {
  HopperThread& t = me();
  const unsigned limit = t.bulk_committed >= keep ? t.bulk_committed - keep : 0u;
  std::size_t kept = 0;
  for (std::size_t i = 0; i < t.stores.size(); ++i) {
    TmaStore& st = t.stores[i];
    if (st.group < limit) {
      if (!st.read_done && std::memcmp(st.data.data(), st.src, st.data.size()) != 0) {
        fail(
            "the shared-memory source of a TMA store (%s) was overwritten before "
            "cp.async.bulk.wait_group.read "
            "said it had been read",
            where_smem(st.src).c_str());
      }
      st.read_done = true;
      if (!read_only) {
        write_store(st);
        continue;
      }
    }
    if (kept != i)
      t.stores[kept] = std::move(t.stores[i]);
    ++kept;
  }
  t.stores.resize(kept);
}

// ---------------------------------------------------------------------------
// (issue 30) cp.async.bulk.shared::cluster.global.mbarrier::complete_tx: a
// non-tensor bulk copy, modelled as a TMA load of a 1-D box of `bytes` bytes
// (no swizzle, nothing outside), so it lands, is checked and is protected as
// one: the destination poisoned until a thread's wait observes the barrier
// phase, the async-proxy view, the stage release rule (a copy into shared
// memory an in-flight wgmma / tcgen05 op reads), an overlapping load still
// in flight. The PTX ISA's rules are checked too: 16-byte aligned addresses,
// a size that is a positive multiple of 16, and the source inside one live
// device allocation.
void bulk_load(void* dst, const void* src, unsigned bytes, void* bar) {
  static constexpr const char* kOp = "cp.async.bulk (bulk copy)";
  if (reinterpret_cast<std::uintptr_t>(dst) % 16 != 0 ||
      reinterpret_cast<std::uintptr_t>(src) % 16 != 0)
    fail("%s: the addresses must be 16-byte aligned (shared %p, global %p)", kOp, dst, src);
  if (bytes == 0 || bytes % 16 != 0)
    fail("%s: the size must be a positive multiple of 16 bytes, not %u", kOp, bytes);
  {
    // Memory the emulator allocated (cudaMalloc, a launch's arguments) must
    // hold the whole source in one allocation: a copy reaching its guards or
    // canaries, or spanning two, is refused. Memory it did not allocate is a
    // host program's own, handed in as device memory (the JAX FFI handler's
    // and the PyTorch op's CPU buffers on the emulator), which it cannot
    // bound, as TMA loads over it are not bounded either.
    const auto* c = static_cast<const unsigned char*>(src);
    Registry& reg = registry();
    std::lock_guard<std::mutex> lock(reg.mu);
    bool inside = false, emulated = false;
    for (const DeviceBuffer& b : reg.buffers) {
      inside = inside || (c >= b.data && c + bytes <= b.data + b.bytes);
      emulated = emulated || (c < b.map + b.map_bytes && c + bytes > b.map);
    }
    if (emulated && !inside)
      fail("%s: the source [%p, +%u) is not inside one live device allocation", kOp, src, bytes);
  }
  check_shared(dst, bytes, kOp);
  Barrier& b = barrier(bar, kOp);
  if (!b.fenced)
    fail("missing fence.mbarrier_init: a bulk copy signals the mbarrier at shared address 0x%05x, "
         "but thread %u initialised it and no fence.mbarrier_init (or fence.proxy.async) of that "
         "thread followed",
         b.addr, b.init_thread);
  const std::uint32_t lo = static_cast<std::uint32_t>(shadow_offset(dst));
  check_no_wgmma_reads(lo, lo + bytes, "a bulk copy");
  tcgen05_check_writes(runner(), lo, lo + bytes, "a bulk copy");
  HopperBlock& h = block();
  auto* d = static_cast<unsigned char*>(dst);
  check_no_load_in_flight(&runner(), dst, bytes, kOp);
  MapBits m{};
  m.magic = kMapMagic;
  m.rank = 1;
  m.elem_bytes = 1;
  m.address = static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(src));
  m.dims[0] = bytes;
  m.strides[0] = 1;
  m.box[0] = bytes;
  std::memset(d, kPoison, bytes);
  std::memset(&h.shadow[shadow_offset(d)], kPoison, bytes);
  std::fill_n(&h.writer[shadow_offset(d)], bytes, 0u);
  note_write(h, shadow_offset(d), bytes);
  h.loads.push_back(TmaLoad{m, {}, &runner(), d, bytes, b.addr, b.phase, current().linear});
  b.carry.merge(signal_of(runner()));
  b.tx -= static_cast<long long>(bytes);
  b.delivered += static_cast<long long>(bytes);
  maybe_complete(b);
}

}  // namespace sm90

}  // namespace gg::emu
