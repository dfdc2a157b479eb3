// A 2-CTA cluster GEMM tile on the cta_group::2 primitives
// (gg_primitives_sm100.cuh, "cta_group::2") with TMA multicast of the
// shared operand (tests/cuda/sm100/test_cuda_sm100_pair_gemm.py):
// C[M x N] = A[M x K] B[N x K]^T in f32, A and B K-major, bf16 (kind::f16)
// or e4m3 (kind::f8f6f4).
//
// A cluster of 2 * P CTAs is P CTA pairs (ranks 2p, 2p + 1); pair p computes
// the M x BN tile at rows M * cluster, columns BN * p (M = 256, or 128 for
// the _m128 kernels). CTA v of a pair holds A's rows [M / 2 v, M / 2 (v + 1))
// of the tile and B's rows [BN / 2 * v, BN / 2 * (v + 1)) of its pair's
// columns, and gets the accumulator's rows [M / 2 v, M / 2 (v + 1)) in its
// TMEM.
// The A half v is the same for every pair: CTA v of pair 0 loads it once
// with a 2-CTA multicast to CTA v of every pair. Every load completes on
// the full barrier of the destination's pair leader, whose MMA thread
// issues the pair's MMAs; each stage is released (empty barrier, one
// arrival per pair) by a multicast commit to every CTA of the cluster, the
// accumulator by a multicast commit to the pair.
//
// Warps 0-3: the epilogue (warp w reads TMEM lanes 32 w ..); warp 4 lane 0:
// the producer; warp 5: TMEM allocation, and lane 0 of the leader's the MMA
// thread. `bug` plants the errors the emulator must report (see Bug).
//
// The host program (gg_emu_host_main, emulator only) encodes the maps
// through cudaGetDriverEntryPoint and launches with cudaLaunchKernelEx and
// cudaLaunchAttributeClusterDimension, as a launcher does. nvcc compiles the
// kernel for sm_100a (the SASS test).
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

enum Bug : int {
  kNoBug = 0,
  kMaskMissesACta = 1,    // the A multicast leaves out the cluster's last CTA
  kReleasedEarly = 2,     // the stage's release is committed before the stage's MMAs: the pair's
                          // CTAs refill it while the pair's MMAs still read it
  kCommitOneCta = 3,      // the accumulator's commit arrives on the leader only
  kOddIssues = 4,         // the odd CTA issues the pair's MMAs
  kGroup1Alloc = 5,       // TMEM allocated with cta_group::1
  kPeerExits = 6,         // the odd CTAs exit after loading, before the cluster barrier
  kPeerSkipsRelease = 7,  // the odd CTAs refill a stage without waiting for its release
};

constexpr int kStages = 2;
constexpr int kRowBytes = 128;  // one K tile of a row: 64 bf16 or 128 e4m3 (128-byte swizzle)

// kFp8: e4m3 (kind::f8f6f4, K = 32 per MMA) instead of bf16 (kind::f16, K = 16).
// kM: the pair's M (256, or 128: 64 rows a CTA, each CTA's D in CuTe's
// "2x2" TMEM layout, umma::pair_d_lane).
template <bool kFp8, int kBN, int kM = 256>
__device__ __forceinline__ void pair_gemm(const CUtensorMap& map_a, const CUtensorMap& map_b, float* c,
                                          int n, int k, int bug) {
  constexpr int kRows = kM / 2;  // A rows (and D rows) a CTA
  constexpr int kABytes = kRows * kRowBytes, kBBytes = kBN / 2 * kRowBytes;
  constexpr int kEb = kFp8 ? 1 : 2, kBK = kRowBytes / kEb, kMmaK = kFp8 ? 32 : 16;
  unsigned char* sa = smem_1024();
  unsigned char* sb = sa + kStages * kABytes;
  __shared__ __align__(8) u64 full[kStages], empty[kStages], acc_full;
  __shared__ unsigned slot;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const unsigned rank = gg::cluster_ctarank(), ncta = gg::cluster_nctarank();
  const unsigned pair = rank / 2, v = rank % 2, npairs = ncta / 2;
  const bool leader = v == 0;
  const int m0 = static_cast<int>(gg::cluster_id().x) * kM, n0 = static_cast<int>(pair) * kBN;
  const int k_tiles = k / kBK;
  const unsigned short all = static_cast<unsigned short>((1u << ncta) - 1);
  const unsigned short pair_mask = static_cast<unsigned short>(3u << (2 * pair));
  if (warp == 5) {
#if defined(GG_EMU)
    // (ptxas refuses a function that mixes cta_group::1 and cta_group::2,
    // so this bug exists only in the emulator's build.)
    if (bug == kGroup1Alloc)
      gg::tmem_alloc(&slot, kBN);
    else
#endif
      gg::tmem_alloc_pair(&slot, kBN);
  }
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      gg::mbarrier_init(&full[s], 1);
      gg::mbarrier_init(&empty[s], npairs);
    }
    gg::mbarrier_init(&acc_full, 1);
    gg::fence_mbarrier_init();
  }
  // Every CTA's barriers are initialised before any peer signals them.
  gg::tcgen05_fence_before_thread_sync();
  gg::cluster_sync();
  gg::tcgen05_fence_after_thread_sync();
  const unsigned tmem = slot;
  if (bug == kPeerExits && !leader && !(warp == 4 && lane == 0))
    return;  // the odd CTAs' other threads leave at once, the producer after loading
  if (warp == 4 && lane == 0) {
    // The producer.
    unsigned short a_mask = 0;
    for (unsigned p = 0; p < npairs; ++p)
      a_mask = static_cast<unsigned short>(a_mask | (1u << (2 * p + v)));
    if (bug == kMaskMissesACta && v == (ncta - 1) % 2)
      a_mask = static_cast<unsigned short>(a_mask & ~(1u << (ncta - 1)));
    for (int kt = 0; kt < k_tiles; ++kt) {
      const int s = kt % kStages;
      if (kt >= kStages && !(bug == kPeerSkipsRelease && !leader))
        gg::mbarrier_wait(&empty[s], ((kt / kStages) - 1) & 1);
      if (leader)
        gg::mbarrier_arrive_expect_tx(&full[s], 2 * (kABytes + kBBytes));
      if (pair == 0)
        gg::tma_load_2d_multicast_pair(sa + s * kABytes, &map_a, &full[s], kt * kBK,
                                       m0 + kRows * static_cast<int>(v), a_mask);
      gg::tma_load_2d_pair(sb + s * kBBytes, &map_b, &full[s], kt * kBK, n0 + kBN / 2 * static_cast<int>(v));
    }
    if (bug == kPeerExits && !leader)
      return;  // no epilogue, no cluster barrier: the pair's MMAs still read this CTA
  } else if (warp == 5 && lane == 0 && (bug == kOddIssues ? !leader : leader)) {
    // The pair's MMA thread.
    const unsigned idesc = gg::umma::instr_desc(kFp8 ? Type::e4m3 : Type::bf16, kFp8 ? Type::e4m3 : Type::bf16,
                                                kM, kBN, Major::K, Major::K);
    for (int kt = 0; kt < k_tiles; ++kt) {
      const int s = kt % kStages;
      if (bug != kOddIssues)
        gg::mbarrier_wait(&full[s], (kt / kStages) & 1);
      gg::tcgen05_fence_after_thread_sync();
      if (bug == kReleasedEarly)
        gg::tcgen05_commit_pair_multicast(&empty[s], all);  // covers only the earlier stages' MMAs
      for (int kb = 0; kb < kBK / kMmaK; ++kb) {
        // K-major, 128-byte rows, 8-row groups 1024 bytes apart; the next
        // MMA's K slice starts 32 bytes further into the swizzled rows.
        const u64 da = gg::make_umma_desc(sa + s * kABytes + kb * 32, 16, 1024, Swizzle::b128);
        const u64 db = gg::make_umma_desc(sb + s * kBBytes + kb * 32, 16, 1024, Swizzle::b128);
        if constexpr (kFp8)
          gg::tcgen05_mma_f8f6f4_pair(tmem, da, db, idesc, kt > 0 || kb > 0);
        else
          gg::tcgen05_mma_f16_pair(tmem, da, db, idesc, kt > 0 || kb > 0);
      }
      if (bug != kReleasedEarly)
        gg::tcgen05_commit_pair_multicast(&empty[s], all);
    }
    gg::tcgen05_commit_pair_multicast(
        &acc_full, bug == kCommitOneCta ? static_cast<unsigned short>(1u << rank) : pair_mask);
  }
  if (warp < 4) {
    // The epilogue: this CTA's 128 rows of the pair's accumulator.
    gg::mbarrier_wait(&acc_full, 0);
    gg::tcgen05_fence_after_thread_sync();
    // Lane 32 w + lane holds row (lane index) for M = 256; for M = 128,
    // lanes 0-63 hold the rows' first N / 2 columns, lanes 64-127 the rest.
    const int tl = 32 * warp + lane;
    const int row = m0 + kRows * static_cast<int>(v) + (kM == 256 ? tl : tl % 64);
    const int col0 = kM == 256 ? 0 : kBN / 2 * (tl / 64);
    const int ncols = kM == 256 ? kBN : kBN / 2;
    for (int col = 0; col < ncols; col += 32) {
      unsigned r[32];
      gg::tcgen05_ld_32x32b<32>(r, gg::umma::tmem_addr(tmem, 32 * warp, col));
      gg::tcgen05_wait_ld();
      for (int j = 0; j < 32; ++j)
        memcpy(&c[static_cast<long>(row) * n + n0 + col0 + col + j], &r[j], 4);
    }
  }
  gg::tcgen05_fence_before_thread_sync();
  __syncthreads();
  if (warp == 5) {
    gg::tcgen05_fence_after_thread_sync();
#if defined(GG_EMU)
    if (bug == kGroup1Alloc)
      gg::tmem_dealloc(tmem, kBN);
    else
#endif
      gg::tmem_dealloc_pair(tmem, kBN);
  }
  // No CTA leaves while a peer may still touch its shared memory or TMEM.
  gg::cluster_sync();
}

#define PAIR_GEMM(NAME, FP8, BN, M)                                                                    \
  extern "C" __global__ void __launch_bounds__(192, 1)                                                 \
      NAME(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b, float* c, \
           int n, int k, int bug) {                                                                    \
    pair_gemm<FP8, BN, M>(map_a, map_b, c, n, k, bug);                                                 \
  }

PAIR_GEMM(pair_gemm_bf16_n128, false, 128, 256)
PAIR_GEMM(pair_gemm_bf16_n256, false, 256, 256)
PAIR_GEMM(pair_gemm_e4m3_n128, true, 128, 256)
PAIR_GEMM(pair_gemm_e4m3_n256, true, 256, 256)
PAIR_GEMM(pair_gemm_bf16_n128_m128, false, 128, 128)
PAIR_GEMM(pair_gemm_e4m3_n256_m128, true, 256, 128)

// ---------------------------------------------------------------------------
// The host program (emulator): inputs "case" (the kernel's name), "dims"
// (int32 m, n, k, cluster size, bug), "a", "b"; output "c" and "status".
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

PFN_cuTensorMapEncodeTiled_v12000 encode_fn() {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult status{};
  if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &status) !=
          cudaSuccess ||
      status != cudaDriverEntryPointSuccess) {
    return nullptr;
  }
  return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
}

// A row-major matrix of rows x k elements of `eb` bytes, boxes of 128 bytes
// of K x box_rows, 128-byte swizzle.
CUresult encode(CUtensorMap* map, void* base, int eb, unsigned rows, unsigned k, unsigned box_rows) {
  const cuuint64_t dims[2] = {k, rows};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(eb) * k};
  const cuuint32_t box[2] = {static_cast<cuuint32_t>(kRowBytes / eb), box_rows};
  const cuuint32_t estr[2] = {1, 1};
  return encode_fn()(map, eb == 2 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, base,
                     dims, strides, box, estr, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                     CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
}

}  // namespace

extern "C" int gg_emu_host_main(void) {
  const std::vector<unsigned char> raw = input("case");
  const std::string name(raw.begin(), raw.end());
  int dims[5];
  const std::vector<unsigned char> d = input("dims");
  std::memcpy(dims, d.data(), sizeof dims);
  const int m = dims[0], n = dims[1], k = dims[2], cluster = dims[3], bug = dims[4];
  const bool fp8 = name.find("e4m3") != std::string::npos;
  const int bn = name.find("n256") != std::string::npos ? 256 : 128;
  const int pm = name.find("m128") != std::string::npos ? 128 : 256;  // the pair's M
  const int eb = fp8 ? 1 : 2;
  void (*kernel)(CUtensorMap, CUtensorMap, float*, int, int, int) =
      name == "pair_gemm_bf16_n128"        ? pair_gemm_bf16_n128
      : name == "pair_gemm_bf16_n256"      ? pair_gemm_bf16_n256
      : name == "pair_gemm_e4m3_n128"      ? pair_gemm_e4m3_n128
      : name == "pair_gemm_bf16_n128_m128" ? pair_gemm_bf16_n128_m128
      : name == "pair_gemm_e4m3_n256_m128" ? pair_gemm_e4m3_n256_m128
                                           : pair_gemm_e4m3_n256;
  const std::vector<unsigned char> a = input("a"), b = input("b");
  void *da = nullptr, *db = nullptr;
  float* dc = nullptr;
  cudaMalloc(&da, a.size());
  cudaMalloc(&db, b.size());
  cudaMalloc(reinterpret_cast<void**>(&dc), static_cast<size_t>(m) * n * 4);
  cudaMemcpy(da, a.data(), a.size(), cudaMemcpyHostToDevice);
  cudaMemcpy(db, b.data(), b.size(), cudaMemcpyHostToDevice);
  cudaMemset(dc, 0xFF, static_cast<size_t>(m) * n * 4);  // poison: every element must be written
  alignas(128) CUtensorMap ma, mb;
  if (encode(&ma, da, eb, m, k, pm / 2) != CUDA_SUCCESS || encode(&mb, db, eb, n, k, bn / 2) != CUDA_SUCCESS)
    return 1;
  const int smem = 1024 + kStages * (pm / 2 + bn / 2) * kRowBytes;
  cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  cudaLaunchAttribute attr[1];
  std::memset(attr, 0, sizeof attr);
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = static_cast<unsigned>(cluster);
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  cudaLaunchConfig_t config;
  std::memset(&config, 0, sizeof config);
  // One cluster per pm rows; its pairs cover the columns.
  config.gridDim = dim3(static_cast<unsigned>(m / pm * cluster), 1, 1);
  config.blockDim = dim3(192, 1, 1);
  config.dynamicSmemBytes = static_cast<size_t>(smem);
  config.attrs = attr;
  config.numAttrs = 1;
  const int status = static_cast<int>(cudaLaunchKernelEx(&config, kernel, ma, mb, dc, n, k, bug));
  gg_emu_host_output("status", &status, sizeof status);
  std::vector<float> c(static_cast<size_t>(m) * n);
  cudaMemcpy(c.data(), dc, c.size() * 4, cudaMemcpyDeviceToHost);
  gg_emu_host_output("c", c.data(), c.size() * 4);
  cudaFree(da);
  cudaFree(db);
  cudaFree(dc);
  return 0;
}
#endif
