// sample_gemm.cu: a small tiled GEMM that exercises the gg:: primitives the
// way generated kernels do, for the runtime's end-to-end tests.
//
//   C[M, N] (f32) = A[M, K] (bf16, row-major) . B[K, N] (bf16, row-major)
//
// 64 x 64 x 32 block tiles, 128 threads as 2 x 2 warps of 32 x 32, a 2-stage
// cp.async pipeline into dynamic shared memory (kSmemBytes), ldmatrix (.trans
// for B) and mma.sync m16n8k16. Partial tiles in M, N and K are zero-filled
// by cp.async; K and N must be multiples of 8 (16-byte rows).
// Launch: grid (ceil(N / 64), ceil(M / 64)), block 128, kSmemBytes of
// dynamic shared memory.
//
// The `_bug_*` kernels are the same GEMM with one deliberate mistake each; the
// tests check that the emulator flags them.
#include "gg_runtime.cuh"

namespace sample {

using gg::u32;

constexpr int kBlockM = 64;
constexpr int kBlockN = 64;
constexpr int kBlockK = 32;
constexpr int kThreads = 128;
constexpr int kStages = 2;
// Shared rows are padded by 8 elements (16 bytes) so that the eight row
// addresses of one ldmatrix fall in different banks.
constexpr int kLdA = kBlockK + 8;
constexpr int kLdB = kBlockN + 8;
constexpr int kStageElems = kBlockM * kLdA + kBlockK * kLdB;
constexpr int kSmemBytes = kStages * kStageElems * 2;

enum class Bug { none, no_sync, fragment, oob };

__device__ __forceinline__ int clamp_bytes(int elems) { return elems <= 0 ? 0 : (elems >= 8 ? 16 : 2 * elems); }

// One 16-byte chunk per call; 2 chunks of A and 2 of B per thread and tile.
__device__ __forceinline__ void load_tile(const __nv_bfloat16* A, const __nv_bfloat16* B, int M, int N, int K,
                                          int m0, int n0, int k0, __nv_bfloat16* sA, __nv_bfloat16* sB) {
  const int tid = static_cast<int>(threadIdx.x);
  for (int c = tid; c < kBlockM * kBlockK / 8; c += kThreads) {
    const int row = c / (kBlockK / 8);
    const int col = (c % (kBlockK / 8)) * 8;
    const int gm = m0 + row;
    const int gk = k0 + col;
    const int bytes = gm < M ? clamp_bytes(K - gk) : 0;
    gg::cp_async_16(sA + row * kLdA + col, bytes ? A + static_cast<long>(gm) * K + gk : A, bytes);
  }
  for (int c = tid; c < kBlockK * kBlockN / 8; c += kThreads) {
    const int row = c / (kBlockN / 8);
    const int col = (c % (kBlockN / 8)) * 8;
    const int gk = k0 + row;
    const int gn = n0 + col;
    const int bytes = gk < K ? clamp_bytes(N - gn) : 0;
    gg::cp_async_16(sB + row * kLdB + col, bytes ? B + static_cast<long>(gk) * N + gn : B, bytes);
  }
}

template <Bug kBug>
__device__ void gemm(const __nv_bfloat16* A, const __nv_bfloat16* B, float* C, int M, int N, int K,
                     unsigned char* smem) {
  const int lane = static_cast<int>(gg::lane_id());
  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int m0 = static_cast<int>(blockIdx.y) * kBlockM;
  const int n0 = static_cast<int>(blockIdx.x) * kBlockN;
  const int wm = (warp / 2) * 32;
  const int wn = (warp % 2) * 32;
  auto* stages = reinterpret_cast<__nv_bfloat16*>(smem);
  auto stage_a = [&](int s) { return stages + s * kStageElems; };
  auto stage_b = [&](int s) { return stages + s * kStageElems + kBlockM * kLdA; };

  float acc[2][4][4];
  for (int mi = 0; mi < 2; ++mi)
    for (int ni = 0; ni < 4; ++ni)
      for (int i = 0; i < 4; ++i) acc[mi][ni][i] = 0.0f;

  // (1) Prologue: tile 0 in flight.
  const int k_tiles = (K + kBlockK - 1) / kBlockK;
  if (k_tiles > 0) load_tile(A, B, M, N, K, m0, n0, 0, stage_a(0), stage_b(0));
  gg::cp_async_commit_group();

  for (int kt = 0; kt < k_tiles; ++kt) {
    // (2) Start tile kt + 1, then wait for this thread's part of tile kt and
    // for every other thread's (the barrier).
    if (kt + 1 < k_tiles) {
      const int s = (kt + 1) % kStages;
      load_tile(A, B, M, N, K, m0, n0, (kt + 1) * kBlockK, stage_a(s), stage_b(s));
    }
    gg::cp_async_commit_group();
    gg::cp_async_wait_group<1>();
    if constexpr (kBug != Bug::no_sync) __syncthreads();

    // (3) Two k16 steps of 2 x 4 mma tiles per warp.
    const __nv_bfloat16* sA = stage_a(kt % kStages);
    const __nv_bfloat16* sB = stage_b(kt % kStages);
    for (int kk = 0; kk < kBlockK; kk += 16) {
      u32 a[2][4];
      u32 b[4][2];
      for (int mi = 0; mi < 2; ++mi) {
        // Lanes 0-15 address rows 0-15 at column kk, lanes 16-31 at kk + 8:
        // registers a0a1, a2a3, a4a5, a6a7 of the A fragment.
        gg::ldmatrix_x4(a[mi], sA + (wm + mi * 16 + lane % 16) * kLdA + kk + (lane / 16) * 8);
      }
      for (int np = 0; np < 2; ++np) {
        // Matrix j = lane / 8: k rows kk + 8 (j & 1), n columns 8 (j >> 1);
        // .trans turns the [k][n] rows into the column-major B fragment.
        const int j = lane / 8;
        u32 r[4];
        gg::ldmatrix_x4_trans(r, sB + (kk + lane % 8 + 8 * (j & 1)) * kLdB + wn + np * 16 + 8 * (j >> 1));
        b[2 * np][0] = r[0];
        b[2 * np][1] = r[1];
        b[2 * np + 1][0] = r[2];
        b[2 * np + 1][1] = r[3];
      }
      for (int mi = 0; mi < 2; ++mi)
        for (int ni = 0; ni < 4; ++ni) gg::mma_m16n8k16_bf16(acc[mi][ni], a[mi], b[ni], acc[mi][ni]);
    }
    // (4) Nobody refills this stage before every warp is done with it.
    __syncthreads();
  }

  // (5) Epilogue: accumulator fragments straight to global memory.
  for (int mi = 0; mi < 2; ++mi) {
    for (int ni = 0; ni < 4; ++ni) {
      for (int i = 0; i < 4; ++i) {
        const gg::RowCol rc = gg::frag::c_m16n8(lane, kBug == Bug::fragment ? i ^ 1 : i);
        const int row = m0 + wm + mi * 16 + rc.row;
        const int col = n0 + wn + ni * 8 + rc.col;
        if ((kBug == Bug::oob || row < M) && col < N) C[static_cast<long>(row) * N + col] = acc[mi][ni][i];
      }
    }
  }
}

}  // namespace sample

extern "C" __global__ void __launch_bounds__(sample::kThreads)
    sample_gemm_bf16(const __nv_bfloat16* A, const __nv_bfloat16* B, float* C, int M, int N, int K) {
  extern __shared__ __align__(16) unsigned char smem[];
  sample::gemm<sample::Bug::none>(A, B, C, M, N, K, smem);
}

// Deliberately broken: no barrier between cp.async.wait_group and the reads
// of other threads' copies.
extern "C" __global__ void __launch_bounds__(sample::kThreads)
    sample_gemm_bf16_bug_no_sync(const __nv_bfloat16* A, const __nv_bfloat16* B, float* C, int M, int N, int K) {
  extern __shared__ __align__(16) unsigned char smem[];
  sample::gemm<sample::Bug::no_sync>(A, B, C, M, N, K, smem);
}

// Deliberately broken: the epilogue reads accumulator element i ^ 1.
extern "C" __global__ void __launch_bounds__(sample::kThreads)
    sample_gemm_bf16_bug_fragment(const __nv_bfloat16* A, const __nv_bfloat16* B, float* C, int M, int N, int K) {
  extern __shared__ __align__(16) unsigned char smem[];
  sample::gemm<sample::Bug::fragment>(A, B, C, M, N, K, smem);
}

// Deliberately broken: the epilogue writes the rows of a partial tile past M.
extern "C" __global__ void __launch_bounds__(sample::kThreads)
    sample_gemm_bf16_bug_oob(const __nv_bfloat16* A, const __nv_bfloat16* B, float* C, int M, int N, int K) {
  extern __shared__ __align__(16) unsigned char smem[];
  sample::gemm<sample::Bug::oob>(A, B, C, M, N, K, smem);
}
