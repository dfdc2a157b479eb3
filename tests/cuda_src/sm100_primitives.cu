// The datacenter Blackwell primitives (gg_primitives_sm100.cuh): TMEM
// allocation, tcgen05.mma into TMEM through matrix and instruction
// descriptors, tcgen05.commit to an mbarrier, tcgen05.ld / st, with planted
// bugs (tests/cuda/sm100/test_cuda_sm100_primitives.py). The host program
// (gg_emu_host_main, emulator only) runs the case named by its input "case";
// nvcc compiles the kernels for sm_100a (the SASS test).
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "gg_runtime.cuh"
#include "gg_primitives_sm100.cuh"

using gg::u64;
using gg::umma::Major;
using gg::umma::Swizzle;
using gg::umma::Type;

extern __shared__ __align__(16) unsigned char smem_raw[];
__device__ __forceinline__ unsigned char* smem_1024() {
  return reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) &
                                          ~uintptr_t{1023});
}

// The parameters of tc_mma (a device array of int64, by index).
enum Param {
  kM,
  kN,
  kAType,  // gg::umma::Type
  kBType,
  kAMajor,  // gg::umma::Major
  kBMajor,
  kALbo,
  kASbo,
  kASwizzle,  // gg::umma::Swizzle
  kBLbo,
  kBSbo,
  kBSwizzle,
  kSteps,       // MMAs along K
  kABytes,      // the A image's bytes (a multiple of 1024)
  kBBytes,
  kAStepBytes,  // how far the descriptor's start moves per step: a tile, or the K of one MMA
  kBStepBytes,
  kAccumulate,  // 1: D starts as C (written with tcgen05.st), else the first MMA overwrites it
  kBug,
  kDLane,  // the lane of D's address: 0, or 16 for a second M = 64 accumulator
  kParams,
};

// The planted bugs (kBug).
enum Bug {
  kNone = 0,
  kNoCommitWait = 1,       // the accumulator is read without waiting on the commit's barrier
  kOverwriteStage = 2,     // an operand's shared memory is rewritten before the commit's phase
  kReadBeforeWaitLd = 3,   // a tcgen05.ld register is used before tcgen05.wait::ld
  kWrongLanes = 4,         // warp w reads the lanes of warp w + 1
  kLeak = 5,               // no tcgen05.dealloc
  kDoubleDealloc = 6,      // tcgen05.dealloc twice
  kOutsideAllocation = 7,  // a tcgen05.ld past the allocated columns
  kAllocAfterRelinquish = 8,
  kBadInstrDesc = 9,     // the instruction descriptor says M = 256 (cta_group::2's shape)
  kSm90Descriptor = 10,  // the A descriptor lacks the sm_100 version bits (46-48 = 0b001)
  kNoFenceAfter = 11,    // no tcgen05.fence::after_thread_sync after the commit's wait
  kNoProxyFence = 12,    // no fence.proxy.async between the operands' st.shared and the MMA
};

__device__ __forceinline__ unsigned ld_cols_of(int n) {
  unsigned c = 32;
  while (c < static_cast<unsigned>(n))
    c *= 2;
  return c;
}

// D (M x N, f32, in TMEM) = sum over the steps of A_s (M x K) * B_s (N x K)^T
// (+ C). 128 threads: warp 0 allocates, thread 0 issues the MMAs and the
// commit, every thread waits on the commit's barrier and reads its lane of
// TMEM. out[lane * N + col] is the raw TMEM cell (lane, col) of the
// accumulator's columns for all 128 lanes.
extern "C" __global__ void __launch_bounds__(128, 1)
    tc_mma(const long long* p, const unsigned char* a_img, const unsigned char* b_img,
           const unsigned* c_in, unsigned* out) {
  const int m = static_cast<int>(p[kM]), n = static_cast<int>(p[kN]);
  const int steps = static_cast<int>(p[kSteps]), bug = static_cast<int>(p[kBug]);
  const int a_step = static_cast<int>(p[kAStepBytes]), b_step = static_cast<int>(p[kBStepBytes]);
  const int a_bytes = static_cast<int>(p[kABytes]), b_bytes = static_cast<int>(p[kBBytes]);
  unsigned char* sa = smem_1024();
  unsigned char* sb = sa + a_bytes;
  __shared__ __align__(8) u64 bar;
  __shared__ unsigned tmem_slot;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const unsigned ncols = ld_cols_of(n);
  if (warp == 0) {
    gg::tmem_alloc(&tmem_slot, ncols);
    if (bug == kAllocAfterRelinquish) {
      gg::tmem_relinquish_alloc_permit();
      gg::tmem_alloc(&tmem_slot, 32);
    }
  }
  if (threadIdx.x == 0) {
    gg::mbarrier_init(&bar, 1);
    gg::fence_mbarrier_init();
  }
  for (int i = threadIdx.x; i < a_bytes; i += blockDim.x)
    sa[i] = a_img[i];
  for (int i = threadIdx.x; i < b_bytes; i += blockDim.x)
    sb[i] = b_img[i];
  if (bug != kNoProxyFence)
    gg::fence_proxy_async();
  gg::tcgen05_fence_before_thread_sync();
  __syncthreads();
  gg::tcgen05_fence_after_thread_sync();
  const unsigned tmem = tmem_slot;
  // This warp's quarter of the lanes.
  const unsigned my_lanes = gg::umma::tmem_addr(tmem, 32 * (warp % 4), 0);
  if (p[kAccumulate]) {
    for (int c = 0; c < n; c += 8) {
      unsigned r[8];
      for (int j = 0; j < 8; ++j)
        r[j] = c_in[(32 * warp + lane) * n + c + j];
      gg::tcgen05_st_32x32b<8>(my_lanes + c, r);
    }
    gg::tcgen05_wait_st();
    gg::tcgen05_fence_before_thread_sync();
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    gg::tcgen05_fence_after_thread_sync();
    const Type ta = static_cast<Type>(p[kAType]), tb = static_cast<Type>(p[kBType]);
    const unsigned d_tmem = gg::umma::tmem_addr(tmem, static_cast<unsigned>(p[kDLane]), 0);
    const unsigned idesc = gg::umma::instr_desc(ta, tb, bug == kBadInstrDesc ? 256 : m, n,
                                                static_cast<Major>(p[kAMajor]),
                                                static_cast<Major>(p[kBMajor]));
    for (int s = 0; s < steps; ++s) {
      u64 da = gg::make_umma_desc(sa + s * a_step, static_cast<unsigned>(p[kALbo]),
                                  static_cast<unsigned>(p[kASbo]),
                                  static_cast<Swizzle>(p[kASwizzle]));
      const u64 db = gg::make_umma_desc(sb + s * b_step, static_cast<unsigned>(p[kBLbo]),
                                        static_cast<unsigned>(p[kBSbo]),
                                        static_cast<Swizzle>(p[kBSwizzle]));
      if (bug == kSm90Descriptor)
        da &= ~gg::umma::kDescVersion;
      const bool acc = s > 0 || p[kAccumulate] != 0;
      if (gg::umma::mma_k(ta) == 16) {
        gg::tcgen05_mma_f16(d_tmem, da, db, idesc, acc);
      } else {
        gg::tcgen05_mma_f8f6f4(d_tmem, da, db, idesc, acc);
      }
    }
    gg::tcgen05_commit(&bar);
    if (bug == kOverwriteStage)
      sb[0] ^= 0x40;  // the MMAs may still be reading B
  }
  if (bug != kNoCommitWait) {
    gg::mbarrier_wait(&bar, 0);
    if (bug != kNoFenceAfter)
      gg::tcgen05_fence_after_thread_sync();
  }
  const unsigned lanes =
      bug == kWrongLanes ? gg::umma::tmem_addr(tmem, 32 * ((warp + 1) % 4), 0) : my_lanes;
  const int cols = bug == kOutsideAllocation ? static_cast<int>(ncols) + 8 : n;
  for (int c = 0; c < cols; c += 8) {
    unsigned r[8];
    gg::tcgen05_ld_32x32b<8>(r, lanes + c);
    if (bug == kReadBeforeWaitLd) {
      float f;
      memcpy(&f, &r[0], sizeof f);
      reinterpret_cast<float*>(out)[(32 * warp + lane) * n] = f + 1.0f;  // BUG: before wait::ld
    }
    gg::tcgen05_wait_ld();
    for (int j = 0; j < 8; ++j)
      out[(32 * warp + lane) * n + c + j] = r[j];
  }
  gg::tcgen05_fence_before_thread_sync();
  __syncthreads();
  if (warp == 0 && bug != kLeak) {
    gg::tcgen05_fence_after_thread_sync();
    gg::tmem_dealloc(tmem, ncols);
    if (bug == kDoubleDealloc)
      gg::tmem_dealloc(tmem, ncols);
  }
}

// Allocation that waits: warp 0 takes all 512 columns, warp 1 asks for
// 128 and gets them once warp 0 has freed its columns (after a barrier that
// warp 1 passes before it allocates, so only the allocation waits). With
// `never_free`, warp 0 keeps its columns: a deadlock. out[w] = the column
// of warp w's allocation.
extern "C" __global__ void tmem_alloc_waits(unsigned* out, int never_free) {
  __shared__ unsigned slot[2];
  __shared__ __align__(8) u64 bar;
  const int warp = threadIdx.x / 32;
  if (threadIdx.x == 0) {
    gg::mbarrier_init(&bar, 32);
    gg::fence_mbarrier_init();
  }
  __syncthreads();
  if (warp == 0) {
    gg::tmem_alloc(&slot[0], 512);
    gg::mbarrier_arrive(&bar);
    out[0] = slot[0];
    if (!never_free)
      gg::tmem_dealloc(slot[0], 512);
  } else {
    gg::mbarrier_wait(&bar, 0);
    gg::tmem_alloc(&slot[1], 128);
    out[1] = slot[1];
    gg::tmem_dealloc(slot[1], 128);
  }
}

// Every width of tcgen05.ld / st (32x32b.x1 .. x128) on one allocation:
// each warp stores its lanes' values in[lane * 256 + col] with .xW and reads
// them back with .xR (W, R = `w`, `r`); out like tc_mma's, one copy per
// block (several blocks: a worker runs them one after another, and each
// starts with TMEM free and its permit to allocate).
template <int W>
__device__ void st_all(unsigned base, const unsigned* in, int lane_in_block) {
  for (int c = 0; c < 256; c += W) {
    unsigned r[W];
    for (int j = 0; j < W; ++j)
      r[j] = in[lane_in_block * 256 + c + j];
    gg::tcgen05_st_32x32b<W>(base + c, r);
  }
  gg::tcgen05_wait_st();
}
template <int R>
__device__ void ld_all(unsigned base, unsigned* out, int lane_in_block) {
  for (int c = 0; c < 256; c += R) {
    unsigned r[R];
    gg::tcgen05_ld_32x32b<R>(r, base + c);
    gg::tcgen05_wait_ld();
    for (int j = 0; j < R; ++j)
      out[lane_in_block * 256 + c + j] = r[j];
  }
}

extern "C" __global__ void tmem_ld_st_widths(const unsigned* in, unsigned* out, int w, int r) {
  __shared__ unsigned slot;
  const int warp = threadIdx.x / 32;
  if (warp == 0)
    gg::tmem_alloc(&slot, 256);
  gg::tcgen05_fence_before_thread_sync();
  __syncthreads();
  gg::tcgen05_fence_after_thread_sync();
  const unsigned base = gg::umma::tmem_addr(slot, 32 * (warp % 4), 0);
  const int lb = threadIdx.x;
  out += blockIdx.x * 128 * 256;
  switch (w) {
    case 1: st_all<1>(base, in, lb); break;
    case 2: st_all<2>(base, in, lb); break;
    case 4: st_all<4>(base, in, lb); break;
    case 8: st_all<8>(base, in, lb); break;
    case 16: st_all<16>(base, in, lb); break;
    case 32: st_all<32>(base, in, lb); break;
    case 64: st_all<64>(base, in, lb); break;
    default: st_all<128>(base, in, lb); break;
  }
  switch (r) {
    case 1: ld_all<1>(base, out, lb); break;
    case 2: ld_all<2>(base, out, lb); break;
    case 4: ld_all<4>(base, out, lb); break;
    case 8: ld_all<8>(base, out, lb); break;
    case 16: ld_all<16>(base, out, lb); break;
    case 32: ld_all<32>(base, out, lb); break;
    case 64: ld_all<64>(base, out, lb); break;
    default: ld_all<128>(base, out, lb); break;
  }
  gg::tcgen05_fence_before_thread_sync();
  __syncthreads();
  if (warp == 0) {
    gg::tcgen05_fence_after_thread_sync();
    gg::tmem_relinquish_alloc_permit();
    gg::tmem_dealloc(slot, 256);
  }
}

// tcgen05.ld.16x256b: each warp stores in[lane * 256 + col] into its lanes
// with 32x32b, then reads each half of its lanes (16 from 32 (w % 4), then
// from + 16) with 16x256b.x<num>: out[((w * 2 + half) * 32 + t) * 128 + j]
// is register j of thread t.
template <int kNum>
__device__ void ld16_all(unsigned base, unsigned* out, int warp, int lane) {
  for (int half = 0; half < 2; ++half) {
    unsigned r[4 * kNum];
    gg::tcgen05_ld_16x256b<kNum>(r, base + (static_cast<unsigned>(16 * half) << 16));
    gg::tcgen05_wait_ld();
    for (int j = 0; j < 4 * kNum; ++j)
      out[((warp * 2 + half) * 32 + lane) * 128 + j] = r[j];
  }
}

extern "C" __global__ void tmem_ld_16x256b(const unsigned* in, unsigned* out, int num) {
  __shared__ unsigned slot;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (warp == 0)
    gg::tmem_alloc(&slot, 256);
  gg::tcgen05_fence_before_thread_sync();
  __syncthreads();
  gg::tcgen05_fence_after_thread_sync();
  const unsigned base = gg::umma::tmem_addr(slot, 32 * (warp % 4), 0);
  st_all<32>(base, in, threadIdx.x);
  switch (num) {
    case 1: ld16_all<1>(base, out, warp, lane); break;
    case 2: ld16_all<2>(base, out, warp, lane); break;
    case 4: ld16_all<4>(base, out, warp, lane); break;
    case 8: ld16_all<8>(base, out, warp, lane); break;
    case 16: ld16_all<16>(base, out, warp, lane); break;
    default: ld16_all<32>(base, out, warp, lane); break;
  }
  gg::tcgen05_fence_before_thread_sync();
  __syncthreads();
  if (warp == 0) {
    gg::tcgen05_fence_after_thread_sync();
    gg::tmem_dealloc(slot, 256);
  }
}

// One accumulator used twice (as a persistent kernel's tiles do): round r,
// thread 0 issues D = (r ? -A : A) * B^T (bf16, M = 128, N = 64, K = 16,
// K-major images with the 128-byte swizzle; round 1 waits on `empty` for
// the epilogue of round 0) and commits to `full`; every thread waits on
// `full`, reads its lane into out[(r * 128 + lane) * 64 + col], then
// tcgen05.fence::before_thread_sync (unless `bug`) and arrives on `empty`.
extern "C" __global__ void __launch_bounds__(128, 1)
    acc_reuse(const unsigned char* a_img, const unsigned char* b_img, unsigned* out, int bug) {
  unsigned char* sa = smem_1024();
  unsigned char* sb = sa + 16384;  // 128 rows of 128 bytes (K = 16 in the first 32 of each)
  __shared__ __align__(8) u64 full, empty;
  __shared__ unsigned slot;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (warp == 0)
    gg::tmem_alloc(&slot, 64);
  if (threadIdx.x == 0) {
    gg::mbarrier_init(&full, 1);
    gg::mbarrier_init(&empty, 128);
    gg::fence_mbarrier_init();
  }
  for (int i = threadIdx.x; i < 16384; i += blockDim.x)
    sa[i] = a_img[i];
  for (int i = threadIdx.x; i < 8192; i += blockDim.x)
    sb[i] = b_img[i];
  gg::fence_proxy_async();
  gg::tcgen05_fence_before_thread_sync();
  __syncthreads();
  gg::tcgen05_fence_after_thread_sync();
  const unsigned tmem = slot;
  for (int round = 0; round < 2; ++round) {
    if (threadIdx.x == 0) {
      if (round > 0) {
        gg::mbarrier_wait(&empty, (round - 1) & 1);
        gg::tcgen05_fence_after_thread_sync();
      }
      const unsigned idesc =
          gg::umma::instr_desc(Type::bf16, Type::bf16, 128, 64, Major::K, Major::K, round == 1);
      gg::tcgen05_mma_f16(tmem, gg::make_umma_desc(sa, 16, 1024, Swizzle::b128),
                          gg::make_umma_desc(sb, 16, 1024, Swizzle::b128), idesc, false);
      gg::tcgen05_commit(&full);
    }
    gg::mbarrier_wait(&full, round & 1);
    gg::tcgen05_fence_after_thread_sync();
    for (int c = 0; c < 64; c += 16) {
      unsigned r[16];
      gg::tcgen05_ld_32x32b<16>(r, gg::umma::tmem_addr(tmem, 32 * warp, c));
      gg::tcgen05_wait_ld();
      for (int j = 0; j < 16; ++j)
        out[(round * 128 + 32 * warp + lane) * 64 + c + j] = r[j];
    }
    if (!bug)
      gg::tcgen05_fence_before_thread_sync();
    gg::mbarrier_arrive(&empty);
  }
  gg::tcgen05_fence_before_thread_sync();
  __syncthreads();
  if (warp == 0) {
    gg::tcgen05_fence_after_thread_sync();
    gg::tmem_dealloc(tmem, 64);
  }
}

// A one-stage TMA + tcgen05 pipeline: D (128 x 64, f32, TMEM) = A (128 x k,
// bf16, row-major) * B (64 x k, bf16, row-major)^T, K tiles of 64 loaded by
// TMA with the 128-byte swizzle into one stage that every K tile reuses.
// Thread 32 produces (waits on `empty` before refilling the stage), thread 0
// issues four MMAs per K tile and commits them to `empty`, then once more to
// `done`, on which every thread waits before reading its lanes of D:
// out[row * 64 + col]. `bug`: 1 the producer refills the stage once the
// MMAs are *issued* (an mbarrier the MMA thread arrives on after its commit)
// instead of completed; 2 the descriptors say 64-byte swizzle.
extern "C" __global__ void __launch_bounds__(128, 1)
    tma_mma(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
            float* out, int k, int bug) {
  constexpr int kBK = 64, kABytes = 128 * kBK * 2, kBBytes = 64 * kBK * 2;
  unsigned char* sa = smem_1024();
  unsigned char* sb = sa + kABytes;
  __shared__ __align__(8) u64 full, empty, issued, done;
  __shared__ unsigned slot;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int k_tiles = k / kBK;
  if (warp == 0)
    gg::tmem_alloc(&slot, 64);
  if (threadIdx.x == 0) {
    gg::mbarrier_init(&full, 1);
    gg::mbarrier_init(&empty, 1);
    gg::mbarrier_init(&issued, 1);
    gg::mbarrier_init(&done, 1);
    gg::fence_mbarrier_init();
  }
  gg::tcgen05_fence_before_thread_sync();
  __syncthreads();
  gg::tcgen05_fence_after_thread_sync();
  const unsigned tmem = slot;
  if (threadIdx.x == 32) {
    for (int kt = 0; kt < k_tiles; ++kt) {
      if (kt > 0)
        gg::mbarrier_wait(bug == 1 ? &issued : &empty, (kt - 1) & 1);
      gg::mbarrier_arrive_expect_tx(&full, kABytes + kBBytes);
      gg::tma_load_2d(sa, &map_a, &full, kt * kBK, 0);
      gg::tma_load_2d(sb, &map_b, &full, kt * kBK, 0);
    }
  } else if (threadIdx.x == 0) {
    const unsigned idesc = gg::umma::instr_desc(Type::bf16, Type::bf16, 128, 64, Major::K, Major::K);
    const Swizzle sw = bug == 2 ? Swizzle::b64 : Swizzle::b128;
    for (int kt = 0; kt < k_tiles; ++kt) {
      gg::mbarrier_wait(&full, kt & 1);
      gg::tcgen05_fence_after_thread_sync();
      for (int kb = 0; kb < kBK / 16; ++kb) {
        // K-major, 128-byte rows, 8-row groups 1024 bytes apart; the next
        // 16 elements of K are 32 bytes further into the swizzled rows.
        const u64 da = gg::make_umma_desc(sa + kb * 32, 16, 1024, sw);
        const u64 db = gg::make_umma_desc(sb + kb * 32, 16, 1024, sw);
        gg::tcgen05_mma_f16(tmem, da, db, idesc, kt > 0 || kb > 0);
      }
      gg::tcgen05_commit(&empty);
      gg::mbarrier_arrive(&issued);
    }
    gg::tcgen05_commit(&done);
  }
  gg::mbarrier_wait(&done, 0);
  gg::tcgen05_fence_after_thread_sync();
  for (int c = 0; c < 64; c += 16) {
    unsigned r[16];
    gg::tcgen05_ld_32x32b<16>(r, gg::umma::tmem_addr(tmem, 32 * warp, c));
    gg::tcgen05_wait_ld();
    for (int j = 0; j < 16; ++j)
      memcpy(&out[(32 * warp + lane) * 64 + c + j], &r[j], 4);
  }
  gg::tcgen05_fence_before_thread_sync();
  __syncthreads();
  if (warp == 0) {
    gg::tcgen05_fence_after_thread_sync();
    gg::tmem_dealloc(tmem, 64);
  }
}

// ---------------------------------------------------------------------------
// The host program (emulator).
#if !defined(__CUDACC__)
extern "C" int gg_emu_host_input(const char* name, const void** data, size_t* bytes);
extern "C" void gg_emu_host_output(const char* name, const void* data, size_t bytes);

namespace {

std::vector<unsigned char> input(const char* name) {
  const void* data = nullptr;
  size_t bytes = 0;
  if (!gg_emu_host_input(name, &data, &bytes))
    return {};
  const auto* q = static_cast<const unsigned char*>(data);
  return std::vector<unsigned char>(q, q + bytes);
}

void* device_copy(const std::vector<unsigned char>& host, size_t min_bytes = 0) {
  void* q = nullptr;
  cudaMalloc(&q, std::max(host.size(), min_bytes));
  if (!host.empty())
    cudaMemcpy(q, host.data(), host.size(), cudaMemcpyHostToDevice);
  return q;
}

void output(const char* name, const void* q, size_t bytes) {
  std::vector<unsigned char> h(bytes);
  cudaMemcpy(h.data(), q, bytes, cudaMemcpyDeviceToHost);
  gg_emu_host_output(name, h.data(), h.size());
}

int run_mma() {
  const std::vector<unsigned char> params = input("params");
  std::vector<long long> p(kParams);
  std::memcpy(p.data(), params.data(), sizeof(long long) * kParams);
  const auto* dp = static_cast<const long long*>(device_copy(params));
  const auto* da = static_cast<const unsigned char*>(device_copy(input("a")));
  const auto* db = static_cast<const unsigned char*>(device_copy(input("b")));
  const auto* dc = static_cast<const unsigned*>(device_copy(input("c")));
  const size_t out_bytes = 128 * static_cast<size_t>(p[kN]) * 4;
  auto* dout = static_cast<unsigned*>(device_copy(std::vector<unsigned char>(out_bytes, 0xFF)));
  const int smem = 1024 + static_cast<int>(p[kABytes] + p[kBBytes]);
  cudaFuncSetAttribute(tc_mma, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  tc_mma<<<1, 128, smem>>>(dp, da, db, dc, dout);
  if (cudaGetLastError() != cudaSuccess)
    return 2;
  output("d", dout, out_bytes);
  return 0;
}

int run_alloc_waits() {
  const std::vector<unsigned char> flag = input("never_free");
  auto* dout = static_cast<unsigned*>(device_copy(std::vector<unsigned char>(8, 0xFF)));
  tmem_alloc_waits<<<1, 64>>>(dout, flag.empty() ? 0 : flag[0]);
  if (cudaGetLastError() != cudaSuccess)
    return 2;
  output("out", dout, 8);
  return 0;
}

int run_widths() {
  const std::vector<unsigned char> wr = input("widths");
  const auto* din = static_cast<const unsigned*>(device_copy(input("in")));
  const int blocks = wr[2];
  const size_t bytes = static_cast<size_t>(blocks) * 128 * 256 * 4;
  auto* dout = static_cast<unsigned*>(device_copy(std::vector<unsigned char>(bytes, 0xFF)));
  tmem_ld_st_widths<<<blocks, 128>>>(din, dout, wr[0], wr[1]);
  if (cudaGetLastError() != cudaSuccess)
    return 2;
  output("out", dout, bytes);
  return 0;
}

int run_ld16() {
  const std::vector<unsigned char> num = input("num");
  const auto* din = static_cast<const unsigned*>(device_copy(input("in")));
  const size_t bytes = 8 * 32 * 128 * 4;
  auto* dout = static_cast<unsigned*>(device_copy(std::vector<unsigned char>(bytes, 0xFF)));
  tmem_ld_16x256b<<<1, 128>>>(din, dout, num[0]);
  if (cudaGetLastError() != cudaSuccess)
    return 2;
  output("out", dout, bytes);
  return 0;
}

int run_acc_reuse() {
  const std::vector<unsigned char> bug = input("bug");
  const auto* da = static_cast<const unsigned char*>(device_copy(input("a")));
  const auto* db = static_cast<const unsigned char*>(device_copy(input("b")));
  const size_t bytes = 2 * 128 * 64 * 4;
  auto* dout = static_cast<unsigned*>(device_copy(std::vector<unsigned char>(bytes, 0xFF)));
  const int smem = 1024 + 16384 + 8192;
  cudaFuncSetAttribute(acc_reuse, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  acc_reuse<<<1, 128, smem>>>(da, db, dout, bug[0]);
  if (cudaGetLastError() != cudaSuccess)
    return 2;
  output("d", dout, bytes);
  return 0;
}

PFN_cuTensorMapEncodeTiled_v12000 encode_fn() {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult status{};
  if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault,
                                       &status) != cudaSuccess ||
      status != cudaDriverEntryPointSuccess) {
    return nullptr;
  }
  return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
}

// A row-major bf16 matrix of rows x k, boxes of 64 (K) x box_rows, 128-byte swizzle.
CUresult encode_bf16(CUtensorMap* map, void* base, unsigned rows, unsigned k, unsigned box_rows) {
  const cuuint64_t dims[2] = {k, rows};
  const cuuint64_t strides[1] = {2ull * k};
  const cuuint32_t box[2] = {64, box_rows};
  const cuuint32_t estr[2] = {1, 1};
  return encode_fn()(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, base, dims, strides, box, estr,
                     CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                     CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
}

int run_tma_mma() {
  const std::vector<unsigned char> kb = input("k_bug");
  int k_bug[2];
  std::memcpy(k_bug, kb.data(), sizeof k_bug);
  void* a = device_copy(input("a"));
  void* b = device_copy(input("b"));
  auto* dout = static_cast<float*>(device_copy(std::vector<unsigned char>(128 * 64 * 4, 0xFF)));
  alignas(128) CUtensorMap ma, mb;
  if (encode_bf16(&ma, a, 128, k_bug[0], 128) != CUDA_SUCCESS ||
      encode_bf16(&mb, b, 64, k_bug[0], 64) != CUDA_SUCCESS)
    return 1;
  const int smem = 1024 + 128 * 64 * 2 + 64 * 64 * 2;
  cudaFuncSetAttribute(tma_mma, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  tma_mma<<<1, 128, smem>>>(ma, mb, dout, k_bug[0], k_bug[1]);
  if (cudaGetLastError() != cudaSuccess)
    return 2;
  output("d", dout, 128 * 64 * 4);
  return 0;
}

}  // namespace

extern "C" int gg_emu_host_main(void) {
  const std::vector<unsigned char> raw = input("case");
  const std::string c(raw.begin(), raw.end());
  if (c == "mma")
    return run_mma();
  if (c == "alloc_waits")
    return run_alloc_waits();
  if (c == "widths")
    return run_widths();
  if (c == "tma_mma")
    return run_tma_mma();
  if (c == "ld16")
    return run_ld16();
  if (c == "acc_reuse")
    return run_acc_reuse();
  return 4;
}
#endif
