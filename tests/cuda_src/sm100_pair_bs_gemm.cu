// A 2-CTA block-scaled GEMM tile on the cta_group::2 block-scaled primitives
// (gg_primitives_sm100.cuh, "Block-scaled cta_group::2";
// tests/cuda/sm100/test_cuda_sm100_pair_bs_gemm.py): C[M x N] = (A * SFA)
// (B * SFB)^T in f32, A and B K-major, MXFP8 (e4m3, kind::mxf8f6f4, ue8m0
// per 32), MXFP4 (e2m1, kind::mxf4, ue8m0 per 32) or NVFP4 (e2m1,
// kind::mxf4nvf4, ue4m3 per 16).
//
// Each 2-CTA cluster is one CTA pair computing the 256 x BN tile at rows
// 256 * cluster, columns BN * blockIdx.y. CTA v holds A's rows [128 v,
// 128 (v + 1)) and B's rows [BN / 2 v, BN / 2 (v + 1)) of the tile and gets
// D's rows [128 v, 128 (v + 1)) in its TMEM. Scales (CUTLASS's
// Sm1xxBlockScaledConfig atoms: 128 rows x 4 K blocks, 512 bytes): CTA v
// stages the SFA atoms of ITS 128 rows and the SFB atoms of ALL BN rows
// (not its half: the pair's MMA reads each CTA's B scales for every
// column it computes). One K tile is 128 bytes of a row (128 e4m3, 256 e2m1)
// and four MMAs, each 32 bytes further; KA = scale atoms a K tile per 128
// rows (MXFP8 1, MXFP4 2, NVFP4 4). MMA j takes K blocks vec j .. vec j +
// vec - 1 of the tile: atom vec j / 4, scale id vec j % 4.
//
// TMEM (tmem_alloc_pair, 2 BN columns): D at 0, SFA atom a at BN + 4 a,
// SFB atom a of rows 128 c .. at BN + 16 + (BN / 32) a + 4 c.
//
// Warps 0-3: the epilogue; warp 4 lane 0: the producer (every load a 2-CTA
// TMA load completing on the leader's full barrier); warp 5: TMEM
// allocation, and lane 0 of the leader's the MMA thread (the copies, the
// MMAs, the multicast commits). `bug` plants the errors of Bug.
//
// The host program (gg_emu_host_main, emulator only) launches with
// cudaLaunchKernelEx and a cluster attribute. nvcc compiles the kernels for
// sm_100a (the SASS test).
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
using gg::umma::BsKind;
using gg::umma::BsType;
using gg::umma::Major;
using gg::umma::ScaleFormat;
using gg::umma::Swizzle;

extern __shared__ __align__(16) unsigned char smem_raw[];
__device__ __forceinline__ unsigned char* smem_1024() {
  return reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) &
                                          ~uintptr_t{1023});
}

enum Bug : int {
  kNoBug = 0,
  kSfbSplitLikeB = 1,  // each CTA stages only the SFB atom of its own B half, as for B itself
  kSfCopyGroup1 = 2,   // the scales copied with tcgen05.cp.cta_group::1 (emulator build only)
  kWrongSfId = 3,      // the SFA id one K block off (MMA j takes id + 1)
  kSfFormatBit = 4,    // the scale format bit flipped (ue8m0 <-> ue4m3)
  kPeerSfEarly = 5,    // the odd CTA's stage released before the pair's copies and MMAs (the
                       // leader's on time)
  kOddIssues = 6,      // the odd CTA issues the pair's copies and MMAs
  kStageEarly = 7,     // both CTAs' stages released before the pair's copies and MMAs
};

constexpr int kStages = 2;
constexpr int kRowBytes = 128;  // one K tile of a row

// kKind: gg::umma::BsKind; kBN: the tile's N (128 or 256).
template <BsKind kKind, int kBN>
__device__ __forceinline__ void pair_bs_gemm(const CUtensorMap& map_a, const CUtensorMap& map_b,
                                             const CUtensorMap& map_sfa,
                                             const CUtensorMap& map_sfb, float* c, int n, int k,
                                             int bug) {
  constexpr int kVec = gg::umma::scale_vec(kKind);
  constexpr int kKa = kKind == BsKind::mxf8f6f4 ? 1 : kKind == BsKind::mxf4 ? 2 : 4;
  constexpr int kChunks = kBN / 128;  // SFB atoms along N
  constexpr int kABytes = 128 * kRowBytes, kBBytes = kBN / 2 * kRowBytes;
  constexpr int kSfaBytes = 512 * kKa, kSfbBytes = 512 * kKa * kChunks;
  constexpr int kTileK = kKind == BsKind::mxf8f6f4 ? kRowBytes : 2 * kRowBytes;  // elements
  constexpr unsigned kCols = 2 * kBN;
  constexpr unsigned kSfaCol = kBN, kSfbCol = kBN + 16;
  constexpr BsType kType = kKind == BsKind::mxf8f6f4 ? BsType::e4m3 : BsType::e2m1;
  constexpr ScaleFormat kSf = kKind == BsKind::mxf4nvf4 ? ScaleFormat::ue4m3 : ScaleFormat::ue8m0;
  unsigned char* sa = smem_1024();
  unsigned char* sb = sa + kStages * kABytes;
  unsigned char* ssfa = sb + kStages * kBBytes;
  unsigned char* ssfb = ssfa + kStages * kSfaBytes;
  __shared__ __align__(8) u64 full[kStages], empty[kStages], acc_full;
  __shared__ unsigned slot;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const unsigned rank = gg::cluster_ctarank(), v = rank % 2;
  const bool leader = v == 0;
  const int m0 = static_cast<int>(gg::cluster_id().x) * 256;
  const int n0 = static_cast<int>(blockIdx.y) * kBN;
  const int k_tiles = k / kTileK, k_atoms = k_tiles * kKa;  // scale atoms along K
  if (warp == 5)
    gg::tmem_alloc_pair(&slot, kCols);
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      gg::mbarrier_init(&full[s], 1);
      gg::mbarrier_init(&empty[s], 1);
    }
    gg::mbarrier_init(&acc_full, 1);
    gg::fence_mbarrier_init();
  }
  gg::tcgen05_fence_before_thread_sync();
  gg::cluster_sync();
  gg::tcgen05_fence_after_thread_sync();
  const unsigned tmem = slot;
  if (warp == 4 && lane == 0) {
    // The producer: this CTA's SFA atoms (its 128 rows), the SFB atoms of
    // every chunk of the tile's N, its A half and its B half.
    const int chunks = bug == kSfbSplitLikeB ? 1 : kChunks;
    const int load_sfb = (kSfbBytes / kChunks) * chunks;
    for (int kt = 0; kt < k_tiles; ++kt) {
      const int s = kt % kStages;
      if (kt >= kStages)
        gg::mbarrier_wait(&empty[s], ((kt / kStages) - 1) & 1);
      if (leader)
        gg::mbarrier_arrive_expect_tx(&full[s], 2 * (kABytes + kBBytes + kSfaBytes + load_sfb));
      const int rb = (m0 + 128 * static_cast<int>(v)) / 128;  // this CTA's row block
      gg::tma_load_2d_pair(ssfa + s * kSfaBytes, &map_sfa, &full[s], 0,
                           32 * (rb * k_atoms + kt * kKa));
      for (int ch = 0; ch < chunks; ++ch) {
        const int nb = n0 / 128 + (bug == kSfbSplitLikeB ? static_cast<int>(v) : ch);
        gg::tma_load_2d_pair(ssfb + s * kSfbBytes + ch * 512 * kKa, &map_sfb, &full[s], 0,
                             32 * (nb * k_atoms + kt * kKa));
      }
      gg::tma_load_2d_pair(sa + s * kABytes, &map_a, &full[s], kt * kRowBytes,
                           m0 + 128 * static_cast<int>(v));
      gg::tma_load_2d_pair(sb + s * kBBytes, &map_b, &full[s], kt * kRowBytes,
                           n0 + kBN / 2 * static_cast<int>(v));
    }
  } else if (warp == 5 && lane == 0 && (bug == kOddIssues ? !leader : leader)) {
    // The pair's MMA thread.
    const ScaleFormat sf =
        bug == kSfFormatBit ? (kSf == ScaleFormat::ue8m0 ? ScaleFormat::ue4m3 : ScaleFormat::ue8m0)
                            : kSf;
    const int chunks = bug == kSfbSplitLikeB ? 1 : kChunks;
    for (int kt = 0; kt < k_tiles; ++kt) {
      const int s = kt % kStages;
      if (bug != kOddIssues)  // (the odd CTA's full barriers get no bytes)
        gg::mbarrier_wait(&full[s], (kt / kStages) & 1);
      gg::tcgen05_fence_after_thread_sync();
      if (bug == kPeerSfEarly || bug == kStageEarly)  // too early: covers the earlier tiles only
        gg::tcgen05_commit_pair_multicast(&empty[s], bug == kPeerSfEarly ? 2 : 3);
      // The K tile's scales into both CTAs' TMEM (the same columns every K
      // tile: the copies are ordered after this thread's earlier MMAs).
      for (int a = 0; a < kKa; ++a) {
        const unsigned col_a = kSfaCol + 4 * a;
        const u64 da = gg::make_umma_desc(ssfa + s * kSfaBytes + a * 512, 16, 128, Swizzle::none);
#if defined(GG_EMU)
        // (ptxas refuses a kernel mixing cta_group::1 and cta_group::2.)
        if (bug == kSfCopyGroup1)
          gg::tcgen05_cp_32x128b_warpx4(tmem + col_a, da);
        else
#endif
          gg::tcgen05_cp_32x128b_warpx4_pair(tmem + col_a, da);
        for (int ch = 0; ch < chunks; ++ch) {
          const unsigned col_b = kSfbCol + (kBN / 32) * a + 4 * ch;
          const u64 db = gg::make_umma_desc(ssfb + s * kSfbBytes + (ch * kKa + a) * 512, 16, 128,
                                            Swizzle::none);
          gg::tcgen05_cp_32x128b_warpx4_pair(tmem + col_b, db);
        }
      }
      for (int j = 0; j < 4; ++j) {
        const int atom = kVec * j / 4, id = kVec * j % 4;
        const unsigned sfa_id = bug == kWrongSfId ? (id + 1) % 4 : id;
        const unsigned idesc = gg::umma::instr_desc_block_scaled(kKind, kType, kType, sf, 256, kBN,
                                                                 sfa_id, id);
        const u64 da = gg::make_umma_desc(sa + s * kABytes + j * 32, 16, 1024, Swizzle::b128);
        const u64 db = gg::make_umma_desc(sb + s * kBBytes + j * 32, 16, 1024, Swizzle::b128);
        const unsigned sfa = tmem + kSfaCol + 4 * atom, sfb = tmem + kSfbCol + (kBN / 32) * atom;
        const bool acc = kt > 0 || j > 0;
        if constexpr (kKind == BsKind::mxf8f6f4)
          gg::tcgen05_mma_mxf8f6f4_block_scaled_pair(tmem, da, db, idesc, sfa, sfb, acc);
        else if constexpr (kKind == BsKind::mxf4)
          gg::tcgen05_mma_mxf4_pair(tmem, da, db, idesc, sfa, sfb, acc);
        else
          gg::tcgen05_mma_mxf4nvf4_pair(tmem, da, db, idesc, sfa, sfb, acc);
      }
      if (bug != kStageEarly)
        gg::tcgen05_commit_pair_multicast(&empty[s], bug == kPeerSfEarly ? 1 : 3);
    }
    gg::tcgen05_commit_pair_multicast(&acc_full, 3);
  }
  if (warp < 4) {
    // The epilogue: this CTA's 128 rows (row m at lane m, column n at n).
    gg::mbarrier_wait(&acc_full, 0);
    gg::tcgen05_fence_after_thread_sync();
    const int row = m0 + 128 * static_cast<int>(v) + 32 * warp + lane;
    for (int col = 0; col < kBN; col += 32) {
      unsigned r[32];
      gg::tcgen05_ld_32x32b<32>(r, gg::umma::tmem_addr(tmem, 32 * warp, col));
      gg::tcgen05_wait_ld();
      for (int j = 0; j < 32; ++j)
        memcpy(&c[static_cast<long>(row) * n + n0 + col + j], &r[j], 4);
    }
  }
  gg::tcgen05_fence_before_thread_sync();
  __syncthreads();
  if (warp == 5) {
    gg::tcgen05_fence_after_thread_sync();
    gg::tmem_dealloc_pair(tmem, kCols);
  }
  gg::cluster_sync();
}

#define PAIR_BS_GEMM(NAME, KIND, BN)                                                             \
  extern "C" __global__ void __launch_bounds__(192, 1)                                           \
      NAME(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b, \
           const __grid_constant__ CUtensorMap map_sfa,                                          \
           const __grid_constant__ CUtensorMap map_sfb, float* c, int n, int k, int bug) {       \
    pair_bs_gemm<KIND, BN>(map_a, map_b, map_sfa, map_sfb, c, n, k, bug);                        \
  }

PAIR_BS_GEMM(pair_bs_mxf8_n128, BsKind::mxf8f6f4, 128)
PAIR_BS_GEMM(pair_bs_mxf8_n256, BsKind::mxf8f6f4, 256)
PAIR_BS_GEMM(pair_bs_mxf4_n128, BsKind::mxf4, 128)
PAIR_BS_GEMM(pair_bs_nvf4_n128, BsKind::mxf4nvf4, 128)
PAIR_BS_GEMM(pair_bs_nvf4_n256, BsKind::mxf4nvf4, 256)

// ---------------------------------------------------------------------------
// The host program (emulator): inputs "case" (the kernel's name), "dims"
// (int32 m, n, k, bug), "a", "b" (row-major bytes, K-major), "sfa", "sfb"
// (the scales in atom order); outputs "c" and "status".
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
  if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault,
                                       &status) != cudaSuccess ||
      status != cudaDriverEntryPointSuccess) {
    return nullptr;
  }
  return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
}

// A row-major byte matrix of rows x cols, boxes of box_cols x box_rows.
CUresult encode_u8(CUtensorMap* map, void* base, unsigned rows, unsigned cols, unsigned box_rows,
                   unsigned box_cols, CUtensorMapSwizzle swizzle) {
  const cuuint64_t dims[2] = {cols, rows};
  const cuuint64_t strides[1] = {cols};
  const cuuint32_t box[2] = {box_cols, box_rows};
  const cuuint32_t estr[2] = {1, 1};
  return encode_fn()(map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, base, dims, strides, box, estr,
                     CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                     CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
}

void* device_copy(const std::vector<unsigned char>& host) {
  void* q = nullptr;
  cudaMalloc(&q, host.size());
  cudaMemcpy(q, host.data(), host.size(), cudaMemcpyHostToDevice);
  return q;
}

}  // namespace

extern "C" int gg_emu_host_main(void) {
  const std::vector<unsigned char> raw = input("case");
  const std::string name(raw.begin(), raw.end());
  int dims[4];
  const std::vector<unsigned char> d = input("dims");
  std::memcpy(dims, d.data(), sizeof dims);
  const int m = dims[0], n = dims[1], k = dims[2], bug = dims[3];
  const bool fp4 = name.find("mxf8") == std::string::npos;
  const int bn = name.find("n256") != std::string::npos ? 256 : 128;
  const int ka = name.find("mxf8") != std::string::npos ? 1 : name.find("mxf4") != std::string::npos ? 2 : 4;
  const int k_bytes = fp4 ? k / 2 : k;
  const int k_atoms = k_bytes / kRowBytes * ka;
  using Kernel = void (*)(CUtensorMap, CUtensorMap, CUtensorMap, CUtensorMap, float*, int, int, int);
  const Kernel kernel = name == "pair_bs_mxf8_n128"   ? pair_bs_mxf8_n128
                        : name == "pair_bs_mxf8_n256" ? pair_bs_mxf8_n256
                        : name == "pair_bs_mxf4_n128" ? pair_bs_mxf4_n128
                        : name == "pair_bs_nvf4_n128" ? pair_bs_nvf4_n128
                                                      : pair_bs_nvf4_n256;
  void* da = device_copy(input("a"));
  void* db = device_copy(input("b"));
  void* dsfa = device_copy(input("sfa"));
  void* dsfb = device_copy(input("sfb"));
  float* dc = nullptr;
  cudaMalloc(reinterpret_cast<void**>(&dc), static_cast<size_t>(m) * n * 4);
  cudaMemset(dc, 0xFF, static_cast<size_t>(m) * n * 4);  // poison: every element must be written
  alignas(128) CUtensorMap ma, mb, msfa, msfb;
  if (encode_u8(&ma, da, m, k_bytes, 128, kRowBytes, CU_TENSOR_MAP_SWIZZLE_128B) != CUDA_SUCCESS ||
      encode_u8(&mb, db, n, k_bytes, bn / 2, kRowBytes, CU_TENSOR_MAP_SWIZZLE_128B) != CUDA_SUCCESS ||
      encode_u8(&msfa, dsfa, m / 128 * k_atoms * 32, 16, 32 * ka, 16, CU_TENSOR_MAP_SWIZZLE_NONE) !=
          CUDA_SUCCESS ||
      encode_u8(&msfb, dsfb, n / 128 * k_atoms * 32, 16, 32 * ka, 16, CU_TENSOR_MAP_SWIZZLE_NONE) !=
          CUDA_SUCCESS)
    return 1;
  const int smem = 1024 + kStages * (128 * kRowBytes + bn / 2 * kRowBytes + 512 * ka + 512 * ka * bn / 128);
  cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  cudaLaunchAttribute attr[1] = {};
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = 2;
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>(m / 256 * 2), static_cast<unsigned>(n / bn), 1);
  config.blockDim = dim3(192, 1, 1);
  config.dynamicSmemBytes = static_cast<size_t>(smem);
  config.attrs = attr;
  config.numAttrs = 1;
  const int status =
      static_cast<int>(cudaLaunchKernelEx(&config, kernel, ma, mb, msfa, msfb, dc, n, k, bug));
  gg_emu_host_output("status", &status, sizeof status);
  std::vector<float> out(static_cast<size_t>(m) * n);
  cudaMemcpy(out.data(), dc, out.size() * 4, cudaMemcpyDeviceToHost);
  gg_emu_host_output("c", out.data(), out.size() * 4);
  cudaFree(da);
  cudaFree(db);
  cudaFree(dsfa);
  cudaFree(dsfb);
  cudaFree(dc);
  return 0;
}
#endif
