// gg_emu_memcheck.cc: the memory checker and the counters (gg_emu_memcheck.h
// describes them), compiled once per build mode into the core objects that
// every memory-checked kernel library links (docs/cuda-emulation.md,
// "Memory checks"). Empty in the other modes.
#include "gg_emu_internal.h"

#if defined(GG_EMU_MEMCHECK) && !defined(GG_EMU_TSAN)

namespace gg::emu::mc {

inline constexpr int kExitRace = 72;
inline constexpr unsigned kMaxSpans = 64;
inline constexpr std::size_t kMaxConflicts = 4096;

// Shadow word of one byte of a device buffer (per launch):
//   bits  0-30: the block that wrote it last (linear block index + 1; 0: none)
//   bit     31: that write was atomic (or several blocks wrote it atomically)
//   bits 32-62: the first block that read it (plain reads only; 0: none)
//   bit     63: another block read it too
inline constexpr std::uint64_t kIdMask = 0x7FFFFFFFu;
inline constexpr std::uint64_t kAtomicBit = std::uint64_t{1} << 31;
inline constexpr std::uint64_t kMultiBit = std::uint64_t{1} << 63;

struct Span {
  std::uintptr_t lo = 0, hi = 0;  // the buffer's bytes [lo, hi)
  std::uint64_t* shadow = nullptr;
  std::size_t shadow_bytes = 0;
  int tag = -1;  // argument index, or -1 for a gg_emu_malloc buffer
};

// Two blocks touching one byte in a way CUDA leaves unordered.
struct Conflict {
  unsigned span;
  std::size_t offset;
  unsigned char kind;  // 0 write/write, 1 write/read, 2 atomic/plain
  std::uint32_t a, b;  // linear block index + 1 of the two blocks (b = 0: "another block")
};

// Per access site (static instruction) and op: what its warp-level requests cost.
struct Stats {
  std::uint64_t requests = 0;      // warp-level instructions
  std::uint64_t lanes = 0;         // active lanes over all requests
  std::uint64_t bytes = 0;         // bytes the lanes asked for
  std::uint64_t sectors = 0;       // global: distinct 32-byte sectors
  std::uint64_t ideal_sectors = 0; // global: ceil(distinct bytes / 32)
  std::uint64_t wavefronts = 0;    // shared: bank-conflict-serialised passes
  std::uint64_t ideal_wavefronts = 0;
  void add(const Stats& o) {
    requests += o.requests;
    lanes += o.lanes;
    bytes += o.bytes;
    sectors += o.sectors;
    ideal_sectors += o.ideal_sectors;
    wavefronts += o.wavefronts;
    ideal_wavefronts += o.ideal_wavefronts;
  }
};

// The lanes of one warp-level request: lane l accessed [addr[l], addr[l] +
// size[l]) (ldmatrix: addr is the lane's row address, size the matrix count).
struct Request {
  std::uint32_t mask = 0;
  std::uint64_t addr[kWarpSize];
  std::uint16_t size[kWarpSize];
};

// The requests of one site in one warp, by execution count.
struct SiteLog {
  std::uint32_t count[kWarpSize] = {};
  std::vector<Request> requests;
};

// A worker's log of the current block (counters only).
struct BlockLog {
  std::vector<std::unordered_map<std::uint64_t, SiteLog>> warps;  // key: site << 4 | op
  std::unordered_map<std::uint64_t, Stats> sites;
};

// NB: the checker's own functions are uninstrumented and cannot inline the
// (instrumented) standard library's, whose accesses would come back here; on
// the access path they use GCC's built-ins only.
struct LaunchState {
  bool active = false;  // __atomic built-ins
  const Launch* launch = nullptr;
  Span spans[kMaxSpans];
  unsigned nspans = 0;
  std::uintptr_t lo = 0, hi = 0;  // the bounds of all spans
  // Bounds of every worker's shared memory: with the spans' bounds, the one
  // test most accesses (to stacks and the heap) need. Empty between launches.
  std::uintptr_t smem_lo = 0, smem_hi = 0;
  std::vector<std::string> arg_names;
  std::mutex mu;
  std::vector<Conflict> conflicts;
  std::uint64_t conflict_bytes = 0;
  bool counting = false;
  std::string counters_path;
  std::unordered_map<std::uint64_t, Stats> sites;  // key: site << 4 | op
  std::uint64_t blocks = 0;
};
inline LaunchState launch_state;

// Per worker thread. NB: a nonzero initialiser keeps it in .tdata, out of the
// .tbss that fiber mode poisons as shared memory.
struct Worker {
  unsigned magic;
  std::uint32_t block;  // linear block index + 1 of the block it runs
  std::uintptr_t smem_lo, smem_hi;
  BlockLog* log;
};
inline thread_local Worker worker{0x6d656d63u, 0, 0, 0, nullptr};

GG_EMU_UNCHECKED inline std::uint32_t block_id(std::uint64_t linear) {
  return static_cast<std::uint32_t>((linear % kIdMask) + 1);
}

GG_EMU_UNCHECKED inline std::string block_name(std::uint32_t id) {
  const Launch* l = launch_state.launch;
  if (id == 0 || l == nullptr) return "another block";
  const std::uint64_t b = id - 1;
  return format("block (%llu,%llu,%llu)", static_cast<unsigned long long>(b % l->grid.x),
                static_cast<unsigned long long>(b / l->grid.x % l->grid.y),
                static_cast<unsigned long long>(b / (static_cast<std::uint64_t>(l->grid.x) * l->grid.y)));
}

GG_EMU_UNCHECKED inline std::string span_name(const Span& s) {
  const std::size_t bytes = s.hi - s.lo;
  if (s.tag < 0) return format("buffer %p (%zu bytes)", reinterpret_cast<void*>(s.lo), bytes);
  const auto& names = launch_state.arg_names;
  if (static_cast<std::size_t>(s.tag) < names.size() && !names[s.tag].empty()) {
    return format("argument #%d `%s` (%zu bytes)", s.tag, names[s.tag].c_str(), bytes);
  }
  return format("argument #%d (%zu bytes)", s.tag, bytes);
}

GG_EMU_UNCHECKED inline const Span* find_span(std::uintptr_t a) {
  const LaunchState& g = launch_state;
  if (a < g.lo || a >= g.hi) return nullptr;
  for (unsigned i = 0; i < g.nspans; ++i) {
    if (a >= g.spans[i].lo && a < g.spans[i].hi) return &g.spans[i];
  }
  return nullptr;
}

// ---------------------------------------------------------------------------
// Alignment.

GG_EMU_UNCHECKED inline std::string describe_address(std::uintptr_t a) {
  if (const Span* s = find_span(a)) {
    return format("byte offset %zu of %s", static_cast<std::size_t>(a - s->lo), span_name(*s).c_str());
  }
  const auto dyn = reinterpret_cast<std::uintptr_t>(gg_emu_dynamic_smem);
  return a >= dyn && a < dyn + kMaxDynamicSmem ? format("byte %zu of dynamic shared memory", static_cast<std::size_t>(a - dyn))
                                               : format("static shared memory (address %p)", reinterpret_cast<void*>(a));
}

// A typed access of `size` bytes at address a, not a multiple of size. The
// site is the instruction's offset in the library; cuda_emu names its source
// line ("[site 0x...]").
[[noreturn]] GG_EMU_UNCHECKED inline void misaligned(std::uintptr_t a, unsigned size, Op op, const void* site) {
  const char* what = op == kStGlobal || op == kStShared ? "store" : (op == kLdGlobal || op == kLdShared ? "load" : "atomic");
  Dl_info info{};
  std::uintptr_t offset = reinterpret_cast<std::uintptr_t>(site);
  if (dladdr(site, &info) != 0 && info.dli_fbase != nullptr) offset -= reinterpret_cast<std::uintptr_t>(info.dli_fbase);
  fail_with_status(kExitFault, format("misaligned %u-byte %s at %s [site 0x%zx]: the address is not a multiple of %u "
                                      "(a GPU stops the kernel with 'misaligned address')",
                                      size, what, describe_address(a).c_str(), static_cast<std::size_t>(offset), size));
}

// ---------------------------------------------------------------------------
// Races between blocks.

GG_EMU_UNCHECKED inline void conflict(const Span& s, std::size_t offset, unsigned char kind, std::uint32_t a,
                                      std::uint32_t b) {
  LaunchState& g = launch_state;
  std::lock_guard<std::mutex> lock(g.mu);
  ++g.conflict_bytes;
  if (g.conflicts.size() < kMaxConflicts) {
    g.conflicts.push_back({static_cast<unsigned>(&s - g.spans), offset, kind, std::min(a, b), std::max(a, b)});
  } else {
    // Keep the lowest ones: the report names the first.
    auto worst = std::max_element(g.conflicts.begin(), g.conflicts.end(), [](const Conflict& x, const Conflict& y) {
      return std::tie(x.span, x.offset) < std::tie(y.span, y.offset);
    });
    const unsigned span = static_cast<unsigned>(&s - g.spans);
    if (std::tie(span, offset) < std::tie(worst->span, worst->offset)) *worst = {span, offset, kind, std::min(a, b), std::max(a, b)};
  }
}

// One byte: the shadow word's update for an access by block `me`.
GG_EMU_UNCHECKED inline void shadow_byte(const Span& s, std::size_t i, std::uint32_t me, bool write, bool atomic) {
  auto* word = &s.shadow[i];
  std::uint64_t cur = __atomic_load_n(word, __ATOMIC_RELAXED);
  for (;;) {
    const std::uint32_t wid = static_cast<std::uint32_t>(cur & kIdMask);
    const bool watomic = (cur & kAtomicBit) != 0;
    const std::uint32_t rid = static_cast<std::uint32_t>((cur >> 32) & kIdMask);
    const bool rmulti = (cur & kMultiBit) != 0;
    std::uint64_t next = cur;
    if (atomic) {
      // Atomics of different blocks are ordered; a plain access of another
      // block is not.
      if (wid != 0 && wid != me && !watomic) conflict(s, i, 2, wid, me);
      if (write && rid != 0 && (rid != me || rmulti)) conflict(s, i, 2, rid != me ? rid : 0, me);
      if (write) next = (cur & ~(kIdMask | kAtomicBit)) | me | kAtomicBit;
    } else if (write) {
      if (wid != 0 && wid != me) conflict(s, i, watomic ? 2 : 0, wid, me);
      if (rid != 0 && (rid != me || rmulti)) conflict(s, i, 1, rid != me ? rid : 0, me);
      next = (cur & ~(kIdMask | kAtomicBit)) | me;
    } else {
      if (wid != 0 && wid != me) conflict(s, i, watomic ? 2 : 1, wid, me);
      if (rid == 0) {
        next = cur | (static_cast<std::uint64_t>(me) << 32);
      } else if (rid != me) {
        next = cur | kMultiBit;
      }
    }
    if (next == cur || __atomic_compare_exchange_n(word, &cur, next, false, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED)) return;
  }
}

GG_EMU_UNCHECKED inline void check_bytes(const Span& s, std::uintptr_t a, std::size_t size, bool write, bool atomic) {
  const std::uint32_t me = worker.block;
  const std::size_t begin = a - s.lo;
  const std::size_t end = begin + size < s.hi - s.lo ? begin + size : s.hi - s.lo;
  for (std::size_t i = begin; i < end; ++i) shadow_byte(s, i, me, write, atomic);
}

// ---------------------------------------------------------------------------
// Counters: every lane's accesses, grouped per (warp, site, n-th execution).

GG_EMU_UNCHECKED inline void log_access(Op op, std::uintptr_t a, unsigned size, const void* site) {
  BlockLog* log = worker.log;
  ThreadCtx* t = tls.thread;
  if (log == nullptr || t == nullptr) return;
  if (log->warps.size() <= t->warp) log->warps.resize(t->warp + 1);
  const std::uint64_t key = (reinterpret_cast<std::uint64_t>(site) << 4) | op;
  SiteLog& s = log->warps[t->warp][key];
  const unsigned n = s.count[t->lane]++;
  if (n >= s.requests.size()) s.requests.resize(n + 1);
  Request& r = s.requests[n];
  r.mask |= 1u << t->lane;
  r.addr[t->lane] = a;
  r.size[t->lane] = static_cast<std::uint16_t>(size);
}

// Shared-memory wavefronts of lanes `first`..`first + n - 1` of `r` (one
// phase): the most distinct 4-byte words any of the 32 banks must deliver.
GG_EMU_UNCHECKED inline unsigned phase_wavefronts(const Request& r, unsigned first, unsigned n, bool ldmatrix) {
  constexpr unsigned kMaxWords = 4096;  // 32 lanes of up to 512 bytes each
  std::uint64_t words[kMaxWords] __attribute__((uninitialized));
  unsigned count = 0;
  for (unsigned l = first; l < first + n; ++l) {
    if (((r.mask >> l) & 1u) == 0) continue;
    const std::uint64_t size = ldmatrix ? 16 : r.size[l];
    for (std::uint64_t w = r.addr[l] / 4; w <= (r.addr[l] + size - 1) / 4 && count < kMaxWords; ++w) {
      words[count++] = w;
    }
  }
  std::sort(words, words + count);
  count = static_cast<unsigned>(std::unique(words, words + count) - words);
  unsigned per_bank[32] = {};
  unsigned most = 0;
  for (unsigned i = 0; i < count; ++i) most = std::max(most, ++per_bank[words[i] % 32]);
  return most;
}

GG_EMU_UNCHECKED inline Stats evaluate(Op op, const Request& r) {
  Stats st;
  st.requests = 1;
  unsigned max_size = 0;
  for (unsigned l = 0; l < kWarpSize; ++l) {
    if (((r.mask >> l) & 1u) == 0) continue;
    ++st.lanes;
    st.bytes += op == kLdmatrix ? 0 : r.size[l];
    max_size = std::max<unsigned>(max_size, r.size[l]);
  }
  switch (op) {
    case kLdGlobal:
    case kStGlobal:
    case kAtomGlobal:
    case kCpAsyncGlobal: {
      // 32-byte sectors touched, against the fewest that hold the bytes.
      constexpr unsigned kMaxSectors = 1024;  // 32 lanes of up to 1 KiB each
      std::pair<std::uint64_t, std::uint64_t> ranges[kWarpSize];
      std::uint64_t sectors[kMaxSectors] __attribute__((uninitialized));
      unsigned nr = 0, ns = 0;
      for (unsigned l = 0; l < kWarpSize; ++l) {
        if (((r.mask >> l) & 1u) == 0 || r.size[l] == 0) continue;
        ranges[nr++] = {r.addr[l], r.addr[l] + r.size[l]};
        for (std::uint64_t x = r.addr[l] / 32; x <= (r.addr[l] + r.size[l] - 1) / 32 && ns < kMaxSectors; ++x) {
          sectors[ns++] = x;
        }
      }
      std::sort(sectors, sectors + ns);
      st.sectors = static_cast<std::uint64_t>(std::unique(sectors, sectors + ns) - sectors);
      std::sort(ranges, ranges + nr);
      std::uint64_t distinct = 0, end = 0;
      for (unsigned i = 0; i < nr; ++i) {
        const std::uint64_t b = std::max(ranges[i].first, end);
        if (ranges[i].second > b) distinct += ranges[i].second - b;
        end = std::max(end, ranges[i].second);
      }
      st.ideal_sectors = (distinct + 31) / 32;
      break;
    }
    case kLdShared:
    case kStShared:
    case kAtomShared:
    case kCpAsyncShared: {
      // Up to 4 bytes per lane: one phase of 32 lanes; 8 bytes: two phases of
      // 16 lanes; 16 bytes: four of 8 (CUDA C++ Programming Guide, "Shared
      // Memory", compute capability 5.x and later).
      const unsigned lanes_per_phase = max_size <= 4 ? 32 : (max_size <= 8 ? 16 : 8);
      for (unsigned first = 0; first < kWarpSize; first += lanes_per_phase) {
        const std::uint32_t phase = static_cast<std::uint32_t>(((std::uint64_t{1} << lanes_per_phase) - 1) << first);
        if ((r.mask & phase) == 0) continue;
        st.wavefronts += phase_wavefronts(r, first, lanes_per_phase, false);
        st.ideal_wavefronts += 1;
      }
      break;
    }
    case kLdmatrix: {
      // Matrix j: 8 rows of 16 bytes, addressed by lanes 8j..8j+7; ideally one
      // wavefront each.
      const unsigned matrices = std::max<unsigned>(1, max_size);
      for (unsigned j = 0; j < matrices; ++j) {
        st.wavefronts += phase_wavefronts(r, 8 * j, 8, true);
        st.ideal_wavefronts += 1;
        st.bytes += 128;
      }
      break;
    }
    default:
      break;
  }
  return st;
}

// ---------------------------------------------------------------------------
// The access path of the instrumentation.

GG_EMU_UNCHECKED inline bool in_kernel() {
  const ThreadCtx* t = tls.thread;
  return t != nullptr && t->state == State::runnable && __atomic_load_n(&launch_state.active, __ATOMIC_RELAXED);
}

// `aligned`: the access's type is `size`-byte aligned, so the GPU requires it.
GG_EMU_UNCHECKED inline void access(const void* p, std::size_t size, bool write, bool atomic, bool aligned,
                                    const void* site) {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  const LaunchState& g = launch_state;
  if ((a < g.lo || a >= g.hi) && (a < g.smem_lo || a >= g.smem_hi)) return;
  if (!in_kernel()) return;
  const Worker& w = worker;
  if (a >= w.smem_lo && a < w.smem_hi) {
    const Op op = atomic ? kAtomShared : (write ? kStShared : kLdShared);
    if (aligned && size > 1 && a % size != 0) misaligned(a, static_cast<unsigned>(size), op, site);
    if (w.log != nullptr) log_access(op, a, static_cast<unsigned>(size), site);
    return;
  }
  const Span* s = find_span(a);
  if (s == nullptr) return;
  const Op op = atomic ? kAtomGlobal : (write ? kStGlobal : kLdGlobal);
  if (aligned && size > 1 && a % size != 0) misaligned(a, static_cast<unsigned>(size), op, site);
  check_bytes(*s, a, size, write, atomic);
  if (w.log != nullptr) log_access(op, a, static_cast<unsigned>(size), site);
}

// ---------------------------------------------------------------------------
// Explicit reports of the primitives (noinline: the return address names the
// access site in the kernel).

GG_EMU_UNCHECKED __attribute__((noinline)) void on_cp_async(void* dst, const void* src, unsigned cp_size,
                                                                   unsigned src_size) {
  if (!in_kernel()) return;
  const void* site = __builtin_return_address(0);
  const auto s = reinterpret_cast<std::uintptr_t>(src);
  if (src_size != 0) {
    if (const Span* span = find_span(s)) check_bytes(*span, s, src_size, false, false);
    if (worker.log != nullptr) log_access(kCpAsyncGlobal, s, src_size, site);
  }
  if (worker.log != nullptr) log_access(kCpAsyncShared, reinterpret_cast<std::uintptr_t>(dst), cp_size, site);
}

GG_EMU_UNCHECKED __attribute__((noinline)) void on_ldmatrix(const void* row, unsigned matrices) {
  if (worker.log == nullptr || !in_kernel()) return;
  log_access(kLdmatrix, reinterpret_cast<std::uintptr_t>(row), matrices, __builtin_return_address(0));
}

GG_EMU_UNCHECKED __attribute__((noinline)) void on_mma() {
  if (worker.log == nullptr || !in_kernel()) return;
  log_access(kMma, 0, 0, __builtin_return_address(0));
}

GG_EMU_UNCHECKED __attribute__((noinline)) void on_barrier() {
  if (worker.log == nullptr || !in_kernel()) return;
  log_access(kBarrier, 0, 0, __builtin_return_address(0));
}

// ---------------------------------------------------------------------------
// Launch and block boundaries (called by gg_emu.h).

GG_EMU_UNCHECKED void on_launch_begin(const Launch& l) {
  LaunchState& g = launch_state;
  g.launch = &l;
  g.nspans = 0;
  g.lo = ~std::uintptr_t{0};
  g.hi = 0;
  g.smem_lo = g.smem_hi = 0;
  g.conflicts.clear();
  g.conflict_bytes = 0;
  g.sites.clear();
  g.blocks = 0;
  g.arg_names.clear();
  if (const char* names = std::getenv("GG_EMU_ARG_NAMES")) {
    std::string cur;
    for (const char* c = names;; ++c) {
      if (*c == ',' || *c == '\0') {
        g.arg_names.push_back(cur);
        cur.clear();
        if (*c == '\0') break;
      } else {
        cur += *c;
      }
    }
  }
  const char* path = std::getenv("GG_EMU_COUNTERS");
  g.counting = path != nullptr && *path != '\0';
  g.counters_path = g.counting ? path : "";
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  for (const DeviceBuffer& b : r.buffers) {
    if (g.nspans == kMaxSpans) fail("the memory checker handles at most %u device buffers per launch", kMaxSpans);
    Span& s = g.spans[g.nspans++];
    s.lo = reinterpret_cast<std::uintptr_t>(b.data);
    s.hi = s.lo + b.bytes;
    s.tag = b.tag;
    s.shadow_bytes = round_up(std::max<std::size_t>(b.bytes, 1) * sizeof(std::uint64_t), page_bytes());
    void* m = mmap(nullptr, s.shadow_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) fail("cannot map %zu bytes of shadow memory", s.shadow_bytes);
    s.shadow = static_cast<std::uint64_t*>(m);
    g.lo = std::min(g.lo, s.lo);
    g.hi = std::max(g.hi, s.hi);
  }
  __atomic_store_n(&g.active, true, __ATOMIC_RELEASE);
}

GG_EMU_UNCHECKED void block_begin(unsigned long long linear_block, const unsigned char* smem_begin,
                                         const unsigned char* smem_end) {
  Worker& w = worker;
  w.block = block_id(linear_block);
  w.smem_lo = reinterpret_cast<std::uintptr_t>(smem_begin);
  w.smem_hi = reinterpret_cast<std::uintptr_t>(smem_end);
  LaunchState& g = launch_state;
  if (w.smem_lo < g.smem_lo || w.smem_hi > g.smem_hi) {
    std::lock_guard<std::mutex> lock(g.mu);
    g.smem_lo = g.smem_hi == 0 ? w.smem_lo : (w.smem_lo < g.smem_lo ? w.smem_lo : g.smem_lo);
    g.smem_hi = w.smem_hi > g.smem_hi ? w.smem_hi : g.smem_hi;
  }
  if (launch_state.counting && w.log == nullptr) w.log = new BlockLog();
}

GG_EMU_UNCHECKED void block_end() {
  Worker& w = worker;
  if (w.log == nullptr) return;
  BlockLog& log = *w.log;
  for (auto& warp : log.warps) {
    for (auto& [key, site] : warp) {
      const Op op = static_cast<Op>(key & 15);
      Stats& total = log.sites[key];
      for (const Request& r : site.requests) {
        if (r.mask != 0) total.add(evaluate(op, r));
      }
    }
    warp.clear();
  }
  LaunchState& g = launch_state;
  std::lock_guard<std::mutex> lock(g.mu);
  for (const auto& [key, st] : log.sites) g.sites[key].add(st);
  ++g.blocks;
  log.sites.clear();
}

// At the end of a worker's blocks.
GG_EMU_UNCHECKED void worker_end() {
  delete worker.log;
  worker.log = nullptr;
}

GG_EMU_UNCHECKED inline std::string json_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

GG_EMU_UNCHECKED inline void write_counters(const Launch& l) {
  LaunchState& g = launch_state;
  FILE* f = std::fopen(g.counters_path.c_str(), "w");
  if (f == nullptr) fail("cannot write %s: %s", g.counters_path.c_str(), std::strerror(errno));
  std::fprintf(f, "{\"kernel\": \"%s\", \"grid\": [%u, %u, %u], \"block\": [%u, %u, %u], \"blocks\": %llu,\n",
               json_escape(l.kernel->name).c_str(), l.grid.x, l.grid.y, l.grid.z, l.block.x, l.block.y, l.block.z,
               static_cast<unsigned long long>(g.blocks));
  std::fprintf(f, " \"sites\": [");
  std::vector<std::pair<std::uint64_t, Stats>> sites(g.sites.begin(), g.sites.end());
  std::sort(sites.begin(), sites.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
  bool first = true;
  for (const auto& [key, st] : sites) {
    const void* pc = reinterpret_cast<const void*>(key >> 4);
    Dl_info info{};
    std::uintptr_t offset = reinterpret_cast<std::uintptr_t>(pc);
    if (dladdr(pc, &info) != 0 && info.dli_fbase != nullptr) offset -= reinterpret_cast<std::uintptr_t>(info.dli_fbase);
    std::fprintf(f,
                 "%s\n  {\"op\": \"%s\", \"pc\": %llu, \"requests\": %llu, \"lanes\": %llu, \"bytes\": %llu, "
                 "\"sectors\": %llu, \"ideal_sectors\": %llu, \"wavefronts\": %llu, \"ideal_wavefronts\": %llu}",
                 first ? "" : ",", kOpNames[key & 15], static_cast<unsigned long long>(offset),
                 static_cast<unsigned long long>(st.requests), static_cast<unsigned long long>(st.lanes),
                 static_cast<unsigned long long>(st.bytes), static_cast<unsigned long long>(st.sectors),
                 static_cast<unsigned long long>(st.ideal_sectors), static_cast<unsigned long long>(st.wavefronts),
                 static_cast<unsigned long long>(st.ideal_wavefronts));
    first = false;
  }
  std::fprintf(f, "\n]}\n");
  std::fclose(f);
}

// Reports the lowest conflicting byte (deterministic: every conflicting pair
// is found whatever the schedule), then frees the shadow memory.
GG_EMU_UNCHECKED void on_launch_end(const Launch& l) {
  LaunchState& g = launch_state;
  __atomic_store_n(&g.active, false, __ATOMIC_RELEASE);
  if (!g.conflicts.empty()) {
    const Conflict c = *std::min_element(g.conflicts.begin(), g.conflicts.end(), [](const Conflict& x, const Conflict& y) {
      return std::tie(x.span, x.offset, x.kind, x.a, x.b) < std::tie(y.span, y.offset, y.kind, y.a, y.b);
    });
    const Span& s = g.spans[c.span];
    static constexpr const char* kWhat[] = {"written by %s and by %s", "written by one and read by the other of %s and %s",
                                            "accessed atomically and plainly by %s and %s"};
    const std::string who = format(kWhat[c.kind], block_name(c.a).c_str(), block_name(c.b).c_str());
    fail_with_status(kExitRace,
                     format("race between blocks in kernel %s: byte offset %zu of %s was %s in the same launch "
                            "(CUDA does not order blocks; %llu conflicting bytes in all)",
                            l.kernel->name.c_str(), c.offset, span_name(s).c_str(), who.c_str(),
                            static_cast<unsigned long long>(g.conflict_bytes)));
  }
  if (g.counting) write_counters(l);
  for (unsigned i = 0; i < g.nspans; ++i) munmap(g.spans[i].shadow, g.spans[i].shadow_bytes);
  g.nspans = 0;
  g.lo = g.hi = g.smem_lo = g.smem_hi = 0;
  g.launch = nullptr;
}

}  // namespace gg::emu::mc

// ---------------------------------------------------------------------------
// The functions GCC's -fsanitize=thread instrumentation calls (the prototypes
// of its built-ins; ThreadSanitizer's runtime is not linked). Plain accesses
// of a type aligned to their size call __tsan_readN / __tsan_writeN; accesses
// GCC cannot prove aligned (a memcpy of 16 bytes, a packed field) and
// aggregates call the _range forms, which have no alignment to check.

// weak: every translation unit of a library carries the hooks (a dispatcher and its
// arms); the linker keeps one copy, as it does for the inline functions.
#define GG_MC_HOOK extern "C" GG_EMU_UNCHECKED __attribute__((visibility("hidden"), weak))
#define GG_MC_SITE __builtin_return_address(0)

GG_MC_HOOK void __tsan_init() {}
GG_MC_HOOK void __tsan_func_entry(void*) {}
GG_MC_HOOK void __tsan_func_exit() {}
GG_MC_HOOK void __tsan_vptr_update(void**, void*) {}
GG_MC_HOOK void __tsan_vptr_read(void**) {}

#define GG_MC_PLAIN(n)                                                                                  \
  GG_MC_HOOK void __tsan_read##n(void* p) { gg::emu::mc::access(p, n, false, false, true, GG_MC_SITE); }  \
  GG_MC_HOOK void __tsan_write##n(void* p) { gg::emu::mc::access(p, n, true, false, true, GG_MC_SITE); }  \
  GG_MC_HOOK void __tsan_unaligned_read##n(void* p) {                                                    \
    gg::emu::mc::access(p, n, false, false, false, GG_MC_SITE);                                          \
  }                                                                                                      \
  GG_MC_HOOK void __tsan_unaligned_write##n(void* p) {                                                   \
    gg::emu::mc::access(p, n, true, false, false, GG_MC_SITE);                                           \
  }                                                                                                      \
  GG_MC_HOOK void __tsan_volatile_read##n(void* p) { gg::emu::mc::access(p, n, false, false, true, GG_MC_SITE); } \
  GG_MC_HOOK void __tsan_volatile_write##n(void* p) { gg::emu::mc::access(p, n, true, false, true, GG_MC_SITE); }
GG_MC_PLAIN(1)
GG_MC_PLAIN(2)
GG_MC_PLAIN(4)
GG_MC_PLAIN(8)
GG_MC_PLAIN(16)
#undef GG_MC_PLAIN

GG_MC_HOOK void __tsan_read_range(void* p, unsigned long n) { gg::emu::mc::access(p, n, false, false, false, GG_MC_SITE); }
GG_MC_HOOK void __tsan_write_range(void* p, unsigned long n) { gg::emu::mc::access(p, n, true, false, false, GG_MC_SITE); }

// Atomics: done here (with GCC's __atomic built-ins, sequentially consistent
// whatever the order asked for), and checked as atomic accesses.
#define GG_MC_ATOMIC(n, T)                                                                                    \
  GG_MC_HOOK T __tsan_atomic##n##_load(const volatile void* a, int) {                                         \
    gg::emu::mc::access(const_cast<const void*>(a), sizeof(T), false, true, true, GG_MC_SITE);                 \
    return __atomic_load_n(static_cast<const volatile T*>(a), __ATOMIC_SEQ_CST);                              \
  }                                                                                                           \
  GG_MC_HOOK void __tsan_atomic##n##_store(volatile void* a, T v, int) {                                      \
    gg::emu::mc::access(const_cast<void*>(a), sizeof(T), true, true, true, GG_MC_SITE);                        \
    __atomic_store_n(static_cast<volatile T*>(a), v, __ATOMIC_SEQ_CST);                                       \
  }                                                                                                           \
  GG_MC_HOOK T __tsan_atomic##n##_exchange(volatile void* a, T v, int) {                                      \
    gg::emu::mc::access(const_cast<void*>(a), sizeof(T), true, true, true, GG_MC_SITE);                        \
    return __atomic_exchange_n(static_cast<volatile T*>(a), v, __ATOMIC_SEQ_CST);                             \
  }                                                                                                           \
  GG_MC_HOOK T __tsan_atomic##n##_fetch_add(volatile void* a, T v, int) {                                     \
    gg::emu::mc::access(const_cast<void*>(a), sizeof(T), true, true, true, GG_MC_SITE);                        \
    return __atomic_fetch_add(static_cast<volatile T*>(a), v, __ATOMIC_SEQ_CST);                              \
  }                                                                                                           \
  GG_MC_HOOK T __tsan_atomic##n##_fetch_sub(volatile void* a, T v, int) {                                     \
    gg::emu::mc::access(const_cast<void*>(a), sizeof(T), true, true, true, GG_MC_SITE);                        \
    return __atomic_fetch_sub(static_cast<volatile T*>(a), v, __ATOMIC_SEQ_CST);                              \
  }                                                                                                           \
  GG_MC_HOOK T __tsan_atomic##n##_fetch_and(volatile void* a, T v, int) {                                     \
    gg::emu::mc::access(const_cast<void*>(a), sizeof(T), true, true, true, GG_MC_SITE);                        \
    return __atomic_fetch_and(static_cast<volatile T*>(a), v, __ATOMIC_SEQ_CST);                              \
  }                                                                                                           \
  GG_MC_HOOK T __tsan_atomic##n##_fetch_or(volatile void* a, T v, int) {                                      \
    gg::emu::mc::access(const_cast<void*>(a), sizeof(T), true, true, true, GG_MC_SITE);                        \
    return __atomic_fetch_or(static_cast<volatile T*>(a), v, __ATOMIC_SEQ_CST);                               \
  }                                                                                                           \
  GG_MC_HOOK T __tsan_atomic##n##_fetch_xor(volatile void* a, T v, int) {                                     \
    gg::emu::mc::access(const_cast<void*>(a), sizeof(T), true, true, true, GG_MC_SITE);                        \
    return __atomic_fetch_xor(static_cast<volatile T*>(a), v, __ATOMIC_SEQ_CST);                              \
  }                                                                                                           \
  GG_MC_HOOK T __tsan_atomic##n##_fetch_nand(volatile void* a, T v, int) {                                    \
    gg::emu::mc::access(const_cast<void*>(a), sizeof(T), true, true, true, GG_MC_SITE);                        \
    return __atomic_fetch_nand(static_cast<volatile T*>(a), v, __ATOMIC_SEQ_CST);                             \
  }                                                                                                           \
  GG_MC_HOOK bool __tsan_atomic##n##_compare_exchange_strong(volatile void* a, void* expected, T v, int, int) { \
    gg::emu::mc::access(const_cast<void*>(a), sizeof(T), true, true, true, GG_MC_SITE);                        \
    return __atomic_compare_exchange_n(static_cast<volatile T*>(a), static_cast<T*>(expected), v, false,      \
                                       __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);                                   \
  }                                                                                                           \
  GG_MC_HOOK bool __tsan_atomic##n##_compare_exchange_weak(volatile void* a, void* expected, T v, int, int) {   \
    gg::emu::mc::access(const_cast<void*>(a), sizeof(T), true, true, true, GG_MC_SITE);                        \
    return __atomic_compare_exchange_n(static_cast<volatile T*>(a), static_cast<T*>(expected), v, false,      \
                                       __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);                                   \
  }                                                                                                           \
  GG_MC_HOOK T __tsan_atomic##n##_compare_exchange_val(volatile void* a, T expected, T v, int, int) {           \
    gg::emu::mc::access(const_cast<void*>(a), sizeof(T), true, true, true, GG_MC_SITE);                        \
    __atomic_compare_exchange_n(static_cast<volatile T*>(a), &expected, v, false, __ATOMIC_SEQ_CST,           \
                                __ATOMIC_SEQ_CST);                                                            \
    return expected;                                                                                          \
  }
GG_MC_ATOMIC(8, unsigned char)
GG_MC_ATOMIC(16, unsigned short)
GG_MC_ATOMIC(32, unsigned int)
GG_MC_ATOMIC(64, unsigned long)
#undef GG_MC_ATOMIC

GG_MC_HOOK void __tsan_atomic_thread_fence(int) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
GG_MC_HOOK void __tsan_atomic_signal_fence(int) { __atomic_signal_fence(__ATOMIC_SEQ_CST); }

#undef GG_MC_HOOK
#undef GG_MC_SITE

#endif
