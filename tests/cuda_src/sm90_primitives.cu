// The Hopper primitives (gg_primitives_sm90.cuh): one small kernel per
// primitive, and a warp-specialized TMA + wgmma GEMM pipeline with planted
// bugs (tests/cuda/sm90/test_cuda_sm90_primitives.py). The host program
// (gg_emu_host_main, emulator only) encodes the tensor maps through
// cudaGetDriverEntryPoint, as a launcher does, and runs the case named by its
// input "case". nvcc compiles the kernels for sm_90a (the SASS test).
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "gg_runtime.cuh"

using gg::u32;
using gg::u64;

// The dynamic shared memory, rounded up to 1024 bytes (the 128-byte swizzle's
// period); launches ask for 1024 bytes more.
extern __shared__ __align__(16) unsigned char smem_raw[];
__device__ __forceinline__ unsigned char* smem_1024() {
  return reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) &
                                          ~uintptr_t{1023});
}

// ---------------------------------------------------------------------------
// mbarrier: 64 producers write a value each and arrive; 64 consumers wait for
// the phase and read. Three phases, so the parity flips.
extern "C" __global__ void mbarrier_phases(float* out) {
  __shared__ __align__(8) u64 bar;
  __shared__ float vals[64];
  const int t = threadIdx.x;
  if (t == 0) {
    gg::mbarrier_init(&bar, 64);
    gg::fence_mbarrier_init();
  }
  __syncthreads();
  for (int phase = 0; phase < 3; ++phase) {
    if (t < 64) {
      vals[t] = static_cast<float>(100 * phase + t);
      gg::mbarrier_arrive(&bar);
    } else {
      gg::mbarrier_wait(&bar, phase & 1);
      out[phase * 64 + (t - 64)] = vals[127 - t];
    }
    __syncthreads();
  }
  if (t == 0)
    gg::mbarrier_inval(&bar);
}

// A wait that never completes: 63 of 64 arrivals.
extern "C" __global__ void mbarrier_missing_arrive(float* out) {
  __shared__ __align__(8) u64 bar;
  const int t = threadIdx.x;
  if (t == 0) {
    gg::mbarrier_init(&bar, 64);
    gg::fence_mbarrier_init();
  }
  __syncthreads();
  if (t < 63)
    gg::mbarrier_arrive(&bar);
  if (t >= 64)
    gg::mbarrier_wait(&bar, 0);
  out[t] = 1.0f;
}

// ---------------------------------------------------------------------------
// TMA: one box to shared memory, its raw bytes back (the test unswizzles).
extern "C" __global__ void tma_load_box(const __grid_constant__ CUtensorMap map, unsigned char* out,
                                        int c0, int c1, int c2, int rank, int box_bytes) {
  unsigned char* smem = smem_1024();
  __shared__ __align__(8) u64 bar;
  if (threadIdx.x == 0) {
    gg::mbarrier_init(&bar, 1);
    gg::fence_mbarrier_init();
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    gg::prefetch_tensormap(&map);
    gg::mbarrier_arrive_expect_tx(&bar, box_bytes);
    if (rank == 2) {
      gg::tma_load_2d(smem, &map, &bar, c0, c1);
    } else {
      gg::tma_load_3d(smem, &map, &bar, c0, c1, c2);
    }
  }
  gg::mbarrier_wait(&bar, 0);
  for (int i = threadIdx.x; i < box_bytes; i += blockDim.x)
    out[i] = smem[i];
}

// TMA store: the threads write the box's raw bytes into shared memory, then
// fence.proxy.async (unless `skip_fence`), then one thread stores it.
extern "C" __global__ void tma_store_box(const __grid_constant__ CUtensorMap map,
                                         const unsigned char* in, int c0, int c1, int c2, int rank,
                                         int box_bytes, int skip_fence) {
  unsigned char* smem = smem_1024();
  for (int i = threadIdx.x; i < box_bytes; i += blockDim.x)
    smem[i] = in[i];
  if (!skip_fence)
    gg::fence_proxy_async();
  __syncthreads();
  if (threadIdx.x == 0) {
    if (rank == 2) {
      gg::tma_store_2d(&map, smem, c0, c1);
    } else {
      gg::tma_store_3d(&map, smem, c0, c1, c2);
    }
    gg::bulk_commit_group();
    gg::bulk_wait_group_read<0>();
    gg::bulk_wait_group<0>();
  }
}

// ---------------------------------------------------------------------------
// wgmma: the operands' shared-memory images (made by the test) are copied in
// with generic stores, fenced, and multiplied; each thread writes its N/2
// accumulators raw: out[t * N/2 + i].
template <int N>
__device__ void wgmma_one(const unsigned char* a_img, int a_bytes, const unsigned char* b_img,
                          int b_bytes, const u32* a_regs, float* out, u64 lbo_sbo_a, u64 lbo_sbo_b,
                          int kind, int accumulate) {
  unsigned char* smem = smem_1024();
  unsigned char* sa = smem;
  unsigned char* sb = smem + ((a_bytes + 1023) & ~1023);
  for (int i = threadIdx.x; i < a_bytes; i += blockDim.x)
    sa[i] = a_img[i];
  for (int i = threadIdx.x; i < b_bytes; i += blockDim.x)
    sb[i] = b_img[i];
  gg::fence_proxy_async();
  __syncthreads();
  // lbo_sbo: lbo | sbo << 20 | swizzle << 40 | trans << 44
  const auto desc = [](const void* p, u64 v) {
    return gg::make_smem_desc(p, static_cast<u32>(v & 0xFFFFF),
                              static_cast<u32>((v >> 20) & 0xFFFFF),
                              static_cast<gg::SmemSwizzle>((v >> 40) & 3));
  };
  const u64 da = desc(sa, lbo_sbo_a), db = desc(sb, lbo_sbo_b);
  const bool ta = (lbo_sbo_a >> 44) & 1, tb = (lbo_sbo_b >> 44) & 1;
  float d[N / 2];
  for (int i = 0; i < N / 2; ++i)
    d[i] = static_cast<float>(threadIdx.x % 7) - 3.0f;
  u32 a[4];
  for (int i = 0; i < 4; ++i)
    a[i] = a_regs[threadIdx.x * 4 + i];
  gg::wgmma_fence();
  gg::wgmma_fence_operand(d);
  switch (kind) {
    case 0:
      if (ta && tb)
        gg::wgmma_m64nNk16_bf16_ss<N, true, true>(d, da, db, accumulate);
      if (ta && !tb)
        gg::wgmma_m64nNk16_bf16_ss<N, true, false>(d, da, db, accumulate);
      if (!ta && tb)
        gg::wgmma_m64nNk16_bf16_ss<N, false, true>(d, da, db, accumulate);
      if (!ta && !tb)
        gg::wgmma_m64nNk16_bf16_ss<N>(d, da, db, accumulate);
      break;
    case 1:
      gg::wgmma_m64nNk16_f16_ss<N>(d, da, db, accumulate);
      break;
    case 2:
      if (tb) {
        gg::wgmma_m64nNk16_bf16_rs<N, true>(d, a, db, accumulate);
      } else {
        gg::wgmma_m64nNk16_bf16_rs<N>(d, a, db, accumulate);
      }
      break;
    case 3:
      gg::wgmma_m64nNk32_e4m3_ss<N>(d, da, db, accumulate);
      break;
    case 4:
      gg::wgmma_m64nNk32_e5m2_ss<N>(d, da, db, accumulate);
      break;
    case 5:
      gg::wgmma_m64nNk16_f16_rs<N>(d, a, db, accumulate);
      break;
  }
  gg::wgmma_commit_group();
  gg::wgmma_wait_group<0>();
  gg::wgmma_fence_operand(d);
  for (int i = 0; i < N / 2; ++i)
    out[threadIdx.x * (N / 2) + i] = d[i];
}

#define GG_WGMMA_KERNEL(N)                                                                     \
  extern "C" __global__ void wgmma_n##N(                                                       \
      const unsigned char* a_img, int a_bytes, const unsigned char* b_img, int b_bytes,        \
      const u32* a_regs, float* out, u64 lbo_sbo_a, u64 lbo_sbo_b, int kind, int accumulate) { \
    wgmma_one<N>(a_img, a_bytes, b_img, b_bytes, a_regs, out, lbo_sbo_a, lbo_sbo_b, kind,      \
                 accumulate);                                                                  \
  }
GG_WGMMA_KERNEL(8)
GG_WGMMA_KERNEL(64)
GG_WGMMA_KERNEL(128)
GG_WGMMA_KERNEL(256)

// Reads the accumulators before wgmma.wait_group (a planted bug).
extern "C" __global__ void wgmma_early_read(const unsigned char* img, float* out) {
  unsigned char* smem = smem_1024();
  for (int i = threadIdx.x; i < 2048; i += blockDim.x)
    smem[i] = img[i];
  gg::fence_proxy_async();
  __syncthreads();
  const u64 da = gg::make_smem_desc(smem, 128, 256, gg::SmemSwizzle::none);
  const u64 db = gg::make_smem_desc(smem + 2048 - 256, 128, 256, gg::SmemSwizzle::none);
  float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  gg::wgmma_fence();
  gg::wgmma_m64nNk16_bf16_ss<8>(d, da, db, false);
  gg::wgmma_commit_group();
  out[threadIdx.x] = d[0] * 2.0f;  // BUG: no wgmma_wait_group<0>() before reading d
  gg::wgmma_wait_group<0>();
}

// wgmma with A in registers over kRsTiles K tiles of 16 (bf16, N = 64): the
// A fragment of tile kt is a_regs[(kt * 128 + t) * 4 + i], B's tile kt a
// K-major image at smem + kt * b_tile_bytes. kMode says how the fragment
// registers are reused:
//   0: two arrays: tile kt is built into buf[kt % 2] while tile kt - 1's
//      wgmma is in flight (wait_group<1> after each commit);
//   1: one array, wait_group<0> after each commit: rebuilt once retired;
//   2: (bug) one array with wait_group<1>: the next tile's fragment
//      overwrites the registers of the wgmma still in flight;
//   3: (bug) one tile: the array is overwritten (with tile 1's fragment)
//      after the commit, before wait_group<0>.
// Each thread writes its 32 accumulators raw: out[t * 32 + i].
constexpr int kRsTiles = 3;

template <int kMode>
__device__ void wgmma_rs_tiles(const unsigned char* smem, int b_tile_bytes, const u32* a_regs,
                               u64 lbo_sbo_b, float (&d)[32]) {
  const auto fragment = [&](u32(&a)[4], int kt) {
    for (int i = 0; i < 4; ++i)
      a[i] = a_regs[(kt * 128 + static_cast<int>(threadIdx.x)) * 4 + i];
  };
  u32 buf[2][4];
  constexpr int kTiles = kMode == 3 ? 1 : kRsTiles;
#pragma unroll
  for (int kt = 0; kt < kTiles; ++kt) {
    u32(&a)[4] = buf[kMode == 0 ? kt % 2 : 0];
    fragment(a, kt);
    const u64 db =
        gg::make_smem_desc(smem + kt * b_tile_bytes, static_cast<u32>(lbo_sbo_b & 0xFFFFF),
                           static_cast<u32>((lbo_sbo_b >> 20) & 0xFFFFF), gg::SmemSwizzle::none);
    gg::wgmma_fence();
    gg::wgmma_fence_operand(d);
    gg::wgmma_m64nNk16_bf16_rs<64>(d, a, db, kt > 0);
    gg::wgmma_commit_group();
    if (kMode == 3)
      fragment(a, 1);  // BUG: the in-flight wgmma still owns these registers
    if (kMode == 1 || kMode == 3) {
      gg::wgmma_wait_group<0>();
    } else {
      gg::wgmma_wait_group<1>();
    }
  }
  gg::wgmma_wait_group<0>();
  gg::wgmma_fence_operand(d);
}

extern "C" __global__ void wgmma_rs_reuse(const unsigned char* b_img, int b_tile_bytes,
                                          const u32* a_regs, float* out, u64 lbo_sbo_b, int mode) {
  unsigned char* smem = smem_1024();
  for (int i = threadIdx.x; i < kRsTiles * b_tile_bytes; i += blockDim.x)
    smem[i] = b_img[i];
  gg::fence_proxy_async();
  __syncthreads();
  float d[32];
  for (int i = 0; i < 32; ++i)
    d[i] = 0.0f;
  switch (mode) {
    case 0:
      wgmma_rs_tiles<0>(smem, b_tile_bytes, a_regs, lbo_sbo_b, d);
      break;
    case 1:
      wgmma_rs_tiles<1>(smem, b_tile_bytes, a_regs, lbo_sbo_b, d);
      break;
    case 2:
      wgmma_rs_tiles<2>(smem, b_tile_bytes, a_regs, lbo_sbo_b, d);
      break;
    default:
      wgmma_rs_tiles<3>(smem, b_tile_bytes, a_regs, lbo_sbo_b, d);
      break;
  }
  for (int i = 0; i < 32; ++i)
    out[threadIdx.x * 32 + i] = d[i];
}

// setmaxnreg in a producer / consumer split.
extern "C" __global__ void __launch_bounds__(384, 1) setmaxnreg_roles(int* out) {
  if (threadIdx.x < 128) {
    gg::setmaxnreg_dec<40>();
  } else {
    gg::setmaxnreg_inc<232>();
  }
  out[threadIdx.x] = static_cast<int>(threadIdx.x);
}

// ---------------------------------------------------------------------------
// A warp-specialized GEMM pipeline: C (m x n, f32) = A (m x k, bf16, row-major)
// * B^T (B: n x k, bf16, row-major), tiles of 128 x 64 x 64, kStages stages.
// Warpgroup 0 is the producer (one thread issues TMA), warpgroups 1 and 2
// consume 64 rows each with wgmma; full[s] counts 1 arrival + the bytes,
// empty[s] 256 consumer arrivals. The epilogue stages C through shared memory
// and stores it with TMA. `bug` plants one mistake (kBug*).
namespace wsg {
constexpr int kBM = 128, kBN = 64, kBK = 64, kStages = 3;
constexpr int kABytes = kBM * kBK * 2, kBBytes = kBN * kBK * 2;
constexpr int kCBytes = kBM * kBN * 4;
constexpr int kSmem = 1024 + kStages * (kABytes + kBBytes) + kCBytes;
enum Bug {
  kNone = 0,
  kExpectTxTooMany = 1,  // expect_tx announces 1024 bytes more than the loads bring
  kNoFullWait = 2,       // consumers do not wait on the full barrier
  kEarlyRelease = 3,     // consumers release a stage before wgmma.wait_group
  kWrongSwizzle = 4,     // the descriptors say 64B swizzle; TMA wrote 128B
  kNoProxyFence = 5,     // no fence.proxy.async before the TMA store of C
  kNoInitFence = 6,      // no fence.mbarrier_init after mbarrier.init
  kNoEmptyArrive = 7,    // one consumer warpgroup never releases stages
  kExpectTxTooFew = 8,   // expect_tx announces 1024 bytes fewer than the loads bring
};
}  // namespace wsg

extern "C" __global__ void __launch_bounds__(384, 1)
    ws_gemm(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
            const __grid_constant__ CUtensorMap map_c, int k, int bug) {
  using namespace wsg;
  unsigned char* smem = smem_1024();
  unsigned char* sa = smem;
  unsigned char* sb = sa + kStages * kABytes;
  auto* sc = reinterpret_cast<float*>(sb + kStages * kBBytes);
  __shared__ __align__(8) u64 full[kStages];
  __shared__ __align__(8) u64 empty[kStages];
  const int wg = threadIdx.x / 128;
  const int k_tiles = (k + kBK - 1) / kBK;
  const int m0 = blockIdx.y * kBM, n0 = blockIdx.x * kBN;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      gg::mbarrier_init(&full[s], 1);
      gg::mbarrier_init(&empty[s], 256);
    }
    if (bug != kNoInitFence)
      gg::fence_mbarrier_init();
  }
  __syncthreads();
  if (wg == 0) {
    gg::setmaxnreg_dec<40>();
    if (threadIdx.x == 0) {
      int tx = kABytes + kBBytes;
      if (bug == kExpectTxTooMany)
        tx += 1024;
      if (bug == kExpectTxTooFew)
        tx -= 1024;
      for (int kt = 0; kt < k_tiles; ++kt) {
        const int s = kt % kStages;
        gg::mbarrier_wait(&empty[s], ((kt / kStages) & 1) ^ 1);
        gg::mbarrier_arrive_expect_tx(&full[s], tx);
        gg::tma_load_2d(sa + s * kABytes, &map_a, &full[s], kt * kBK, m0);
        gg::tma_load_2d(sb + s * kBBytes, &map_b, &full[s], kt * kBK, n0);
      }
    }
  } else {
    gg::setmaxnreg_inc<232>();
    float d[kBN / 2];
    for (int i = 0; i < kBN / 2; ++i)
      d[i] = 0.0f;
    const gg::SmemSwizzle sw = bug == kWrongSwizzle ? gg::SmemSwizzle::b64 : gg::SmemSwizzle::b128;
    for (int kt = 0; kt < k_tiles; ++kt) {
      const int s = kt % kStages;
      if (bug != kNoFullWait)
        gg::mbarrier_wait(&full[s], (kt / kStages) & 1);
      gg::wgmma_fence();
      gg::wgmma_fence_operand(d);
      for (int kb = 0; kb < kBK / 16; ++kb) {
        // K-major, 128B swizzle: rows of 128 bytes, 8-row groups 1024 bytes apart.
        const u64 da =
            gg::make_smem_desc(sa + s * kABytes + (wg - 1) * 64 * 128 + kb * 32, 16, 1024, sw);
        const u64 db = gg::make_smem_desc(sb + s * kBBytes + kb * 32, 16, 1024, sw);
        gg::wgmma_m64nNk16_bf16_ss<kBN>(d, da, db, kt > 0 || kb > 0);
      }
      gg::wgmma_commit_group();
      if (bug == kEarlyRelease)
        gg::mbarrier_arrive(&empty[s]);
      gg::wgmma_wait_group<0>();
      gg::wgmma_fence_operand(d);
      if (bug != kEarlyRelease && !(bug == kNoEmptyArrive && wg == 2))
        gg::mbarrier_arrive(&empty[s]);
    }
    // The accumulator fragment into the C tile (row-major, 64 floats a row).
    const int t = threadIdx.x % 128, warp = t / 32, lane = t % 32;
    for (int i = 0; i < kBN / 2; ++i) {
      const int row = (wg - 1) * 64 + 16 * warp + lane / 4 + 8 * ((i / 2) % 2);
      const int col = 8 * (i / 4) + 2 * (lane % 4) + i % 2;
      sc[row * kBN + col] = d[i];
    }
    if (bug != kNoProxyFence)
      gg::fence_proxy_async();
  }
  __syncthreads();
  if (threadIdx.x == 128) {
    gg::tma_store_2d(&map_c, sc, n0, m0);
    gg::tma_store_2d(&map_c, sc + 64 * kBN, n0, m0 + 64);
    gg::bulk_commit_group();
    gg::bulk_wait_group<0>();
  }
}

// ---------------------------------------------------------------------------
// The host program (emulator): inputs "case" and the case's arrays, outputs
// named arrays and "status" lines.
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

template <class T>
std::vector<T> input_as(const char* name) {
  const std::vector<unsigned char> raw = input(name);
  std::vector<T> v(raw.size() / sizeof(T));
  std::memcpy(v.data(), raw.data(), v.size() * sizeof(T));
  return v;
}

void output(const char* name, const void* p, size_t bytes) {
  gg_emu_host_output(name, p, bytes);
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

// "map" input: u64 dtype, rank, swizzle, dims[5], strides[4], box[5], estrides[5], address offset.
CUresult encode(CUtensorMap* map, void* base, const std::vector<unsigned long long>& v) {
  cuuint64_t dims[5], strides[4];
  cuuint32_t box[5], estr[5];
  for (int i = 0; i < 5; ++i) {
    dims[i] = v[3 + i];
    box[i] = static_cast<cuuint32_t>(v[12 + i]);
    estr[i] = static_cast<cuuint32_t>(v[17 + i]);
  }
  for (int i = 0; i < 4; ++i)
    strides[i] = v[8 + i];
  return encode_fn()(map, static_cast<CUtensorMapDataType>(v[0]), static_cast<cuuint32_t>(v[1]),
                     static_cast<unsigned char*>(base) + v[22], dims, strides, box, estr,
                     CU_TENSOR_MAP_INTERLEAVE_NONE, static_cast<CUtensorMapSwizzle>(v[2]),
                     CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
}

void* device_copy(const std::vector<unsigned char>& host, size_t min_bytes = 0) {
  void* p = nullptr;
  cudaMalloc(&p, std::max(host.size(), min_bytes));
  if (!host.empty())
    cudaMemcpy(p, host.data(), host.size(), cudaMemcpyHostToDevice);
  return p;
}

std::vector<unsigned char> host_copy(const void* p, size_t bytes) {
  std::vector<unsigned char> h(bytes);
  cudaMemcpy(h.data(), p, bytes, cudaMemcpyDeviceToHost);
  return h;
}

int run_encode() {
  // Encodes the map of input "map" against a 256-byte aligned buffer; the
  // CUresult comes back as "result".
  const std::vector<unsigned char> g(1 << 16, 0);
  void* base = device_copy(g);
  alignas(128) CUtensorMap map;
  const int r = static_cast<int>(encode(&map, base, input_as<unsigned long long>("map")));
  output("result", &r, sizeof r);
  return 0;
}

int run_tma_load() {
  const std::vector<unsigned long long> m = input_as<unsigned long long>("map");
  const std::vector<int> c = input_as<int>("coords");  // c0, c1, c2, rank, box_bytes
  void* g = device_copy(input("global"));
  alignas(128) CUtensorMap map;
  if (encode(&map, g, m) != CUDA_SUCCESS)
    return 1;
  void* out = nullptr;
  cudaMalloc(&out, c[4]);
  cudaFuncSetAttribute(tma_load_box, cudaFuncAttributeMaxDynamicSharedMemorySize, c[4] + 1024);
  tma_load_box<<<1, 128, c[4] + 1024>>>(map, static_cast<unsigned char*>(out), c[0], c[1], c[2],
                                        c[3], c[4]);
  if (cudaGetLastError() != cudaSuccess)
    return 2;
  const std::vector<unsigned char> h = host_copy(out, c[4]);
  output("smem", h.data(), h.size());
  return 0;
}

int run_tma_store() {
  const std::vector<unsigned long long> m = input_as<unsigned long long>("map");
  const std::vector<int> c = input_as<int>("coords");  // c0, c1, c2, rank, box_bytes, skip_fence
  const std::vector<unsigned char> initial = input("global");
  void* g = device_copy(initial);
  void* in = device_copy(input("smem"));
  alignas(128) CUtensorMap map;
  if (encode(&map, g, m) != CUDA_SUCCESS)
    return 1;
  cudaFuncSetAttribute(tma_store_box, cudaFuncAttributeMaxDynamicSharedMemorySize, c[4] + 1024);
  tma_store_box<<<1, 128, c[4] + 1024>>>(map, static_cast<const unsigned char*>(in), c[0], c[1],
                                         c[2], c[3], c[4], c[5]);
  if (cudaGetLastError() != cudaSuccess)
    return 2;
  const std::vector<unsigned char> h = host_copy(g, initial.size());
  output("global", h.data(), h.size());
  return 0;
}

int run_wgmma() {
  const std::vector<unsigned long long> p =
      input_as<unsigned long long>("params");  // n, kind, acc, lbo_sbo_a, _b
  const std::vector<unsigned char> a = input("a"), b = input("b"), regs = input("a_regs");
  const unsigned char* da = static_cast<const unsigned char*>(device_copy(a));
  const unsigned char* db = static_cast<const unsigned char*>(device_copy(b));
  const u32* dr = static_cast<const u32*>(device_copy(regs));
  const int n = static_cast<int>(p[0]);
  float* out = nullptr;
  cudaMalloc(reinterpret_cast<void**>(&out), 128 * (n / 2) * sizeof(float));
  const int smem =
      1024 + ((static_cast<int>(a.size()) + 1023) & ~1023) + static_cast<int>(b.size());
  const int kind = static_cast<int>(p[1]), acc = static_cast<int>(p[2]);
  const int as = static_cast<int>(a.size()), bs = static_cast<int>(b.size());
  void (*kernels[])(const unsigned char*, int, const unsigned char*, int, const u32*, float*, u64,
                    u64, int, int) = {wgmma_n8, wgmma_n64, wgmma_n128, wgmma_n256};
  const int which = n == 8 ? 0 : n == 64 ? 1 : n == 128 ? 2 : 3;
  const auto kernel = kernels[which];
  cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  kernel<<<1, 128, smem>>>(da, as, db, bs, dr, out, p[3], p[4], kind, acc);
  if (cudaGetLastError() != cudaSuccess)
    return 2;
  const std::vector<unsigned char> h = host_copy(out, 128 * (n / 2) * sizeof(float));
  output("d", h.data(), h.size());
  return 0;
}

int run_wgmma_rs_reuse() {
  const std::vector<unsigned long long> p =
      input_as<unsigned long long>("params");  // mode, lbo_sbo_b
  const std::vector<unsigned char> b = input("b"), regs = input("a_regs");
  const unsigned char* db = static_cast<const unsigned char*>(device_copy(b));
  const u32* dr = static_cast<const u32*>(device_copy(regs));
  float* out = nullptr;
  cudaMalloc(reinterpret_cast<void**>(&out), 128 * 32 * sizeof(float));
  const int smem = 1024 + static_cast<int>(b.size());
  cudaFuncSetAttribute(wgmma_rs_reuse, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  wgmma_rs_reuse<<<1, 128, smem>>>(db, static_cast<int>(b.size()) / kRsTiles, dr, out, p[1],
                                   static_cast<int>(p[0]));
  if (cudaGetLastError() != cudaSuccess)
    return 2;
  const std::vector<unsigned char> h = host_copy(out, 128 * 32 * sizeof(float));
  output("d", h.data(), h.size());
  return 0;
}

int run_ws_gemm() {
  const std::vector<int> s = input_as<int>("shape");  // m, n, k, bug
  const int m = s[0], n = s[1], k = s[2], bug = s[3];
  void* a = device_copy(input("a"));
  void* b = device_copy(input("b"));
  std::vector<unsigned char> c0(static_cast<size_t>(m) * n * 4, 0xFF);
  void* c = device_copy(c0);
  alignas(128) CUtensorMap ma, mb, mc;
  const auto map = [](unsigned long long dtype, unsigned long long swizzle,
                      unsigned long long inner, unsigned long long outer, unsigned long long stride,
                      unsigned long long box0, unsigned long long box1) {
    return std::vector<unsigned long long>{dtype,  2, swizzle, inner, outer, 1,    1, 1,
                                           stride, 0, 0,       0,     box0,  box1, 1, 1,
                                           1,      1, 1,       1,     1,     1,    0};
  };
  using namespace wsg;
  if (encode(&ma, a,
             map(CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, CU_TENSOR_MAP_SWIZZLE_128B, k, m, 2ull * k, kBK,
                 kBM)) ||
      encode(&mb, b,
             map(CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, CU_TENSOR_MAP_SWIZZLE_128B, k, n, 2ull * k, kBK,
                 kBN)) ||
      encode(&mc, c,
             map(CU_TENSOR_MAP_DATA_TYPE_FLOAT32, CU_TENSOR_MAP_SWIZZLE_NONE, n, m, 4ull * n, kBN,
                 64))) {
    return 1;
  }
  cudaFuncSetAttribute(ws_gemm, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
  const dim3 grid((n + kBN - 1) / kBN, (m + kBM - 1) / kBM);
  ws_gemm<<<grid, 384, kSmem>>>(ma, mb, mc, k, bug);
  if (cudaGetLastError() != cudaSuccess)
    return 2;
  const std::vector<unsigned char> h = host_copy(c, c0.size());
  output("c", h.data(), h.size());
  return 0;
}

int run_simple() {
  const std::string name(reinterpret_cast<const char*>(input("kernel").data()),
                         input("kernel").size());
  float* out = nullptr;
  cudaMalloc(reinterpret_cast<void**>(&out), 384 * sizeof(float));
  if (name == "mbarrier_phases") {
    mbarrier_phases<<<1, 128>>>(out);
    const std::vector<unsigned char> h = host_copy(out, 192 * sizeof(float));
    output("out", h.data(), h.size());
  } else if (name == "mbarrier_missing_arrive") {
    mbarrier_missing_arrive<<<1, 128>>>(out);
  } else if (name == "setmaxnreg_roles") {
    setmaxnreg_roles<<<1, 384>>>(reinterpret_cast<int*>(out));
    const std::vector<unsigned char> h = host_copy(out, 384 * sizeof(int));
    output("out", h.data(), h.size());
  } else if (name == "wgmma_early_read") {
    std::vector<unsigned char> img(2048, 0x3f);
    const unsigned char* di = static_cast<const unsigned char*>(device_copy(img));
    wgmma_early_read<<<1, 128, 4096>>>(di, out);
    const std::vector<unsigned char> h = host_copy(out, 128 * sizeof(float));
    output("out", h.data(), h.size());
  } else {
    return 3;
  }
  return cudaGetLastError() == cudaSuccess ? 0 : 2;
}

}  // namespace

extern "C" int gg_emu_host_main(void) {
  const std::vector<unsigned char> raw = input("case");
  const std::string c(raw.begin(), raw.end());
  if (c == "encode")
    return run_encode();
  if (c == "tma_load")
    return run_tma_load();
  if (c == "tma_store")
    return run_tma_store();
  if (c == "wgmma")
    return run_wgmma();
  if (c == "ws_gemm")
    return run_ws_gemm();
  if (c == "wgmma_rs_reuse")
    return run_wgmma_rs_reuse();
  if (c == "simple")
    return run_simple();
  return 4;
}
#endif
