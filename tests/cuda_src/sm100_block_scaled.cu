// The block-scaled tcgen05 primitives (gg_primitives_sm100.cuh): scale
// factors copied from shared memory into TMEM with
// tcgen05.cp.32x128b.warpx4, then kind::mxf8f6f4 / mxf4 / mxf4nvf4
// block-scaled tcgen05.mma reading them, with planted bugs
// (tests/cuda/sm100/test_cuda_sm100_block_scaled.py). The host program
// (gg_emu_host_main, emulator only) runs one tile; nvcc compiles the kernel
// for sm_100a (the SASS test).
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

// The parameters of bs_mma (a device array of int64, by index).
enum Param {
  kKind,   // gg::umma::BsKind
  kAType,  // gg::umma::BsType
  kBType,
  kScaleFormat,  // gg::umma::ScaleFormat
  kN,
  kSteps,   // MMAs along K
  kAMajor,  // gg::umma::Major
  kBMajor,
  kALbo,
  kASbo,
  kASwizzle,  // gg::umma::Swizzle
  kBLbo,
  kBSbo,
  kBSwizzle,
  kABytes,  // the A image's bytes (a multiple of 1024)
  kBBytes,
  kAStepBytes,  // how far a descriptor's start moves per MMA
  kBStepBytes,
  kSfaBytes,  // the scale images (512-byte atoms, Sm1xxBlockScaledConfig order)
  kSfbBytes,
  kAtoms,  // K atoms of scales (4 scale blocks each)
  kBug,
  kNegate,  // 1: negate A and B in the instruction descriptor
  kSfBySt,  // 1: each warp writes the scales into its lane quarter with tcgen05.st, not tcgen05.cp
  kParams,
};

// The planted bugs (kBug).
enum Bug {
  kNone = 0,
  kSfWrongColumns = 1,     // the A scales copied one column to the right of where the MMA reads
  kSfWrongId = 2,          // the scale ids of each MMA one K block too far (mod 4: mxf8f6f4)
  kSfFormatBit = 3,        // the instruction descriptor's scale format bit (23) flipped
  kSfSmemOverwrite = 4,    // the A scales' shared memory rewritten before the commit's phase
  kSfOutsideAlloc = 5,     // the B scales at a column past the allocation
  kSfOverlapD = 6,         // the A scales copied to and read from the accumulator's columns
  kSfOddId = 7,            // scale factor A id 1 (kind::mxf4 takes 0 or 2)
  kSfNoProxyFence = 8,     // the scales' st.shared not fenced (fence.proxy.async) before tcgen05.cp
  kSfReplicaDiffers = 9,   // kSfBySt: warp 3 writes one scale byte of its quarter differently
  kLdScalesInFlight = 10,  // every warp reads the A scales' columns before the commit's wait
  kMmaByOtherThread = 11,  // thread 32 issues the MMAs while thread 0's copies are in flight
};

// The word at column g of lane r % 32 of a 128 x 4 scale atom (bytes
// (r % 32) * 16 + 4 g .. + 3): what tcgen05.cp.32x128b.warpx4 puts in every
// lane quarter, for the tcgen05.st path.
__device__ __forceinline__ unsigned atom_word(const unsigned char* atom, unsigned r, unsigned g) {
  const unsigned char* q = atom + (r % 32) * 16 + 4 * g;
  return q[0] | (q[1] << 8) | (q[2] << 16) | (static_cast<unsigned>(q[3]) << 24);
}

__device__ __forceinline__ unsigned pow2_cols(unsigned n) {
  unsigned c = 32;
  while (c < n)
    c *= 2;
  return c;
}

// D (128 x N, f32, in TMEM) = sum over the steps of (A_s * SFA) (B_s * SFB)^T.
// 128 threads: warp 0 allocates; thread 0 copies the scales into TMEM
// (tcgen05.cp; or every warp writes its lane quarter's with tcgen05.st),
// issues the MMAs and the commit; every thread waits on the
// commit's barrier and reads its lane. TMEM columns: D [0, N), the A scales
// [N, N + 4 atoms), the B scales after them (4 columns per 128 rows of B
// per atom). out[lane * N + col] is the raw accumulator cell.
extern "C" __global__ void __launch_bounds__(128, 1)
    bs_mma(const long long* p, const unsigned char* a_img, const unsigned char* b_img,
           const unsigned char* sfa_img, const unsigned char* sfb_img, unsigned* out) {
  const int n = static_cast<int>(p[kN]), steps = static_cast<int>(p[kSteps]);
  const int bug = static_cast<int>(p[kBug]), atoms = static_cast<int>(p[kAtoms]);
  const int a_bytes = static_cast<int>(p[kABytes]), b_bytes = static_cast<int>(p[kBBytes]);
  const int sfa_bytes = static_cast<int>(p[kSfaBytes]), sfb_bytes = static_cast<int>(p[kSfbBytes]);
  const BsKind kind = static_cast<BsKind>(p[kKind]);
  const ScaleFormat sf = static_cast<ScaleFormat>(p[kScaleFormat]);
  unsigned char* sa = smem_1024();
  unsigned char* sb = sa + a_bytes;
  unsigned char* ssfa = sb + b_bytes;
  unsigned char* ssfb = ssfa + sfa_bytes;
  __shared__ __align__(8) u64 bar;
  __shared__ unsigned tmem_slot;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const unsigned b_blocks = (static_cast<unsigned>(n) + 127) / 128;  // 128-row scale atoms of B
  const unsigned sfa_col = static_cast<unsigned>(n);
  const unsigned sfb_col = sfa_col + 4 * static_cast<unsigned>(atoms);
  const unsigned ncols = pow2_cols(sfb_col + 4 * b_blocks * static_cast<unsigned>(atoms));
  if (warp == 0)
    gg::tmem_alloc(&tmem_slot, ncols);
  if (threadIdx.x == 0) {
    gg::mbarrier_init(&bar, 1);
    gg::fence_mbarrier_init();
  }
  for (int i = threadIdx.x; i < a_bytes; i += blockDim.x)
    sa[i] = a_img[i];
  for (int i = threadIdx.x; i < b_bytes; i += blockDim.x)
    sb[i] = b_img[i];
  for (int i = threadIdx.x; i < sfa_bytes; i += blockDim.x)
    ssfa[i] = sfa_img[i];
  for (int i = threadIdx.x; i < sfb_bytes; i += blockDim.x)
    ssfb[i] = sfb_img[i];
  if (bug != kSfNoProxyFence)
    gg::fence_proxy_async();
  gg::tcgen05_fence_before_thread_sync();
  __syncthreads();
  gg::tcgen05_fence_after_thread_sync();
  const unsigned tmem = tmem_slot;
  if (p[kSfBySt] != 0) {
    // Each warp its quarter of the lanes: lane 32 q + i holds the words of
    // atom row i, as the copy would leave them.
    const unsigned quarter = gg::umma::tmem_addr(tmem, 32 * (warp % 4), 0);
    for (int t = 0; t < atoms; ++t) {
      unsigned r[4];
      for (unsigned g = 0; g < 4; ++g)
        r[g] = atom_word(ssfa + 512 * t, lane, g) ^
               (bug == kSfReplicaDiffers && warp == 3 && lane == 5 && g == 1 ? 1u : 0u);
      gg::tcgen05_st_32x32b<4>(quarter + sfa_col + 4 * t, r);
      for (unsigned rb = 0; rb < b_blocks; ++rb) {
        for (unsigned g = 0; g < 4; ++g)
          r[g] = atom_word(ssfb + 512 * (rb * atoms + t), lane, g);
        gg::tcgen05_st_32x32b<4>(quarter + sfb_col + 4 * (b_blocks * t + rb), r);
      }
    }
    gg::tcgen05_wait_st();
    gg::tcgen05_fence_before_thread_sync();
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    gg::tcgen05_fence_after_thread_sync();
    // The scales: one 128 x 4 atom (512 bytes: 32 rows of 16 bytes, 8-row
    // core matrices 128 bytes apart) per copy, A's atoms K-atom by K-atom,
    // B's row block by row block within each K atom.
    for (int t = 0; t < atoms && p[kSfBySt] == 0; ++t) {
      const unsigned to =
          bug == kSfOverlapD ? 0u : sfa_col + 4 * t + (bug == kSfWrongColumns ? 1 : 0);
      gg::tcgen05_cp_32x128b_warpx4(tmem + to,
                                    gg::make_umma_desc(ssfa + 512 * t, 16, 128, Swizzle::none));
      for (unsigned rb = 0; rb < b_blocks; ++rb) {
        gg::tcgen05_cp_32x128b_warpx4(
            tmem + sfb_col + 4 * (b_blocks * t + rb),
            gg::make_umma_desc(ssfb + 512 * (rb * atoms + t), 16, 128, Swizzle::none));
      }
    }
  }
  // The MMAs are issued by the copying thread (ordered after its copies).
  const unsigned issuer = bug == kMmaByOtherThread ? 32u : 0u;
  if (bug == kMmaByOtherThread)
    __syncthreads();
  if (threadIdx.x == issuer) {
    const int per_atom = 4 / gg::umma::scale_vec(kind);  // MMAs per K atom of scales
    for (int s = 0; s < steps; ++s) {
      const int t = s / per_atom;
      unsigned id = static_cast<unsigned>((s % per_atom) * gg::umma::scale_vec(kind));
      if (bug == kSfWrongId)
        id = (id + 1) % 4;
      const unsigned sfa_id = bug == kSfOddId ? 1u : id;
      unsigned idesc = gg::umma::instr_desc_block_scaled(
          kind, static_cast<BsType>(p[kAType]), static_cast<BsType>(p[kBType]), sf, 128, n, sfa_id,
          id, static_cast<Major>(p[kAMajor]), static_cast<Major>(p[kBMajor]), p[kNegate] != 0,
          p[kNegate] != 0);
      if (bug == kSfFormatBit)
        idesc ^= 1u << 23;
      const u64 da =
          gg::make_umma_desc(sa + s * p[kAStepBytes], static_cast<unsigned>(p[kALbo]),
                             static_cast<unsigned>(p[kASbo]), static_cast<Swizzle>(p[kASwizzle]));
      const u64 db =
          gg::make_umma_desc(sb + s * p[kBStepBytes], static_cast<unsigned>(p[kBLbo]),
                             static_cast<unsigned>(p[kBSbo]), static_cast<Swizzle>(p[kBSwizzle]));
      const unsigned sfa = tmem + (bug == kSfOverlapD ? 0u : sfa_col + 4 * t);
      const unsigned sfb =
          tmem +
          (bug == kSfOutsideAlloc ? ncols : sfb_col + 4 * b_blocks * static_cast<unsigned>(t));
      if (kind == BsKind::mxf8f6f4) {
        gg::tcgen05_mma_mxf8f6f4_block_scaled(tmem, da, db, idesc, sfa, sfb, s > 0);
      } else if (kind == BsKind::mxf4) {
        gg::tcgen05_mma_mxf4(tmem, da, db, idesc, sfa, sfb, s > 0);
      } else {
        gg::tcgen05_mma_mxf4nvf4(tmem, da, db, idesc, sfa, sfb, s > 0);
      }
    }
    gg::tcgen05_commit(&bar);
    if (bug == kSfSmemOverwrite)
      ssfa[16] ^= 0x01;  // the copy may still be reading the A scales
  }
  const unsigned my_lanes = gg::umma::tmem_addr(tmem, 32 * (warp % 4), 0);
  if (bug == kLdScalesInFlight) {
    unsigned r[4];
    gg::tcgen05_ld_32x32b<4>(r, my_lanes + sfa_col);
    gg::tcgen05_wait_ld();
  }
  gg::mbarrier_wait(&bar, 0);
  gg::tcgen05_fence_after_thread_sync();
  for (int c = 0; c < n; c += 8) {
    unsigned r[8];
    gg::tcgen05_ld_32x32b<8>(r, my_lanes + c);
    gg::tcgen05_wait_ld();
    for (int j = 0; j < 8; ++j)
      out[(32 * warp + lane) * n + c + j] = r[j];
  }
  gg::tcgen05_fence_before_thread_sync();
  __syncthreads();
  if (warp == 0) {
    gg::tcgen05_fence_after_thread_sync();
    gg::tmem_dealloc(tmem, ncols);
  }
}

// A TMA-fed pipeline of MXFP8 K tiles through one stage: D (128 x 128, f32,
// TMEM) = sum over K tiles of 128 of (A * SFA) (B * SFB)^T, A and B e4m3
// (128 x k, row-major, loaded with the 128-byte swizzle), the scales in
// 128 x 4 atoms (one per K tile and operand: 32 rows of 16 bytes, loaded
// without swizzle). Thread 32 produces (all four loads on `full`; it waits
// on `empty` before refilling the stage), thread 0 waits on `full`, copies
// the K tile's scales into TMEM (the same columns every K tile), issues the
// four MMAs (scale ids 0..3) and commits them to `empty`, then once more to
// `done`. out[row * 128 + col]. `bug`: 1 the producer refills the stage
// once the MMAs are issued (an mbarrier the MMA thread arrives on after its
// commit) instead of completed; 2 thread 0 copies the scales before waiting
// on `full`.
extern "C" __global__ void __launch_bounds__(128, 1)
    bs_tma(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
           const __grid_constant__ CUtensorMap map_sfa, const __grid_constant__ CUtensorMap map_sfb,
           float* out, int k, int bug) {
  constexpr int kBK = 128, kOpBytes = 128 * kBK, kSfBytes = 512;
  unsigned char* ssfa = smem_1024();  // the scales first: the producer loads them first
  unsigned char* ssfb = ssfa + 1024;
  unsigned char* sa = ssfb + 1024;
  unsigned char* sb = sa + kOpBytes;
  __shared__ __align__(8) u64 full, empty, issued, done;
  __shared__ unsigned slot;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int k_tiles = k / kBK;
  if (warp == 0)
    gg::tmem_alloc(&slot, 256);
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
  const unsigned tmem = slot, sfa_col = 128, sfb_col = 132;
  if (threadIdx.x == 32) {
    for (int kt = 0; kt < k_tiles; ++kt) {
      if (kt > 0)
        gg::mbarrier_wait(bug == 1 ? &issued : &empty, (kt - 1) & 1);
      gg::mbarrier_arrive_expect_tx(&full, 2 * kOpBytes + 2 * kSfBytes);
      gg::tma_load_2d(ssfa, &map_sfa, &full, 0, 32 * kt);
      gg::tma_load_2d(ssfb, &map_sfb, &full, 0, 32 * kt);
      gg::tma_load_2d(sa, &map_a, &full, kt * kBK, 0);
      gg::tma_load_2d(sb, &map_b, &full, kt * kBK, 0);
    }
  } else if (threadIdx.x == 0) {
    for (int kt = 0; kt < k_tiles; ++kt) {
      if (bug != 2)
        gg::mbarrier_wait(&full, kt & 1);
      gg::tcgen05_fence_after_thread_sync();
      gg::tcgen05_cp_32x128b_warpx4(tmem + sfa_col,
                                    gg::make_umma_desc(ssfa, 16, 128, Swizzle::none));
      gg::tcgen05_cp_32x128b_warpx4(tmem + sfb_col,
                                    gg::make_umma_desc(ssfb, 16, 128, Swizzle::none));
      if (bug == 2)
        gg::mbarrier_wait(&full, kt & 1);
      for (int kb = 0; kb < 4; ++kb) {
        const unsigned idesc = gg::umma::instr_desc_block_scaled(
            BsKind::mxf8f6f4, BsType::e4m3, BsType::e4m3, ScaleFormat::ue8m0, 128, 128, kb, kb);
        const u64 da = gg::make_umma_desc(sa + kb * 32, 16, 1024, Swizzle::b128);
        const u64 db = gg::make_umma_desc(sb + kb * 32, 16, 1024, Swizzle::b128);
        gg::tcgen05_mma_mxf8f6f4_block_scaled(tmem, da, db, idesc, tmem + sfa_col, tmem + sfb_col,
                                              kt > 0 || kb > 0);
      }
      gg::tcgen05_commit(&empty);
      gg::mbarrier_arrive(&issued);
    }
    gg::tcgen05_commit(&done);
  }
  gg::mbarrier_wait(&done, 0);
  gg::tcgen05_fence_after_thread_sync();
  for (int c = 0; c < 128; c += 32) {
    unsigned r[32];
    gg::tcgen05_ld_32x32b<32>(r, gg::umma::tmem_addr(tmem, 32 * warp, c));
    gg::tcgen05_wait_ld();
    for (int j = 0; j < 32; ++j)
      memcpy(&out[(32 * warp + lane) * 128 + c + j], &r[j], 4);
  }
  gg::tcgen05_fence_before_thread_sync();
  __syncthreads();
  if (warp == 0) {
    gg::tcgen05_fence_after_thread_sync();
    gg::tmem_dealloc(tmem, 256);
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

int run_tma() {
  const std::vector<unsigned char> kb = input("k_bug");
  int k_bug[2];
  std::memcpy(k_bug, kb.data(), sizeof k_bug);
  const unsigned k = static_cast<unsigned>(k_bug[0]), atoms = k / 128;
  void* a = device_copy(input("a"));
  void* b = device_copy(input("b"));
  void* sfa = device_copy(input("sfa"));
  void* sfb = device_copy(input("sfb"));
  auto* dout = static_cast<float*>(device_copy(std::vector<unsigned char>(128 * 128 * 4, 0xFF)));
  alignas(128) CUtensorMap ma, mb, msfa, msfb;
  if (encode_u8(&ma, a, 128, k, 128, 128, CU_TENSOR_MAP_SWIZZLE_128B) != CUDA_SUCCESS ||
      encode_u8(&mb, b, 128, k, 128, 128, CU_TENSOR_MAP_SWIZZLE_128B) != CUDA_SUCCESS ||
      encode_u8(&msfa, sfa, 32 * atoms, 16, 32, 16, CU_TENSOR_MAP_SWIZZLE_NONE) != CUDA_SUCCESS ||
      encode_u8(&msfb, sfb, 32 * atoms, 16, 32, 16, CU_TENSOR_MAP_SWIZZLE_NONE) != CUDA_SUCCESS)
    return 1;
  const int smem = 1024 + 2048 + 2 * 128 * 128;
  cudaFuncSetAttribute(bs_tma, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  bs_tma<<<1, 128, smem>>>(ma, mb, msfa, msfb, dout, k_bug[0], k_bug[1]);
  if (cudaGetLastError() != cudaSuccess)
    return 2;
  std::vector<unsigned char> h(128 * 128 * 4);
  cudaMemcpy(h.data(), dout, h.size(), cudaMemcpyDeviceToHost);
  gg_emu_host_output("d", h.data(), h.size());
  return 0;
}

}  // namespace

extern "C" int gg_emu_host_main(void) {
  if (!input("k_bug").empty())
    return run_tma();
  const std::vector<unsigned char> params = input("params");
  std::vector<long long> p(kParams);
  std::memcpy(p.data(), params.data(), sizeof(long long) * kParams);
  const auto* dp = static_cast<const long long*>(device_copy(params));
  const auto* da = static_cast<const unsigned char*>(device_copy(input("a")));
  const auto* db = static_cast<const unsigned char*>(device_copy(input("b")));
  const auto* dsfa = static_cast<const unsigned char*>(device_copy(input("sfa")));
  const auto* dsfb = static_cast<const unsigned char*>(device_copy(input("sfb")));
  const size_t out_bytes = 128 * static_cast<size_t>(p[kN]) * 4;
  auto* dout = static_cast<unsigned*>(device_copy(std::vector<unsigned char>(out_bytes, 0xFF)));
  const int smem = 1024 + static_cast<int>(p[kABytes] + p[kBBytes] + p[kSfaBytes] + p[kSfbBytes]);
  cudaFuncSetAttribute(bs_mma, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  bs_mma<<<1, 128, smem>>>(dp, da, db, dsfa, dsfb, dout);
  if (cudaGetLastError() != cudaSuccess)
    return 2;
  std::vector<unsigned char> h(out_bytes);
  cudaMemcpy(h.data(), dout, out_bytes, cudaMemcpyDeviceToHost);
  gg_emu_host_output("d", h.data(), h.size());
  return 0;
}
#endif
