// gg_primitives_sm90.cuh: the Hopper (sm_90a) primitives: mbarrier, TMA
// (cp.async.bulk.tensor) through tensor maps, the async-proxy fence, wgmma
// and setmaxnreg. Included at the end of gg_primitives.cuh; as there, each
// primitive has its PTX under __CUDA_ARCH__ and a CPU body under GG_EMU, whose
// model is gg_emu_sm90.h. docs/cuda-hopper.md describes the protocol a
// warp-specialized GEMM follows with them.
//
// Archs: mbarrier, TMA and the fences need sm_90; wgmma and setmaxnreg need
// sm_90a (__CUDA_ARCH_FEAT_SM90_ALL). Every primitive is a template, so the
// static_assert of an older arch fires only in kernels that call it.
//
// - mbarrier (a u64 in shared memory, 8-byte aligned): init with the number
//   of arrivals per phase, then fence_mbarrier_init() by the initialising
//   thread and a __syncthreads before any use. A phase completes when all
//   arrivals came and the transaction count is back at 0. Waits name the
//   parity of the phase they wait for: mbarrier_wait(bar, p) returns once the
//   phase with parity p has completed (waiting with parity 1 on a fresh
//   barrier returns at once: the "previous" phase counts as complete).
// - TMA: tma_load_2d/3d(dst, &map, bar, c0, c1[, c2]) copies the map's box at
//   element coordinates (c0 innermost) into shared memory (128-byte aligned;
//   1024 for the 128-byte swizzle, so that the pattern starts at its origin),
//   zero-filling out-of-bounds elements, and completes box-bytes of
//   transaction count on `bar` (announce them with mbarrier_arrive_expect_tx).
//   tma_store_2d/3d writes a box back (out-of-bounds elements are skipped);
//   bulk_commit_group + bulk_wait_group_read<N> (smem may be reused) or
//   bulk_wait_group<N> (global writes done).
// - fence_proxy_async(): between generic-proxy writes to shared memory
//   (st.shared) and async-proxy reads of it (a TMA store, a wgmma operand).
// - Tensor maps: `const __grid_constant__ CUtensorMap` kernel parameters,
//   encoded on the host with cuTensorMapEncodeTiled (reached through
//   cudaGetDriverEntryPoint; the emulator provides it there too).
// - wgmma: make_smem_desc(ptr, lbo, sbo, swizzle) builds a matrix descriptor;
//   wgmma_fence() before a batch, then wgmma_m64nNk16_{bf16,f16}_{ss,rs}<N>
//   or wgmma_m64nNk32_{e4m3,e5m2}_ss<N>, wgmma_commit_group(), and
//   wgmma_wait_group<K>() before the accumulators are read. d[N/2] is the
//   thread's accumulator fragment: value i of warpgroup thread t holds
//   D[16*(t/32) + (t%32)/4 + 8*((i/2)%2)][8*(i/4) + 2*(t%4) + i%2].
//   Warpgroup-collective: all 128 threads of the warpgroup call it.
// - setmaxnreg_inc<R>() / setmaxnreg_dec<R>(): warpgroup-collective.
#pragma once

#if !defined(__CUDACC_RTC__)
#include <cuda.h>
#else
// NVRTC (the CuPy launchers) cannot include <cuda.h>, which includes
// <stdlib.h>: the opaque 128-byte map as cuda.h declares it, for
// `const __grid_constant__ CUtensorMap` parameters.
typedef struct CUtensorMap_st {
  alignas(128) unsigned long long opaque[16];
} CUtensorMap;
#endif

namespace gg {

using u64 = unsigned long long;

// The swizzle of a wgmma matrix descriptor (its layout type, bits 62-63).
enum class SmemSwizzle : unsigned { none = 0, b128 = 1, b64 = 2, b32 = 3 };

namespace sm90_detail {
__device__ __forceinline__ u32 smem_addr(const void* p) {
#if defined(__CUDA_ARCH__)
  return static_cast<u32>(__cvta_generic_to_shared(p));
#elif defined(GG_EMU)
  return gg::emu::sm90::addr_of(p);
#else
  (void)p;
  return 0;
#endif
}
}  // namespace sm90_detail

// ---------------------------------------------------------------------------
// Matrix descriptors (PTX ISA "Matrix Descriptor Format"): start address,
// leading and stride byte offsets (all >> 4, 14 bits), swizzle mode.
__host__ __device__ constexpr u64 smem_desc(u32 smem_address, u32 lbo_bytes, u32 sbo_bytes,
                                            SmemSwizzle swizzle) {
  return static_cast<u64>((smem_address & 0x3FFFFu) >> 4) |
         (static_cast<u64>((lbo_bytes & 0x3FFFFu) >> 4) << 16) |
         (static_cast<u64>((sbo_bytes & 0x3FFFFu) >> 4) << 32) | (static_cast<u64>(swizzle) << 62);
}

// The descriptor of the operand tile at `smem` (shared memory).
__device__ __forceinline__ u64 make_smem_desc(const void* smem, u32 lbo_bytes, u32 sbo_bytes,
                                              SmemSwizzle swizzle) {
  return smem_desc(sm90_detail::smem_addr(smem), lbo_bytes, sbo_bytes, swizzle);
}

// ---------------------------------------------------------------------------
// mbarrier.

template <int kNever = 0>
__device__ __forceinline__ void mbarrier_init(u64* bar, u32 count) {
#if defined(__CUDA_ARCH__)
#if __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(sm90_detail::smem_addr(bar)),
               "r"(count)
               : "memory");
#else
  static_assert(kNever != 0, "gg::mbarrier_init needs sm_90 or newer");
#endif
#elif defined(GG_EMU)
  gg::emu::sm90::mbarrier_init(bar, count);
#endif
}

// Makes the calling thread's mbarrier.init visible to the async proxy (TMA).
template <int kNever = 0>
__device__ __forceinline__ void fence_mbarrier_init() {
#if defined(__CUDA_ARCH__)
#if __CUDA_ARCH__ >= 900
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#else
  static_assert(kNever != 0, "gg::fence_mbarrier_init needs sm_90 or newer");
#endif
#elif defined(GG_EMU)
  gg::emu::sm90::fence_mbarrier_init();
#endif
}

template <int kNever = 0>
__device__ __forceinline__ void mbarrier_inval(u64* bar) {
#if defined(__CUDA_ARCH__)
#if __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.inval.shared::cta.b64 [%0];\n" ::"r"(sm90_detail::smem_addr(bar))
               : "memory");
#else
  static_assert(kNever != 0, "gg::mbarrier_inval needs sm_90 or newer");
#endif
#elif defined(GG_EMU)
  gg::emu::sm90::mbarrier_inval(bar);
#endif
}

// One arrival; returns the barrier's state token.
template <int kNever = 0>
__device__ __forceinline__ u64 mbarrier_arrive(u64* bar) {
  u64 state = 0;
#if defined(__CUDA_ARCH__)
#if __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.arrive.shared::cta.b64 %0, [%1];\n"
               : "=l"(state)
               : "r"(sm90_detail::smem_addr(bar))
               : "memory");
#else
  static_assert(kNever != 0, "gg::mbarrier_arrive needs sm_90 or newer");
#endif
#elif defined(GG_EMU)
  state = gg::emu::sm90::mbarrier_arrive(bar, 0);
#endif
  return state;
}

// Announces `tx_bytes` more transaction bytes for the current phase, then
// arrives.
template <int kNever = 0>
__device__ __forceinline__ void mbarrier_arrive_expect_tx(u64* bar, u32 tx_bytes) {
#if defined(__CUDA_ARCH__)
#if __CUDA_ARCH__ >= 900
  asm volatile(
      "mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(sm90_detail::smem_addr(bar)),
      "r"(tx_bytes)
      : "memory");
#else
  static_assert(kNever != 0, "gg::mbarrier_arrive_expect_tx needs sm_90 or newer");
#endif
#elif defined(GG_EMU)
  gg::emu::sm90::mbarrier_arrive(bar, tx_bytes);
#endif
}

// True once the phase with parity `parity` has completed. (The emulator
// blocks the thread until then, and reports a wait that never can complete.)
template <int kNever = 0>
__device__ __forceinline__ bool mbarrier_try_wait_parity(u64* bar, u32 parity) {
#if defined(__CUDA_ARCH__)
#if __CUDA_ARCH__ >= 900
  u32 done;
  asm volatile(
      "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.b32 %0, 1, 0, "
      "p;\n}\n"
      : "=r"(done)
      : "r"(sm90_detail::smem_addr(bar)), "r"(parity)
      : "memory");
  return done != 0;
#else
  static_assert(kNever != 0, "gg::mbarrier_try_wait_parity needs sm_90 or newer");
  return false;
#endif
#elif defined(GG_EMU)
  return gg::emu::sm90::mbarrier_wait(bar, parity, "mbarrier.try_wait.parity");
#else
  (void)bar;
  (void)parity;
  return true;
#endif
}

// Waits until the phase with parity `parity` has completed.
template <int kNever = 0>
__device__ __forceinline__ void mbarrier_wait(u64* bar, u32 parity) {
  while (!mbarrier_try_wait_parity<kNever>(bar, parity)) {
  }
}

// ---------------------------------------------------------------------------
// The async proxy and TMA.

// Orders the calling thread's generic-proxy writes to shared memory before
// later async-proxy accesses (TMA, wgmma operands).
template <int kNever = 0>
__device__ __forceinline__ void fence_proxy_async() {
#if defined(__CUDA_ARCH__)
#if __CUDA_ARCH__ >= 900
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#else
  static_assert(kNever != 0, "gg::fence_proxy_async needs sm_90 or newer");
#endif
#elif defined(GG_EMU)
  gg::emu::sm90::fence_proxy_async();
#endif
}

template <int kNever = 0>
__device__ __forceinline__ void prefetch_tensormap(const CUtensorMap* map) {
#if defined(__CUDA_ARCH__)
#if __CUDA_ARCH__ >= 900
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<u64>(map)) : "memory");
#else
  static_assert(kNever != 0, "gg::prefetch_tensormap needs sm_90 or newer");
#endif
#elif defined(GG_EMU)
  gg::emu::sm90::map_bits(map, "prefetch.tensormap");
#endif
}

template <int kNever = 0>
__device__ __forceinline__ void tma_load_2d(void* smem_dst, const CUtensorMap* map, u64* bar,
                                            int c0, int c1) {
#if defined(__CUDA_ARCH__)
#if __CUDA_ARCH__ >= 900
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, "
      "{%3, %4}], [%2];\n" ::"r"(sm90_detail::smem_addr(smem_dst)),
      "l"(reinterpret_cast<u64>(map)), "r"(sm90_detail::smem_addr(bar)), "r"(c0), "r"(c1)
      : "memory");
#else
  static_assert(kNever != 0, "gg::tma_load_2d needs sm_90 or newer");
#endif
#elif defined(GG_EMU)
  const int c[2] = {c0, c1};
  gg::emu::sm90::tma_load(smem_dst, map, bar, c, 2);
#endif
}

template <int kNever = 0>
__device__ __forceinline__ void tma_load_3d(void* smem_dst, const CUtensorMap* map, u64* bar,
                                            int c0, int c1, int c2) {
#if defined(__CUDA_ARCH__)
#if __CUDA_ARCH__ >= 900
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, "
      "{%3, %4, %5}], "
      "[%2];\n" ::"r"(sm90_detail::smem_addr(smem_dst)),
      "l"(reinterpret_cast<u64>(map)), "r"(sm90_detail::smem_addr(bar)), "r"(c0), "r"(c1), "r"(c2)
      : "memory");
#else
  static_assert(kNever != 0, "gg::tma_load_3d needs sm_90 or newer");
#endif
#elif defined(GG_EMU)
  const int c[3] = {c0, c1, c2};
  gg::emu::sm90::tma_load(smem_dst, map, bar, c, 3);
#endif
}

template <int kNever = 0>
__device__ __forceinline__ void tma_store_2d(const CUtensorMap* map, const void* smem_src, int c0,
                                             int c1) {
#if defined(__CUDA_ARCH__)
#if __CUDA_ARCH__ >= 900
  asm volatile(
      "cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group [%0, {%2, %3}], [%1];\n" ::"l"(
          reinterpret_cast<u64>(map)),
      "r"(sm90_detail::smem_addr(smem_src)), "r"(c0), "r"(c1)
      : "memory");
#else
  static_assert(kNever != 0, "gg::tma_store_2d needs sm_90 or newer");
#endif
#elif defined(GG_EMU)
  const int c[2] = {c0, c1};
  gg::emu::sm90::tma_store(map, smem_src, c, 2);
#endif
}

template <int kNever = 0>
__device__ __forceinline__ void tma_store_3d(const CUtensorMap* map, const void* smem_src, int c0,
                                             int c1, int c2) {
#if defined(__CUDA_ARCH__)
#if __CUDA_ARCH__ >= 900
  asm volatile(
      "cp.async.bulk.tensor.3d.global.shared::cta.tile.bulk_group [%0, {%2, %3, %4}], [%1];\n" ::
          "l"(reinterpret_cast<u64>(map)),
      "r"(sm90_detail::smem_addr(smem_src)), "r"(c0), "r"(c1), "r"(c2)
      : "memory");
#else
  static_assert(kNever != 0, "gg::tma_store_3d needs sm_90 or newer");
#endif
#elif defined(GG_EMU)
  const int c[3] = {c0, c1, c2};
  gg::emu::sm90::tma_store(map, smem_src, c, 3);
#endif
}

// Closes the calling thread's current group of TMA stores.
template <int kNever = 0>
__device__ __forceinline__ void bulk_commit_group() {
#if defined(__CUDA_ARCH__)
#if __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
#else
  static_assert(kNever != 0, "gg::bulk_commit_group needs sm_90 or newer");
#endif
#elif defined(GG_EMU)
  gg::emu::sm90::bulk_commit();
#endif
}

// Waits until at most kPending of the thread's newest store groups still
// read their shared-memory source.
template <int kPending, int kNever = 0>
__device__ __forceinline__ void bulk_wait_group_read() {
  static_assert(kPending >= 0 && kPending <= 7, "cp.async.bulk.wait_group takes 0..7");
#if defined(__CUDA_ARCH__)
#if __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(kPending) : "memory");
#else
  static_assert(kNever != 0, "gg::bulk_wait_group_read needs sm_90 or newer");
#endif
#elif defined(GG_EMU)
  gg::emu::sm90::bulk_wait(kPending, true);
#endif
}

// Waits until at most kPending of the thread's newest store groups are
// incomplete (their global writes done).
template <int kPending, int kNever = 0>
__device__ __forceinline__ void bulk_wait_group() {
  static_assert(kPending >= 0 && kPending <= 7, "cp.async.bulk.wait_group takes 0..7");
#if defined(__CUDA_ARCH__)
#if __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(kPending) : "memory");
#else
  static_assert(kNever != 0, "gg::bulk_wait_group needs sm_90 or newer");
#endif
#elif defined(GG_EMU)
  gg::emu::sm90::bulk_wait(kPending, false);
#endif
}

// ---------------------------------------------------------------------------
// setmaxnreg: a warpgroup asks for (inc) or releases (dec) registers, so that
// the producer gives its registers to the consumers.

template <int kRegs, int kNever = 0>
__device__ __forceinline__ void setmaxnreg_inc() {
  static_assert(kRegs >= 24 && kRegs <= 256 && kRegs % 8 == 0,
                "setmaxnreg takes a multiple of 8 in 24..256");
#if defined(__CUDA_ARCH__)
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs));
#else
  static_assert(kNever != 0, "gg::setmaxnreg_inc needs sm_90a");
#endif
#elif defined(GG_EMU)
  gg::emu::syncwarp(0xffffffffu);
  gg::emu::sm90::setmaxnreg(kRegs);
#endif
}

template <int kRegs, int kNever = 0>
__device__ __forceinline__ void setmaxnreg_dec() {
  static_assert(kRegs >= 24 && kRegs <= 256 && kRegs % 8 == 0,
                "setmaxnreg takes a multiple of 8 in 24..256");
#if defined(__CUDA_ARCH__)
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs));
#else
  static_assert(kNever != 0, "gg::setmaxnreg_dec needs sm_90a");
#endif
#elif defined(GG_EMU)
  gg::emu::syncwarp(0xffffffffu);
  gg::emu::sm90::setmaxnreg(kRegs);
#endif
}

// ---------------------------------------------------------------------------
// wgmma.

template <int kNever = 0>
__device__ __forceinline__ void wgmma_fence() {
#if defined(__CUDA_ARCH__)
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#else
  static_assert(kNever != 0, "gg::wgmma_fence needs sm_90a");
#endif
#elif defined(GG_EMU)
  gg::emu::sm90::wgmma_fence();
#endif
}

template <int kNever = 0>
__device__ __forceinline__ void wgmma_commit_group() {
#if defined(__CUDA_ARCH__)
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#else
  static_assert(kNever != 0, "gg::wgmma_commit_group needs sm_90a");
#endif
#elif defined(GG_EMU)
  gg::emu::sm90::wgmma_commit();
#endif
}

// Waits until at most kPending of the newest wgmma groups are in flight; the
// accumulators of the others are valid after it.
template <int kPending, int kNever = 0>
__device__ __forceinline__ void wgmma_wait_group() {
  static_assert(kPending >= 0 && kPending <= 7, "wgmma.wait_group takes 0..7");
#if defined(__CUDA_ARCH__)
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
#else
  static_assert(kNever != 0, "gg::wgmma_wait_group needs sm_90a");
#endif
#elif defined(GG_EMU)
  gg::emu::sm90::wgmma_wait(kPending);
#endif
}

// Keeps the compiler from moving accesses of the accumulators across the
// wgmma instructions (use around issue and wait).
template <int kN>
__device__ __forceinline__ void wgmma_fence_operand(float (&d)[kN]) {
#if defined(__CUDA_ARCH__)
  for (int i = 0; i < kN; ++i)
    asm volatile("" : "+f"(d[i])::"memory");
#else
  (void)d;
#endif
}

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
namespace sm90_detail {

template <int N>
struct WgmmaAsm;

// imm-scale-a = imm-scale-b = 1; scale-d from a register (0: D = A*B).
#define GG_WGMMA_SS(N, NAME, TYPES, SA, SB, SS, STA, STB)                                    \
  template <int kTA, int kTB>                                                                \
  static __device__ __forceinline__ void NAME(float (&d)[N / 2], u64 a, u64 b, u32 scale) {  \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" SS                                     \
                 ", 0;\nwgmma.mma_async.sync.aligned.m64n" #N "k16." TYPES " " GG_WGMMA_D##N \
                 ", %" SA ", %" SB ", p, 1, 1, %" STA ", %" STB ";\n}\n"                     \
                 : GG_WGMMA_OUT##N                                                           \
                 : "l"(a), "l"(b), "r"(scale), "n"(kTA), "n"(kTB));                          \
  }
#define GG_WGMMA_RS(N, NAME, TYPES, RA0, RA1, RA2, RA3, RB, RS, RTB)                            \
  template <int kTB>                                                                            \
  static __device__ __forceinline__ void NAME(float (&d)[N / 2], const u32(&a)[4], u64 b,       \
                                              u32 scale) {                                      \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" RS                                        \
                 ", 0;\nwgmma.mma_async.sync.aligned.m64n" #N "k16." TYPES " " GG_WGMMA_D##N    \
                 ", {%" RA0 ", %" RA1 ", %" RA2 ", %" RA3 "}, %" RB ", p, 1, 1, %" RTB ";\n}\n" \
                 : GG_WGMMA_OUT##N                                                              \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(scale), "n"(kTB));   \
  }
#define GG_WGMMA_SS8(N, NAME, TYPES, SA, SB, SS)                                             \
  static __device__ __forceinline__ void NAME(float (&d)[N / 2], u64 a, u64 b, u32 scale) {  \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" SS                                     \
                 ", 0;\nwgmma.mma_async.sync.aligned.m64n" #N "k32." TYPES " " GG_WGMMA_D##N \
                 ", %" SA ", %" SB ", p, 1, 1;\n}\n"                                         \
                 : GG_WGMMA_OUT##N                                                           \
                 : "l"(a), "l"(b), "r"(scale));                                              \
  }
// The operand numbers of each form: the N/2 accumulators come first.
#define GG_WGMMA_SHAPE(N, SA, SB, SS, STA, STB, RA0, RA1, RA2, RA3, RB, RS, RTB) \
  template <>                                                                    \
  struct WgmmaAsm<N> {                                                           \
    GG_WGMMA_SS(N, ss_bf16, "f32.bf16.bf16", SA, SB, SS, STA, STB)               \
    GG_WGMMA_SS(N, ss_f16, "f32.f16.f16", SA, SB, SS, STA, STB)                  \
    GG_WGMMA_RS(N, rs_bf16, "f32.bf16.bf16", RA0, RA1, RA2, RA3, RB, RS, RTB)    \
    GG_WGMMA_RS(N, rs_f16, "f32.f16.f16", RA0, RA1, RA2, RA3, RB, RS, RTB)       \
    GG_WGMMA_SS8(N, ss_e4m3, "f32.e4m3.e4m3", SA, SB, SS)                        \
    GG_WGMMA_SS8(N, ss_e5m2, "f32.e5m2.e5m2", SA, SB, SS)                        \
  };

// The accumulator registers and operand lists of each N (written out: the
// preprocessor cannot count).
#define GG_WGMMA_D8 "{%0, %1, %2, %3}"
#define GG_WGMMA_OUT8 "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
GG_WGMMA_SHAPE(8, "4", "5", "6", "7", "8", "4", "5", "6", "7", "8", "9", "10")
#define GG_WGMMA_D16 "{%0, %1, %2, %3, %4, %5, %6, %7}"
#define GG_WGMMA_OUT16 \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
GG_WGMMA_SHAPE(16, "8", "9", "10", "11", "12", "8", "9", "10", "11", "12", "13", "14")
#define GG_WGMMA_D32 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}"
#define GG_WGMMA_OUT32                                                                            \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
      "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]),    \
      "+f"(d[15])
GG_WGMMA_SHAPE(32, "16", "17", "18", "19", "20", "16", "17", "18", "19", "20", "21", "22")
#define GG_WGMMA_D64                                                       \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15," \
  " %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define GG_WGMMA_OUT64                                                                            \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
      "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]),    \
      "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]),  \
      "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]),  \
      "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
GG_WGMMA_SHAPE(64, "32", "33", "34", "35", "36", "32", "33", "34", "35", "36", "37", "38")
#define GG_WGMMA_D96                                                                 \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"           \
  " %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31," \
  " %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47}"
#define GG_WGMMA_OUT96                                                                            \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
      "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]),    \
      "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]),  \
      "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]),  \
      "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]),  \
      "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]),  \
      "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47])
GG_WGMMA_SHAPE(96, "48", "49", "50", "51", "52", "48", "49", "50", "51", "52", "53", "54")
#define GG_WGMMA_D128                                                                \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"           \
  " %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31," \
  " %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47," \
  " %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}"
#define GG_WGMMA_OUT128                                                                           \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
      "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]),    \
      "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]),  \
      "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]),  \
      "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]),  \
      "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]),  \
      "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]),  \
      "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]),  \
      "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
GG_WGMMA_SHAPE(128, "64", "65", "66", "67", "68", "64", "65", "66", "67", "68", "69", "70")
#define GG_WGMMA_D192                                                                \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"           \
  " %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31," \
  " %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47," \
  " %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63," \
  " %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79," \
  " %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95}"
#define GG_WGMMA_OUT192                                                                           \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
      "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]),    \
      "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]),  \
      "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]),  \
      "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]),  \
      "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]),  \
      "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]),  \
      "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]),  \
      "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),  \
      "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]),  \
      "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]),  \
      "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]),  \
      "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]),  \
      "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95])
GG_WGMMA_SHAPE(192, "96", "97", "98", "99", "100", "96", "97", "98", "99", "100", "101", "102")
#define GG_WGMMA_D256                                                                            \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"                       \
  " %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31,"             \
  " %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47,"             \
  " %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63,"             \
  " %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79,"             \
  " %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95,"             \
  " %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111," \
  " %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, "  \
  "%127}"
#define GG_WGMMA_OUT256                                                                           \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
      "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]),    \
      "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]),  \
      "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]),  \
      "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]),  \
      "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]),  \
      "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]),  \
      "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]),  \
      "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),  \
      "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]),  \
      "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]),  \
      "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]),  \
      "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]),  \
      "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]),  \
      "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]),          \
      "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]),         \
      "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]),         \
      "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]),         \
      "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
GG_WGMMA_SHAPE(256, "128", "129", "130", "131", "132", "128", "129", "130", "131", "132", "133",
               "134")

#undef GG_WGMMA_SHAPE
#undef GG_WGMMA_SS8
#undef GG_WGMMA_RS
#undef GG_WGMMA_SS

}  // namespace sm90_detail
#endif

#if defined(GG_EMU)
namespace sm90_detail {

struct WgmmaIn {
  u64 desc_a, desc_b;
  u32 a[4];
  u32 flags;
};
struct WgmmaOut {
  unsigned short tile[16][16];
};

// Issues one wgmma for the calling thread. A warp-collective first: the
// lanes must agree on the operands, and with A in registers every lane gets
// its warp's 16 rows of A.
template <int N>
GG_EMU_ALWAYS_INLINE void emu_wgmma(const char* op, float (&d)[N / 2], u64 desc_a,
                                    const u32* a_regs, u64 desc_b, bool accumulate, bool trans_a,
                                    bool trans_b, unsigned k, unsigned elem_bytes,
                                    double (*value)(unsigned)) {
  WgmmaIn in{desc_a,
             desc_b,
             {},
             (a_regs != nullptr ? 1u : 0u) | (trans_a ? 2u : 0u) | (trans_b ? 4u : 0u) |
                 (accumulate ? 8u : 0u)};
  if (a_regs != nullptr) {
    for (int i = 0; i < 4; ++i)
      in.a[i] = a_regs[i];
  }
  const WgmmaOut out = gg::emu::warp_collective<WgmmaIn, WgmmaOut>(
      op, 0xffffffffu, in, [](unsigned lane, const WgmmaIn* const* ins) {
        WgmmaOut o{};
        for (unsigned l = 0; l < 32; ++l) {
          if (ins[l]->desc_b != ins[lane]->desc_b || ins[l]->flags != ins[lane]->flags ||
              ((ins[lane]->flags & 1u) == 0 && ins[l]->desc_a != ins[lane]->desc_a)) {
            gg::emu::fail(
                "wgmma.mma_async: lanes %u and %u of a warp pass different descriptors or flags", l,
                lane);
          }
        }
        if (ins[lane]->flags & 1u) {
          for (unsigned l = 0; l < 32; ++l) {
            for (unsigned j = 0; j < 8; ++j) {
              unsigned m, kk;
              gg::emu::sm90::a_fragment_coord(l, j, &m, &kk);
              o.tile[m][kk] = static_cast<unsigned short>(ins[l]->a[j / 2] >> (16 * (j % 2)));
            }
          }
        }
        return o;
      });
  gg::emu::sm90::WgmmaOp w;
  w.n = N;
  w.k = k;
  w.desc_a = desc_a;
  w.desc_b = desc_b;
  w.a_regs = a_regs != nullptr;
  w.trans_a = trans_a;
  w.trans_b = trans_b;
  w.scale_d = accumulate;
  w.eb = elem_bytes;
  w.value = value;
  std::memcpy(w.a_tile, out.tile, sizeof w.a_tile);
  if (a_regs != nullptr) {
    w.a_addr = a_regs;
    std::memcpy(w.a_vals, a_regs, sizeof w.a_vals);
  }
  gg::emu::sm90::wgmma_issue(std::move(w), d);
}

}  // namespace sm90_detail
#endif

#define GG_WGMMA_CHECK_N(N)                                                                        \
  static_assert((N) >= 8 && (N) <= 256 && ((N) % 16 == 0 || (N) <= 32) &&                          \
                    ((N) == 8 || (N) == 16 || (N) == 32 || (N) == 64 || (N) == 96 || (N) == 128 || \
                     (N) == 192 || (N) == 256),                                                    \
                "gg::wgmma: N must be one of 8, 16, 32, 64, 96, 128, 192, 256")

// D (64 x N, f32; this thread's N/2 values) = A (64 x 16) * B (16 x N) + (accumulate ? D : 0),
// A and B in shared memory through descriptors, K-major unless kTransA / kTransB (M-/N-major).
template <int N, bool kTransA = false, bool kTransB = false, int kNever = 0>
__device__ __forceinline__ void wgmma_m64nNk16_bf16_ss(float (&d)[N / 2], u64 desc_a, u64 desc_b,
                                                       bool accumulate) {
  GG_WGMMA_CHECK_N(N);
#if defined(__CUDA_ARCH__)
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  sm90_detail::WgmmaAsm<N>::template ss_bf16<kTransA ? 1 : 0, kTransB ? 1 : 0>(
      d, desc_a, desc_b, accumulate ? 1u : 0u);
#else
  static_assert(kNever != 0, "gg::wgmma needs sm_90a");
#endif
#elif defined(GG_EMU)
  sm90_detail::emu_wgmma<N>("wgmma.mma_async.m64nNk16.bf16", d, desc_a, nullptr, desc_b, accumulate,
                            kTransA, kTransB, 16, 2, emu_detail::bf16_value);
#endif
}

template <int N, bool kTransA = false, bool kTransB = false, int kNever = 0>
__device__ __forceinline__ void wgmma_m64nNk16_f16_ss(float (&d)[N / 2], u64 desc_a, u64 desc_b,
                                                      bool accumulate) {
  GG_WGMMA_CHECK_N(N);
#if defined(__CUDA_ARCH__)
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  sm90_detail::WgmmaAsm<N>::template ss_f16<kTransA ? 1 : 0, kTransB ? 1 : 0>(d, desc_a, desc_b,
                                                                              accumulate ? 1u : 0u);
#else
  static_assert(kNever != 0, "gg::wgmma needs sm_90a");
#endif
#elif defined(GG_EMU)
  sm90_detail::emu_wgmma<N>("wgmma.mma_async.m64nNk16.f16", d, desc_a, nullptr, desc_b, accumulate,
                            kTransA, kTransB, 16, 2, emu_detail::f16_value);
#endif
}

// A from registers: a[4] is this thread's A fragment (the mma.m16n8k16 A
// layout of its warp's 16 rows: gg::frag::a_m16n8k16, rows + 16 * warp).
template <int N, bool kTransB = false, int kNever = 0>
__device__ __forceinline__ void wgmma_m64nNk16_bf16_rs(float (&d)[N / 2], const u32 (&a)[4],
                                                       u64 desc_b, bool accumulate) {
  GG_WGMMA_CHECK_N(N);
#if defined(__CUDA_ARCH__)
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  sm90_detail::WgmmaAsm<N>::template rs_bf16<kTransB ? 1 : 0>(d, a, desc_b, accumulate ? 1u : 0u);
#else
  static_assert(kNever != 0, "gg::wgmma needs sm_90a");
#endif
#elif defined(GG_EMU)
  sm90_detail::emu_wgmma<N>("wgmma.mma_async.m64nNk16.bf16.rs", d, 0, a, desc_b, accumulate, false,
                            kTransB, 16, 2, emu_detail::bf16_value);
#endif
}

template <int N, bool kTransB = false, int kNever = 0>
__device__ __forceinline__ void wgmma_m64nNk16_f16_rs(float (&d)[N / 2], const u32 (&a)[4],
                                                      u64 desc_b, bool accumulate) {
  GG_WGMMA_CHECK_N(N);
#if defined(__CUDA_ARCH__)
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  sm90_detail::WgmmaAsm<N>::template rs_f16<kTransB ? 1 : 0>(d, a, desc_b, accumulate ? 1u : 0u);
#else
  static_assert(kNever != 0, "gg::wgmma needs sm_90a");
#endif
#elif defined(GG_EMU)
  sm90_detail::emu_wgmma<N>("wgmma.mma_async.m64nNk16.f16.rs", d, 0, a, desc_b, accumulate, false,
                            kTransB, 16, 2, emu_detail::f16_value);
#endif
}

// FP8: D (64 x N, f32) = A (64 x 32) * B (32 x N) + ..., both K-major.
template <int N, int kNever = 0>
__device__ __forceinline__ void wgmma_m64nNk32_e4m3_ss(float (&d)[N / 2], u64 desc_a, u64 desc_b,
                                                       bool accumulate) {
  GG_WGMMA_CHECK_N(N);
#if defined(__CUDA_ARCH__)
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  sm90_detail::WgmmaAsm<N>::ss_e4m3(d, desc_a, desc_b, accumulate ? 1u : 0u);
#else
  static_assert(kNever != 0, "gg::wgmma needs sm_90a");
#endif
#elif defined(GG_EMU)
  sm90_detail::emu_wgmma<N>("wgmma.mma_async.m64nNk32.e4m3", d, desc_a, nullptr, desc_b, accumulate,
                            false, false, 32, 1, emu_detail::e4m3_value);
#endif
}

template <int N, int kNever = 0>
__device__ __forceinline__ void wgmma_m64nNk32_e5m2_ss(float (&d)[N / 2], u64 desc_a, u64 desc_b,
                                                       bool accumulate) {
  GG_WGMMA_CHECK_N(N);
#if defined(__CUDA_ARCH__)
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  sm90_detail::WgmmaAsm<N>::ss_e5m2(d, desc_a, desc_b, accumulate ? 1u : 0u);
#else
  static_assert(kNever != 0, "gg::wgmma needs sm_90a");
#endif
#elif defined(GG_EMU)
  sm90_detail::emu_wgmma<N>("wgmma.mma_async.m64nNk32.e5m2", d, desc_a, nullptr, desc_b, accumulate,
                            false, false, 32, 1, emu_detail::e5m2_value);
#endif
}

// ---------------------------------------------------------------------------
// Thread-block clusters (sm_90; docs/cuda-hopper.md, "Clusters"). A kernel
// launched with cudaLaunchKernelEx and cudaLaunchAttributeClusterDimension
// runs its blocks in clusters whose CTAs are resident at once and reach each
// other's shared memory. A launch without the attribute is a cluster of one
// CTA per block (rank 0 of 1).
//
// - cluster_ctarank() / cluster_nctarank(): %cluster_ctarank (x fastest
//   over the cluster's CTAs) and %cluster_nctarank; cluster_id() (%clusterid),
//   cluster_ctaid() (%cluster_ctaid: the CTA's position in its cluster),
//   cluster_nctaid() (%cluster_nctaid), cluster_nclusterid() (%nclusterid).
// - cluster_arrive() (barrier.cluster.arrive.release.aligned),
//   cluster_arrive_relaxed() (.relaxed), cluster_wait()
//   (barrier.cluster.wait.acquire.aligned), cluster_sync() (both): every
//   non-exited thread of the cluster arrives; a wait returns once all have.
//   Required before a CTA exits while its peers may still touch its shared
//   memory, and after mbarrier_init before a peer signals the barrier.
// - cluster_map_shared(p, rank): mapa.u64, the generic address of the same
//   shared variable in CTA `rank`; cluster_map_shared_addr(p, rank):
//   mapa.shared::cluster.u32, its shared::cluster address, for
//   ld_shared_cluster / st_shared_cluster (ld / st.shared::cluster) and
//   mbarrier_arrive_cluster (mbarrier.arrive.release.cluster.shared::cluster:
//   one arrival on a barrier of any CTA of the cluster).
// - tma_load_2d/3d_multicast(dst, &map, bar, c..., mask): one box read from
//   global memory lands at dst's offset in every CTA whose bit is set in the
//   16-bit ctaMask, and completes its bytes on the mbarrier at bar's offset in
//   each of them (each destination announces them with expect_tx).

namespace sm90_detail {
template <int kNever>
__device__ __forceinline__ u32 special_u32(int which) {
  u32 v = 0;
#if defined(__CUDA_ARCH__)
#if __CUDA_ARCH__ >= 900
  switch (which) {
    case 0: asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(v)); break;
    case 1: asm volatile("mov.u32 %0, %%cluster_nctarank;\n" : "=r"(v)); break;
    case 2: asm volatile("mov.u32 %0, %%clusterid.x;\n" : "=r"(v)); break;
    case 3: asm volatile("mov.u32 %0, %%clusterid.y;\n" : "=r"(v)); break;
    case 4: asm volatile("mov.u32 %0, %%clusterid.z;\n" : "=r"(v)); break;
    case 5: asm volatile("mov.u32 %0, %%cluster_ctaid.x;\n" : "=r"(v)); break;
    case 6: asm volatile("mov.u32 %0, %%cluster_ctaid.y;\n" : "=r"(v)); break;
    case 7: asm volatile("mov.u32 %0, %%cluster_ctaid.z;\n" : "=r"(v)); break;
    case 8: asm volatile("mov.u32 %0, %%cluster_nctaid.x;\n" : "=r"(v)); break;
    case 9: asm volatile("mov.u32 %0, %%cluster_nctaid.y;\n" : "=r"(v)); break;
    case 10: asm volatile("mov.u32 %0, %%cluster_nctaid.z;\n" : "=r"(v)); break;
    case 11: asm volatile("mov.u32 %0, %%nclusterid.x;\n" : "=r"(v)); break;
    case 12: asm volatile("mov.u32 %0, %%nclusterid.y;\n" : "=r"(v)); break;
    default: asm volatile("mov.u32 %0, %%nclusterid.z;\n" : "=r"(v)); break;
  }
#else
  static_assert(kNever != 0, "gg's cluster special registers need sm_90 or newer");
#endif
#elif defined(GG_EMU)
  namespace e = gg::emu::sm90;
  switch (which) {
    case 0: v = e::cluster_ctarank(); break;
    case 1: v = e::cluster_nctarank(); break;
    case 2: v = e::cluster_id().x; break;
    case 3: v = e::cluster_id().y; break;
    case 4: v = e::cluster_id().z; break;
    case 5: v = e::cluster_ctaid().x; break;
    case 6: v = e::cluster_ctaid().y; break;
    case 7: v = e::cluster_ctaid().z; break;
    case 8: v = e::cluster_nctaid().x; break;
    case 9: v = e::cluster_nctaid().y; break;
    case 10: v = e::cluster_nctaid().z; break;
    case 11: v = e::cluster_nclusterid().x; break;
    case 12: v = e::cluster_nclusterid().y; break;
    default: v = e::cluster_nclusterid().z; break;
  }
#else
  (void)which;
#endif
  return v;
}
}  // namespace sm90_detail

template <int kNever = 0>
__device__ __forceinline__ u32 cluster_ctarank() {
  return sm90_detail::special_u32<kNever>(0);
}
template <int kNever = 0>
__device__ __forceinline__ u32 cluster_nctarank() {
  return sm90_detail::special_u32<kNever>(1);
}
template <int kNever = 0>
__device__ __forceinline__ dim3 cluster_id() {
  return dim3(sm90_detail::special_u32<kNever>(2), sm90_detail::special_u32<kNever>(3),
              sm90_detail::special_u32<kNever>(4));
}
template <int kNever = 0>
__device__ __forceinline__ dim3 cluster_ctaid() {
  return dim3(sm90_detail::special_u32<kNever>(5), sm90_detail::special_u32<kNever>(6),
              sm90_detail::special_u32<kNever>(7));
}
template <int kNever = 0>
__device__ __forceinline__ dim3 cluster_nctaid() {
  return dim3(sm90_detail::special_u32<kNever>(8), sm90_detail::special_u32<kNever>(9),
              sm90_detail::special_u32<kNever>(10));
}
template <int kNever = 0>
__device__ __forceinline__ dim3 cluster_nclusterid() {
  return dim3(sm90_detail::special_u32<kNever>(11), sm90_detail::special_u32<kNever>(12),
              sm90_detail::special_u32<kNever>(13));
}

template <int kNever = 0>
__device__ __forceinline__ void cluster_arrive() {
#if defined(__CUDA_ARCH__)
#if __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory");
#else
  static_assert(kNever != 0, "gg::cluster_arrive needs sm_90 or newer");
#endif
#elif defined(GG_EMU)
  gg::emu::sm90::cluster_arrive();
#endif
}

// No release: the thread's earlier writes are not ordered before the wait's
// return in the other CTAs (the emulator keeps them all: threads of a
// cluster run one at a time).
template <int kNever = 0>
__device__ __forceinline__ void cluster_arrive_relaxed() {
#if defined(__CUDA_ARCH__)
#if __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");
#else
  static_assert(kNever != 0, "gg::cluster_arrive_relaxed needs sm_90 or newer");
#endif
#elif defined(GG_EMU)
  gg::emu::sm90::cluster_arrive();
#endif
}

template <int kNever = 0>
__device__ __forceinline__ void cluster_wait() {
#if defined(__CUDA_ARCH__)
#if __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
#else
  static_assert(kNever != 0, "gg::cluster_wait needs sm_90 or newer");
#endif
#elif defined(GG_EMU)
  gg::emu::sm90::cluster_wait();
#endif
}

template <int kNever = 0>
__device__ __forceinline__ void cluster_sync() {
  cluster_arrive<kNever>();
  cluster_wait<kNever>();
}

// The generic address of `p`'s variable in CTA `rank` of the cluster.
template <class T, int kNever = 0>
__device__ __forceinline__ T* cluster_map_shared(T* p, u32 rank) {
#if defined(__CUDA_ARCH__)
#if __CUDA_ARCH__ >= 900
  u64 out;
  asm volatile("mapa.u64 %0, %1, %2;\n" : "=l"(out) : "l"(reinterpret_cast<u64>(p)), "r"(rank));
  return reinterpret_cast<T*>(out);
#else
  static_assert(kNever != 0, "gg::cluster_map_shared needs sm_90 or newer");
  return p;
#endif
#elif defined(GG_EMU)
  return static_cast<T*>(gg::emu::sm90::map_shared(p, rank));
#else
  (void)rank;
  return p;
#endif
}

// The shared::cluster address of `p`'s variable in CTA `rank`.
template <int kNever = 0>
__device__ __forceinline__ u32 cluster_map_shared_addr(const void* p, u32 rank) {
  u32 out = 0;
#if defined(__CUDA_ARCH__)
#if __CUDA_ARCH__ >= 900
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n"
               : "=r"(out)
               : "r"(sm90_detail::smem_addr(p)), "r"(rank));
#else
  static_assert(kNever != 0, "gg::cluster_map_shared_addr needs sm_90 or newer");
#endif
#elif defined(GG_EMU)
  out = gg::emu::sm90::map_shared_cluster(sm90_detail::smem_addr(p), rank);
#else
  (void)p;
  (void)rank;
#endif
  return out;
}

template <int kNever = 0>
__device__ __forceinline__ u32 ld_shared_cluster(u32 cluster_addr) {
  u32 v = 0;
#if defined(__CUDA_ARCH__)
#if __CUDA_ARCH__ >= 900
  asm volatile("ld.shared::cluster.u32 %0, [%1];\n" : "=r"(v) : "r"(cluster_addr) : "memory");
#else
  static_assert(kNever != 0, "gg::ld_shared_cluster needs sm_90 or newer");
#endif
#elif defined(GG_EMU)
  gg::emu::sm90::load_cluster(cluster_addr, &v, 4);
#else
  (void)cluster_addr;
#endif
  return v;
}

template <int kNever = 0>
__device__ __forceinline__ void st_shared_cluster(u32 cluster_addr, u32 v) {
#if defined(__CUDA_ARCH__)
#if __CUDA_ARCH__ >= 900
  asm volatile("st.shared::cluster.u32 [%0], %1;\n" ::"r"(cluster_addr), "r"(v) : "memory");
#else
  static_assert(kNever != 0, "gg::st_shared_cluster needs sm_90 or newer");
#endif
#elif defined(GG_EMU)
  gg::emu::sm90::store_cluster(cluster_addr, &v, 4);
#else
  (void)cluster_addr;
  (void)v;
#endif
}

// One arrival (release, cluster scope) on the mbarrier at shared::cluster
// address `cluster_bar` (from cluster_map_shared_addr; any CTA).
template <int kNever = 0>
__device__ __forceinline__ void mbarrier_arrive_cluster(u32 cluster_bar) {
#if defined(__CUDA_ARCH__)
#if __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];\n" ::"r"(cluster_bar)
               : "memory");
#else
  static_assert(kNever != 0, "gg::mbarrier_arrive_cluster needs sm_90 or newer");
#endif
#elif defined(GG_EMU)
  gg::emu::sm90::mbarrier_arrive_cluster(cluster_bar);
#else
  (void)cluster_bar;
#endif
}

template <int kNever = 0>
__device__ __forceinline__ void tma_load_2d_multicast(void* smem_dst, const CUtensorMap* map, u64* bar,
                                                      int c0, int c1, unsigned short cta_mask) {
#if defined(__CUDA_ARCH__)
#if __CUDA_ARCH__ >= 900
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::"
      "cluster [%0], [%1, {%3, %4}], [%2], %5;\n" ::"r"(sm90_detail::smem_addr(smem_dst)),
      "l"(reinterpret_cast<u64>(map)), "r"(sm90_detail::smem_addr(bar)), "r"(c0), "r"(c1),
      "h"(cta_mask)
      : "memory");
#else
  static_assert(kNever != 0, "gg::tma_load_2d_multicast needs sm_90 or newer");
#endif
#elif defined(GG_EMU)
  const int c[2] = {c0, c1};
  gg::emu::sm90::tma_load_multicast(smem_dst, map, bar, c, 2, cta_mask);
#endif
}

template <int kNever = 0>
__device__ __forceinline__ void tma_load_3d_multicast(void* smem_dst, const CUtensorMap* map, u64* bar,
                                                      int c0, int c1, int c2, unsigned short cta_mask) {
#if defined(__CUDA_ARCH__)
#if __CUDA_ARCH__ >= 900
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::"
      "cluster [%0], [%1, {%3, %4, %5}], [%2], %6;\n" ::"r"(sm90_detail::smem_addr(smem_dst)),
      "l"(reinterpret_cast<u64>(map)), "r"(sm90_detail::smem_addr(bar)), "r"(c0), "r"(c1), "r"(c2),
      "h"(cta_mask)
      : "memory");
#else
  static_assert(kNever != 0, "gg::tma_load_3d_multicast needs sm_90 or newer");
#endif
#elif defined(GG_EMU)
  const int c[3] = {c0, c1, c2};
  gg::emu::sm90::tma_load_multicast(smem_dst, map, bar, c, 3, cta_mask);
#endif
}

#undef GG_WGMMA_CHECK_N

// ---------------------------------------------------------------------------
// (issue 30) The non-tensor bulk copy: `bytes` (a multiple of 16) of global
// memory at `src` into shared memory at `smem_dst` (both 16-byte aligned),
// completing on the mbarrier `bar` with complete_tx (its bytes announced by
// an arrive.expect_tx of the same phase, as a TMA load's). SASS: UBLKCP.
// The sm_100a body copies contiguous 512-byte scale atoms with it
// (gg_gemm_sm100.cuh, layout=atom128x4).
template <int kNever = 0>
__device__ __forceinline__ void bulk_load(void* smem_dst, const void* src, u32 bytes, u64* bar) {
#if defined(__CUDA_ARCH__)
#if __CUDA_ARCH__ >= 900
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::
          "r"(sm90_detail::smem_addr(smem_dst)),
      "l"(reinterpret_cast<u64>(src)), "r"(bytes), "r"(sm90_detail::smem_addr(bar))
      : "memory");
#else
  static_assert(kNever != 0, "gg::bulk_load needs sm_90 or newer");
#endif
#elif defined(GG_EMU)
  gg::emu::sm90::bulk_load(smem_dst, src, bytes, bar);
#endif
}

}  // namespace gg
