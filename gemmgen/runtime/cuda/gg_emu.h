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
// - Thread-block clusters (a launch with a cluster dimension): each CTA of a
//   cluster on its own worker OS thread (its own shared memory), one CTA
//   running at a time, handing a baton on when none of its threads can run;
//   a deadlock of the whole cluster is reported (gg_emu_cluster.cc).
// - GG_EMU_TSAN (build with -fsanitize=thread): one OS thread per CUDA thread,
//   blocks one after another, barriers on a mutex and condition variable, so
//   ThreadSanitizer sees the kernel's own synchronisation.
// Errors print "gg-emu: error: ..." on stderr and end the process with status
// 70 (kernel error) or 71 (memory fault); run kernels in a child process.
//
// Files, by tier (docs/cuda-emulation.md, "Files"): what a kernel's
// translation unit sees is this header and the ones it includes, which hold
// only what is templated on the kernel's code or must inline into it:
//   gg_emu_core.h      execution core: registry, threads, errors, warp-collectives
//   gg_emu_memcheck.h  the memory checker's hooks in the primitives
//   gg_emu_sm80.h      sm_80 warp-level primitives (cp.async; the mma.sync and
//                      ldmatrix bodies are templates in gg_primitives.cuh)
//   gg_emu_sm90.h      sm_90 machinery (mbarrier, TMA, tensor maps, wgmma)
//   gg_emu_sm100.h     sm_100 machinery (TMEM, tcgen05.mma)
//   gg_emu_cudart.h    the CUDA runtime API for host code, <<<>>>
// Everything else is compiled once per build mode into the core objects
// (gg_emu_*.cc, with the internal gg_emu_internal.h and gg_emu_runner.h) and
// linked into every kernel library, each with its own copy of the state.
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
// the builtin-variable macros below (its prototypes name parameters blockIdx).
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
#include <cstdarg>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <pthread.h>
#include <time.h>
#include <ucontext.h>

#include "gg_emu_core.h"
// The memory checker and counters (GG_EMU_MEMCHECK builds; no-ops otherwise).
#include "gg_emu_memcheck.h"
// sm_80: cp.async (mma.sync and ldmatrix: gg_primitives.cuh's CPU bodies).
#include "gg_emu_sm80.h"
// The Hopper machinery: mbarrier, TMA, tensor maps, wgmma.
#include "gg_emu_sm90.h"
// Datacenter Blackwell: tensor memory and tcgen05.mma.
#include "gg_emu_sm100.h"
// The CUDA runtime API for host code, and host programs (gg_emu_run_host).
#include "gg_emu_cudart.h"

// ---------------------------------------------------------------------------
// CUDA builtins.

#define threadIdx (::gg::emu::current().thread_idx)
#define blockIdx (::gg::emu::current().block_idx)
// gridDim and blockDim are the same for every thread of a launch: variables
// of the worker thread (set when it starts a block; gg_emu_core.cc), not
// macros, so that host code can still name the members of CUDA's structs
// (cudaLaunchConfig_t::gridDim, ::blockDim).
extern thread_local constinit dim3 gridDim;
extern thread_local constinit dim3 blockDim;
inline constexpr int warpSize = 32;

GG_EMU_ALWAYS_INLINE void __syncthreads() { gg::emu::syncthreads(); }
inline void __syncwarp(unsigned mask = 0xffffffffu) { gg::emu::syncwarp(mask); }
inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
inline void __threadfence_block() { std::atomic_thread_fence(std::memory_order_seq_cst); }
inline void __threadfence_system() { std::atomic_thread_fence(std::memory_order_seq_cst); }
inline unsigned __activemask() { return gg::emu::active_lanes(gg::emu::current()); }
// A trap ends the kernel (on a GPU the launch fails with an unspecified
// launch failure): gemmgen emits one in an entry point the launchers must
// never take on the device (e.g. fp4 x fp4's mma.sync entry).
[[noreturn]] inline void __trap() { gg::emu::fail("__trap() reached in %s", gg::emu::where().c_str()); }

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
