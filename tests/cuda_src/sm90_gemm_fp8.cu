// The Hopper tile GEMM body (gg_gemm_sm90.cuh) on FP8 with hand-written
// tiles: wgmma m64nNk32 from K-major tiles of 128 FP8 elements, the FP32
// promotion of each K tile, and the per-tensor, per-token and per-channel
// scales (f32 and e8m0) in the epilogue (tests/cuda/sm90/test_cuda_sm90_gemm_fp8.py).
// The host program (gg_emu_host_main, emulator only) encodes the tensor maps
// through cudaGetDriverEntryPoint, as a launcher does; nvcc compiles the
// kernels for sm_90a (the SASS test).
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "gg_runtime.cuh"

// GG_SM90_PLANTED: a copy of gg_gemm_sm90.cuh with one bug planted, in
// namespace gg::gemm::sm90_planted (tests/cuda/sm90/test_cuda_sm90_gemm_fp8.py).
#if defined(GG_SM90_PLANTED)
#include "sm90_planted.cuh"
namespace body = gg::gemm::sm90_planted;
#else
namespace body = gg::gemm::sm90;
#endif

extern __shared__ __align__(16) unsigned char gg_smem[];

namespace {

using gg::gemm::Activation;
using gg::gemm::BFeed;
using gg::gemm::Bias;
using gg::gemm::Format;
using gg::gemm::ScaleMode;

template <class M, Format F, class O, ScaleMode LS, Format LF, ScaleMode RS, Format RF, Bias B,
          class BiasT, Activation A, int kBlock = 0>
struct Cfg {
  using lhs_t = M;
  using rhs_t = M;
  using mma_t = M;
  using acc_t = float;
  using out_t = O;
  using lhs_scale_t = gg::gemm::storage_t<LF>;
  using rhs_scale_t = gg::gemm::storage_t<RF>;
  using bias_t = BiasT;
  static constexpr Format kRhs = F;
  static constexpr bool kRhsNK = true;
  static constexpr BFeed kBFeed = BFeed::kLdmatrix;
  static constexpr ScaleMode kLhsScale = LS;
  static constexpr Format kLhsScaleFormat = LF;
  static constexpr int kLhsScaleBlockK = LS == ScaleMode::kPerTokenGroup ? kBlock : 0;
  static constexpr gg::gemm::ScaleLayout kLhsScaleLayout = gg::gemm::ScaleLayout::kRows;
  static constexpr ScaleMode kRhsScale = RS;
  static constexpr Format kRhsScaleFormat = RF;
  static constexpr int kRhsScaleBlockN = RS == ScaleMode::kBlock ? kBlock : 0;
  static constexpr int kRhsScaleBlockK = RS == ScaleMode::kBlock ? kBlock : 0;
  static constexpr gg::gemm::ScaleLayout kRhsScaleLayout = gg::gemm::ScaleLayout::kRows;
  static constexpr bool kFoldScales = false;
  static constexpr int kScaleBlockK = kBlock;
  static constexpr Bias kBias = B;
  static constexpr Activation kActivation = A;
  static constexpr bool kHasAlpha = false;
  static constexpr float kAlpha = 1.0f;
};

// K tiles of 128 FP8 elements: one 128-byte row per tile row.
template <class C, int BN, int S>
struct Tile : C {
  static constexpr int kOut = static_cast<int>(sizeof(typename C::out_t));
  static constexpr int kBM = 128, kBN = BN, kBK = 128, kBNOut = BN, kThreads = 384;
  static constexpr int kStages = S, kGroupM = 2;
  static constexpr int kAStage = 128 * 128, kBStage = BN * 128;
  static constexpr int kCStride = BN + 16 / kOut, kCWarpBytes = 16 * kCStride * kOut;
  static constexpr int kSmemBytes = 1024 + S * (kAStage + kBStage) + 8 * kCWarpBytes + 2 * S * 8;
};

using BF = __nv_bfloat16;
using E4 = __nv_fp8_e4m3;
using E5 = __nv_fp8_e5m2;
// e4m3 x e4m3 [n, k], per-token f32 x per-channel f32 -> bf16; 128 x 128, 4 stages.
using TTok = Tile<Cfg<E4, Format::kE4M3, BF, ScaleMode::kPerToken, Format::kF32,
                      ScaleMode::kPerChannel, Format::kF32, Bias::kNone, void, Activation::kNone>,
                  128, 4>;
// e5m2 x e5m2 [n, k], per-tensor f32 x per-channel e8m0, bias [n], gelu -> f32;
// 128 x 64, 6 stages.
using TE5 = Tile<Cfg<E5, Format::kE5M2, float, ScaleMode::kPerTensor, Format::kF32,
                     ScaleMode::kPerChannel, Format::kE8M0, Bias::kN, float, Activation::kGelu>,
                 64, 6>;
// Grouped e4m3 [g, n, k], per-token f32 x per-channel f32 [g, n] -> bf16.
using TGrp = TTok;
// DeepSeek-style block-scaled W8A8: e4m3, 1 x 128 lhs groups and 128 x 128
// rhs blocks, f32 (TBlk) or e8m0 (TBlkE8) scales, promoted each K tile -> bf16.
using TBlk = Tile<Cfg<E4, Format::kE4M3, BF, ScaleMode::kPerTokenGroup, Format::kF32,
                      ScaleMode::kBlock, Format::kF32, Bias::kNone, void, Activation::kNone, 128>,
                  128, 4>;
using TBlkE8 =
    Tile<Cfg<E4, Format::kE4M3, BF, ScaleMode::kPerTokenGroup, Format::kE8M0, ScaleMode::kBlock,
             Format::kE8M0, Bias::kNone, void, Activation::kNone, 128>,
         128, 4>;

static_assert(body::runs<TTok>() && body::qualifies<TTok>() && body::qualifies<TBlk>(),
              "the generator routes FP8, per-token/channel and block-scaled, to the body");

}  // namespace

extern "C" __global__ void __launch_bounds__(384, 1)
    sm90_fp8_token_channel(const __grid_constant__ CUtensorMap map_a,
                           const __grid_constant__ CUtensorMap map_b, const float* lhs_scale,
                           const float* rhs_scale, BF* out, int m, int n, int k) {
  body::dense<TTok>(gg_smem, &map_a, &map_b, lhs_scale, rhs_scale, nullptr, out, m, n,
                              k);
}

extern "C" __global__ void __launch_bounds__(384, 1)
    sm90_fp8_e5m2_e8m0(const __grid_constant__ CUtensorMap map_a,
                       const __grid_constant__ CUtensorMap map_b, const float* lhs_scale,
                       const unsigned char* rhs_scale, const float* bias, float* out, int m, int n,
                       int k) {
  body::dense<TE5>(gg_smem, &map_a, &map_b, lhs_scale, rhs_scale, bias, out, m, n, k);
}

extern "C" __global__ void __launch_bounds__(384, 1)
    sm90_fp8_grouped(const __grid_constant__ CUtensorMap map_a,
                     const __grid_constant__ CUtensorMap map_b, const float* lhs_scale,
                     const float* rhs_scale, BF* out, const int* workspace, int m, int n, int k,
                     int num_groups, int group_offset) {
  body::grouped<TGrp>(gg_smem, &map_a, &map_b, lhs_scale, rhs_scale, nullptr, out,
                                workspace, m, n, k, num_groups, group_offset);
}

extern "C" __global__ void __launch_bounds__(384, 1)
    sm90_fp8_block(const __grid_constant__ CUtensorMap map_a,
                   const __grid_constant__ CUtensorMap map_b, const float* lhs_scale,
                   const float* rhs_scale, BF* out, int m, int n, int k) {
  body::dense<TBlk>(gg_smem, &map_a, &map_b, lhs_scale, rhs_scale, nullptr, out, m, n, k);
}

extern "C" __global__ void __launch_bounds__(384, 1)
    sm90_fp8_block_e8m0(const __grid_constant__ CUtensorMap map_a,
                        const __grid_constant__ CUtensorMap map_b, const unsigned char* lhs_scale,
                        const unsigned char* rhs_scale, BF* out, int m, int n, int k) {
  body::dense<TBlkE8>(gg_smem, &map_a, &map_b, lhs_scale, rhs_scale, nullptr, out, m, n, k);
}

extern "C" __global__ void __launch_bounds__(384, 1)
    sm90_fp8_block_grouped(const __grid_constant__ CUtensorMap map_a,
                           const __grid_constant__ CUtensorMap map_b, const float* lhs_scale,
                           const float* rhs_scale, BF* out, const int* workspace, int m, int n,
                           int k, int num_groups, int group_offset) {
  body::grouped<TBlk>(gg_smem, &map_a, &map_b, lhs_scale, rhs_scale, nullptr, out, workspace, m,
                      n, k, num_groups, group_offset);
}

extern "C" __global__ void sm90_fp8_fill_bf16(BF* out, const BF* existing, long long total) {
  gg::gemm::fill(out, existing, total);
}
extern "C" __global__ void sm90_fp8_worklist(const int* group_sizes, int num_groups,
                                             int group_offset, int g, int m, int* workspace) {
  gg::gemm::worklist(group_sizes, num_groups, group_offset, g, m, 128, workspace);
}

// ---------------------------------------------------------------------------
// The host program (emulator): inputs "case" (token_channel, e5m2_e8m0,
// grouped, block, block_e8m0, block_grouped), "dims" (ints: m, n, k, grid, then for grouped g, num_groups,
// group_offset, has_existing), "a", "b", "lhs_scale", "rhs_scale", "bias",
// "group_sizes", "existing"; output "out".
#if !defined(__CUDACC__)
extern "C" int gg_emu_host_input(const char* name, const void** data, size_t* bytes);
extern "C" void gg_emu_host_output(const char* name, const void* data, size_t bytes);

namespace {

std::vector<unsigned char> input(const char* name) {
  const void* data = nullptr;
  size_t bytes = 0;
  if (!gg_emu_host_input(name, &data, &bytes))
    return {};
  const auto* p = static_cast<const unsigned char*>(data);
  return std::vector<unsigned char>(p, p + bytes);
}

void* device_copy(const std::vector<unsigned char>& host, size_t min_bytes = 16) {
  void* p = nullptr;
  cudaMalloc(&p, std::max(host.size(), min_bytes));
  if (!host.empty())
    cudaMemcpy(p, host.data(), host.size(), cudaMemcpyHostToDevice);
  return p;
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

// A K-major FP8 tensor [outer][rows][k] (outer = 1: 2D), boxes of 128 x
// box_rows (x 1), 128-byte swizzle.
CUresult encode(CUtensorMap* map, void* base, int rank, unsigned long long k,
                unsigned long long rows, unsigned long long outer, unsigned box_rows) {
  const cuuint64_t dims[3] = {k, rows, outer};
  const cuuint64_t strides[2] = {k, k * rows};
  const cuuint32_t box[3] = {128, box_rows, 1};
  const cuuint32_t estr[3] = {1, 1, 1};
  return encode_fn()(map, CU_TENSOR_MAP_DATA_TYPE_UINT8, static_cast<cuuint32_t>(rank), base, dims,
                     strides, box, estr, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                     CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
}

template <class T, class K, class... Args>
int launch(K kernel, int grid, Args... args) {
  cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, T::kSmemBytes);
  kernel<<<grid, 384, T::kSmemBytes>>>(args...);
  return cudaGetLastError() == cudaSuccess ? 0 : 2;
}

}  // namespace

extern "C" int gg_emu_host_main(void) {
  const std::vector<unsigned char> raw = input("case");
  const std::string c(raw.begin(), raw.end());
  const std::vector<unsigned char> dims_raw = input("dims");
  std::vector<int> d(dims_raw.size() / 4);
  std::memcpy(d.data(), dims_raw.data(), d.size() * 4);
  const int m = d[0], n = d[1], k = d[2], grid = d[3];
  const bool grouped = c == "grouped" || c == "block_grouped";
  const int g = grouped ? d[4] : 1;
  const size_t out_bytes = static_cast<size_t>(m) * n * (c == "e5m2_e8m0" ? 4 : 2);
  void* a = device_copy(input("a"));
  void* b = device_copy(input("b"));
  const void* lhs_scale = device_copy(input("lhs_scale"));
  const void* rhs_scale = device_copy(input("rhs_scale"));
  void* out = device_copy(std::vector<unsigned char>(out_bytes, 0xFF));
  alignas(128) CUtensorMap ma, mb;
  const unsigned bn = c == "e5m2_e8m0" ? 64 : 128;
  if (encode(&ma, a, 2, k, m, 1, 128) != CUDA_SUCCESS ||
      encode(&mb, b, grouped ? 3 : 2, k, n, g, bn) != CUDA_SUCCESS) {
    return 1;
  }
  int rc = 0;
  if (c == "token_channel") {
    rc = launch<TTok>(sm90_fp8_token_channel, grid, ma, mb, static_cast<const float*>(lhs_scale),
                      static_cast<const float*>(rhs_scale), static_cast<BF*>(out), m, n, k);
  } else if (c == "e5m2_e8m0") {
    const float* bias = static_cast<const float*>(device_copy(input("bias")));
    rc = launch<TE5>(sm90_fp8_e5m2_e8m0, grid, ma, mb, static_cast<const float*>(lhs_scale),
                     static_cast<const unsigned char*>(rhs_scale), bias, static_cast<float*>(out),
                     m, n, k);
  } else if (c == "block") {
    rc = launch<TBlk>(sm90_fp8_block, grid, ma, mb, static_cast<const float*>(lhs_scale),
                      static_cast<const float*>(rhs_scale), static_cast<BF*>(out), m, n, k);
  } else if (c == "block_e8m0") {
    rc = launch<TBlkE8>(sm90_fp8_block_e8m0, grid, ma, mb,
                        static_cast<const unsigned char*>(lhs_scale),
                        static_cast<const unsigned char*>(rhs_scale), static_cast<BF*>(out), m, n,
                        k);
  } else if (grouped) {
    const int num_groups = d[5], group_offset = d[6], has_existing = d[7];
    const int* sizes = static_cast<const int*>(device_copy(input("group_sizes")));
    int* ws = static_cast<int*>(device_copy({}, 4 * (2 + num_groups + 2 * (m / 128 + g + 1))));
    const void* existing = has_existing ? device_copy(input("existing")) : nullptr;
    sm90_fp8_fill_bf16<<<4, 256>>>(static_cast<BF*>(out), static_cast<const BF*>(existing),
                                   static_cast<long long>(m) * n);
    sm90_fp8_worklist<<<1, 32>>>(sizes, num_groups, group_offset, g, m, ws);
    if (c == "grouped") {
      rc = launch<TGrp>(sm90_fp8_grouped, grid, ma, mb, static_cast<const float*>(lhs_scale),
                        static_cast<const float*>(rhs_scale), static_cast<BF*>(out), ws, m, n, k,
                        num_groups, group_offset);
    } else {
      rc = launch<TBlk>(sm90_fp8_block_grouped, grid, ma, mb, static_cast<const float*>(lhs_scale),
                        static_cast<const float*>(rhs_scale), static_cast<BF*>(out), ws, m, n, k,
                        num_groups, group_offset);
    }
  } else {
    return 4;
  }
  if (rc != 0)
    return rc;
  std::vector<unsigned char> h(out_bytes);
  cudaMemcpy(h.data(), out, out_bytes, cudaMemcpyDeviceToHost);
  gg_emu_host_output("out", h.data(), h.size());
  return 0;
}
#endif
