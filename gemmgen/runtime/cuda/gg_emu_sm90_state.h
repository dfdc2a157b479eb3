// gg_emu_sm90_state.h: what the parts of the emulator's Hopper (sm_90a) model
// (gg_emu_sm90_*.cc) share, and only they include: the wgmma matrix
// descriptors and canonical layouts, the per-block state (mbarriers, TMA
// loads and stores in flight, the async proxy's view, the write order
// between CTAs) with the helpers that reach it, and the landing of a TMA
// box. gg_emu_sm90.h describes the model; docs/cuda-hopper.md has the full
// story.
#pragma once

#include "gg_emu_runner.h"

#include <cfenv>
#include <optional>
#include <csignal>

namespace gg::emu {

namespace sm90 {

// The swizzle span in bytes of a CU_TENSOR_MAP_SWIZZLE_* (0: none).
inline unsigned swizzle_span(int swizzle) {
  return swizzle == 0 ? 0u : 16u << swizzle;
}

// ---------------------------------------------------------------------------
// Matrix descriptors and the canonical layouts (PTX ISA, "Shared Memory
// Matrix Layout": the table of canonical layouts in CuTe notation, and
// "Matrix Descriptor Format"). Pure functions: the tests check them against
// CuTe (gg_emu_sm90_operand_address, in gg_emu_sm90_wgmma.cc).

struct Desc {
  std::uint32_t start;  // bytes
  std::uint32_t lbo;    // bytes
  std::uint32_t sbo;    // bytes
  unsigned base_offset;
  unsigned mode;  // 0 none, 1 128B, 2 64B, 3 32B
};

inline Desc decode_desc(std::uint64_t d) {
  return {static_cast<std::uint32_t>(d & 0x3FFF) << 4,
          static_cast<std::uint32_t>((d >> 16) & 0x3FFF) << 4,
          static_cast<std::uint32_t>((d >> 32) & 0x3FFF) << 4, static_cast<unsigned>((d >> 49) & 7),
          static_cast<unsigned>((d >> 62) & 3)};
}

// Swizzle bytes of a descriptor's layout type (0: none).
inline unsigned desc_span(unsigned mode) {
  return mode == 0 ? 0u : (mode == 1 ? 128u : (mode == 2 ? 64u : 32u));
}

// Swizzle<B,4,3> on a byte address: bits [4, 4+B) ^= bits [7, 7+B), B = log2(span / 16).
inline std::uint32_t swizzle_address(std::uint32_t addr, unsigned span) {
  if (span == 0)
    return addr;
  const std::uint32_t mask = span / 16 - 1;
  return addr ^ (((addr >> 7) & mask) << 4);
}

// The shared address of element (mn, k) of a wgmma operand (A: m x k, B:
// n x k) that `d` describes, `mn_major` for an M/N-major operand (imm-trans 1),
// elements of `eb` bytes. The canonical layouts, in bytes, with T = 16 / eb
// elements per 16 bytes and S the swizzle span:
//   K-major,  none:     (mn%8)*16 + (mn/8)*SBO + (k/T)*LBO + (k%T)*eb
//   K-major,  swizzled: (mn%8)*S  + (mn/8)*SBO + k*eb                  (LBO unused)
//   MN-major, none:     (mn%T)*eb + (mn/T)*SBO + (k%8)*16 + (k/8)*LBO
//   MN-major, swizzled: (mn%T)*eb + ((mn/T)%(S/16))*16 + (mn/(T*S/16))*LBO + (k%8)*S + (k/8)*SBO
// then Swizzle<log2(S/16),4,3> on the address.
inline std::uint32_t operand_address(const Desc& d, bool mn_major, unsigned eb, unsigned mn,
                                     unsigned k) {
  const unsigned t = 16 / eb;
  const unsigned span = desc_span(d.mode);
  std::uint32_t off;
  if (!mn_major) {
    off = span == 0 ? (mn % 8) * 16 + (mn / 8) * d.sbo + (k / t) * d.lbo + (k % t) * eb
                    : (mn % 8) * span + (mn / 8) * d.sbo + k * eb;
  } else if (span == 0) {
    off = (mn % t) * eb + (mn / t) * d.sbo + (k % 8) * 16 + (k / 8) * d.lbo;
  } else {
    const unsigned w = span / 16;
    off = (mn % t) * eb + ((mn / t) % w) * 16 + (mn / (t * w)) * d.lbo + (k % 8) * span +
          (k / 8) * d.sbo;
  }
  return swizzle_address((d.start + off) % kWindow, span);
}

// The wgmma accumulator fragment (PTX ISA, figures "WGMMA .m64nNk16 / k32
// register fragment layout for accumulator matrix D"): thread t of the
// warpgroup, value i of its N/2 f32 registers.
inline void accumulator_coord(unsigned t, unsigned i, unsigned* m, unsigned* n) {
  const unsigned warp = t / 32, lane = t % 32;
  *m = 16 * warp + lane / 4 + 8 * ((i / 2) % 2);
  *n = 8 * (i / 4) + 2 * (lane % 4) + i % 2;
}

// ---------------------------------------------------------------------------
// Per-block state.

// (issue 30) The write order between the CTAs of a cluster, per CTA (a vector
// clock of CTAs): at[r] is the last of CTA r's shared-memory writes (its
// numbered TMA loads landing there, and the generic stores each
// fence.proxy.async makes visible) that a signal of r made after them
// carried here. A signal (an arrival, a TMA load's complete_tx) carries what
// its CTA has seen and its own writes so far onto the barrier's phase; a
// wait that observes the phase merges them into its CTA; a cluster barrier
// merges every CTA's into all. Per CTA, not per thread: any thread's wait
// counts for its CTA (looser than the hardware, never stricter).
struct Seen {
  std::uint32_t at[kMaxClusterNonPortable] = {};
  void merge(const Seen& o) {
    for (unsigned i = 0; i < kMaxClusterNonPortable; ++i)
      at[i] = std::max(at[i], o.at[i]);
  }
};

struct Barrier {
  std::uint32_t addr = 0;
  unsigned count = 0;    // arrivals per phase
  unsigned pending = 0;  // arrivals still missing in the current phase
  long long tx = 0;      // transaction bytes still missing (expect_tx adds, complete_tx subtracts)
  long long announced = 0;       // bytes announced by expect_tx in the current phase
  long long delivered = 0;       // bytes delivered by TMA in the current phase
  unsigned long long phase = 0;  // completed phases
  unsigned init_thread = 0;
  bool fenced = false;   // fence.mbarrier_init (or fence.proxy.async) by the initialising thread
  order::Clock arrived;  // the happens-before clocks of the current phase's arrivals
  order::Clock done;     // and of the last completed phase (a wait acquires it)
  Seen carry;            // the write order the current phase's signals carry
  Seen carried;          // ... and the completed phases'
};

struct TmaLoad {
  MapBits map;
  int coords[5];
  BlockRunner* dst_cta;  // the CTA whose shared memory dst is in (a 2-CTA load: the peer's)
  unsigned char* dst;
  std::size_t bytes;
  std::uint32_t barrier;
  unsigned long long phase;  // the barrier phase whose transaction count it is part of
  unsigned thread;
};

struct TmaStore {
  MapBits map;
  int coords[5];
  const unsigned char* src;
  std::vector<unsigned char> data;  // what the async proxy read at issue
  unsigned group;
  bool read_done = false;
};

struct HopperThread {
  std::vector<WgmmaOp> wgmma;
  unsigned wgmma_committed = 0;
  bool fence_needed = true;  // wgmma.fence before the next wgmma.mma_async
  bool stalled = false;      // wait_group: the block stalled since it began waiting
  std::vector<TmaStore> stores;
  unsigned bulk_committed = 0;
  std::string wait_text;  // the description of the thread's current wait
};

}  // namespace sm90

struct HopperBlock {
  std::vector<sm90::Barrier> barriers;
  std::vector<sm90::TmaLoad> loads;
  std::vector<sm90::HopperThread> threads;
  std::vector<unsigned char> shadow;  // the async proxy's view of the block's shared memory
  // Per byte of shared memory, the fence.proxy.async that published its
  // generic write (an index into `fences`; 0: none, or an async-proxy
  // write): the fencing thread (cluster-wide index) and its epoch
  // (namespace order in gg_emu_internal.h).
  std::vector<std::uint32_t> writer;
  struct Fence {
    unsigned thread;
    std::uint32_t epoch;
  };
  std::vector<Fence> fences;
  struct Filled {
    std::uint32_t lo, hi;
    unsigned span;  // the swizzle span of the TMA load that filled [lo, hi)
  };
  std::vector<Filled> filled;
  // The shared memory each wgmma operand seen in this block reads (cached_reads).
  struct Reads {
    std::uint64_t desc;
    bool mn_major;
    unsigned eb, rows, k;
    std::vector<sm90::Range> ranges;
  };
  std::vector<Reads> reads;
  // (issue 30) This CTA's shared-memory writes, numbered (TMA loads, the
  // generic stores a fence.proxy.async publishes), the number of the last
  // one of each 16-byte granule, and what the CTA has seen of every CTA's
  // (sm90::Seen).
  std::uint32_t writes = 0;
  std::vector<std::uint32_t> written_at;
  sm90::Seen seen;
  bool used = false;
};

namespace sm90 {

[[noreturn]] inline void tsan_unsupported() {
  fail(
      "the Hopper primitives (mbarrier, TMA, wgmma) are modelled in fiber mode only, not in TSan "
      "mode");
}

inline BlockRunner& runner() {
  return *current().runner;
}

inline HopperBlock& block() {
#if defined(GG_EMU_TSAN)
  tsan_unsupported();
#else
  BlockRunner& r = runner();
  if (r.hopper == nullptr)
    r.hopper = new HopperBlock();
  HopperBlock& h = *r.hopper;
  if (!h.used) {
    const SharedRegion& s = r.shared_region();
    if (static_cast<std::size_t>(s.end - s.begin) > kWindow) {
      fail("internal: the block's shared memory (%zu bytes) is over the 2^18-byte shared window",
           static_cast<std::size_t>(s.end - s.begin));
    }
    h.threads.assign(r.num_threads(), HopperThread{});
    // The async proxy's view at block start: the poison every block starts with.
    h.shadow.assign(static_cast<std::size_t>(s.end - s.begin), kPoison);
    h.writer.assign(static_cast<std::size_t>(s.end - s.begin), 0u);
    h.fences.assign(1, {});
    h.writes = 0;
    h.written_at.assign(static_cast<std::size_t>(s.end - s.begin) / 16 + 1, 0);
    h.seen = Seen{};
    h.used = true;
  }
  return h;
#endif
}

inline HopperThread& me() {
  return block().threads[current().linear];
}

// The bytes at shared address `a`, `bytes` long, in this block's shared memory.
inline unsigned char* at(std::uint32_t a, std::size_t bytes, const char* what) {
  const SharedRegion& s = runner().shared_region();
  const std::uint32_t base = addr_of(s.begin);
  const std::size_t off = (a - base) % kWindow;
  if (off + bytes > static_cast<std::size_t>(s.end - s.begin)) {
    fail("%s: shared address 0x%05x (+%zu bytes) is outside the block's shared memory", what, a,
         bytes);
  }
  return s.begin + off;
}

// The offset in the block's shared memory of shared address `a` (ranges
// are kept as offsets: the window address of the region may wrap at 2^18).
inline std::uint32_t rel(std::uint32_t a) {
  return (a - addr_of(runner().shared_region().begin)) % kWindow;
}

inline std::size_t shadow_offset(const void* p) {
  return static_cast<std::size_t>(static_cast<const unsigned char*>(p) -
                                  runner().shared_region().begin);
}

// (issue 30) A write of [off, off + bytes) of this CTA's shared memory.
inline void note_write(HopperBlock& h, std::size_t off, std::size_t bytes) {
  ++h.writes;
  for (std::size_t g = off / 16; g <= (off + bytes - 1) / 16; ++g)
    h.written_at[g] = h.writes;
}

// What a signal of CTA `r` carries: what r has seen, and its own writes.
inline Seen signal_of(const BlockRunner& r) {
  Seen s;
  if (r.hopper != nullptr && r.hopper->used) {
    s = r.hopper->seen;
    const unsigned rank = r.cluster_rank();
    s.at[rank] = std::max(s.at[rank], r.hopper->writes);
  }
  return s;
}

inline std::string where_smem(const void* p) {
  return format("shared address 0x%05x", addr_of(p));
}

inline Barrier* find_barrier(const void* bar) {
  const std::uint32_t a = addr_of(bar);
  for (Barrier& b : block().barriers) {
    if (b.addr == a)
      return &b;
  }
  return nullptr;
}

inline void check_barrier_address(const void* bar, const char* op) {
  if (reinterpret_cast<std::uintptr_t>(bar) % 8 != 0)
    fail("%s: mbarrier address %p is not 8-byte aligned", op, bar);
  check_shared(bar, 8, op);
}

inline Barrier& barrier(const void* bar, const char* op) {
  check_barrier_address(bar, op);
  Barrier* b = find_barrier(bar);
  if (b == nullptr) {
    fail("%s: the mbarrier at %s was not initialised (mbarrier.init), or was invalidated", op,
         where_smem(bar).c_str());
  }
  return *b;
}

inline std::string describe_barrier(const Barrier& b) {
  std::string s = format(
      "mbarrier at shared address 0x%05x: phase %llu (parity %llu) incomplete: %u of %u arrivals "
      "missing",
      b.addr, b.phase, b.phase & 1, b.pending, b.count);
  if (b.tx > 0) {
    s += format(", %lld transaction bytes missing (expect_tx announced %lld, TMA delivered %lld)",
                b.tx, b.announced, b.delivered);
  } else if (b.tx < 0) {
    s += format(
        ", %lld transaction bytes more than announced (expect_tx announced %lld, TMA delivered "
        "%lld)",
        -b.tx, b.announced, b.delivered);
  }
  return s;
}

GG_EMU_UNCHECKED inline void copy_box(const TmaLoad& l);

// Ends the current phase when nothing is missing; wakes the waiters.
inline void maybe_complete(Barrier& b) {
  if (b.pending != 0 || b.tx != 0)
    return;
  b.carried.merge(b.carry);
  b.carry = Seen{};
  ++b.phase;
  b.pending = b.count;
  b.announced = b.delivered = 0;
  b.done = std::move(b.arrived);
  b.arrived.clear();
  runner().wake_waiters();
}

inline bool phase_done(const Barrier& b, unsigned parity) {
  return (b.phase & 1) != parity;
}

// Lands the TMA loads of every completed phase of barrier `b` (a thread's
// wait has seen the phase complete).
GG_EMU_UNCHECKED inline void land_loads(const Barrier& b) {
  HopperBlock& h = block();
  std::size_t kept = 0;
  for (std::size_t i = 0; i < h.loads.size(); ++i) {
    const TmaLoad& l = h.loads[i];
    if (l.barrier == b.addr && l.phase < b.phase) {
      if (l.dst_cta != &runner()) {
        if (l.dst_cta->cta_exited()) {
          fail("a TMA load into the shared memory of CTA rank %u (mbarrier at 0x%05x, phase %llu) lands after "
               "every thread of that CTA exited: its shared memory is released; a CTA must wait for its "
               "peers (barrier.cluster.arrive + wait) before it exits",
               l.dst_cta->cluster_rank(), l.barrier, l.phase);
        }
        OnPeer on(l.dst_cta);
        copy_box(l);
      } else {
        copy_box(l);
      }
    } else {
      h.loads[kept++] = h.loads[i];
    }
  }
  h.loads.resize(kept);
}

struct WaitArg {
  HopperBlock* h;
  std::uint32_t addr;
  unsigned parity;
};

inline bool wait_ready(const void* p) {
  const auto* w = static_cast<const WaitArg*>(p);
  for (const Barrier& b : w->h->barriers) {
    if (b.addr == w->addr)
      return phase_done(b, w->parity);
  }
  return true;  // invalidated: the wait reports it when it resumes
}

// The async proxy reads [p, p + bytes): its bytes must be what the last
// fence.proxy.async (or an async-proxy write) left.
inline void check_async_view(const unsigned char* p, std::size_t bytes, const char* reader) {
  const HopperBlock& h = block();
  const std::size_t off = shadow_offset(p);
  for (std::size_t i = 0; i < bytes; ++i) {
    if (p[i] != h.shadow[off + i]) {
      fail(
          "missing fence.proxy.async: %s reads shared memory at %s (byte %zu of %zu) that the "
          "generic proxy wrote "
          "(st.shared) after the last fence.proxy.async; write, then fence.proxy.async, then a "
          "barrier, then the "
          "async-proxy read",
          reader, where_smem(p + i).c_str(), i, bytes);
    }
  }
}

// Walks every element of a TMA box: f(offset of the element in the box
// (elements), its global coordinates, whether all are in bounds).
template <class F>
GG_EMU_UNCHECKED inline void for_box(const MapBits& m, const int* coords, F f) {
  std::size_t count = 1;
  for (unsigned d = 0; d < m.rank; ++d)
    count *= m.box[d];
  for (std::size_t e = 0; e < count; ++e) {
    std::size_t rest = e;
    bool inside = true;
    long long g[5] = {};
    for (unsigned d = 0; d < m.rank; ++d) {
      g[d] = static_cast<long long>(coords[d]) + static_cast<long long>(rest % m.box[d]);
      rest /= m.box[d];
      inside = inside && g[d] >= 0 && g[d] < static_cast<long long>(m.dims[d]);
    }
    f(e, g, inside);
  }
}

inline std::size_t box_bytes(const MapBits& m) {
  std::size_t n = m.elem_bytes;
  for (unsigned d = 0; d < m.rank; ++d)
    n *= m.box[d];
  return n;
}

// Byte `byte` of a box that starts at `dst`, after the swizzle (which only
// moves bits 4-6 of the address, so the host address serves).
inline unsigned char* box_byte(unsigned char* dst, std::size_t byte, unsigned swizzle) {
  std::uintptr_t a = reinterpret_cast<std::uintptr_t>(dst) + byte;
  const unsigned span = swizzle_span(swizzle);
  if (span != 0)
    a ^= ((a >> 7) & (span / 16 - 1)) << 4;
  return reinterpret_cast<unsigned char*>(a);
}

GG_EMU_UNCHECKED inline void copy_box(const TmaLoad& l) {
  HopperBlock& h = block();
  const MapBits& m = l.map;
  const auto* g = reinterpret_cast<const unsigned char*>(static_cast<std::uintptr_t>(m.address));
  const std::size_t off0 = shadow_offset(l.dst);
  const std::uint32_t lo = static_cast<std::uint32_t>(shadow_offset(l.dst)),
                      hi = lo + static_cast<std::uint32_t>(l.bytes);
  std::erase_if(h.filled, [&](const HopperBlock::Filled& f) { return f.lo < hi && lo < f.hi; });
  h.filled.push_back({lo, hi, swizzle_span(m.swizzle)});
  for_box(m, l.coords, [&](std::size_t e, const long long* c, bool inside) {
    unsigned char* s = box_byte(l.dst, e * m.elem_bytes, m.swizzle);
    if (inside) {
      std::size_t go = 0;
      for (unsigned d = 0; d < m.rank; ++d)
        go += static_cast<std::size_t>(c[d]) * m.strides[d];
      std::memcpy(s, g + go, m.elem_bytes);
    } else {
      std::memset(s, 0, m.elem_bytes);
    }
    std::memcpy(&h.shadow[off0 + static_cast<std::size_t>(s - l.dst)], s, m.elem_bytes);
  });
}

}  // namespace sm90

}  // namespace gg::emu
