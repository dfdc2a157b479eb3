// gg_emu_internal.h: the declarations the emulator's core units share
// (gg_emu_core.cc, gg_emu_launch.cc, gg_emu_memcheck.cc, gg_emu_sm90_*.cc,
// gg_emu_sm100_*.cc, gg_emu_cudart.cc, ...). Those are compiled once per
// build mode (fiber, memory checker, TSan) with GG_EMU_CORE defined, into
// objects that every kernel library links statically: each library keeps
// its own copy of the state (buffers, stacks, the fault handler, the
// launch), as when the whole emulator was compiled in the kernel's unit. A
// kernel never includes it.
#pragma once

#if !defined(GG_EMU_CORE)
#error "gg_emu_internal.h belongs to the emulator's core units (compiled with -DGG_EMU_CORE)"
#endif

#include "gg_emu.h"

#include <condition_variable>
#include <mutex>
#include <thread>
#include <unordered_map>

#include <dlfcn.h>
#include <link.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>
#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

// The C ABI: exported, and kept (`used`) although nothing in the library calls it.
#define GG_EMU_API extern "C" __attribute__((visibility("default"), used))

namespace gg::emu {

struct Launch {
  const KernelInfo* kernel = nullptr;
  void* const* args = nullptr;
  dim3 grid;
  dim3 block;
  dim3 cluster{1, 1, 1};  // cudaLaunchAttributeClusterDimension (1, 1, 1: no clusters)
  std::size_t dynamic_smem = 0;
  Schedule schedule = Schedule::run_ahead;
  unsigned workers = 1;
  std::size_t stack_bytes = 0;
  bool flush_subnormals = false;  // GG_EMU_FTZ=1: model a kernel built with -ftz (see set_ftz)
  std::atomic<unsigned long long> next_block{0};

  unsigned long long num_blocks() const {
    return static_cast<unsigned long long>(grid.x) * grid.y * grid.z;
  }
  unsigned threads_per_block() const { return block.x * block.y * block.z; }
  unsigned cluster_size() const { return cluster.x * cluster.y * cluster.z; }
  unsigned long long num_clusters() const { return num_blocks() / cluster_size(); }
  // The linear block index of CTA `rank` (%cluster_ctarank, x fastest) of
  // cluster `c` (linear, x fastest over the grid of clusters).
  unsigned long long cluster_block(unsigned long long c, unsigned rank) const {
    const unsigned long long cx = grid.x / cluster.x, cy = grid.y / cluster.y;
    const unsigned long long x = c % cx * cluster.x + rank % cluster.x;
    const unsigned long long y = c / cx % cy * cluster.y + rank / cluster.x % cluster.y;
    const unsigned long long z = c / (cx * cy) * cluster.z + rank / (cluster.x * cluster.y);
    return x + grid.x * (y + static_cast<unsigned long long>(grid.y) * z);
  }
};

// ---------------------------------------------------------------------------
// Happens-before clocks (docs/cuda-emulation.md, "Ordering of generic writes
// before async-proxy reads"). The baton and the run-ahead schedule run a
// writer before the reader whenever they can, so a missing arrival or wait
// between a thread's st.shared (then fence.proxy.async) and another
// thread's async-proxy read of those bytes (a tcgen05.cp or tcgen05.mma
// operand, possibly of a peer CTA of its pair) would go unseen. Each thread
// carries a vector clock (ThreadCtx::hb: per thread of the cluster, the last
// epoch of that thread ordered before this one's present). A release
// (mbarrier.arrive, remote or local, tcgen05.commit's arrival, an arrival at
// __syncthreads or barrier.cluster) joins the thread's clock into the
// barrier's phase and starts a new epoch of the thread; an acquire (a wait
// that saw the phase complete, leaving __syncthreads or barrier.cluster.wait)
// joins the completed phase's clock into the thread's. fence.proxy.async
// tags the bytes the generic proxy changed since the last fence with the
// fencing thread and its epoch, and an async-proxy read of a tagged byte by a
// thread whose clock does not reach that epoch is reported. TMA and bulk
// copies are the async proxy's own writes (their waits are checked apart).
namespace order {

using Clock = std::vector<std::uint32_t>;

// The clock of thread `t`, started (its own epoch 1, nothing else known) on
// first use.
inline Clock& clock(ThreadCtx& t) {
  if (t.hb.empty()) {
    t.hb.assign(t.hb_size, 0u);
    t.hb[t.hb_self] = 1;
  }
  return t.hb;
}

inline void join(Clock& into, const Clock& from) {
  if (from.empty()) return;
  if (into.size() < from.size()) into.resize(from.size(), 0u);
  for (std::size_t i = 0; i < from.size(); ++i) into[i] = std::max(into[i], from[i]);
}

// A release by `t` into `into` (a barrier's phase): what t knows travels
// with it, and t's later writes are a new epoch.
inline void release(ThreadCtx& t, Clock& into) {
  Clock& c = clock(t);
  join(into, c);
  ++c[t.hb_self];
}

// An acquire by `t` of `from` (a completed phase's clock).
inline void acquire(ThreadCtx& t, const Clock& from) {
  if (!from.empty()) join(clock(t), from);
}

// Whether thread `t` knows epoch `epoch` of thread `writer` (a cluster-wide index).
inline bool knows(const ThreadCtx& t, unsigned writer, std::uint32_t epoch) {
  return writer < t.hb.size() && t.hb[writer] >= epoch;
}

// A barrier among threads (__syncthreads, barrier.cluster): arrivals join
// into `acc`; the completing one moves it to `done`, which each thread
// acquires when it leaves.
struct Gather {
  Clock acc, done;
  void reset() {
    acc.clear();
    done.clear();
  }
  void complete() {
    done = std::move(acc);
    acc.clear();
  }
};

}  // namespace order

// ---------------------------------------------------------------------------
// Thread-block clusters (docs/cuda-emulation.md, "Clusters"): the CTAs of a
// cluster run at once, each on its own worker OS thread (so each has its own
// shared memory, the worker's TLS), but one at a time: the CTA that holds
// the baton runs its fibers until none can run, then hands the baton to the
// next CTA of the cluster (rank order; the reverse schedule goes down) that
// can. Every cross-CTA operation (a remote mbarrier arrive, a multicast TMA
// load, st.shared::cluster, barrier.cluster) is done by the baton holder on
// the peer's state while the peer's OS thread waits for the baton, so the
// per-block models need no locks. No CTA able to run while one has live
// threads is a deadlock of the cluster, reported with every CTA's threads.
struct Cluster {
  Launch* launch = nullptr;
  unsigned size = 1;
  std::vector<BlockRunner*> ctas;  // by rank
  std::mutex mu;
  std::condition_variable cv;
  // The cluster being run (set by rank 0's thread; `generation` counts them).
  unsigned long long index = 0;
  unsigned long long generation = 0;
  bool stop = false;
  unsigned ready = 0;     // CTAs set up for this cluster
  unsigned finished = 0;  // CTAs whose threads have all exited
  unsigned done = 0;      // CTAs past their end-of-block checks
  int baton = -1;         // the rank that runs; -1 before the start and after the end
  std::vector<bool> exited;  // per rank: every thread of the CTA exited
  // barrier.cluster: the phase, and the threads arrived in it.
  unsigned long long barrier_phase = 0;
  unsigned barrier_arrived = 0;
  order::Gather barrier_clock;  // its happens-before clocks
};


// GG_EMU_FTZ=1 models a kernel compiled with -ftz=true (nvcc --use_fast_math):
// f32 arithmetic flushes subnormal inputs and results to zero. On x86 the
// MXCSR bits FTZ (results) and DAZ (inputs) do that for every SSE operation
// of the thread, f64 included (the emulator's own f64 arithmetic, such as an
// mma.sync's sum, never meets a subnormal for realistic data). Set at the start
// of each CUDA thread; swapcontext saves and restores MXCSR per fiber.
inline bool ftz_supported() {
#if defined(__x86_64__) || defined(__i386__)
  return true;
#else
  return false;
#endif
}
inline void set_ftz(bool on) {
#if defined(__x86_64__) || defined(__i386__)
  if (on) _mm_setcsr(_mm_getcsr() | 0x8040u);  // FTZ (bit 15) | DAZ (bit 6)
#else
  (void)on;
#endif
}

// ---------------------------------------------------------------------------
// Shared-memory regions of the calling worker thread.

struct SharedRegion {
  unsigned char* begin = nullptr;
  unsigned char* end = nullptr;
};

#if !defined(GG_EMU_TSAN)
// The calling thread's instance of this module's .tbss: every static
// `__shared__` variable and gg_emu_dynamic_smem, nothing else (see Tls).
SharedRegion module_tbss();
#endif

// ---------------------------------------------------------------------------
// Device buffers with guard regions and canaries.

struct DeviceBuffer {
  unsigned char* map;
  std::size_t map_bytes;
  unsigned char* data;
  std::size_t bytes;
  std::size_t padded;
  int tag;
};

struct StackGuard {
  unsigned char* begin;
  unsigned char* end;
};

// The shared memory of a cluster's CTA whose threads have all exited while
// its peers run: PROT_NONE until the cluster ends, so a peer's access
// through a mapped (mapa) pointer faults with this report.
struct ExitedSmem {
  unsigned char* dyn;  // the CTA's dynamic shared memory
  unsigned char* begin;
  unsigned char* end;
  char what[512];
};

struct Registry {
  std::mutex mu;
  std::vector<DeviceBuffer> buffers;
  std::vector<StackGuard> stack_guards;
  std::size_t stack_bytes = 0;
  std::vector<ExitedSmem> exited_smem;
};

Registry& registry();

inline std::size_t round_up(std::size_t x, std::size_t m) { return (x + m - 1) / m * m; }

// A buffer of `bytes` whose end is 16-byte aligned against a 64 KiB PROT_NONE
// guard region; another guards the page before it. Everything between the
// guards that is not the buffer holds 0xFF canaries.
void* device_malloc(std::size_t bytes, int tag);
void device_free(void* p);
std::string describe_buffer(const DeviceBuffer& b);
// Finds writes into the canary bytes around every live buffer.
void check_canaries();

// ---------------------------------------------------------------------------
// Poisoned fiber stacks (fiber mode; docs/cuda-emulation.md, "Uninitialised
// values").
//
// Fresh fiber stacks are zero pages: an uninitialised local would read 0 in a
// worker's first block and a previous block's values later. Instead every
// block starts with its fibers' stacks full of kStackPoison words: NaN in
// every float format at every aligned position (f32, f64, bf16, f16, e4m3,
// e5m2), INT_MAX or a huge int64 as an integer, a non-canonical address as a
// pointer. Only what a fiber has used is refilled: a stack is PROT_NONE below
// its top kStackWindow bytes, and a fault there (above the guard) makes more
// pages accessible, poisons them and retries the access, so a block pays for
// the stack its threads use, not for GG_EMU_STACK_KB.

inline constexpr std::uint32_t kStackPoison = 0x7FFFFFFFu;
inline constexpr std::size_t kStackWindow = std::size_t{8} << 10;
inline constexpr unsigned kMaxStackAreas = 1024;

// The stacks of one BlockRunner. Read by the fault handler, so fixed slots.
struct StackArea {
  std::atomic<bool> in_use;
  unsigned char* map;     // `count` stacks, each a guard region then the stack
  std::size_t each;       // guard + stack bytes
  unsigned count;
  unsigned char** low;    // per stack: its lowest accessible byte
};
extern StackArea stack_areas[kMaxStackAreas];

std::size_t page_bytes();
GG_EMU_UNCHECKED void fill_stack_poison(unsigned char* p, std::size_t bytes);

// The SIGSEGV and SIGBUS handler: grows fiber stacks, reports faults in
// guard regions (gg_emu_core.cc). Installed once per library.
void install_fault_handler();

// The fault handler runs on an alternate stack: a fiber's own may be full.
// One per worker thread, for the worker's lifetime.
class SignalStack {
 public:
  SignalStack() : mem_(mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)) {
    stack_t ss{};
    ss.ss_sp = mem_;
    ss.ss_size = kBytes;
    sigaltstack(&ss, nullptr);
  }
  ~SignalStack() {
    stack_t ss{};
    ss.ss_flags = SS_DISABLE;
    sigaltstack(&ss, nullptr);
    munmap(mem_, kBytes);
  }
  SignalStack(const SignalStack&) = delete;
  SignalStack& operator=(const SignalStack&) = delete;

 private:
  static constexpr std::size_t kBytes = std::size_t{64} << 10;
  void* mem_;
};

#if defined(GG_EMU_TSAN)
}  // namespace gg::emu

extern "C" {
void AnnotateIgnoreSyncBegin(const char* file, int line);
void AnnotateIgnoreSyncEnd(const char* file, int line);
void AnnotateIgnoreReadsBegin(const char* file, int line);
void AnnotateIgnoreReadsEnd(const char* file, int line);
void AnnotateIgnoreWritesBegin(const char* file, int line);
void AnnotateIgnoreWritesEnd(const char* file, int line);
void __tsan_acquire(void* addr);
void __tsan_release(void* addr);
}

namespace gg::emu {

// NB: every barrier and warp-collective of a block goes through one mutex.
// Left alone, TSan would take each lock/unlock pair as synchronisation between
// the two threads, whatever warps they are in, and a race could hide behind
// an unrelated __syncwarp. So the emulator's bookkeeping is invisible to TSan
// (no checked accesses, no happens-before from its mutex), and explicit
// release/acquire annotations on a per-block and per-warp token give exactly
// the synchronisation CUDA defines: __syncthreads orders the block, a
// warp-collective orders the lanes of its warp.
struct TsanQuiet {
  TsanQuiet() { begin(); }
  ~TsanQuiet() { end(); }
  TsanQuiet(const TsanQuiet&) = delete;
  TsanQuiet& operator=(const TsanQuiet&) = delete;
  static void begin() {
    AnnotateIgnoreSyncBegin(__FILE__, __LINE__);
    AnnotateIgnoreReadsBegin(__FILE__, __LINE__);
    AnnotateIgnoreWritesBegin(__FILE__, __LINE__);
  }
  static void end() {
    AnnotateIgnoreWritesEnd(__FILE__, __LINE__);
    AnnotateIgnoreReadsEnd(__FILE__, __LINE__);
    AnnotateIgnoreSyncEnd(__FILE__, __LINE__);
  }
};
inline void sync_release(const void* token) { __tsan_release(const_cast<void*>(token)); }
inline void sync_acquire(const void* token) { __tsan_acquire(const_cast<void*>(token)); }
#else
inline void sync_release(const void*) {}
inline void sync_acquire(const void*) {}
#endif

}  // namespace gg::emu

namespace gg::emu {

// The Hopper model's per-block state and the runner's hooks (gg_emu_sm90_block.cc).
struct HopperBlock;
void hopper_block_begin(BlockRunner& r);
void hopper_block_end(BlockRunner& r);
void hopper_thread_exit(ThreadCtx& t);
void hopper_free(HopperBlock* h);
std::string hopper_report(const BlockRunner& r);
bool hopper_on_stall(BlockRunner& r);
// (issue 30) A completed barrier.cluster: every CTA of the cluster has seen
// every CTA's shared-memory writes so far (gg_emu_sm90_block.cc, the write order).
void hopper_cluster_synced(Cluster& c);
// The read of [lo, hi) of the current CTA's shared memory by an op of CTA
// `reader` (a cta_group::2 op of its pair leader) must be ordered after the
// current CTA's writes there: a signal of this CTA made after them reached
// `reader` (a remote arrival, a TMA completion on its barrier, a cluster
// barrier) and a thread of `reader` waited on it.
void hopper_check_ordered_read(const BlockRunner& reader, std::uint32_t lo, std::uint32_t hi,
                               const char* what);

// The sm_100 model's per-block state (TMEM, tcgen05.mma) and its hooks
// (gg_emu_sm100_retire.cc): the runner's, and the sm90 tier's calls into it (a wait
// that saw an mbarrier phase complete retires the MMAs committed to it and
// hands on the unfenced tcgen05 accesses of the phase's arrivals; a TMA load
// into shared memory an in-flight MMA reads is reported; the floating-point
// trap's report for a tcgen05.ld register read too early).
struct Sm100Block;
void sm100_block_begin(BlockRunner& r);
void sm100_block_end(BlockRunner& r);
void sm100_thread_exit(ThreadCtx& t);
void sm100_free(Sm100Block* b);
std::string sm100_report(const BlockRunner& r);
void tcgen05_retire(BlockRunner& r, std::uint32_t bar, unsigned long long phase);
// An arrival of the calling thread on `bar` in `phase` (mbarrier.arrive,
// and tcgen05.commit's): its tcgen05.ld / st since its last
// tcgen05.fence::before_thread_sync are not ordered before it.
void tcgen05_on_arrive(BlockRunner& r, std::uint32_t bar, unsigned long long phase);
void tcgen05_check_writes(BlockRunner& r, std::uint32_t lo, std::uint32_t hi, const char* writer);
const char* tcgen05_fpe_reason();

// The cluster model (gg_emu_cluster.cc): a thread of a cluster's CTA exits
// (barrier.cluster then waits for one thread fewer); a CTA's threads have
// all exited while peers run (its shared memory becomes inaccessible), and
// the cluster has ended (accessible again).
void cluster_thread_exit(ThreadCtx& t);
void cluster_cta_exited(BlockRunner& r);
void cluster_cta_released(BlockRunner& r);

// Runs the calling thread's model operations against the state of CTA
// `peer` of its cluster (a remote arrive, a multicast load): the per-block
// models find their block through current().runner. Safe because only the
// baton holder runs (Cluster).
struct OnPeer {
  ThreadCtx& t;
  BlockRunner* saved;
  explicit OnPeer(BlockRunner* peer) : t(current()), saved(t.runner) { t.runner = peer; }
  ~OnPeer() { t.runner = saved; }
  OnPeer(const OnPeer&) = delete;
  OnPeer& operator=(const OnPeer&) = delete;
};

namespace sm90 {
// A shared::cluster address resolved: the CTA and the host address.
struct ClusterRef {
  BlockRunner* cta;
  unsigned rank;
  unsigned char* p;
};
// Resolves shared::cluster address `addr` ([addr, addr + bytes) must lie in
// the CTA's static shared memory or its launch's dynamic shared memory; the
// CTA must not have exited). `op` names the instruction in reports.
ClusterRef resolve_cluster(std::uint32_t addr, std::size_t bytes, const char* op);
}  // namespace sm90

// ---------------------------------------------------------------------------
// Launches (gg_emu_launch.cc).

// The message of the last rejected launch or runtime call.
std::string& last_error();
// Rejects a launch or a runtime call: `code` is the cudaError_t a GPU
// returns, the message says why.
int reject(int code, const std::string& message);

// ---------------------------------------------------------------------------
// Emulated device: the arch whose limits launches are checked against.
// gemmgen.harness.cuda_emu sets GG_EMU_ARCH (e.g. sm_89) and
// GG_EMU_SMEM_OPTIN (its opt-in shared memory per block, from
// gemmgen.archs.shared_memory_limit) and GG_EMU_SM_COUNT (its SMs, from
// gemmgen.archs.sm_count, or what a test asks for); without them the device
// is an sm_90a with 132 SMs. The grid and block limits are the same on
// every arch.

struct Device {
  std::string arch;  // "sm_90a"
  int major = 0;
  int minor = 0;
  std::size_t smem_optin = 0;  // cudaDevAttrMaxSharedMemoryPerBlockOptin
  int sm_count = 132;          // cudaDevAttrMultiProcessorCount
};

inline constexpr unsigned long long kMaxGridX = 2147483647ull;  // 2^31 - 1
inline constexpr unsigned kMaxGridYZ = 65535;
inline constexpr unsigned kMaxBlockThreads = 1024;
inline constexpr unsigned kMaxBlockXY = 1024;
inline constexpr unsigned kMaxBlockZ = 64;
// Blocks per cluster: portable, and with cudaFuncAttributeNonPortableClusterSizeAllowed.
inline constexpr unsigned kMaxClusterPortable = 8;
inline constexpr unsigned kMaxClusterNonPortable = 16;

// The emulated device, read from the environment at the first call.
const Device& device();
// cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes).
int set_max_dynamic_smem(KernelInfo& k, long long bytes);
// What the driver checks before it launches `k`: 0, or the cudaError_t a
// GPU returns (with last_error() saying why). `cluster` (null: no cluster
// attribute) is cudaLaunchAttributeClusterDimension's (x, y, z).
int check_launch(const KernelInfo& k, const unsigned grid[3], const unsigned block[3], std::size_t dynamic_smem,
                 const unsigned* cluster = nullptr);
// Runs kernel `k` (after check_launch): 0, or the check's error code.
int run_kernel(const KernelInfo* k, const unsigned grid[3], const unsigned block[3], std::size_t dynamic_smem,
               void* const* args, const unsigned* cluster = nullptr);
// Runs the kernel named `kernel` (gg_emu_launch, gg_emu_launch_cluster): 0,
// or a nonzero cudaError_t code when the launch is rejected.
int launch(const char* kernel, const unsigned grid[3], const unsigned block[3], std::size_t dynamic_smem,
           void* const* args, std::size_t nargs, const unsigned* cluster = nullptr);

// Request files (gg_emu_launch.cc describes the format).
struct Reader {
  const unsigned char* p;
  const unsigned char* end;

  const unsigned char* take(std::size_t n) {
    if (static_cast<std::size_t>(end - p) < n) fail("malformed request file: truncated");
    const unsigned char* r = p;
    p += n;
    return r;
  }
  template <class T>
  T get() {
    T v;
    std::memcpy(&v, take(sizeof(T)), sizeof(T));
    return v;
  }
};

std::vector<unsigned char> read_file(const char* path);

namespace sm90 {
// A tensor-map entry of a request (kind 3), decoded.
struct MapArgument {
  std::uint32_t buffer, dtype, rank, interleave, swizzle, l2_promotion, oob_fill;
  std::uint64_t offset;
  std::vector<std::uint64_t> dims, strides;
  std::vector<std::uint32_t> box, element_strides;
};
// Encodes `a` into `map` (128 bytes, 64-byte aligned) with the emulated
// cuTensorMapEncodeTiled against `buffer` (`buffer_bytes` long) plus the
// offset, and checks that the map stays inside the buffer. Defined in
// gg_emu_sm90_tensor_map.cc; false with `why` set when either fails.
// What the sm100 tier uses of the Hopper model (gg_emu_sm90_wgmma.cc,
// gg_emu_sm90_mbarrier.cc): an
// async-proxy read of block offsets [lo, hi) by `reader`, through a
// descriptor of swizzle span `span` (inside the block's shared memory, not
// filled by a TMA load still in flight or by one of another swizzle, and
// fenced with fence.proxy.async after generic writes); the phase an arrival
// on `bar` now counts in; the floating-point "invalid" trap of the thread.
void check_async_read(std::uint32_t lo, std::uint32_t hi, unsigned span, const char* reader);
unsigned long long mbarrier_phase(void* bar, const char* op);
void set_invalid_trap(bool on);
bool encode_map_argument(void* map, const MapArgument& a, unsigned char* buffer, std::size_t buffer_bytes,
                         std::string& why);
// The emulated cuTensorMapEncodeTiled (gg_emu_sm90_tensor_map.cc).
CUresult encode_tiled(CUtensorMap* map, CUtensorMapDataType dtype, cuuint32_t rank, void* address,
                      const cuuint64_t* dims, const cuuint64_t* strides, const cuuint32_t* box,
                      const cuuint32_t* element_strides, CUtensorMapInterleave interleave,
                      CUtensorMapSwizzle swizzle, CUtensorMapL2promotion l2, CUtensorMapFloatOOBfill oob);
}  // namespace sm90

}  // namespace gg::emu
