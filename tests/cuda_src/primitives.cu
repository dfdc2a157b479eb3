// primitives.cu: one small kernel per gg:: primitive, for the tests in
// tests/cuda/emulator/test_cuda_runtime_primitives.py and scripts/gpu_check_cuda_runtime.py
// (the expected values live in tests/cuda_runtime_cases.py). Every kernel runs
// as one warp unless its comment says otherwise. Build with -DGG_NO_FP8 for
// archs before sm_89.
#include "gg_runtime.cuh"

using gg::u32;

namespace {

// Packs element i of a fragment into register i / (4 / bytes), lower index in
// the lower bits.
template <int kBytes>
__device__ __forceinline__ void pack(u32* regs, int i, u32 bits) {
  constexpr int kPerReg = 4 / kBytes;
  regs[i / kPerReg] |= bits << (8 * kBytes * (i % kPerReg));
}

// D[16x8] = A[16x16] * B[16x8] + C through one m16n8k16 mma; A and B hold
// 16-bit patterns, row-major ([m][k] and [k][n]).
template <bool kF16>
__device__ void mma_m16n8k16(const unsigned short* A, const unsigned short* B, const float* C, float* D) {
  const int lane = static_cast<int>(gg::lane_id());
  u32 a[4] = {0, 0, 0, 0};
  u32 b[2] = {0, 0};
  float c[4], d[4];
  for (int i = 0; i < 8; ++i) {
    const gg::RowCol rc = gg::frag::a_m16n8k16(lane, i);
    pack<2>(a, i, A[rc.row * 16 + rc.col]);
  }
  for (int i = 0; i < 4; ++i) {
    const gg::RowCol kn = gg::frag::b_m16n8k16(lane, i);
    pack<2>(b, i, B[kn.row * 8 + kn.col]);
  }
  for (int i = 0; i < 4; ++i) {
    const gg::RowCol rc = gg::frag::c_m16n8(lane, i);
    c[i] = C[rc.row * 8 + rc.col];
  }
  if constexpr (kF16) {
    gg::mma_m16n8k16_f16(d, a, b, c);
  } else {
    gg::mma_m16n8k16_bf16(d, a, b, c);
  }
  for (int i = 0; i < 4; ++i) {
    const gg::RowCol rc = gg::frag::c_m16n8(lane, i);
    D[rc.row * 8 + rc.col] = d[i];
  }
}

enum class Mma8 { e4m3, e5m2, s8 };

// D[16x8] = A[16x32] * B[32x8] + C through one m16n8k32 mma on bytes.
template <Mma8 kKind, class Acc>
__device__ void mma_m16n8k32(const unsigned char* A, const unsigned char* B, const Acc* C, Acc* D) {
  const int lane = static_cast<int>(gg::lane_id());
  u32 a[4] = {0, 0, 0, 0};
  u32 b[2] = {0, 0};
  Acc c[4], d[4];
  for (int i = 0; i < 16; ++i) {
    const gg::RowCol rc = gg::frag::a_m16n8k32(lane, i);
    pack<1>(a, i, A[rc.row * 32 + rc.col]);
  }
  for (int i = 0; i < 8; ++i) {
    const gg::RowCol kn = gg::frag::b_m16n8k32(lane, i);
    pack<1>(b, i, B[kn.row * 8 + kn.col]);
  }
  for (int i = 0; i < 4; ++i) {
    const gg::RowCol rc = gg::frag::c_m16n8(lane, i);
    c[i] = C[rc.row * 8 + rc.col];
  }
  if constexpr (kKind == Mma8::s8) {
    gg::mma_m16n8k32_s8(d, a, b, c);
  }
#if !defined(GG_NO_FP8)
  if constexpr (kKind == Mma8::e4m3) gg::mma_m16n8k32_e4m3(d, a, b, c);
  if constexpr (kKind == Mma8::e5m2) gg::mma_m16n8k32_e5m2(d, a, b, c);
#endif
  for (int i = 0; i < 4; ++i) {
    const gg::RowCol rc = gg::frag::c_m16n8(lane, i);
    D[rc.row * 8 + rc.col] = d[i];
  }
}

}  // namespace

extern "C" __global__ void mma_bf16(const unsigned short* A, const unsigned short* B, const float* C, float* D) {
  mma_m16n8k16<false>(A, B, C, D);
}

extern "C" __global__ void mma_f16(const unsigned short* A, const unsigned short* B, const float* C, float* D) {
  mma_m16n8k16<true>(A, B, C, D);
}

extern "C" __global__ void mma_s8(const unsigned char* A, const unsigned char* B, const int* C, int* D) {
  mma_m16n8k32<Mma8::s8>(A, B, C, D);
}

#if !defined(GG_NO_FP8)
extern "C" __global__ void mma_e4m3(const unsigned char* A, const unsigned char* B, const float* C, float* D) {
  mma_m16n8k32<Mma8::e4m3>(A, B, C, D);
}

extern "C" __global__ void mma_e5m2(const unsigned char* A, const unsigned char* B, const float* C, float* D) {
  mma_m16n8k32<Mma8::e5m2>(A, B, C, D);
}
#endif

// The (row, col) of every fragment element of every lane, as int pairs:
// a16 [32][8][2], b16 [32][4][2], c [32][4][2], a32 [32][16][2], b32 [32][8][2].
extern "C" __global__ void fragment_layouts(int* a16, int* b16, int* c, int* a32, int* b32) {
  const int lane = static_cast<int>(gg::lane_id());
  for (int i = 0; i < 8; ++i) {
    const gg::RowCol rc = gg::frag::a_m16n8k16(lane, i);
    a16[(lane * 8 + i) * 2] = rc.row;
    a16[(lane * 8 + i) * 2 + 1] = rc.col;
  }
  for (int i = 0; i < 4; ++i) {
    const gg::RowCol kn = gg::frag::b_m16n8k16(lane, i);
    b16[(lane * 4 + i) * 2] = kn.row;
    b16[(lane * 4 + i) * 2 + 1] = kn.col;
    const gg::RowCol rc = gg::frag::c_m16n8(lane, i);
    c[(lane * 4 + i) * 2] = rc.row;
    c[(lane * 4 + i) * 2 + 1] = rc.col;
  }
  for (int i = 0; i < 16; ++i) {
    const gg::RowCol rc = gg::frag::a_m16n8k32(lane, i);
    a32[(lane * 16 + i) * 2] = rc.row;
    a32[(lane * 16 + i) * 2 + 1] = rc.col;
  }
  for (int i = 0; i < 8; ++i) {
    const gg::RowCol kn = gg::frag::b_m16n8k32(lane, i);
    b32[(lane * 8 + i) * 2] = kn.row;
    b32[(lane * 8 + i) * 2 + 1] = kn.col;
  }
}

// Every ldmatrix variant on four 8x8 b16 matrices `src` [4][8][8]: lane
// 8j + r gives the address of row rows[8j + r] of matrix j. out is
// [6 variants: x1, x2, x4, x1.trans, x2.trans, x4.trans][32 lanes][4 regs].
extern "C" __global__ void ldmatrix_all(const unsigned short* src, const int* rows, u32* out) {
  __shared__ __align__(16) unsigned short tile[4 * 8 * 8];
  const int lane = static_cast<int>(gg::lane_id());
  for (int i = lane; i < 4 * 8 * 8; i += 32) tile[i] = src[i];
  __syncthreads();
  const unsigned short* row = &tile[(lane / 8) * 64 + rows[lane] * 8];
  u32* o = out + lane * 4;
  {
    u32 r[1];
    gg::ldmatrix_x1(r, row);
    o[0 * 128] = r[0];
    gg::ldmatrix_x1_trans(r, row);
    o[3 * 128] = r[0];
  }
  {
    u32 r[2];
    gg::ldmatrix_x2(r, row);
    for (int j = 0; j < 2; ++j) o[1 * 128 + j] = r[j];
    gg::ldmatrix_x2_trans(r, row);
    for (int j = 0; j < 2; ++j) o[4 * 128 + j] = r[j];
  }
  {
    u32 r[4];
    gg::ldmatrix_x4(r, row);
    for (int j = 0; j < 4; ++j) o[2 * 128 + j] = r[j];
    gg::ldmatrix_x4_trans(r, row);
    for (int j = 0; j < 4; ++j) o[5 * 128 + j] = r[j];
  }
}

// Per lane: a 16-, an 8- and a 4-byte cp.async from src + 64 * lane into
// dynamic shared memory, each reading `sizes[3 * lane + v]` bytes (zero-fill
// for the rest; a size of 0 passes `nowhere` as the source, which must not be
// read). out [32][28]: the three destinations after wait_all.
extern "C" __global__ void cp_async_sizes(const unsigned char* src, const int* sizes, const unsigned char* nowhere,
                                          unsigned char* out) {
  extern __shared__ __align__(16) unsigned char smem[];
  const int lane = static_cast<int>(gg::lane_id());
  const unsigned char* s = src + 64 * lane;
  unsigned char* d = smem + 32 * lane;
  const int n16 = sizes[3 * lane], n8 = sizes[3 * lane + 1], n4 = sizes[3 * lane + 2];
  gg::cp_async_16(d, n16 ? s : nowhere, n16);
  gg::cp_async_8(d + 16, n8 ? s + 16 : nowhere, n8);
  gg::cp_async_4(d + 24, n4 ? s + 24 : nowhere, n4);
  gg::cp_async_commit_group();
  gg::cp_async_wait_all();
  __syncthreads();
  for (int i = 0; i < 28; ++i) out[28 * lane + i] = smem[32 * ((lane + 1) % 32) + i];
}

// What the emulator shows a thread around its own cp.async groups (lane 0
// copies; a GPU gives undefined values before the wait, so this is
// emulator-only): out[0..15] right after issue of group 0, out[16..31] group 0
// after wait_group<1> (with group 1 in flight), out[32..47] group 1 at that
// time, out[48..63] group 1 after wait_group<0>.
extern "C" __global__ void cp_async_groups(const unsigned char* src, unsigned char* out) {
  __shared__ __align__(16) unsigned char buf[32];
  if (gg::lane_id() != 0) return;
  gg::cp_async_16(buf, src);
  for (int i = 0; i < 16; ++i) out[i] = buf[i];
  gg::cp_async_commit_group();
  gg::cp_async_16(buf + 16, src + 16);
  gg::cp_async_commit_group();
  gg::cp_async_wait_group<1>();
  for (int i = 0; i < 16; ++i) out[16 + i] = buf[i];
  for (int i = 0; i < 16; ++i) out[32 + i] = buf[16 + i];
  gg::cp_async_wait_group<0>();
  for (int i = 0; i < 16; ++i) out[48 + i] = buf[16 + i];
}

// Shuffles and reductions of x[lane] (and xd, xi): out rows in the order of
// tests/cuda_runtime_cases.py SHUFFLE_ROWS.
extern "C" __global__ void shuffles(const float* x, const double* xd, const int* xi, float* out, double* outd,
                                    int* outi) {
  const int lane = static_cast<int>(gg::lane_id());
  const float v = x[lane];
  const double vd = xd[lane];
  const int vi = xi[lane];
  out[0 * 32 + lane] = gg::shfl_xor(v, 1);
  out[1 * 32 + lane] = gg::shfl_xor(v, 5);
  out[2 * 32 + lane] = gg::shfl_xor(v, 16);
  out[3 * 32 + lane] = gg::shfl_down(v, 1u);
  out[4 * 32 + lane] = gg::shfl_down(v, 3u);
  out[5 * 32 + lane] = gg::shfl_idx(v, (lane * 7) % 32);
  out[6 * 32 + lane] = gg::shfl_idx(v, 5);
  out[7 * 32 + lane] = gg::warp_reduce_sum(v);
  out[8 * 32 + lane] = gg::warp_reduce_max(v);
  outd[0 * 32 + lane] = gg::shfl_xor(vd, 3);
  outd[1 * 32 + lane] = gg::shfl_down(vd, 2u);
  outd[2 * 32 + lane] = gg::shfl_idx(vd, 31 - lane);
  outd[3 * 32 + lane] = gg::warp_reduce_sum(vd);
  outi[0 * 32 + lane] = gg::shfl_xor(vi, 7);
  outi[1 * 32 + lane] = gg::shfl_down(vi, 16u);
  outi[2 * 32 + lane] = gg::shfl_idx(vi, lane / 2);
  outi[3 * 32 + lane] = gg::warp_reduce_sum(vi);
  outi[4 * 32 + lane] = gg::warp_reduce_max(vi);
}

// 128-bit loads and stores: thread i copies 16 bytes at 16 * i through each
// load helper into its own output.
extern "C" __global__ void global_128(const u32* src, u32* out_coherent, u32* out_readonly, int n16) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i >= n16) return;
  gg::st_global_128(out_coherent + 4 * i, gg::ld_global_128(src + 4 * i));
  gg::st_global_128(out_readonly + 4 * i, gg::ld_global_nc_128(src + 4 * i));
}

// Built-in variables and atomics over a 3-D grid of 3-D blocks: each thread
// writes its coordinates at its global linear index and adds to a total.
// coords [threads][6] (threadIdx.xyz, blockIdx.xyz), total [2] (int, float).
extern "C" __global__ void indexing(int* coords, int* total_i, float* total_f) {
  const int tpb = static_cast<int>(blockDim.x * blockDim.y * blockDim.z);
  const int t = static_cast<int>(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z));
  const int b = static_cast<int>(blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z));
  int* c = coords + 6 * (b * tpb + t);
  c[0] = static_cast<int>(threadIdx.x);
  c[1] = static_cast<int>(threadIdx.y);
  c[2] = static_cast<int>(threadIdx.z);
  c[3] = static_cast<int>(blockIdx.x);
  c[4] = static_cast<int>(blockIdx.y);
  c[5] = static_cast<int>(blockIdx.z);
  atomicAdd(total_i, 1);
  atomicAdd(total_f, 0.5f);
}
