// gg_primitives.cuh: the device primitives gemmgen's CUDA kernels are built
// from, and the only file with inline PTX. Every primitive has its PTX body
// under __CUDA_ARCH__ and a CPU body under GG_EMU (gg_emu.h) that runs the
// same operation on the emulator, so one kernel source serves nvcc and g++.
//
// Warp-collective primitives (mma, ldmatrix, shuffles, reductions) must be
// called by every lane of the warp with the same arguments shape; the
// emulator reports a lane that does not arrive.
//
// Fragment layouts (PTX ISA "Matrix Fragments for mma.m16n8k16 / m16n8k32";
// g = lane >> 2, t = lane % 4; element i of a fragment sits in register i / 2
// (16-bit types) or i / 4 (8-bit types), lower index in the lower bits):
//   m16n8k16 A (8 elems):  row = g + 8*((i>>1)&1),  col = 2t + (i&1) + 8*(i>=4)
//   m16n8k16 B (4 elems):  k = 2t + (i&1) + 8*(i>=2), n = g
//   C/D f32|s32 (4 elems): row = g + 8*(i>=2),       col = 2t + (i&1)
//   m16n8k32 A (16 elems): row = g + 8*((i>>2)&1),  col = 4t + (i&3) + 16*(i>=8)
//   m16n8k32 B (8 elems):  k = 4t + (i&3) + 16*(i>=4), n = g
// gg::frag::* computes these; kernels use it to load and store fragments.
//
// ldmatrix.m8n8.b16: lanes 8j..8j+7 give the row addresses of matrix j
// (16-byte aligned, shared memory); register j of lane l holds row l/4,
// columns 2(l%4) and 2(l%4)+1 of matrix j, or with .trans column l/4, rows
// 2(l%4) and 2(l%4)+1.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#if defined(GG_EMU)
#include <cstring>
#endif

namespace gg {

using u32 = unsigned int;

// A (row, column) position in a fragment's matrix; for B it is (k, n).
struct RowCol {
  int row;
  int col;
};

namespace frag {

__host__ __device__ constexpr RowCol a_m16n8k16(int lane, int i) {
  return {(lane >> 2) + 8 * ((i >> 1) & 1), 2 * (lane & 3) + (i & 1) + 8 * (i >= 4)};
}
__host__ __device__ constexpr RowCol b_m16n8k16(int lane, int i) {
  return {2 * (lane & 3) + (i & 1) + 8 * (i >= 2), lane >> 2};
}
// The accumulator (C and D) of every m16n8kK shape.
__host__ __device__ constexpr RowCol c_m16n8(int lane, int i) {
  return {(lane >> 2) + 8 * (i >= 2), 2 * (lane & 3) + (i & 1)};
}
__host__ __device__ constexpr RowCol a_m16n8k32(int lane, int i) {
  return {(lane >> 2) + 8 * ((i >> 2) & 1), 4 * (lane & 3) + (i & 3) + 16 * (i >= 8)};
}
__host__ __device__ constexpr RowCol b_m16n8k32(int lane, int i) {
  return {4 * (lane & 3) + (i & 3) + 16 * (i >= 4), lane >> 2};
}

}  // namespace frag

#if defined(GG_EMU)
// CPU bodies: each lane computes its own outputs from every lane's posted
// registers, finding an element's owner with the inverse of gg::frag.
namespace emu_detail {

struct Lane {
  int lane;
  int i;
};
GG_EMU_ALWAYS_INLINE Lane owner_a_m16n8k16(int row, int col) {
  return {4 * (row & 7) + ((col & 7) >> 1), (col & 1) | ((row >= 8) << 1) | ((col >= 8) << 2)};
}
GG_EMU_ALWAYS_INLINE Lane owner_b_m16n8k16(int k, int n) {
  return {4 * n + ((k & 7) >> 1), (k & 1) | ((k >= 8) << 1)};
}
GG_EMU_ALWAYS_INLINE Lane owner_a_m16n8k32(int row, int col) {
  return {4 * (row & 7) + ((col & 15) >> 2), (col & 3) | ((row >= 8) << 2) | ((col >= 16) << 3)};
}
GG_EMU_ALWAYS_INLINE Lane owner_b_m16n8k32(int k, int n) {
  return {4 * n + ((k & 15) >> 2), (k & 3) | ((k >= 16) << 2)};
}

GG_EMU_ALWAYS_INLINE unsigned half_of(u32 reg, int i) {
  return (reg >> (16 * (i & 1))) & 0xFFFFu;
}
GG_EMU_ALWAYS_INLINE unsigned byte_of(u32 reg, int i) {
  return (reg >> (8 * (i & 3))) & 0xFFu;
}

GG_EMU_ALWAYS_INLINE double bf16_value(unsigned bits) {
  const u32 u = bits << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
GG_EMU_ALWAYS_INLINE double f16_value(unsigned bits) {
  const double sign = (bits & 0x8000u) ? -1.0 : 1.0;
  const int e = (bits >> 10) & 31;
  const int m = bits & 1023;
  if (e == 31)
    return m == 0 ? sign * HUGE_VAL : NAN;
  return sign * (e == 0 ? std::ldexp(m, -24) : std::ldexp(1024 + m, e - 25));
}
GG_EMU_ALWAYS_INLINE double e4m3_value(unsigned bits) {
  const double sign = (bits & 0x80u) ? -1.0 : 1.0;
  const int e = (bits >> 3) & 15;
  const int m = bits & 7;
  if (e == 15 && m == 7)
    return NAN;
  return sign * (e == 0 ? std::ldexp(m, -9) : std::ldexp(8 + m, e - 10));
}
GG_EMU_ALWAYS_INLINE double e5m2_value(unsigned bits) {
  const double sign = (bits & 0x80u) ? -1.0 : 1.0;
  const int e = (bits >> 2) & 31;
  const int m = bits & 3;
  if (e == 31)
    return m == 0 ? sign * HUGE_VAL : NAN;
  return sign * (e == 0 ? std::ldexp(m, -16) : std::ldexp(4 + m, e - 17));
}
GG_EMU_ALWAYS_INLINE double s8_value(unsigned bits) {
  return static_cast<signed char>(bits);
}

template <class Acc>
struct MmaIn {
  u32 a[4];
  u32 b[2];
  Acc c[4];
};
template <class Acc>
struct MmaOut {
  Acc d[4];
};

// D = A * B + C for the lane's four accumulator elements, summed in double
// (or exactly in 64-bit integers for s8) and rounded once.
template <class Acc, int K, double (*Value)(unsigned)>
GG_EMU_UNCHECKED MmaOut<Acc> mma_lane(unsigned lane, const MmaIn<Acc>* const* ins) {
  MmaOut<Acc> out{};
  for (int i = 0; i < 4; ++i) {
    const RowCol rc = frag::c_m16n8(static_cast<int>(lane), i);
    double acc = 0.0;
    long long iacc = 0;
    for (int k = 0; k < K; ++k) {
      unsigned a_bits, b_bits;
      if constexpr (K == 16) {
        const Lane ao = owner_a_m16n8k16(rc.row, k);
        const Lane bo = owner_b_m16n8k16(k, rc.col);
        a_bits = half_of(ins[ao.lane]->a[ao.i >> 1], ao.i);
        b_bits = half_of(ins[bo.lane]->b[bo.i >> 1], bo.i);
      } else {
        const Lane ao = owner_a_m16n8k32(rc.row, k);
        const Lane bo = owner_b_m16n8k32(k, rc.col);
        a_bits = byte_of(ins[ao.lane]->a[ao.i >> 2], ao.i);
        b_bits = byte_of(ins[bo.lane]->b[bo.i >> 2], bo.i);
      }
      if constexpr (std::is_integral_v<Acc>) {
        iacc += static_cast<long long>(Value(a_bits)) * static_cast<long long>(Value(b_bits));
      } else {
        acc += Value(a_bits) * Value(b_bits);
      }
    }
    const Acc c = ins[lane]->c[i];
    if constexpr (std::is_integral_v<Acc>) {
      out.d[i] = static_cast<Acc>(static_cast<u32>(static_cast<long long>(c) + iacc));
    } else {
      out.d[i] = static_cast<Acc>(static_cast<double>(c) + acc);
    }
  }
  return out;
}

template <class Acc, int K, double (*Value)(unsigned)>
GG_EMU_ALWAYS_INLINE void mma(const char* op, Acc (&d)[4], const u32 (&a)[4], const u32 (&b)[2],
                              const Acc (&c)[4]) {
  gg::emu::mc::on_mma();
  const MmaIn<Acc> in{{a[0], a[1], a[2], a[3]}, {b[0], b[1]}, {c[0], c[1], c[2], c[3]}};
  const MmaOut<Acc> out = gg::emu::warp_collective<MmaIn<Acc>, MmaOut<Acc>>(
      op, 0xffffffffu, in, [](unsigned lane, const MmaIn<Acc>* const* ins) {
        return mma_lane<Acc, K, Value>(lane, ins);
      });
  for (int i = 0; i < 4; ++i)
    d[i] = out.d[i];
}

struct LdmatrixIn {
  const unsigned char* row;
};
template <int N>
struct LdmatrixOut {
  u32 r[N];
};

inline const unsigned char* ldmatrix_row(const LdmatrixIn* const* ins, unsigned lane) {
  const unsigned char* p = ins[lane]->row;
  if (reinterpret_cast<std::uintptr_t>(p) % 16 != 0) {
    gg::emu::fail("ldmatrix: lane %u gave row address %p, which is not 16-byte aligned", lane,
                  static_cast<const void*>(p));
  }
  gg::emu::check_shared(p, 16, "ldmatrix row address");
  return p;
}

template <int N, bool Trans>
GG_EMU_ALWAYS_INLINE void ldmatrix(const char* op, u32 (&r)[N], const void* row) {
  gg::emu::mc::on_ldmatrix(row, N);
  const LdmatrixIn in{static_cast<const unsigned char*>(row)};
  const LdmatrixOut<N> out = gg::emu::warp_collective<LdmatrixIn, LdmatrixOut<N>>(
      op, 0xffffffffu, in, [](unsigned lane, const LdmatrixIn* const* ins) {
        LdmatrixOut<N> o{};
        for (int j = 0; j < N; ++j) {
          if constexpr (Trans) {
            // Column lane/4 of rows 2(lane%4) and 2(lane%4)+1.
            const unsigned r0 = 8 * j + 2 * (lane & 3);
            std::uint16_t lo, hi;
            std::memcpy(&lo, ldmatrix_row(ins, r0) + 2 * (lane >> 2), 2);
            std::memcpy(&hi, ldmatrix_row(ins, r0 + 1) + 2 * (lane >> 2), 2);
            o.r[j] = static_cast<u32>(lo) | (static_cast<u32>(hi) << 16);
          } else {
            // Columns 2(lane%4), +1 of row lane/4.
            std::memcpy(&o.r[j], ldmatrix_row(ins, 8 * j + (lane >> 2)) + 4 * (lane & 3), 4);
          }
        }
        return o;
      });
  for (int j = 0; j < N; ++j)
    r[j] = out.r[j];
}

inline void check_global_alignment(const void* p, const char* what) {
  if (reinterpret_cast<std::uintptr_t>(p) % 16 != 0)
    gg::emu::fail("%s: address %p is not 16-byte aligned", what, p);
}

}  // namespace emu_detail
#elif defined(__CUDA_ARCH__)
namespace detail {
__device__ __forceinline__ u32 smem_u32(const void* p) {
  return static_cast<u32>(__cvta_generic_to_shared(p));
}
}  // namespace detail
#endif

// ---------------------------------------------------------------------------
// Tensor-core MMA: d = a * b + c for one 16x8 tile (row-major A, column-major
// B, f32 or s32 accumulators). Warp-collective.

__device__ __forceinline__ void mma_m16n8k16_bf16(float (&d)[4], const u32 (&a)[4],
                                                  const u32 (&b)[2], const float (&c)[4]) {
#if defined(__CUDA_ARCH__)
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, "
      "{%10, %11, %12, %13};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]),
        "f"(c[2]), "f"(c[3]));
#elif defined(GG_EMU)
  emu_detail::mma<float, 16, emu_detail::bf16_value>("mma.sync.m16n8k16.bf16", d, a, b, c);
#endif
}

__device__ __forceinline__ void mma_m16n8k16_f16(float (&d)[4], const u32 (&a)[4],
                                                 const u32 (&b)[2], const float (&c)[4]) {
#if defined(__CUDA_ARCH__)
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, "
      "%9}, "
      "{%10, %11, %12, %13};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]),
        "f"(c[2]), "f"(c[3]));
#elif defined(GG_EMU)
  emu_detail::mma<float, 16, emu_detail::f16_value>("mma.sync.m16n8k16.f16", d, a, b, c);
#endif
}

// FP8 mma.sync exists from sm_89. NB: a template, so that the static_assert
// fires only in kernels that call it on an older arch.
template <int kNever = 0>
__device__ __forceinline__ void mma_m16n8k32_e4m3(float (&d)[4], const u32 (&a)[4],
                                                  const u32 (&b)[2], const float (&c)[4]) {
#if defined(__CUDA_ARCH__)
#if __CUDA_ARCH__ >= 890
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, "
      "{%10, %11, %12, %13};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]),
        "f"(c[2]), "f"(c[3]));
#else
  static_assert(kNever != 0, "gg::mma_m16n8k32_e4m3 needs sm_89 or newer (FP8 mma.sync)");
#endif
#elif defined(GG_EMU)
  emu_detail::mma<float, 32, emu_detail::e4m3_value>("mma.sync.m16n8k32.e4m3", d, a, b, c);
#endif
}

template <int kNever = 0>
__device__ __forceinline__ void mma_m16n8k32_e5m2(float (&d)[4], const u32 (&a)[4],
                                                  const u32 (&b)[2], const float (&c)[4]) {
#if defined(__CUDA_ARCH__)
#if __CUDA_ARCH__ >= 890
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.f32.e5m2.e5m2.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, "
      "{%10, %11, %12, %13};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]),
        "f"(c[2]), "f"(c[3]));
#else
  static_assert(kNever != 0, "gg::mma_m16n8k32_e5m2 needs sm_89 or newer (FP8 mma.sync)");
#endif
#elif defined(GG_EMU)
  emu_detail::mma<float, 32, emu_detail::e5m2_value>("mma.sync.m16n8k32.e5m2", d, a, b, c);
#endif
}

// s32 accumulation wraps on overflow, like mma.sync without .satfinite.
__device__ __forceinline__ void mma_m16n8k32_s8(int (&d)[4], const u32 (&a)[4], const u32 (&b)[2],
                                                const int (&c)[4]) {
#if defined(__CUDA_ARCH__)
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, "
      "%9}, "
      "{%10, %11, %12, %13};\n"
      : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "r"(c[0]), "r"(c[1]),
        "r"(c[2]), "r"(c[3]));
#elif defined(GG_EMU)
  emu_detail::mma<int, 32, emu_detail::s8_value>("mma.sync.m16n8k32.s8", d, a, b, c);
#endif
}

// ---------------------------------------------------------------------------
// ldmatrix: one to four 8x8 b16 matrices from shared memory. Warp-collective;
// `row` is this lane's row address (see the header comment).

__device__ __forceinline__ void ldmatrix_x1(u32 (&r)[1], const void* row) {
#if defined(__CUDA_ARCH__)
  asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];\n"
               : "=r"(r[0])
               : "r"(detail::smem_u32(row)));
#elif defined(GG_EMU)
  emu_detail::ldmatrix<1, false>("ldmatrix.x1", r, row);
#endif
}

__device__ __forceinline__ void ldmatrix_x2(u32 (&r)[2], const void* row) {
#if defined(__CUDA_ARCH__)
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(detail::smem_u32(row)));
#elif defined(GG_EMU)
  emu_detail::ldmatrix<2, false>("ldmatrix.x2", r, row);
#endif
}

__device__ __forceinline__ void ldmatrix_x4(u32 (&r)[4], const void* row) {
#if defined(__CUDA_ARCH__)
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(detail::smem_u32(row)));
#elif defined(GG_EMU)
  emu_detail::ldmatrix<4, false>("ldmatrix.x4", r, row);
#endif
}

__device__ __forceinline__ void ldmatrix_x1_trans(u32 (&r)[1], const void* row) {
#if defined(__CUDA_ARCH__)
  asm volatile("ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {%0}, [%1];\n"
               : "=r"(r[0])
               : "r"(detail::smem_u32(row)));
#elif defined(GG_EMU)
  emu_detail::ldmatrix<1, true>("ldmatrix.x1.trans", r, row);
#endif
}

__device__ __forceinline__ void ldmatrix_x2_trans(u32 (&r)[2], const void* row) {
#if defined(__CUDA_ARCH__)
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(detail::smem_u32(row)));
#elif defined(GG_EMU)
  emu_detail::ldmatrix<2, true>("ldmatrix.x2.trans", r, row);
#endif
}

__device__ __forceinline__ void ldmatrix_x4_trans(u32 (&r)[4], const void* row) {
#if defined(__CUDA_ARCH__)
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(detail::smem_u32(row)));
#elif defined(GG_EMU)
  emu_detail::ldmatrix<4, true>("ldmatrix.x4.trans", r, row);
#endif
}

// ---------------------------------------------------------------------------
// cp.async: global -> shared copies that complete at cp_async_wait_group.
// Only the first `src_bytes` bytes are read; the rest of the destination is
// zero-filled (src_bytes = 0 reads nothing: a partial tile's padding).
// Addresses must be aligned to the copy size.

__device__ __forceinline__ void cp_async_16(void* smem_dst, const void* gmem_src,
                                            u32 src_bytes = 16) {
#if defined(__CUDA_ARCH__)
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(detail::smem_u32(smem_dst)),
               "l"(gmem_src), "r"(src_bytes)
               : "memory");
#elif defined(GG_EMU)
  gg::emu::cp_async(smem_dst, gmem_src, 16, src_bytes);
#endif
}

__device__ __forceinline__ void cp_async_8(void* smem_dst, const void* gmem_src,
                                           u32 src_bytes = 8) {
#if defined(__CUDA_ARCH__)
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(detail::smem_u32(smem_dst)),
               "l"(gmem_src), "r"(src_bytes)
               : "memory");
#elif defined(GG_EMU)
  gg::emu::cp_async(smem_dst, gmem_src, 8, src_bytes);
#endif
}

__device__ __forceinline__ void cp_async_4(void* smem_dst, const void* gmem_src,
                                           u32 src_bytes = 4) {
#if defined(__CUDA_ARCH__)
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(detail::smem_u32(smem_dst)),
               "l"(gmem_src), "r"(src_bytes)
               : "memory");
#elif defined(GG_EMU)
  gg::emu::cp_async(smem_dst, gmem_src, 4, src_bytes);
#endif
}

// Closes the current group of this thread's cp.async copies.
__device__ __forceinline__ void cp_async_commit_group() {
#if defined(__CUDA_ARCH__)
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#elif defined(GG_EMU)
  gg::emu::cp_async_commit();
#endif
}

// Waits until at most `kPending` of this thread's newest committed groups are
// still in flight. Other threads' copies need a __syncthreads after this.
template <int kPending>
__device__ __forceinline__ void cp_async_wait_group() {
  static_assert(kPending >= 0 && kPending <= 7, "cp.async.wait_group takes 0..7");
#if defined(__CUDA_ARCH__)
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
#elif defined(GG_EMU)
  gg::emu::cp_async_wait(kPending);
#endif
}

// Commits the current group and waits for every copy of this thread.
__device__ __forceinline__ void cp_async_wait_all() {
#if defined(__CUDA_ARCH__)
  asm volatile("cp.async.wait_all;\n" ::: "memory");
#elif defined(GG_EMU)
  gg::emu::cp_async_commit();
  gg::emu::cp_async_wait(0);
#endif
}

// ---------------------------------------------------------------------------
// Warp shuffles and reductions (values of 4 or 8 bytes). Warp-collective over
// `mask`.

__device__ __forceinline__ u32 lane_id() {
#if defined(__CUDA_ARCH__)
  u32 lane;
  asm("mov.u32 %0, %%laneid;\n" : "=r"(lane));
  return lane;
#elif defined(GG_EMU)
  return gg::emu::lane_id();
#else
  return 0;
#endif
}

template <class T>
__device__ __forceinline__ T shfl_xor(T v, int lane_mask, u32 mask = 0xffffffffu) {
#if defined(__CUDA_ARCH__)
  return __shfl_xor_sync(mask, v, lane_mask);
#elif defined(GG_EMU)
  return gg::emu::shfl(gg::emu::ShflMode::bfly, mask, v, lane_mask, 32);
#else
  return v;
#endif
}

template <class T>
__device__ __forceinline__ T shfl_down(T v, u32 delta, u32 mask = 0xffffffffu) {
#if defined(__CUDA_ARCH__)
  return __shfl_down_sync(mask, v, delta);
#elif defined(GG_EMU)
  return gg::emu::shfl(gg::emu::ShflMode::down, mask, v, static_cast<int>(delta), 32);
#else
  return v;
#endif
}

template <class T>
__device__ __forceinline__ T shfl_idx(T v, int src_lane, u32 mask = 0xffffffffu) {
#if defined(__CUDA_ARCH__)
  return __shfl_sync(mask, v, src_lane);
#elif defined(GG_EMU)
  return gg::emu::shfl(gg::emu::ShflMode::idx, mask, v, src_lane, 32);
#else
  return v;
#endif
}

// Butterfly sum over the warp: every lane gets the same result, summed in the
// same order on the GPU and on the emulator.
template <class T>
__device__ __forceinline__ T warp_reduce_sum(T v) {
  for (int offset = 16; offset > 0; offset >>= 1)
    v += shfl_xor(v, offset);
  return v;
}

// Butterfly maximum over the warp; a NaN in any lane makes the result NaN.
template <class T>
__device__ __forceinline__ T warp_reduce_max(T v) {
  for (int offset = 16; offset > 0; offset >>= 1) {
    const T other = shfl_xor(v, offset);
    v = (other > v || other != other) ? other : v;
  }
  return v;
}

// ---------------------------------------------------------------------------
// 128-bit global memory access (16-byte aligned addresses).

// LDG.E.128: a coherent load.
__device__ __forceinline__ uint4 ld_global_128(const void* p) {
  uint4 v;
#if defined(__CUDA_ARCH__)
  asm volatile("ld.global.v4.u32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p)
               : "memory");
#elif defined(GG_EMU)
  emu_detail::check_global_alignment(p, "ld_global_128");
  std::memcpy(&v, p, sizeof v);
#else
  v = uint4{};
#endif
  return v;
}

// LDG.E.128.CONSTANT: a read-only (non-coherent) load, for data the kernel
// never writes.
__device__ __forceinline__ uint4 ld_global_nc_128(const void* p) {
  uint4 v;
#if defined(__CUDA_ARCH__)
  asm("ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];\n"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p));
#elif defined(GG_EMU)
  emu_detail::check_global_alignment(p, "ld_global_nc_128");
  std::memcpy(&v, p, sizeof v);
#else
  v = uint4{};
#endif
  return v;
}

// STG.E.128.
__device__ __forceinline__ void st_global_128(void* p, uint4 v) {
#if defined(__CUDA_ARCH__)
  asm volatile("st.global.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"l"(p), "r"(v.x), "r"(v.y), "r"(v.z),
               "r"(v.w)
               : "memory");
#elif defined(GG_EMU)
  emu_detail::check_global_alignment(p, "st_global_128");
  std::memcpy(p, &v, sizeof v);
#else
  (void)p;
  (void)v;
#endif
}

}  // namespace gg
#include "gg_primitives_sm90.cuh"
#include "gg_primitives_sm120.cuh"
