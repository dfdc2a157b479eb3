// gg_emu_core.h: the emulator's execution core as a kernel's translation unit
// sees it: constants, the kernel registry, the CUDA thread's state, errors,
// block barriers and warp-collectives. Included by gg_emu.h only.
//
// Only what is templated on the kernel's code (the registration of each
// kernel's signature, warp-collectives, shuffles) or must inline into it (the
// current thread, __syncthreads: the memory checker names the kernel's line
// by the return address) is defined here. The rest of the core (fibers, the
// scheduler, BlockRunner, guarded buffers, stacks, fault handling, launches,
// request files, the C ABI) is declared here or in gg_emu_internal.h and
// compiled once per build mode in gg_emu_core.cc and gg_emu_launch.cc.
#pragma once

namespace gg::emu {

inline constexpr unsigned kWarpSize = 32;
// The runtime's dynamic shared buffer: 227 KiB, the largest opt-in limit per
// block of any arch (sm_90 / sm_100). A launch is checked against the limit
// of the emulated arch (device(), "Emulated device" below).
inline constexpr std::size_t kMaxDynamicSmem = 232448;
// Dynamic shared memory a kernel may use without
// cudaFuncSetAttribute(cudaFuncAttributeMaxDynamicSharedMemorySize).
inline constexpr int kDefaultDynamicSmem = 48 * 1024;
inline constexpr unsigned char kPoison = 0xFF;
inline constexpr int kExitKernelError = 70;
inline constexpr int kExitFault = 71;
inline constexpr std::size_t kGuardBytes = std::size_t{64} << 10;

}  // namespace gg::emu

// The per-block dynamic shared memory every `extern __shared__` array
// aliases (GG_EMU_DYNAMIC_SHARED). TLS in fiber mode: one per worker thread.
// gemmgen.harness.cuda_emu defines it (GG_EMU_DYNAMIC_SMEM_BUFFER) with the
// aliases, in one translation unit of a library; the core's units
// (GG_EMU_CORE) only declare it; a direct g++ build of a kernel, here.
#if defined(GG_EMU_PREPROCESS) || defined(GG_EMU_CORE)
#define GG_EMU_DECLARE_SMEM_BUFFER 1
#endif
#if defined(GG_EMU_TSAN)
extern "C" {
#if defined(GG_EMU_DECLARE_SMEM_BUFFER)
extern unsigned char gg_emu_dynamic_smem[gg::emu::kMaxDynamicSmem];
#else
alignas(1024) unsigned char gg_emu_dynamic_smem[gg::emu::kMaxDynamicSmem];
#endif
extern unsigned char __start_gg_shared[] __attribute__((weak, visibility("hidden")));
extern unsigned char __stop_gg_shared[] __attribute__((weak, visibility("hidden")));
}
#else
extern "C" {
#if defined(GG_EMU_DECLARE_SMEM_BUFFER)
extern thread_local unsigned char gg_emu_dynamic_smem[gg::emu::kMaxDynamicSmem];
#else
alignas(1024) thread_local unsigned char gg_emu_dynamic_smem[gg::emu::kMaxDynamicSmem];
#endif
}
#endif
#undef GG_EMU_DECLARE_SMEM_BUFFER

namespace gg::emu {

// ---------------------------------------------------------------------------
// Kernel registry: GG_EMU_REGISTER_KERNEL records each extern "C" kernel with
// a thunk that unpacks cuLaunchKernel-style `void** args` for its signature.

struct ParamInfo {
  std::size_t size;
  bool is_pointer;
  std::string type;
};

struct KernelInfo {
  std::string name;
  void* fn;
  void (*invoke)(void* fn, void* const* args);
  std::vector<ParamInfo> params;
  // __launch_bounds__(max_threads, ...) (GG_EMU_LAUNCH_BOUNDS); 0: none.
  unsigned max_threads = 0;
  // cudaFuncAttributeMaxDynamicSharedMemorySize, as cudaFuncSetAttribute
  // leaves it (host calls only, one at a time: launches are synchronous).
  int max_dynamic_smem = kDefaultDynamicSmem;
  // cudaFuncAttributeNonPortableClusterSizeAllowed: clusters of up to 16 blocks.
  bool non_portable_cluster = false;
};

std::vector<KernelInfo>& kernel_registry();

template <class T>
std::string type_name() {
  const std::string s = __PRETTY_FUNCTION__;  // "... [with T = const float*; ...]"
  const std::size_t b = s.find("T = ") + 4;
  return s.substr(b, s.find_first_of(";]", b) - b);
}

template <class... A, std::size_t... I>
void invoke_kernel(void* fn, void* const* args, std::index_sequence<I...>) {
  // NB: each CUDA thread gets its own copy of the parameters, as on a GPU.
  std::tuple<std::remove_cv_t<A>...> values;
  (std::memcpy(static_cast<void*>(&std::get<I>(values)), args[I], sizeof(A)), ...);
  reinterpret_cast<void (*)(A...)>(fn)(std::get<I>(values)...);
}

struct KernelRegistration {
  template <class... A>
  KernelRegistration(const char* name, void (*fn)(A...)) {
    for (const KernelInfo& k : kernel_registry()) {
      if (k.name == name) return;
    }
    KernelInfo k;
    k.name = name;
    k.fn = reinterpret_cast<void*>(fn);
    k.invoke = [](void* f, void* const* args) {
      invoke_kernel<A...>(f, args, std::index_sequence_for<A...>{});
    };
    k.params = {ParamInfo{sizeof(A), std::is_pointer_v<A>, type_name<A>()}...};
    kernel_registry().push_back(std::move(k));
  }
};

KernelInfo* find_kernel(const char* name);

// The registered kernel whose entry point is `fn` (cudaLaunchKernel,
// cudaFuncSetAttribute and `<<<>>>` name kernels by address).
KernelInfo* find_kernel_at(const void* fn);

// GG_EMU_LAUNCH_BOUNDS(name, max_threads[, min_blocks[, max_cluster]]):
// records a registered kernel's __launch_bounds__ (cuda_emu appends one per
// kernel that declares them, after its registration).
struct LaunchBoundsRegistration {
  LaunchBoundsRegistration(const char* name, long long max_threads, long long = 0, long long = 0);
};
// ---------------------------------------------------------------------------
// Per-thread state.

enum class Schedule { run_ahead, reverse };
// at_wait: blocked until a condition holds (an mbarrier phase, gg_emu_sm90.h).
enum class State : unsigned char { runnable, at_barrier, at_collective, at_wait, exited };

// Computes lane `lane`'s output of a warp-collective from every lane's input
// (ins[l] is null for lanes outside the mask).
using CollectiveFn = void (*)(unsigned lane, const void* const* ins, void* out);

struct CpAsyncCopy {
  void* dst;
  const void* src;
  unsigned cp_size;
  unsigned src_size;
  unsigned group;
};

class BlockRunner;

struct Launch;

struct ThreadCtx {
  uint3 thread_idx{};
  uint3 block_idx{};
  dim3 block_dim;
  dim3 grid_dim;
  unsigned linear = 0;
  unsigned lane = 0;
  unsigned warp = 0;
  State state = State::runnable;
  // The warp-collective this thread waits at (state == at_collective).
  const char* op = nullptr;
  unsigned mask = 0;
  const void* in = nullptr;
  void* out = nullptr;
  CollectiveFn fn = nullptr;
  // The condition this thread waits for (state == at_wait; `op` describes it).
  bool (*wait_ready)(const void*) = nullptr;
  const void* wait_arg = nullptr;
  // cp.async copies not yet landed; `group` counts commit_group calls.
  std::vector<CpAsyncCopy> cp_pending;
  unsigned cp_committed = 0;
  // barrier.cluster.arrive done, its wait not yet (the phase it arrived in).
  bool cluster_arrived = false;
  unsigned long long cluster_phase = 0;
  // The thread's happens-before clock (gg_emu_internal.h, namespace order):
  // per thread of the cluster (index rank * threads + linear), the last epoch
  // of that thread ordered before this thread's present; empty until first
  // needed. hb_self is this thread's index, hb_size the cluster's threads.
  std::vector<std::uint32_t> hb;
  unsigned hb_self = 0;
  unsigned hb_size = 0;
  BlockRunner* runner = nullptr;
#if defined(GG_EMU_TSAN)
  pthread_t os_thread{};
#else
  ucontext_t ctx{};
  unsigned char* stack = nullptr;
#endif
};

// NB: the only runtime thread_local besides gg_emu_dynamic_smem (and the
// memory checker's and the runtime API's, likewise). Its nonzero initialiser
// (gg_emu_core.cc) keeps it in .tdata: fiber mode poisons the module's whole
// .tbss (static and dynamic shared memory) at every block start. constinit:
// no dynamic initialisation, so the kernel's code reads it directly.
struct Tls {
  ThreadCtx* thread;
  BlockRunner* runner;
  unsigned magic;
};
extern thread_local constinit Tls tls __attribute__((visibility("hidden")));

// ---------------------------------------------------------------------------
// Errors.

std::string vformat(const char* fmt, va_list ap);
std::string format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
// Where the calling CUDA thread is: kernel, block, thread, warp and lane.
std::string where();
// The emulated device's arch (GG_EMU_ARCH, e.g. "sm_120a"), for primitives
// that exist on some archs only.
const char* device_arch();
[[noreturn]] void fail_with_status(int status, const std::string& message);
// Ends the process with "gg-emu: error: <message>" and status 70.
[[noreturn]] void fail(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

inline ThreadCtx& current() {
  ThreadCtx* t = tls.thread;
  if (t == nullptr) [[unlikely]] {
    fail("a CUDA builtin (threadIdx, __syncthreads, a gg:: primitive, ...) was used outside a kernel");
  }
  return *t;
}


// ---------------------------------------------------------------------------
// The calling thread's block (its BlockRunner, gg_emu_runner.h).

// Arrives at a warp-collective and returns when the lanes of `mask` have
// computed their outputs (BlockRunner::collective).
void collective(ThreadCtx& t, const char* op, unsigned mask, const void* in, void* out, CollectiveFn fn);
// __syncthreads (BlockRunner::syncthreads).
void block_sync(ThreadCtx& t);
// The lanes of the thread's warp that exist in its block.
unsigned active_lanes(const ThreadCtx& t);
// True when [p, p + bytes) lies in the thread's block's shared memory.
bool in_shared_memory(const ThreadCtx& t, const void* p, std::size_t bytes);
// Lands every cp.async copy of a committed group older than the newest `keep`.
void land_cp_async(ThreadCtx& t, unsigned keep);

}  // namespace gg::emu

// The memory checker's hooks (GG_EMU_MEMCHECK builds; no-ops otherwise).
#include "gg_emu_memcheck.h"

namespace gg::emu {

// ---------------------------------------------------------------------------
// Operations the CUDA builtins and gg:: primitives are made of.

GG_EMU_ALWAYS_INLINE void syncthreads() {
  mc::on_barrier();
  block_sync(current());
}

// Runs a warp-collective operation: `compute(lane, ins)` returns lane `lane`'s
// output from every participating lane's input (ins[l] is null outside the
// mask). It runs once per lane, in the context of the last lane to arrive.
template <class In, class Out, class F>
Out warp_collective(const char* op, unsigned mask, const In& in, F) {
  static_assert(std::is_empty_v<F>, "the compute function of a warp collective must not capture");
  Out out{};
  CollectiveFn fn = [](unsigned lane, const void* const* ins, void* result) GG_EMU_UNCHECKED {
    const In* typed[kWarpSize];
    for (unsigned l = 0; l < kWarpSize; ++l) typed[l] = static_cast<const In*>(ins[l]);
    *static_cast<Out*>(result) = F{}(lane, typed);
  };
  collective(current(), op, mask, &in, &out, fn);
  return out;
}

void syncwarp(unsigned mask);

enum class ShflMode { idx, up, down, bfly };

// __shfl_*_sync semantics, including `width` segments: a lane whose source is
// outside its segment gets its own value back.
template <class T>
T shfl(ShflMode mode, unsigned mask, T value, int arg, int width) {
  static_assert(sizeof(T) <= 8, "shuffles move values of at most 8 bytes");
  struct In {
    T value;
    int arg;
    int width;
    ShflMode mode;
  };
  static constexpr const char* kNames[] = {"shfl.sync.idx", "shfl.sync.up", "shfl.sync.down", "shfl.sync.bfly"};
  if (width <= 0 || width > 32 || (width & (width - 1)) != 0) fail("shuffle width %d is not a power of two <= 32", width);
  return warp_collective<In, T>(kNames[static_cast<int>(mode)], mask, In{value, arg, width, mode},
                                [](unsigned lane, const In* const* ins) -> T {
                                  const In& me = *ins[lane];
                                  const unsigned w = static_cast<unsigned>(me.width);
                                  const unsigned seg = lane & ~(w - 1);
                                  const unsigned a = static_cast<unsigned>(me.arg);
                                  unsigned src = lane;
                                  switch (me.mode) {
                                    case ShflMode::idx:
                                      src = seg + (a & (w - 1));
                                      break;
                                    case ShflMode::up:
                                      src = (lane - seg) >= a ? lane - a : lane;
                                      break;
                                    case ShflMode::down:
                                      src = (lane - seg) + a < w ? lane + a : lane;
                                      break;
                                    case ShflMode::bfly:
                                      src = (lane ^ a) < seg + w ? lane ^ a : lane;
                                      break;
                                  }
                                  if (ins[src] == nullptr) {
                                    fail("shuffle: lane %u reads lane %u, which is not in the mask", lane, src);
                                  }
                                  return ins[src]->value;
                                });
}

unsigned ballot(unsigned mask, bool predicate);

}  // namespace gg::emu
