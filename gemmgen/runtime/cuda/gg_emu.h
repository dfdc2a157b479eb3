// gg_emu.h: run CUDA kernels on the CPU (the emulation behind gemmgen's
// "CUDA on CPU" test tier). Included by gg_runtime.cuh when the compiler is
// not nvcc; a kernel never includes it directly.
//
// Model (docs/cuda-emulation.md has the full story):
// - One fiber (ucontext) per CUDA thread. A worker OS thread (one per core,
//   GG_EMU_WORKERS) takes blocks from a shared counter and runs all fibers of
//   one block at a time, so `thread_local` storage is per-block storage: that
//   is how static `__shared__` works (gg_emu_compile.h).
// - Deterministic run-ahead schedule: the scheduler always resumes the first
//   runnable thread in (warp, lane) order, so each warp runs as far as it can
//   before the next one starts; GG_EMU_SCHEDULE=reverse uses the reverse order.
// - Shared memory (static and dynamic) is poisoned with 0xFF bytes (NaN for
//   every float format) at each block start; cp.async poisons its destination
//   when issued and copies the data at cp.async.wait_group. Together with the
//   run-ahead schedule this turns a missing __syncthreads into NaN results.
// - Warp-collective operations (mma, ldmatrix, shuffles, votes, __syncwarp):
//   every lane posts a pointer to its inputs and blocks; the last lane of the
//   mask to arrive computes every lane's outputs, then all continue.
// - __syncthreads is a block barrier; a barrier that can never complete
//   (threads exited, or all threads blocked) aborts with a report.
// - Device buffers made by gg_emu_malloc sit between PROT_NONE guard regions
//   with 0xFF canaries in the slack, so out-of-bounds accesses fault or are
//   found after the launch.
// - The emulated device (GG_EMU_ARCH, GG_EMU_SMEM_OPTIN) and the driver's
//   checks of every launch: grid and block limits, __launch_bounds__, dynamic
//   shared memory against the kernel's attribute and the arch's opt-in limit.
//   Host code calls the CUDA runtime API of gg_emu_cudart.h.
// - GG_EMU_TSAN (build with -fsanitize=thread): one OS thread per CUDA thread,
//   blocks one after another, barriers on a mutex and condition variable, so
//   ThreadSanitizer sees the kernel's own synchronisation.
// Errors print "gg-emu: error: ..." on stderr and end the process with status
// 70 (kernel error) or 71 (memory fault); run kernels in a child process.
#pragma once

#if defined(__CUDACC__)
#error "gg_emu.h emulates CUDA for host compilers; nvcc builds must not include it"
#endif

#define GG_EMU 1

// Functions of the runtime that the memory checker's instrumentation must
// not see (gg_emu_memcheck.h): GG_EMU_MEMCHECK builds compile the kernel with
// GCC's ThreadSanitizer instrumentation, and these run uninstrumented.
#if defined(GG_EMU_MEMCHECK) && !defined(GG_EMU_TSAN)
#define GG_EMU_UNCHECKED __attribute__((no_sanitize("thread")))
#else
#define GG_EMU_UNCHECKED
#endif
// A helper of GG_EMU_UNCHECKED code: g++ inlines a function into one with
// other sanitizer settings only when it must.
#define GG_EMU_ALWAYS_INLINE inline __attribute__((always_inline))

// Execution-space keywords, defined before CUDA's headers so that
// crt/host_defines.h keeps them (it only defines the ones not yet defined).
#define __global__ __gg_global__
#define __shared__ __gg_shared__
#define __device__
#define __host__
#define __constant__
#define __managed__
#define __grid_constant__

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <vector_functions.h>
#include <vector_types.h>
// nvcc includes cuda_runtime.h in every .cu; here it also must come before
// the builtin-variable macros below (its prototypes name parameters gridDim).
#include <cuda_runtime.h>

// NB: always_inline, as nvcc inlines: the primitives land in the kernel's own
// code, so the memory checker's access sites name the kernel's lines.
#undef __forceinline__
#define __forceinline__ inline __attribute__((always_inline))
// __launch_bounds__ survives preprocessing as a marker: gemmgen.harness.cuda_emu
// records each kernel's bound (GG_EMU_LAUNCH_BOUNDS) and launches check it.
#undef __launch_bounds__
#if defined(GG_EMU_PREPROCESS)
#define __launch_bounds__(...) __gg_launch_bounds__(__VA_ARGS__)
#else
#define __launch_bounds__(...)
#endif

#if !defined(GG_EMU_PREPROCESS)
#include "gg_emu_compile.h"
#endif

#include <algorithm>
#include <atomic>
#include <cassert>
#include <cmath>
#include <condition_variable>
#include <cstdarg>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <tuple>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <ucontext.h>
#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif
#include <unistd.h>

// The C ABI: exported, and kept (`used`) although nothing in the library calls it.
#define GG_EMU_API extern "C" inline __attribute__((visibility("default"), used))

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
// aliases, in one translation unit of a library; a direct g++ build, here.
#if defined(GG_EMU_TSAN)
extern "C" {
#if defined(GG_EMU_PREPROCESS)
extern unsigned char gg_emu_dynamic_smem[gg::emu::kMaxDynamicSmem];
#else
alignas(256) unsigned char gg_emu_dynamic_smem[gg::emu::kMaxDynamicSmem];
#endif
extern unsigned char __start_gg_shared[] __attribute__((weak, visibility("hidden")));
extern unsigned char __stop_gg_shared[] __attribute__((weak, visibility("hidden")));
}
#else
extern "C" {
#if defined(GG_EMU_PREPROCESS)
extern thread_local unsigned char gg_emu_dynamic_smem[gg::emu::kMaxDynamicSmem];
#else
alignas(256) thread_local unsigned char gg_emu_dynamic_smem[gg::emu::kMaxDynamicSmem];
#endif
}
#endif

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
};

inline std::vector<KernelInfo>& kernel_registry() {
  static std::vector<KernelInfo> registry;
  return registry;
}

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

inline KernelInfo* find_kernel(const char* name) {
  for (KernelInfo& k : kernel_registry()) {
    if (k.name == name) return &k;
  }
  return nullptr;
}

// The registered kernel whose entry point is `fn` (cudaLaunchKernel,
// cudaFuncSetAttribute and `<<<>>>` name kernels by address).
inline KernelInfo* find_kernel_at(const void* fn) {
  for (KernelInfo& k : kernel_registry()) {
    if (k.fn == fn) return &k;
  }
  return nullptr;
}

// GG_EMU_LAUNCH_BOUNDS(name, max_threads[, min_blocks[, max_cluster]]):
// records a registered kernel's __launch_bounds__ (cuda_emu appends one per
// kernel that declares them, after its registration).
struct LaunchBoundsRegistration {
  LaunchBoundsRegistration(const char* name, long long max_threads, long long = 0, long long = 0) {
    if (KernelInfo* k = find_kernel(name)) k->max_threads = static_cast<unsigned>(max_threads);
  }
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

// The Hopper model (gg_emu_sm90.h): per-block state and the runner's hooks.
struct HopperBlock;
struct ThreadCtx;
inline void hopper_block_begin(BlockRunner& r);
inline void hopper_block_end(BlockRunner& r);
inline void hopper_thread_exit(ThreadCtx& t);
inline void hopper_free(HopperBlock* h);
inline std::string hopper_report(const BlockRunner& r);
inline bool hopper_on_stall(BlockRunner& r);

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
  BlockRunner* runner = nullptr;
#if defined(GG_EMU_TSAN)
  pthread_t os_thread{};
#else
  ucontext_t ctx{};
  unsigned char* stack = nullptr;
#endif
};

struct Launch {
  const KernelInfo* kernel = nullptr;
  void* const* args = nullptr;
  dim3 grid;
  dim3 block;
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
};

// NB: the only runtime thread_local besides gg_emu_dynamic_smem. Its nonzero
// initialiser keeps it in .tdata: fiber mode poisons the module's whole .tbss
// (static and dynamic shared memory) at every block start.
struct Tls {
  ThreadCtx* thread;
  BlockRunner* runner;
  unsigned magic;
};
inline thread_local Tls tls{nullptr, nullptr, 0x67676575u};

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
// Errors.

inline std::string vformat(const char* fmt, va_list ap) {
  va_list copy;
  va_copy(copy, ap);
  const int n = std::vsnprintf(nullptr, 0, fmt, copy);
  va_end(copy);
  std::string s(n > 0 ? static_cast<std::size_t>(n) : 0, '\0');
  std::vsnprintf(s.data(), s.size() + 1, fmt, ap);
  return s;
}

inline std::string format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
inline std::string format(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::string s = vformat(fmt, ap);
  va_end(ap);
  return s;
}

std::string where();

[[noreturn]] inline void fail_with_status(int status, const std::string& message) {
  const std::string text = "gg-emu: error: " + message + "\n" + where();
  std::fwrite(text.data(), 1, text.size(), stderr);
  std::fflush(stderr);
  std::fflush(stdout);
  _exit(status);
}

[[noreturn]] inline void fail(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
[[noreturn]] inline void fail(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  const std::string message = vformat(fmt, ap);
  va_end(ap);
  fail_with_status(kExitKernelError, message);
}

inline ThreadCtx& current() {
  ThreadCtx* t = tls.thread;
  if (t == nullptr) [[unlikely]] {
    fail("a CUDA builtin (threadIdx, __syncthreads, a gg:: primitive, ...) was used outside a kernel");
  }
  return *t;
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
inline SharedRegion module_tbss() {
  struct Search {
    std::uintptr_t probe;
    SharedRegion region;
    bool found;
  } search{reinterpret_cast<std::uintptr_t>(&module_tbss), {}, false};
  // Reading a thread_local makes sure this thread's TLS block for the module
  // exists before dl_iterate_phdr reports it.
  const auto* runtime_tls = reinterpret_cast<const unsigned char*>(&tls);
  if (*static_cast<const volatile unsigned*>(&tls.magic) == 0) fail("internal: runtime TLS is not initialised");
  dl_iterate_phdr(
      [](dl_phdr_info* info, std::size_t, void* data) -> int {
        auto* s = static_cast<Search*>(data);
        bool ours = false;
        const ElfW(Phdr)* tls_phdr = nullptr;
        for (int i = 0; i < info->dlpi_phnum; ++i) {
          const ElfW(Phdr)& ph = info->dlpi_phdr[i];
          const std::uintptr_t lo = info->dlpi_addr + ph.p_vaddr;
          if (ph.p_type == PT_LOAD && s->probe >= lo && s->probe < lo + ph.p_memsz) ours = true;
          if (ph.p_type == PT_TLS) tls_phdr = &ph;
        }
        if (!ours) return 0;
        s->found = true;
        if (tls_phdr != nullptr && info->dlpi_tls_data != nullptr) {
          auto* block = static_cast<unsigned char*>(info->dlpi_tls_data);
          s->region = {block + tls_phdr->p_filesz, block + tls_phdr->p_memsz};
        }
        return 1;
      },
      &search);
  if (!search.found || search.region.begin == nullptr ||
      (runtime_tls + sizeof(Tls) > search.region.begin && runtime_tls < search.region.end)) {
    fail("internal: cannot locate this module's thread-local shared memory (.tbss)");
  }
  return search.region;
}
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

struct Registry {
  std::mutex mu;
  std::vector<DeviceBuffer> buffers;
  std::vector<StackGuard> stack_guards;
  std::size_t stack_bytes = 0;
};

inline Registry& registry() {
  static Registry r;
  return r;
}

inline std::size_t round_up(std::size_t x, std::size_t m) { return (x + m - 1) / m * m; }

// A buffer of `bytes` whose end is 16-byte aligned against a 64 KiB PROT_NONE
// guard region; another guards the page before it. Everything between the
// guards that is not the buffer holds 0xFF canaries.
inline void* device_malloc(std::size_t bytes, int tag) {
  const std::size_t page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  const std::size_t padded = round_up(bytes, 16);
  const std::size_t body = std::max(round_up(padded, page), page);
  const std::size_t map_bytes = kGuardBytes + body + kGuardBytes;
  void* m = mmap(nullptr, map_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (m == MAP_FAILED) fail("gg_emu_malloc(%zu): mmap failed: %s", bytes, std::strerror(errno));
  auto* map = static_cast<unsigned char*>(m);
  mprotect(map, kGuardBytes, PROT_NONE);
  mprotect(map + kGuardBytes + body, kGuardBytes, PROT_NONE);
  std::memset(map + kGuardBytes, kPoison, body);
  unsigned char* data = map + kGuardBytes + body - padded;
  std::lock_guard<std::mutex> lock(registry().mu);
  registry().buffers.push_back({map, map_bytes, data, bytes, padded, tag});
  return data;
}

inline void device_free(void* p) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  for (std::size_t i = 0; i < r.buffers.size(); ++i) {
    if (r.buffers[i].data == p) {
      munmap(r.buffers[i].map, r.buffers[i].map_bytes);
      r.buffers.erase(r.buffers.begin() + static_cast<std::ptrdiff_t>(i));
      return;
    }
  }
}

inline std::string describe_buffer(const DeviceBuffer& b) {
  return b.tag >= 0 ? format("argument #%d (%zu bytes)", b.tag, b.bytes) : format("buffer %p (%zu bytes)", b.data, b.bytes);
}

// Finds writes into the canary bytes around every live buffer.
inline void check_canaries() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  for (const DeviceBuffer& b : r.buffers) {
    const unsigned char* lead = b.map + kGuardBytes;
    for (const unsigned char* p = lead; p < b.data; ++p) {
      if (*p != kPoison) {
        fail("out-of-bounds write: %zu bytes before the start of %s was written", static_cast<std::size_t>(b.data - p),
             describe_buffer(b).c_str());
      }
    }
    for (std::size_t i = b.bytes; i < b.padded; ++i) {
      if (b.data[i] != kPoison) {
        fail("out-of-bounds write at byte offset %zu of %s", i, describe_buffer(b).c_str());
      }
    }
  }
}

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
inline StackArea stack_areas[kMaxStackAreas];

inline std::size_t page_bytes() {
  static const std::size_t page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  return page;
}

GG_EMU_UNCHECKED inline void fill_stack_poison(unsigned char* p, std::size_t bytes) {
  typedef std::uint32_t Words __attribute__((vector_size(16)));
  const Words poison = {kStackPoison, kStackPoison, kStackPoison, kStackPoison};
  auto* w = reinterpret_cast<Words*>(p);  // page-aligned
  for (std::size_t i = 0; i < bytes / sizeof(Words); ++i) w[i] = poison;
}

// Called by the fault handler: true when `addr` lies in the not yet
// accessible part of a fiber stack, which is then made accessible.
GG_EMU_UNCHECKED inline bool grow_fiber_stack(const unsigned char* addr) {
  for (StackArea& a : stack_areas) {
    if (!a.in_use.load(std::memory_order_acquire)) continue;
    if (addr < a.map || addr >= a.map + a.count * a.each) continue;
    const std::size_t i = static_cast<std::size_t>(addr - a.map) / a.each;
    unsigned char* lowest = a.map + i * a.each + kGuardBytes;
    unsigned char* low = a.low[i];
    if (addr < lowest || addr >= low) return false;  // the guard, or not ours
    const std::size_t page = page_bytes();
    const auto at = reinterpret_cast<std::uintptr_t>(addr) / page * page;
    unsigned char* from = std::max(lowest, reinterpret_cast<unsigned char*>(at) - 3 * page);
    if (mprotect(from, static_cast<std::size_t>(low - from), PROT_READ | PROT_WRITE) != 0) return false;
    fill_stack_poison(from, static_cast<std::size_t>(low - from));
    a.low[i] = from;
    return true;
  }
  return false;
}

// The SIGSEGV and SIGBUS handlers installed before ours. Several emulated
// libraries may share a process (XLA's CPU platform loads one per FFI
// handler, docs/cuda-emulation.md, "Inside XLA"): each installs its handler
// once, and a fault that is none of its own (another library's fiber stack
// growing, or its buffers) goes on to the handler it replaced, when that is
// one taking siginfo as ours do.
inline struct sigaction previous_fault_handler[2];

inline void on_fault(int sig, siginfo_t* info, void* context) {
  const auto* addr = static_cast<const unsigned char*>(info->si_addr);
#if !defined(GG_EMU_TSAN)
  if ((sig == SIGSEGV || sig == SIGBUS) && grow_fiber_stack(addr)) return;
#endif
  std::string what = format("invalid memory access (%s) at address %p", sig == SIGBUS ? "SIGBUS" : "SIGSEGV", info->si_addr);
  bool ours = false;
  Registry& r = registry();
  for (const DeviceBuffer& b : r.buffers) {
    if (addr >= b.map && addr < b.map + b.map_bytes) {
      ours = true;
      if (addr < b.data) {
        what = format("out-of-bounds access %zu bytes before the start of %s", static_cast<std::size_t>(b.data - addr),
                      describe_buffer(b).c_str());
      } else {
        what = format("out-of-bounds access at byte offset %zu of %s", static_cast<std::size_t>(addr - b.data),
                      describe_buffer(b).c_str());
      }
    }
  }
  for (const StackGuard& g : r.stack_guards) {
    if (addr >= g.begin && addr < g.end) {
      ours = true;
      what = format("stack overflow in a CUDA thread (each has %zu KiB; set GG_EMU_STACK_KB)", r.stack_bytes >> 10);
    }
  }
  const struct sigaction& previous = previous_fault_handler[sig == SIGBUS ? 1 : 0];
  if (!ours && (previous.sa_flags & SA_SIGINFO) != 0 && previous.sa_sigaction != nullptr) {
    previous.sa_sigaction(sig, info, context);
    return;
  }
  fail_with_status(kExitFault, what);
}

inline void install_fault_handler() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction sa {};
    sa.sa_sigaction = &on_fault;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, &previous_fault_handler[0]);
    sigaction(SIGBUS, &sa, &previous_fault_handler[1]);
  });
}

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

// The memory checker and counters (GG_EMU_MEMCHECK builds; no-ops otherwise).
#include "gg_emu_memcheck.h"

namespace gg::emu {

// ---------------------------------------------------------------------------
// BlockRunner: runs the blocks of a launch on one worker, one at a time.

class BlockRunner {
 public:
  explicit BlockRunner(Launch& launch)
      : launch_(launch), nthreads_(launch.threads_per_block()), threads_(nthreads_) {
    for (unsigned i = 0; i < nthreads_; ++i) {
      ThreadCtx& t = threads_[i];
      t.linear = i;
      t.lane = i % kWarpSize;
      t.warp = i / kWarpSize;
      t.thread_idx = make_uint3(i % launch.block.x, (i / launch.block.x) % launch.block.y,
                                i / (launch.block.x * launch.block.y));
      t.block_dim = launch.block;
      t.grid_dim = launch.grid;
      t.runner = this;
      t.cp_pending.reserve(16);
    }
#if defined(GG_EMU_TSAN)
    shared_ = {__start_gg_shared, __stop_gg_shared};
#else
    shared_ = module_tbss();
    allocate_stacks();
#endif
  }

  ~BlockRunner() {
#if !defined(GG_EMU_TSAN)
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mu);
    std::erase_if(r.stack_guards, [this](const StackGuard& g) {
      return g.begin >= stacks_ && g.begin < stacks_ + stacks_bytes_;
    });
    if (stack_area_ != nullptr) stack_area_->in_use.store(false, std::memory_order_release);
    munmap(stacks_, stacks_bytes_);
    mc::worker_end();
#endif
    hopper_free(hopper);
  }

  BlockRunner(const BlockRunner&) = delete;
  BlockRunner& operator=(const BlockRunner&) = delete;

  Launch& launch() { return launch_; }

  void run(unsigned long long linear_block) {
    const dim3 g = launch_.grid;
    block_idx_ = make_uint3(static_cast<unsigned>(linear_block % g.x), static_cast<unsigned>(linear_block / g.x % g.y),
                            static_cast<unsigned>(linear_block / (static_cast<unsigned long long>(g.x) * g.y)));
    poison_shared_memory();
#if !defined(GG_EMU_TSAN)
    poison_stacks();
    mc::block_begin(linear_block, shared_.begin, shared_.end);
#endif
    n_live_ = n_runnable_ = nthreads_;
    n_barrier_ = n_exited_ = 0;
    for (ThreadCtx& t : threads_) {
      t.block_idx = block_idx_;
      t.state = State::runnable;
      t.op = nullptr;
      t.cp_pending.clear();
      t.cp_committed = 0;
    }
    hopper_block_begin(*this);
    tls.runner = this;
#if defined(GG_EMU_TSAN)
    run_threads();
#else
    run_fibers();
    hopper_block_end(*this);
    mc::block_end();
#endif
    tls.runner = nullptr;
    tls.thread = nullptr;
    check_dynamic_smem();
  }

  // ---- called by kernel threads ------------------------------------------

  void syncthreads(ThreadCtx& t) {
    sync_release(&block_token_);
    wait_at_barrier(t);
    sync_acquire(&block_token_);
  }

  void collective(ThreadCtx& t, const char* op, unsigned mask, const void* in, void* out, CollectiveFn fn) {
    const void* token = &warp_tokens_[t.warp];
    sync_release(token);
    arrive_at_collective(t, op, mask, in, out, fn, token);
    sync_acquire(token);
  }

  void thread_exit(ThreadCtx& t) {
    // Copies in flight still land on a GPU after the thread has exited.
    land_cp_async(t, ~0u);
    hopper_thread_exit(t);
    [[maybe_unused]] Guard g = guard();  // TSan mode: the block's lock, held to the end
    t.state = State::exited;
    --n_live_;
    --n_runnable_;
    ++n_exited_;
    if (n_barrier_ != 0 && n_barrier_ == n_live_) fail_barrier_after_exit();
    if (n_live_ != 0 && n_runnable_ == 0) stalled();
  }

  GG_EMU_ALWAYS_INLINE unsigned lanes_present(unsigned warp) const {
    const unsigned n = std::min(kWarpSize, nthreads_ - warp * kWarpSize);
    return n == kWarpSize ? 0xffffffffu : (1u << n) - 1u;
  }

  // Blocks the thread until `ready(arg)` holds (checked now and at every
  // wake_waiters); `what` describes the wait in a deadlock report. Fiber mode.
  GG_EMU_UNCHECKED void wait_until(ThreadCtx& t, const char* what, bool (*ready)(const void*), const void* arg) {
    Guard g = guard();
    if (ready(arg)) return;
    t.op = what;
    t.wait_ready = ready;
    t.wait_arg = arg;
    t.state = State::at_wait;
    --n_runnable_;
    if (n_runnable_ == 0) stalled();
    suspend(t, g);
  }

  // Makes every waiting thread whose condition now holds runnable.
  GG_EMU_UNCHECKED void wake_waiters() {
    for (ThreadCtx& u : threads_) {
      if (u.state == State::at_wait && u.wait_ready(u.wait_arg)) {
        u.op = nullptr;
        make_runnable(u);
      }
    }
    notify();
  }

  const SharedRegion& shared_region() const { return shared_; }
  unsigned num_threads() const { return nthreads_; }
  ThreadCtx& thread(unsigned linear) { return threads_[linear]; }
  // The Hopper model's state of the current block (gg_emu_sm90.h).
  HopperBlock* hopper = nullptr;

  // True when [p, p + bytes) lies in this block's shared memory. Only exact in
  // fiber mode; TSan mode cannot see static __shared__ in templates.
  bool is_shared(const void* p, std::size_t bytes) const {
#if defined(GG_EMU_TSAN)
    (void)p;
    (void)bytes;
    return true;
#else
    const auto* c = static_cast<const unsigned char*>(p);
    return c >= shared_.begin && c + bytes <= shared_.end;
#endif
  }

  // Lands every copy of a committed group older than the newest `keep` groups.
  static void land_cp_async(ThreadCtx& t, unsigned keep) {
    const unsigned limit = keep == ~0u ? ~0u : (t.cp_committed >= keep ? t.cp_committed - keep : 0u);
    std::size_t kept = 0;
    for (const CpAsyncCopy& c : t.cp_pending) {
      if (c.group < limit) {
        if (c.src_size != 0) std::memcpy(c.dst, c.src, c.src_size);
        std::memset(static_cast<unsigned char*>(c.dst) + c.src_size, 0, c.cp_size - c.src_size);
      } else {
        t.cp_pending[kept++] = c;
      }
    }
    t.cp_pending.resize(kept);
  }

 private:
  GG_EMU_UNCHECKED void wait_at_barrier(ThreadCtx& t) {
    Guard g = guard();
    t.state = State::at_barrier;
    ++n_barrier_;
    --n_runnable_;
    if (n_barrier_ == n_live_) {
      if (n_exited_ != 0) fail_barrier_after_exit();
      for (ThreadCtx& u : threads_) {
        if (u.state == State::at_barrier) make_runnable(u);
      }
      n_barrier_ = 0;
      notify();
#if !defined(GG_EMU_TSAN)
      // Back to the scheduler, which restarts from the first warp in order.
      suspend(t, g);
#endif
      return;
    }
    if (n_runnable_ == 0) stalled();
    suspend(t, g);
  }

  GG_EMU_UNCHECKED void arrive_at_collective(ThreadCtx& t, const char* op, unsigned mask, const void* in, void* out, CollectiveFn fn,
                            const void* token) {
    Guard g = guard();
    const unsigned base = t.warp * kWarpSize;
    const unsigned present = lanes_present(t.warp);
    if (((mask >> t.lane) & 1u) == 0) {
      fail("%s: lane %u passed mask 0x%08x, which does not include the lane itself", op, t.lane, mask);
    }
    if ((mask & ~present) != 0) {
      fail("%s: mask 0x%08x names lanes that do not exist (warp %u of a %u-thread block has lanes 0x%08x)", op, mask,
           t.warp, nthreads_, present);
    }
    t.op = op;
    t.mask = mask;
    t.in = in;
    t.out = out;
    t.fn = fn;
    t.state = State::at_collective;
    --n_runnable_;
    bool complete = true;
    for (unsigned l = 0; l < kWarpSize; ++l) {
      if (((mask >> l) & 1u) == 0 || l == t.lane) continue;
      const ThreadCtx& u = threads_[base + l];
      if (u.state != State::at_collective) {
        complete = false;
      } else if (std::strcmp(u.op, op) != 0 || u.mask != mask) {
        fail("warp divergence in warp %u: lane %u reached %s (mask 0x%08x) while lane %u waits at %s (mask 0x%08x); "
             "every lane of a mask must reach the same warp-collective operation",
             t.warp, t.lane, op, mask, u.lane, u.op, u.mask);
      }
    }
    if (complete) {
      const void* ins[kWarpSize] = {};
      void* outs[kWarpSize] = {};
      for (unsigned l = 0; l < kWarpSize; ++l) {
        if ((mask >> l) & 1u) {
          ins[l] = threads_[base + l].in;
          outs[l] = threads_[base + l].out;
        }
      }
      // The instruction's own reads (shared memory, the lanes' inputs) and
      // writes (the lanes' outputs) are the kernel's: TSan checks them.
      g.expose([&] {
        sync_acquire(token);
        for (unsigned l = 0; l < kWarpSize; ++l) {
          if ((mask >> l) & 1u) fn(l, ins, outs[l]);
        }
        sync_release(token);
      });
      for (unsigned l = 0; l < kWarpSize; ++l) {
        if ((mask >> l) & 1u) {
          threads_[base + l].op = nullptr;
          make_runnable(threads_[base + l]);
        }
      }
      notify();
      return;  // the last lane to arrive carries on
    }
    if (n_runnable_ == 0) stalled();
    suspend(t, g);
  }

  // Holds the block's state for one barrier or collective step.
#if defined(GG_EMU_TSAN)
  struct Guard {
    TsanQuiet quiet;  // NB: declared first: quiet before locking, until after unlocking
    std::unique_lock<std::mutex> lock;
    template <class F>
    void expose(F&& f) {
      TsanQuiet::end();
      f();
      TsanQuiet::begin();
    }
  };
  Guard guard() { return Guard{{}, std::unique_lock<std::mutex>(mu_)}; }
  void notify() { cv_.notify_all(); }
  void suspend(ThreadCtx& t, Guard& g) {
    cv_.wait(g.lock, [&t] { return t.state == State::runnable; });
  }
#else
  struct Guard {
    template <class F>
    void expose(F&& f) {
      f();
    }
  };
  Guard guard() { return {}; }
  void notify() {}
  void suspend(ThreadCtx& t, Guard&) { swapcontext(&t.ctx, &scheduler_); }
#endif

  GG_EMU_ALWAYS_INLINE unsigned position(unsigned linear) const {
    return launch_.schedule == Schedule::reverse ? nthreads_ - 1 - linear : linear;
  }

  GG_EMU_ALWAYS_INLINE void make_runnable(ThreadCtx& t) {
    t.state = State::runnable;
    ++n_runnable_;
    resume_from_ = std::min(resume_from_, position(t.linear));
  }

  void poison_shared_memory() {
    if (shared_.begin != nullptr) std::memset(shared_.begin, kPoison, static_cast<std::size_t>(shared_.end - shared_.begin));
#if defined(GG_EMU_TSAN)
    std::memset(gg_emu_dynamic_smem, kPoison, sizeof(gg_emu_dynamic_smem));
#endif
  }

  // Writes past the dynamic shared memory the launch asked for land in
  // poisoned bytes that must stay poisoned.
  void check_dynamic_smem() const {
    constexpr std::size_t kChecked = 4096;
    const std::size_t begin = launch_.dynamic_smem;
    const std::size_t end = std::min(kMaxDynamicSmem, begin + kChecked);
    for (std::size_t i = begin; i < end; ++i) {
      if (gg_emu_dynamic_smem[i] != kPoison) {
        fail("out-of-bounds write to dynamic shared memory in block (%u,%u,%u): byte %zu written, but the launch "
             "asked for %zu bytes",
             block_idx_.x, block_idx_.y, block_idx_.z, i, launch_.dynamic_smem);
      }
    }
  }

  std::string describe(const ThreadCtx& t) const {
    switch (t.state) {
      case State::runnable:
        return "runnable";
      case State::at_barrier:
        return "wait at __syncthreads";
      case State::at_collective:
        return format("wait at %s (mask 0x%08x)", t.op, t.mask);
      case State::at_wait:
        return format("wait at %s", t.op);
      case State::exited:
        return "exited";
    }
    return "?";
  }

  // One line per run of consecutive threads in the same state.
  std::string thread_states() const {
    std::string out;
    unsigned first = 0;
    for (unsigned i = 1; i <= nthreads_; ++i) {
      if (i < nthreads_ && describe(threads_[i]) == describe(threads_[first])) continue;
      out += i - 1 == first ? format("  thread %u: ", first) : format("  threads %u-%u: ", first, i - 1);
      out += describe(threads_[first]) + "\n";
      first = i;
    }
    return out;
  }

  // No thread can run: threads waiting at wgmma.wait_group may go on
  // (gg_emu_sm90.h); otherwise a deadlock.
  void stalled() {
    if (!hopper_on_stall(*this)) deadlock();
  }

  [[noreturn]] void deadlock() const {
    fail("deadlock in block (%u,%u,%u): no thread of the block can make progress\n%s%s", block_idx_.x, block_idx_.y,
         block_idx_.z, thread_states().c_str(), hopper_report(*this).c_str());
  }

  [[noreturn]] void fail_barrier_after_exit() const {
    fail("__syncthreads in block (%u,%u,%u) can never complete: %u threads wait at it but %u threads of the block "
         "have exited (every thread of a block must reach every __syncthreads)\n%s",
         block_idx_.x, block_idx_.y, block_idx_.z, n_barrier_, n_exited_, thread_states().c_str());
  }

#if defined(GG_EMU_TSAN)
  static void* thread_main(void* arg) {
    auto* t = static_cast<ThreadCtx*>(arg);
    tls.thread = t;
    tls.runner = t->runner;
    Launch& l = t->runner->launch_;
    set_ftz(l.flush_subnormals);
    l.kernel->invoke(l.kernel->fn, l.args);
    t->runner->thread_exit(*t);
    return nullptr;
  }

  void run_threads() {
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, launch_.stack_bytes);
    for (unsigned p = 0; p < nthreads_; ++p) {
      ThreadCtx& t = threads_[position(p)];
      if (pthread_create(&t.os_thread, &attr, &thread_main, &t) != 0) {
        fail("cannot start OS thread %u of %u (TSan mode runs one per CUDA thread)", p, nthreads_);
      }
    }
    pthread_attr_destroy(&attr);
    for (ThreadCtx& t : threads_) pthread_join(t.os_thread, nullptr);
  }

  std::mutex mu_;
  std::condition_variable cv_;
#else
  void allocate_stacks() {
    const std::size_t page = page_bytes();
    const std::size_t stack = round_up(launch_.stack_bytes, page);
    const std::size_t each = kGuardBytes + stack;
    const std::size_t window = std::min(stack, round_up(kStackWindow, page));
    stacks_bytes_ = each * nthreads_;
    void* m = mmap(nullptr, stacks_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) fail("cannot map %zu bytes of fiber stacks", stacks_bytes_);
    stacks_ = static_cast<unsigned char*>(m);
    stack_low_.assign(nthreads_, nullptr);
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mu);
    r.stack_bytes = launch_.stack_bytes;
    for (unsigned i = 0; i < nthreads_; ++i) {
      unsigned char* base = stacks_ + i * each;
      mprotect(base, kGuardBytes + stack - window, PROT_NONE);  // guard, then not yet used
      r.stack_guards.push_back({base, base + kGuardBytes});
      threads_[i].stack = base + kGuardBytes;
      stack_low_[i] = base + each - window;
    }
    for (StackArea& a : stack_areas) {
      if (a.in_use.load(std::memory_order_relaxed)) continue;
      a.map = stacks_;
      a.each = each;
      a.count = nthreads_;
      a.low = stack_low_.data();
      bool expected = false;
      if (a.in_use.compare_exchange_strong(expected, true, std::memory_order_acq_rel)) {
        stack_area_ = &a;
        return;
      }
    }
    fail("more than %u block runners at once", kMaxStackAreas);
  }

  // Every block starts with poisoned stacks (kStackPoison).
  void poison_stacks() {
    const std::size_t each = stacks_bytes_ / nthreads_;
    for (unsigned i = 0; i < nthreads_; ++i) {
      unsigned char* top = stacks_ + (i + 1) * each;
      fill_stack_poison(stack_low_[i], static_cast<std::size_t>(top - stack_low_[i]));
    }
  }

  static void fiber_main() {
    ThreadCtx* t = tls.thread;
    Launch& l = t->runner->launch_;
    set_ftz(l.flush_subnormals);
    l.kernel->invoke(l.kernel->fn, l.args);
    t->runner->thread_exit(*t);
    // Returning resumes uc_link, the scheduler.
  }

  void run_fibers() {
    for (ThreadCtx& t : threads_) {
      getcontext(&t.ctx);
      t.ctx.uc_stack.ss_sp = t.stack;
      t.ctx.uc_stack.ss_size = launch_.stack_bytes;
      t.ctx.uc_link = &scheduler_;
      makecontext(&t.ctx, &fiber_main, 0);
    }
    resume_from_ = 0;
    for (;;) {
      ThreadCtx* next = pick();
      if (next == nullptr) break;
      tls.thread = next;
      swapcontext(&scheduler_, &next->ctx);
    }
    if (n_live_ != 0) deadlock();
  }

  // The first runnable thread in schedule order. Threads before resume_from_
  // are never runnable: make_runnable lowers it.
  GG_EMU_UNCHECKED ThreadCtx* pick() {
    for (unsigned p = resume_from_; p < nthreads_; ++p) {
      ThreadCtx& t = threads_[position(p)];
      if (t.state == State::runnable) {
        resume_from_ = p;
        return &t;
      }
    }
    resume_from_ = nthreads_;
    return nullptr;
  }

  ucontext_t scheduler_{};
  unsigned char* stacks_ = nullptr;
  std::size_t stacks_bytes_ = 0;
  std::vector<unsigned char*> stack_low_;  // see StackArea
  StackArea* stack_area_ = nullptr;
#endif

  Launch& launch_;
  unsigned nthreads_;
  std::vector<ThreadCtx> threads_;
  SharedRegion shared_;
  uint3 block_idx_{};
  unsigned n_live_ = 0;
  unsigned n_runnable_ = 0;
  unsigned n_barrier_ = 0;
  unsigned n_exited_ = 0;
  unsigned resume_from_ = 0;
  // Addresses for TSan's release/acquire annotations (unused in fiber mode).
  char block_token_ = 0;
  std::vector<char> warp_tokens_ = std::vector<char>(nthreads_ / kWarpSize + 1);
};

inline std::string where() {
  const ThreadCtx* t = tls.thread;
  if (t == nullptr || t->runner == nullptr) return "";
  return format("  in kernel %s, block (%u,%u,%u), thread (%u,%u,%u) = warp %u lane %u\n",
                t->runner->launch().kernel->name.c_str(), t->block_idx.x, t->block_idx.y, t->block_idx.z,
                t->thread_idx.x, t->thread_idx.y, t->thread_idx.z, t->warp, t->lane);
}

// ---------------------------------------------------------------------------
// Operations the CUDA builtins and gg:: primitives are made of.

GG_EMU_ALWAYS_INLINE void syncthreads() {
  mc::on_barrier();
  ThreadCtx& t = current();
  t.runner->syncthreads(t);
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
  ThreadCtx& t = current();
  t.runner->collective(t, op, mask, &in, &out, fn);
  return out;
}

inline void syncwarp(unsigned mask) {
  warp_collective<char, char>("__syncwarp", mask, char{}, [](unsigned, const char* const*) { return char{}; });
}

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

inline unsigned ballot(unsigned mask, bool predicate) {
  return warp_collective<int, unsigned>("vote.sync.ballot", mask, predicate ? 1 : 0,
                                        [](unsigned, const int* const* ins) {
                                          unsigned bits = 0;
                                          for (unsigned l = 0; l < kWarpSize; ++l) {
                                            if (ins[l] != nullptr && *ins[l] != 0) bits |= 1u << l;
                                          }
                                          return bits;
                                        });
}

// cp.async: the destination reads as poison (0xFF) from issue until the
// thread's cp.async.wait_group lands the copy.
GG_EMU_ALWAYS_INLINE void cp_async(void* dst, const void* src, unsigned cp_size, unsigned src_size) {
  ThreadCtx& t = current();
  const auto d = reinterpret_cast<std::uintptr_t>(dst);
  const auto s = reinterpret_cast<std::uintptr_t>(src);
  if (src_size > cp_size) fail("cp.async: src-size %u exceeds cp-size %u", src_size, cp_size);
  if (d % cp_size != 0 || s % cp_size != 0) {
    fail("cp.async of %u bytes needs %u-byte aligned addresses; got dst %p, src %p", cp_size, cp_size, dst, src);
  }
  if (!t.runner->is_shared(dst, cp_size)) fail("cp.async: destination %p is not in shared memory", dst);
  mc::on_cp_async(dst, src, cp_size, src_size);
  std::memset(dst, kPoison, cp_size);
  t.cp_pending.push_back({dst, src, cp_size, src_size, t.cp_committed});
}

inline void cp_async_commit() { ++current().cp_committed; }

inline void cp_async_wait(unsigned keep) { BlockRunner::land_cp_async(current(), keep); }

inline unsigned lane_id() { return current().lane; }

inline void check_shared(const void* p, std::size_t bytes, const char* what) {
  ThreadCtx& t = current();
  if (!t.runner->is_shared(p, bytes)) fail("%s: address %p is not in shared memory", what, p);
}

// ---------------------------------------------------------------------------
// Launch.

inline unsigned env_unsigned(const char* name, unsigned fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  return static_cast<unsigned>(std::strtoul(v, nullptr, 10));
}

inline std::string& last_error() {
  static std::string e;
  return e;
}

// Rejects a launch or a runtime call: `code` is the cudaError_t a GPU
// returns, the message says why.
inline int reject(int code, const std::string& message) {
  last_error() = message;
  return code;
}

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

inline Device read_device() {
  Device d;
  const char* arch = std::getenv("GG_EMU_ARCH");
  const char* optin = std::getenv("GG_EMU_SMEM_OPTIN");
  d.arch = arch != nullptr && *arch != '\0' ? arch : "sm_90a";
  if (optin != nullptr && *optin != '\0') {
    d.smem_optin = std::strtoull(optin, nullptr, 10);
  } else if (arch == nullptr || *arch == '\0') {
    d.smem_optin = 232448;  // sm_90a
  } else {
    fail("GG_EMU_ARCH=%s needs GG_EMU_SMEM_OPTIN, the arch's opt-in shared memory per block", arch);
  }
  unsigned number = 0;
  if (std::sscanf(d.arch.c_str(), "sm_%u", &number) != 1 || number < 10) {
    fail("GG_EMU_ARCH=%s: expected an arch such as sm_80 or sm_90a", d.arch.c_str());
  }
  if (d.smem_optin == 0 || d.smem_optin > kMaxDynamicSmem) {
    fail("GG_EMU_SMEM_OPTIN=%zu: expected 1..%zu", d.smem_optin, kMaxDynamicSmem);
  }
  d.major = static_cast<int>(number / 10);
  d.minor = static_cast<int>(number % 10);
  if (const char* sms = std::getenv("GG_EMU_SM_COUNT"); sms != nullptr && *sms != '\0') {
    const long count = std::strtol(sms, nullptr, 10);
    if (count < 1 || count > 1024) {
      fail("GG_EMU_SM_COUNT=%s: expected 1..1024", sms);
    }
    d.sm_count = static_cast<int>(count);
  }
  return d;
}

inline const Device& device() {
  static const Device d = read_device();
  return d;
}

// cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes).
inline int set_max_dynamic_smem(KernelInfo& k, long long bytes) {
  const Device& d = device();
  if (bytes < 0 || static_cast<unsigned long long>(bytes) > d.smem_optin) {
    return reject(cudaErrorInvalidValue,
                  format("cudaFuncSetAttribute(%s, cudaFuncAttributeMaxDynamicSharedMemorySize, %lld): over the "
                         "opt-in limit of %zu bytes per block of the emulated %s (cudaErrorInvalidValue)",
                         k.name.c_str(), bytes, d.smem_optin, d.arch.c_str()));
  }
  k.max_dynamic_smem = static_cast<int>(bytes);
  return 0;
}

// What the driver checks before it launches `k`: 0, or the cudaError_t a
// GPU returns (with last_error() saying why).
inline int check_launch(const KernelInfo& k, const unsigned grid[3], const unsigned block[3],
                        std::size_t dynamic_smem) {
  const char* name = k.name.c_str();
  const unsigned long long threads = static_cast<unsigned long long>(block[0]) * block[1] * block[2];
  if (threads == 0 || threads > kMaxBlockThreads || block[0] > kMaxBlockXY || block[1] > kMaxBlockXY ||
      block[2] > kMaxBlockZ) {
    return reject(cudaErrorInvalidConfiguration,
                  format("kernel %s: invalid block (%u,%u,%u): CUDA allows 1..%u threads per block, x and y "
                         "<= %u, z <= %u (cudaErrorInvalidConfiguration)",
                         name, block[0], block[1], block[2], kMaxBlockThreads, kMaxBlockXY, kMaxBlockZ));
  }
  if (grid[0] == 0 || grid[1] == 0 || grid[2] == 0 || grid[0] > kMaxGridX || grid[1] > kMaxGridYZ ||
      grid[2] > kMaxGridYZ) {
    return reject(cudaErrorInvalidConfiguration,
                  format("kernel %s: invalid grid (%u,%u,%u): CUDA allows x in 1..%llu, y and z in 1..%u "
                         "(cudaErrorInvalidConfiguration)",
                         name, grid[0], grid[1], grid[2], kMaxGridX, kMaxGridYZ));
  }
  if (k.max_threads != 0 && threads > k.max_threads) {
    return reject(cudaErrorLaunchOutOfResources,
                  format("kernel %s: a block of %llu threads is over the kernel's __launch_bounds__(%u) "
                         "(cudaErrorLaunchOutOfResources)",
                         name, threads, k.max_threads));
  }
  if (dynamic_smem > static_cast<std::size_t>(k.max_dynamic_smem)) {
    const bool unset = k.max_dynamic_smem == kDefaultDynamicSmem;
    return reject(cudaErrorInvalidValue,
                  format("kernel %s: %zu bytes of dynamic shared memory requested, over the kernel's limit of %d "
                         "(cudaFuncAttributeMaxDynamicSharedMemorySize%s) (cudaErrorInvalidValue)",
                         name, dynamic_smem, k.max_dynamic_smem,
                         unset ? ": 48 KiB unless cudaFuncSetAttribute raises it, up to the arch's opt-in limit" : ""));
  }
  return 0;
}

// Runs kernel `k` (after check_launch): 0, or the check's error code.
inline int run_kernel(const KernelInfo* k, const unsigned grid[3], const unsigned block[3],
                         std::size_t dynamic_smem, void* const* args) {
  if (const int code = check_launch(*k, grid, block, dynamic_smem)) return code;
  const char* schedule = std::getenv("GG_EMU_SCHEDULE");
  Launch l;
  l.kernel = k;
  l.args = args;
  l.grid = dim3(grid[0], grid[1], grid[2]);
  l.block = dim3(block[0], block[1], block[2]);
  l.dynamic_smem = dynamic_smem;
  if (schedule != nullptr && std::strcmp(schedule, "reverse") == 0) {
    l.schedule = Schedule::reverse;
  } else if (schedule != nullptr && *schedule != '\0' && std::strcmp(schedule, "run-ahead") != 0) {
    return reject(cudaErrorInvalidValue, format("GG_EMU_SCHEDULE=%s: expected run-ahead or reverse", schedule));
  }
  l.stack_bytes = std::max(64u, env_unsigned("GG_EMU_STACK_KB", 256)) * std::size_t{1024};
  l.flush_subnormals = env_unsigned("GG_EMU_FTZ", 0) != 0;
  if (l.flush_subnormals && !ftz_supported()) {
    return reject(cudaErrorInvalidValue, "GG_EMU_FTZ=1: flushing subnormals is modelled on x86 only");
  }
  install_fault_handler();
#if defined(GG_EMU_TSAN)
  l.workers = 1;
  BlockRunner runner(l);
  for (unsigned long long b = 0; b < l.num_blocks(); ++b) runner.run(b);
#else
  mc::on_launch_begin(l);
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  l.workers = static_cast<unsigned>(
      std::min<unsigned long long>(std::max(1u, env_unsigned("GG_EMU_WORKERS", cores)), l.num_blocks()));
  std::vector<std::thread> workers;
  for (unsigned w = 0; w < l.workers; ++w) {
    workers.emplace_back([&l] {
      SignalStack signal_stack;
      BlockRunner runner(l);
      for (;;) {
        const unsigned long long b = l.next_block.fetch_add(1);
        if (b >= l.num_blocks()) break;
        runner.run(b);
      }
    });
  }
  for (std::thread& w : workers) w.join();
  mc::on_launch_end(l);
#endif
  return 0;
}

// Runs the kernel named `kernel` (gg_emu_launch): 0, or a nonzero
// cudaError_t code when the launch is rejected.
inline int launch(const char* kernel, const unsigned grid[3], const unsigned block[3], std::size_t dynamic_smem,
                  void* const* args, std::size_t nargs) {
  const KernelInfo* k = find_kernel(kernel);
  if (k == nullptr) {
    std::string names;
    for (const KernelInfo& i : kernel_registry()) names += (names.empty() ? "" : ", ") + i.name;
    return reject(cudaErrorInvalidDeviceFunction,
                  format("no kernel named '%s' in this module (it has: %s)", kernel, names.c_str()));
  }
  if (nargs != k->params.size()) {
    return reject(cudaErrorInvalidValue,
                  format("kernel %s takes %zu arguments, %zu given", kernel, k->params.size(), nargs));
  }
  return run_kernel(k, grid, block, dynamic_smem, args);
}

// ---------------------------------------------------------------------------
// Request files: how gemmgen.harness.cuda_emu hands a launch to a child
// process. Little-endian:
//   "GGEMUREQ" u32 version(=3)
//   u32 name_len, name bytes; u32 grid[3]; u32 block[3]; u64 dynamic_smem
//   i64 max_dynamic_smem: the kernel's cudaFuncAttributeMaxDynamicSharedMemorySize,
//     set with cudaFuncSetAttribute before the launch (-1: left unset, 48 KiB)
//   u32 nargs (entries), then per entry:
//     u32 kind (0 buffer, 1 value, 2 null pointer, 3 tensor map), u32 flags
//     (1 return it, 2 poison it instead of reading data, 4 a buffer that is
//     not a kernel parameter: only tensor maps reach it), u64 nbytes, data
//     (absent for a poisoned buffer and for null)
//   The kernel's parameters are the entries without flag 4, in order. The
//   data of a tensor map (kind 3) is what cuTensorMapEncodeTiled takes, with
//   a buffer entry in place of the address:
//     u32 buffer (an entry index), u32 dtype, u32 rank, u32 interleave,
//     u32 swizzle, u32 l2_promotion, u32 oob_fill, u64 offset (bytes into the
//     buffer), u64 global_dim[rank], u64 global_strides[rank - 1] (bytes),
//     u32 box_dim[rank], u32 element_strides[rank]
//   The child encodes it with the emulated cuTensorMapEncodeTiled against
//   the buffer's device address plus the offset, and passes the 128-byte
//   CUtensorMap by value.
// The response: "GGEMURSP" u32 count, then per returned buffer:
//   u32 entry index, u64 nbytes, data.

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

inline std::vector<unsigned char> read_file(const char* path) {
  std::vector<unsigned char> data;
  FILE* f = std::fopen(path, "rb");
  if (f == nullptr) fail("cannot open %s: %s", path, std::strerror(errno));
  unsigned char buf[1 << 16];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) data.insert(data.end(), buf, buf + n);
  std::fclose(f);
  return data;
}

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
// gg_emu_sm90.h; false with `why` set when either fails.
inline bool encode_map_argument(void* map, const MapArgument& a, unsigned char* buffer,
                                std::size_t buffer_bytes, std::string& why);
}  // namespace sm90

// Decodes the data of a tensor-map entry; false when its size does not match its rank.
inline bool read_map_argument(const unsigned char* data, std::size_t bytes, sm90::MapArgument& a) {
  Reader r{data, data + bytes};
  if (bytes < 36) return false;
  a.buffer = r.get<std::uint32_t>();
  a.dtype = r.get<std::uint32_t>();
  a.rank = r.get<std::uint32_t>();
  a.interleave = r.get<std::uint32_t>();
  a.swizzle = r.get<std::uint32_t>();
  a.l2_promotion = r.get<std::uint32_t>();
  a.oob_fill = r.get<std::uint32_t>();
  a.offset = r.get<std::uint64_t>();
  const std::uint64_t rank = a.rank, strides = rank > 0 ? rank - 1 : 0;
  if (rank > 64 || bytes != 36 + 8 * rank + 8 * strides + 4 * rank + 4 * rank) return false;
  a.dims.resize(rank);
  a.strides.resize(strides);
  a.box.resize(rank);
  a.element_strides.resize(rank);
  for (std::uint64_t& d : a.dims) d = r.get<std::uint64_t>();
  for (std::uint64_t& d : a.strides) d = r.get<std::uint64_t>();
  for (std::uint32_t& d : a.box) d = r.get<std::uint32_t>();
  for (std::uint32_t& d : a.element_strides) d = r.get<std::uint32_t>();
  return true;
}

inline int run_request(const char* request_path, const char* response_path) {
  enum Kind : unsigned { kBuffer = 0, kValue = 1, kNull = 2, kTensorMap = 3 };
  enum Flag : unsigned { kReturn = 1, kPoison = 2, kNotParameter = 4 };
  const std::vector<unsigned char> request = read_file(request_path);
  Reader r{request.data(), request.data() + request.size()};
  if (std::memcmp(r.take(8), "GGEMUREQ", 8) != 0) fail("not a gg-emu request file");
  if (const std::uint32_t version = r.get<std::uint32_t>(); version != 3) {
    fail("a gg-emu request file of version %u; this emulator reads version 3", version);
  }
  const std::uint32_t name_len = r.get<std::uint32_t>();
  const std::string name(reinterpret_cast<const char*>(r.take(name_len)), name_len);
  unsigned grid[3], block[3];
  for (unsigned& g : grid) g = r.get<std::uint32_t>();
  for (unsigned& b : block) b = r.get<std::uint32_t>();
  const std::size_t smem = r.get<std::uint64_t>();
  const std::int64_t max_dynamic_smem = r.get<std::int64_t>();
  const std::uint32_t nargs = r.get<std::uint32_t>();

  KernelInfo* k = find_kernel(name.c_str());
  struct Arg {
    unsigned kind, flags;
    std::size_t bytes;
    void* device;
    const unsigned char* value;
    std::uint32_t param;  // its parameter index (entries without kNotParameter)
  };
  // The 128-byte CUtensorMap of each tensor-map entry, aligned as cuda.h
  // aligns CUtensorMap (the encoder requires 64).
  struct alignas(128) MapStorage {
    unsigned char bytes[128];
  };
  std::vector<Arg> parsed(nargs);
  std::vector<MapStorage> maps(nargs);
  std::vector<void*> args;
  const auto rejected = [&](const std::string& why) {
    std::fprintf(stderr, "gg-emu: error: kernel %s: %s\n", name.c_str(), why.c_str());
    return 2;
  };
  for (std::uint32_t i = 0; i < nargs; ++i) {
    Arg& a = parsed[i];
    a.kind = r.get<std::uint32_t>();
    a.flags = r.get<std::uint32_t>();
    a.bytes = r.get<std::uint64_t>();
    a.device = nullptr;
    a.value = nullptr;
    a.param = static_cast<std::uint32_t>(args.size());
    if (a.kind > kTensorMap) fail("malformed request file: argument kind %u", a.kind);
    if ((a.flags & kNotParameter) != 0 && a.kind != kBuffer) {
      fail("malformed request file: entry #%u is not a buffer but is not a kernel parameter", i);
    }
    if (a.kind == kValue || a.kind == kTensorMap || (a.kind == kBuffer && (a.flags & kPoison) == 0)) {
      a.value = r.take(a.bytes);
    }
    const bool parameter = (a.flags & kNotParameter) == 0;
    if (k != nullptr && parameter && a.param < k->params.size()) {
      const ParamInfo& p = k->params[a.param];
      const bool by_value = a.kind == kValue || a.kind == kTensorMap;
      const bool is_map = p.type.find("CUtensorMap") != std::string::npos;
      if (by_value == p.is_pointer || (a.kind == kValue && a.bytes != p.size) ||
          (a.kind == kTensorMap && !(is_map && p.size == sizeof(MapStorage)))) {
        const std::string given =
            a.kind == kValue       ? format("a value of %zu bytes", a.bytes)
            : a.kind == kTensorMap ? std::string("a tensor map")
                                   : std::string(a.kind == kNull ? "None" : "an array");
        return rejected(format("argument #%u is `%s` (%zu bytes) but %s was passed", a.param, p.type.c_str(),
                               p.size, given.c_str()));
      }
    }
    if (a.kind == kBuffer) {
      a.device = device_malloc(a.bytes, parameter ? static_cast<int>(a.param) : -1);
      if (a.value != nullptr) std::memcpy(a.device, a.value, a.bytes);
      if (parameter) args.push_back(&a.device);
    } else if (a.kind == kNull) {
      args.push_back(&a.device);
    } else if (a.kind == kTensorMap) {
      args.push_back(maps[i].bytes);
    } else {
      args.push_back(const_cast<unsigned char*>(a.value));
    }
  }
  // Tensor maps last: their buffers may come after them.
  for (std::uint32_t i = 0; i < nargs; ++i) {
    const Arg& a = parsed[i];
    if (a.kind != kTensorMap) continue;
    sm90::MapArgument m;
    if (!read_map_argument(a.value, a.bytes, m)) fail("malformed request file: tensor map entry #%u", i);
    if (m.buffer >= nargs || parsed[m.buffer].kind != kBuffer) {
      return rejected(format("argument #%u is a tensor map over entry #%u, which is not an array", a.param,
                             m.buffer));
    }
    std::string why;
    const Arg& b = parsed[m.buffer];
    if (!sm90::encode_map_argument(maps[i].bytes, m, static_cast<unsigned char*>(b.device), b.bytes, why)) {
      const std::string buffer = (b.flags & kNotParameter) != 0 ? format("buffer #%u", m.buffer)
                                                               : format("argument #%u", b.param);
      return rejected(format("argument #%u (a tensor map over %s, %zu bytes): %s", a.param, buffer.c_str(), b.bytes,
                             why.c_str()));
    }
  }
  if (k != nullptr && max_dynamic_smem >= 0 && set_max_dynamic_smem(*k, max_dynamic_smem) != 0) {
    std::fprintf(stderr, "gg-emu: error: %s\n", last_error().c_str());
    return 2;
  }
  if (launch(name.c_str(), grid, block, smem, args.data(), args.size()) != 0) {
    std::fprintf(stderr, "gg-emu: error: %s\n", last_error().c_str());
    return 2;
  }
  check_canaries();

  FILE* f = std::fopen(response_path, "wb");
  if (f == nullptr) fail("cannot write %s: %s", response_path, std::strerror(errno));
  std::uint32_t count = 0;
  for (const Arg& a : parsed) count += a.kind == kBuffer && (a.flags & 1u);
  std::fwrite("GGEMURSP", 1, 8, f);
  std::fwrite(&count, sizeof(count), 1, f);
  for (std::uint32_t i = 0; i < nargs; ++i) {
    const Arg& a = parsed[i];
    if (a.kind != kBuffer || (a.flags & 1u) == 0) continue;
    const std::uint64_t bytes = a.bytes;
    std::fwrite(&i, sizeof(i), 1, f);
    std::fwrite(&bytes, sizeof(bytes), 1, f);
    std::fwrite(a.device, 1, a.bytes, f);
  }
  std::fclose(f);
  for (const Arg& a : parsed) {
    if (a.device != nullptr) device_free(a.device);
  }
  return 0;
}

}  // namespace gg::emu

// ---------------------------------------------------------------------------
// The C ABI of an emulated kernel library (see docs/cuda-emulation.md).

// Runs kernel `kernel` like cuLaunchKernel: args[i] points to the value of
// parameter i (for a pointer parameter, to the pointer). Returns 0, or the
// nonzero cudaError_t a GPU gives when the launch is rejected
// (gg_emu_last_error says why). Errors while the kernel runs end the process
// (status 70 or 71).
GG_EMU_API int gg_emu_launch(const char* kernel, const unsigned grid[3], const unsigned block[3],
                             std::size_t dynamic_smem, void* const* args, std::size_t nargs) {
  return gg::emu::launch(kernel, grid, block, dynamic_smem, args, nargs);
}
GG_EMU_API const char* gg_emu_last_error() { return gg::emu::last_error().c_str(); }
// Device memory between guard regions (content: 0xFF bytes).
GG_EMU_API void* gg_emu_malloc(std::size_t bytes) { return gg::emu::device_malloc(bytes, -1); }
GG_EMU_API void gg_emu_free(void* p) { gg::emu::device_free(p); }
// Ends the process with a report if a kernel wrote next to a live buffer.
GG_EMU_API void gg_emu_check_buffers() { gg::emu::check_canaries(); }
// Runs the launch a request file describes and writes the response file.
GG_EMU_API int gg_emu_run_request(const char* request_path, const char* response_path) {
  return gg::emu::run_request(request_path, response_path);
}

// The Hopper machinery: mbarrier, TMA, tensor maps, wgmma (gg_emu_sm90.h).
#include "gg_emu_sm90.h"

// The CUDA runtime API for host code, and host programs (gg_emu_run_host).
#include "gg_emu_cudart.h"

// ---------------------------------------------------------------------------
// CUDA builtins.

#define threadIdx (::gg::emu::current().thread_idx)
#define blockIdx (::gg::emu::current().block_idx)
#define blockDim (::gg::emu::current().block_dim)
#define gridDim (::gg::emu::current().grid_dim)
inline constexpr int warpSize = 32;

GG_EMU_ALWAYS_INLINE void __syncthreads() { gg::emu::syncthreads(); }
inline void __syncwarp(unsigned mask = 0xffffffffu) { gg::emu::syncwarp(mask); }
inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
inline void __threadfence_block() { std::atomic_thread_fence(std::memory_order_seq_cst); }
inline void __threadfence_system() { std::atomic_thread_fence(std::memory_order_seq_cst); }
inline unsigned __activemask() {
  const gg::emu::ThreadCtx& t = gg::emu::current();
  return t.runner->lanes_present(t.warp);
}

template <class T>
T __shfl_sync(unsigned mask, T v, int src_lane, int width = 32) {
  return gg::emu::shfl(gg::emu::ShflMode::idx, mask, v, src_lane, width);
}
template <class T>
T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  return gg::emu::shfl(gg::emu::ShflMode::up, mask, v, static_cast<int>(delta), width);
}
template <class T>
T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  return gg::emu::shfl(gg::emu::ShflMode::down, mask, v, static_cast<int>(delta), width);
}
template <class T>
T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
  return gg::emu::shfl(gg::emu::ShflMode::bfly, mask, v, lane_mask, width);
}
inline unsigned __ballot_sync(unsigned mask, int predicate) { return gg::emu::ballot(mask, predicate != 0); }
inline int __any_sync(unsigned mask, int predicate) { return gg::emu::ballot(mask, predicate != 0) != 0; }
inline int __all_sync(unsigned mask, int predicate) { return gg::emu::ballot(mask, predicate != 0) == mask; }

template <class T>
T __ldg(const T* p) {
  return *p;
}

// Atomics: real atomics, since blocks run on several worker threads.
template <class T>
T gg_emu_atomic_update(T* address, T (*op)(T, T), T value) {
  static_assert(sizeof(T) == 4 || sizeof(T) == 8);
  using Bits = std::conditional_t<sizeof(T) == 4, std::uint32_t, std::uint64_t>;
  auto* word = reinterpret_cast<Bits*>(address);
  Bits expected = __atomic_load_n(word, __ATOMIC_RELAXED);
  for (;;) {
    T old;
    std::memcpy(&old, &expected, sizeof(T));
    const T updated = op(old, value);
    Bits desired;
    std::memcpy(&desired, &updated, sizeof(T));
    if (__atomic_compare_exchange_n(word, &expected, desired, false, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED)) return old;
  }
}
template <class T>
T atomicAdd(T* address, T value) {
  return gg_emu_atomic_update<T>(address, [](T a, T b) { return static_cast<T>(a + b); }, value);
}
template <class T>
T atomicSub(T* address, T value) {
  return gg_emu_atomic_update<T>(address, [](T a, T b) { return static_cast<T>(a - b); }, value);
}
template <class T>
T atomicMax(T* address, T value) {
  return gg_emu_atomic_update<T>(address, [](T a, T b) { return a < b ? b : a; }, value);
}
template <class T>
T atomicMin(T* address, T value) {
  return gg_emu_atomic_update<T>(address, [](T a, T b) { return b < a ? b : a; }, value);
}
template <class T>
T atomicExch(T* address, T value) {
  return gg_emu_atomic_update<T>(address, [](T, T b) { return b; }, value);
}
template <class T>
T atomicAnd(T* address, T value) {
  return __atomic_fetch_and(address, value, __ATOMIC_SEQ_CST);
}
template <class T>
T atomicOr(T* address, T value) {
  return __atomic_fetch_or(address, value, __ATOMIC_SEQ_CST);
}
template <class T>
T atomicXor(T* address, T value) {
  return __atomic_fetch_xor(address, value, __ATOMIC_SEQ_CST);
}
template <class T>
T atomicCAS(T* address, T compare, T value) {
  __atomic_compare_exchange_n(address, &compare, value, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
  return compare;
}

// Arithmetic intrinsics and CUDA's global min/max.
template <class A, class B>
constexpr std::common_type_t<A, B> min(A a, B b) {
  using C = std::common_type_t<A, B>;
  return static_cast<C>(b) < static_cast<C>(a) ? static_cast<C>(b) : static_cast<C>(a);
}
template <class A, class B>
constexpr std::common_type_t<A, B> max(A a, B b) {
  using C = std::common_type_t<A, B>;
  return static_cast<C>(a) < static_cast<C>(b) ? static_cast<C>(b) : static_cast<C>(a);
}
inline float __expf(float x) { return std::exp(x); }
inline float __logf(float x) { return std::log(x); }
inline float __sinf(float x) { return std::sin(x); }
inline float __cosf(float x) { return std::cos(x); }
inline float __powf(float x, float y) { return std::pow(x, y); }
inline float __fdividef(float x, float y) { return x / y; }
inline float __frcp_rn(float x) { return 1.0f / x; }
inline float __fdiv_rn(float x, float y) { return x / y; }
inline float __fmul_rn(float x, float y) { return x * y; }
inline float __fsqrt_rn(float x) { return std::sqrt(x); }
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline float __saturatef(float x) { return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x); }
inline float __fmaf_rn(float a, float b, float c) { return std::fma(a, b, c); }
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz(static_cast<unsigned>(x)); }
inline int __clzll(long long x) { return x == 0 ? 64 : __builtin_clzll(static_cast<unsigned long long>(x)); }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __ffsll(long long x) { return __builtin_ffsll(x); }
inline unsigned __brev(unsigned x) {
  unsigned r = 0;
  for (int i = 0; i < 32; ++i) r |= ((x >> i) & 1u) << (31 - i);
  return r;
}
inline unsigned __umulhi(unsigned a, unsigned b) {
  return static_cast<unsigned>((static_cast<unsigned long long>(a) * b) >> 32);
}
inline long long clock64() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<long long>(ts.tv_sec) * 1000000000LL + ts.tv_nsec;
}
inline void __nanosleep(unsigned) {}
