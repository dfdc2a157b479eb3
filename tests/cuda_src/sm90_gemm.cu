// The Hopper tile GEMM body (gg_gemm_sm90.cuh) with hand-written tiles:
// dense bf16 with rhs [n, k] (f32 out) and rhs [k, n] (bf16 out), dense f16
// with a bias and relu, and grouped bf16 with both layouts
// (tests/cuda/sm90/test_cuda_sm90_gemm.py). The host program (gg_emu_host_main,
// emulator only) encodes the tensor maps through cudaGetDriverEntryPoint, as
// a launcher does, and runs the case its inputs name; nvcc compiles the
// kernels for sm_90a (the SASS test).
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "gg_runtime.cuh"

// GG_SM90_PLANTED: the test's copy of gg_gemm_sm90.cuh with one bug planted,
// in namespace gg::gemm::sm90_planted (tests/cuda/sm90/test_cuda_sm90_gemm.py).
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

template <class M, Format F, bool kNK, class O, Bias B, class BiasT, Activation A>
struct Cfg {
  using lhs_t = M;
  using rhs_t = M;
  using mma_t = M;
  using acc_t = float;
  using out_t = O;
  using lhs_scale_t = void;
  using rhs_scale_t = void;
  using bias_t = BiasT;
  static constexpr Format kRhs = F;
  static constexpr bool kRhsNK = kNK;
  static constexpr BFeed kBFeed = kNK ? BFeed::kLdmatrix : BFeed::kLdmatrixTrans;
  static constexpr ScaleMode kLhsScale = ScaleMode::kNone;
  static constexpr Format kLhsScaleFormat = Format::kNone;
  static constexpr int kLhsScaleBlockK = 0;
  static constexpr gg::gemm::ScaleLayout kLhsScaleLayout = gg::gemm::ScaleLayout::kRows;
  static constexpr ScaleMode kRhsScale = ScaleMode::kNone;
  static constexpr Format kRhsScaleFormat = Format::kNone;
  static constexpr int kRhsScaleBlockN = 0;
  static constexpr int kRhsScaleBlockK = 0;
  static constexpr gg::gemm::ScaleLayout kRhsScaleLayout = gg::gemm::ScaleLayout::kRows;
  static constexpr bool kFoldScales = false;
  static constexpr int kScaleBlockK = 0;
  static constexpr Bias kBias = B;
  static constexpr Activation kActivation = A;
  static constexpr bool kHasAlpha = false;
  static constexpr float kAlpha = 1.0f;
};

template <class C, int BN, int S>
struct Tile : C {
  static constexpr int kOut = static_cast<int>(sizeof(typename C::out_t));
  static constexpr int kBM = 128, kBN = BN, kBK = 64, kBNOut = BN, kThreads = 384;
  static constexpr int kStages = S, kGroupM = 2;
  static constexpr int kAStage = 128 * 64 * 2, kBStage = BN * 64 * 2;
  static constexpr int kCStride = BN + 16 / kOut, kCWarpBytes = 16 * kCStride * kOut;
  static constexpr int kSmemBytes = 1024 + S * (kAStage + kBStage) + 8 * kCWarpBytes + 2 * S * 8;
};

using BF = __nv_bfloat16;
// bf16 x bf16 [n, k] -> f32, 128 x 128 tiles, 4 stages.
using TNk = Tile<Cfg<BF, Format::kBF16, true, float, Bias::kNone, void, Activation::kNone>, 128, 4>;
// bf16 x bf16 [k, n] -> bf16, 128 x 256 tiles, 3 stages.
using TKn = Tile<Cfg<BF, Format::kBF16, false, BF, Bias::kNone, void, Activation::kNone>, 256, 3>;
// f16 x f16 [n, k] + bias [n], relu -> f16, 128 x 64 tiles, 2 stages.
using TF16 =
    Tile<Cfg<__half, Format::kF16, true, __half, Bias::kN, float, Activation::kRelu>, 64, 2>;
// Grouped bf16 [g, n, k] -> bf16 and [g, k, n] -> f32, 128 x 128, 3 stages.
using TGNk = Tile<Cfg<BF, Format::kBF16, true, BF, Bias::kNone, void, Activation::kNone>, 128, 3>;
using TGKn =
    Tile<Cfg<BF, Format::kBF16, false, float, Bias::kNone, void, Activation::kNone>, 128, 3>;

}  // namespace

extern "C" __global__ void __launch_bounds__(384, 1)
    sm90_dense_nk(const __grid_constant__ CUtensorMap map_a,
                  const __grid_constant__ CUtensorMap map_b, float* out, int m, int n, int k) {
  body::dense<TNk>(gg_smem, &map_a, &map_b, nullptr, out, m, n, k);
}

extern "C" __global__ void __launch_bounds__(384, 1)
    sm90_dense_kn(const __grid_constant__ CUtensorMap map_a,
                  const __grid_constant__ CUtensorMap map_b, BF* out, int m, int n, int k) {
  body::dense<TKn>(gg_smem, &map_a, &map_b, nullptr, out, m, n, k);
}

extern "C" __global__ void __launch_bounds__(384, 1)
    sm90_dense_f16(const __grid_constant__ CUtensorMap map_a,
                   const __grid_constant__ CUtensorMap map_b, const float* bias, __half* out, int m,
                   int n, int k) {
  body::dense<TF16>(gg_smem, &map_a, &map_b, bias, out, m, n, k);
}

extern "C" __global__ void __launch_bounds__(384, 1)
    sm90_grouped_nk(const __grid_constant__ CUtensorMap map_a,
                    const __grid_constant__ CUtensorMap map_b, BF* out, const int* workspace, int m,
                    int n, int k, int num_groups, int group_offset) {
  body::grouped<TGNk>(gg_smem, &map_a, &map_b, nullptr, out, workspace, m, n, k,
                                num_groups, group_offset);
}

extern "C" __global__ void __launch_bounds__(384, 1)
    sm90_grouped_kn(const __grid_constant__ CUtensorMap map_a,
                    const __grid_constant__ CUtensorMap map_b, float* out, const int* workspace,
                    int m, int n, int k, int num_groups, int group_offset) {
  body::grouped<TGKn>(gg_smem, &map_a, &map_b, nullptr, out, workspace, m, n, k,
                                num_groups, group_offset);
}

// The grouped GEMM's first launches (as the mma.sync path's): out =
// existing_out (or zeros), and the device worklist.
extern "C" __global__ void sm90_fill_bf16(BF* out, const BF* existing, long long total) {
  gg::gemm::fill(out, existing, total);
}
extern "C" __global__ void sm90_fill_f32(float* out, const float* existing, long long total) {
  gg::gemm::fill(out, existing, total);
}
extern "C" __global__ void sm90_worklist(const int* group_sizes, int num_groups, int group_offset,
                                         int g, int m, int* workspace) {
  gg::gemm::worklist(group_sizes, num_groups, group_offset, g, m, 128, workspace);
}

// ---------------------------------------------------------------------------
// The host program (emulator): inputs "case" (dense_nk, dense_kn, dense_f16,
// grouped_nk, grouped_kn), "dims" (ints: m, n, k, grid, then for grouped g,
// num_groups, group_offset, has_existing), "a", "b", "bias", "group_sizes",
// "existing"; output "out".
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

// A 16-bit row-major tensor [outer][mid][inner] (outer = 1: 2D), boxes of
// box_inner x box_mid (x 1), 128-byte swizzle.
CUresult encode(CUtensorMap* map, void* base, CUtensorMapDataType type, int rank,
                unsigned long long inner, unsigned long long mid, unsigned long long outer,
                unsigned box_inner, unsigned box_mid) {
  const cuuint64_t dims[3] = {inner, mid, outer};
  const cuuint64_t strides[2] = {inner * 2, inner * mid * 2};
  const cuuint32_t box[3] = {box_inner, box_mid, 1};
  const cuuint32_t estr[3] = {1, 1, 1};
  return encode_fn()(map, type, static_cast<cuuint32_t>(rank), base, dims, strides, box, estr,
                     CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
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
  const bool grouped = c.rfind("grouped", 0) == 0;
  const int g = grouped ? d[4] : 1;
  const bool nk = c == "dense_nk" || c == "dense_f16" || c == "grouped_nk";
  const bool f16 = c == "dense_f16";
  const size_t out_bytes =
      static_cast<size_t>(m) * n * (c == "dense_nk" || c == "grouped_kn" ? 4 : 2);
  void* a = device_copy(input("a"));
  void* b = device_copy(input("b"));
  void* out = device_copy(std::vector<unsigned char>(out_bytes, 0xFF));
  const CUtensorMapDataType type =
      f16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
  alignas(128) CUtensorMap ma, mb;
  const int bn = c == "dense_kn" ? 256 : c == "dense_f16" ? 64 : 128;
  if (encode(&ma, a, type, 2, k, m, 1, 64, 128) != CUDA_SUCCESS)
    return 1;
  const CUresult rb = nk ? encode(&mb, b, type, grouped ? 3 : 2, k, n, g, 64, bn)
                         : encode(&mb, b, type, grouped ? 3 : 2, n, k, g, 64, 64);
  if (rb != CUDA_SUCCESS)
    return 1;
  int rc = 0;
  if (c == "dense_nk") {
    rc = launch<TNk>(sm90_dense_nk, grid, ma, mb, static_cast<float*>(out), m, n, k);
  } else if (c == "dense_kn") {
    rc = launch<TKn>(sm90_dense_kn, grid, ma, mb, static_cast<BF*>(out), m, n, k);
  } else if (c == "dense_f16") {
    const float* bias = static_cast<const float*>(device_copy(input("bias")));
    rc = launch<TF16>(sm90_dense_f16, grid, ma, mb, bias, static_cast<__half*>(out), m, n, k);
  } else if (grouped) {
    const int num_groups = d[5], group_offset = d[6], has_existing = d[7];
    const int* sizes = static_cast<const int*>(device_copy(input("group_sizes")));
    int* ws = static_cast<int*>(device_copy({}, 4 * (2 + num_groups + 2 * (m / 128 + g + 1))));
    const void* existing = has_existing ? device_copy(input("existing")) : nullptr;
    const long long total = static_cast<long long>(m) * n;
    if (c == "grouped_nk") {
      sm90_fill_bf16<<<4, 256>>>(static_cast<BF*>(out), static_cast<const BF*>(existing), total);
    } else {
      sm90_fill_f32<<<4, 256>>>(static_cast<float*>(out), static_cast<const float*>(existing),
                                total);
    }
    sm90_worklist<<<1, 32>>>(sizes, num_groups, group_offset, g, m, ws);
    if (c == "grouped_nk") {
      rc = launch<TGNk>(sm90_grouped_nk, grid, ma, mb, static_cast<BF*>(out), ws, m, n, k,
                        num_groups, group_offset);
    } else {
      rc = launch<TGKn>(sm90_grouped_kn, grid, ma, mb, static_cast<float*>(out), ws, m, n, k,
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
