// The block-scaled tcgen05 primitives (gg_primitives_sm100.cuh): scale
// factors copied from shared memory into TMEM with
// tcgen05.cp.32x128b.warpx4, then kind::mxf8f6f4 / mxf4 / mxf4nvf4
// block-scaled tcgen05.mma reading them, with planted bugs
// (tests/cuda/sm100/test_cuda_sm100_block_scaled.py). The host program
// (gg_emu_host_main, emulator only) runs one tile; nvcc compiles the kernel
// for sm_100a (the SASS test).
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

}  // namespace

extern "C" int gg_emu_host_main(void) {
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
