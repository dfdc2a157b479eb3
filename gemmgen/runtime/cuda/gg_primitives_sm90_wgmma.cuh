// gg_primitives_sm90_wgmma.cuh: the wgmma matrix descriptors,
// setmaxnreg and wgmma (fence, mma_async in its bf16 / f16 / FP8 forms,
// commit_group, wait_group).
// Part of gg_primitives_sm90.cuh, which includes it after what the parts
// share (u64, SmemSwizzle, sm90_detail::smem_addr): include that header,
// not this one.
#pragma once

namespace gg {

// ---------------------------------------------------------------------------
// Matrix descriptors (PTX ISA "Matrix Descriptor Format"): start address,
// leading and stride byte offsets (all >> 4, 14 bits), swizzle mode.
__host__ __device__ constexpr u64 smem_desc(u32 smem_address, u32 lbo_bytes, u32 sbo_bytes,
                                            SmemSwizzle swizzle) {
  return static_cast<u64>((smem_address & 0x3FFFFu) >> 4) |
         (static_cast<u64>((lbo_bytes & 0x3FFFFu) >> 4) << 16) |
         (static_cast<u64>((sbo_bytes & 0x3FFFFu) >> 4) << 32) | (static_cast<u64>(swizzle) << 62);
}

// The descriptor of the operand tile at `smem` (shared memory).
__device__ __forceinline__ u64 make_smem_desc(const void* smem, u32 lbo_bytes, u32 sbo_bytes,
                                              SmemSwizzle swizzle) {
  return smem_desc(sm90_detail::smem_addr(smem), lbo_bytes, sbo_bytes, swizzle);
}

// ---------------------------------------------------------------------------
// setmaxnreg: a warpgroup asks for (inc) or releases (dec) registers, so that
// the producer gives its registers to the consumers.

template <int kRegs, int kNever = 0>
__device__ __forceinline__ void setmaxnreg_inc() {
  static_assert(kRegs >= 24 && kRegs <= 256 && kRegs % 8 == 0,
                "setmaxnreg takes a multiple of 8 in 24..256");
#if defined(__CUDA_ARCH__)
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs));
#else
  static_assert(kNever != 0, "gg::setmaxnreg_inc needs sm_90a");
#endif
#elif defined(GG_EMU)
  gg::emu::syncwarp(0xffffffffu);
  gg::emu::sm90::setmaxnreg(kRegs);
#endif
}

template <int kRegs, int kNever = 0>
__device__ __forceinline__ void setmaxnreg_dec() {
  static_assert(kRegs >= 24 && kRegs <= 256 && kRegs % 8 == 0,
                "setmaxnreg takes a multiple of 8 in 24..256");
#if defined(__CUDA_ARCH__)
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs));
#else
  static_assert(kNever != 0, "gg::setmaxnreg_dec needs sm_90a");
#endif
#elif defined(GG_EMU)
  gg::emu::syncwarp(0xffffffffu);
  gg::emu::sm90::setmaxnreg(kRegs);
#endif
}

// ---------------------------------------------------------------------------
// wgmma.

template <int kNever = 0>
__device__ __forceinline__ void wgmma_fence() {
#if defined(__CUDA_ARCH__)
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#else
  static_assert(kNever != 0, "gg::wgmma_fence needs sm_90a");
#endif
#elif defined(GG_EMU)
  gg::emu::sm90::wgmma_fence();
#endif
}

template <int kNever = 0>
__device__ __forceinline__ void wgmma_commit_group() {
#if defined(__CUDA_ARCH__)
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#else
  static_assert(kNever != 0, "gg::wgmma_commit_group needs sm_90a");
#endif
#elif defined(GG_EMU)
  gg::emu::sm90::wgmma_commit();
#endif
}

// Waits until at most kPending of the newest wgmma groups are in flight; the
// accumulators of the others are valid after it.
template <int kPending, int kNever = 0>
__device__ __forceinline__ void wgmma_wait_group() {
  static_assert(kPending >= 0 && kPending <= 7, "wgmma.wait_group takes 0..7");
#if defined(__CUDA_ARCH__)
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
#else
  static_assert(kNever != 0, "gg::wgmma_wait_group needs sm_90a");
#endif
#elif defined(GG_EMU)
  gg::emu::sm90::wgmma_wait(kPending);
#endif
}

// Keeps the compiler from moving accesses of the accumulators across the
// wgmma instructions (use around issue and wait).
template <int kN>
__device__ __forceinline__ void wgmma_fence_operand(float (&d)[kN]) {
#if defined(__CUDA_ARCH__)
  for (int i = 0; i < kN; ++i)
    asm volatile("" : "+f"(d[i])::"memory");
#else
  (void)d;
#endif
}

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
namespace sm90_detail {

template <int N>
struct WgmmaAsm;

// imm-scale-a = imm-scale-b = 1; scale-d from a register (0: D = A*B).
#define GG_WGMMA_SS(N, NAME, TYPES, SA, SB, SS, STA, STB)                                    \
  template <int kTA, int kTB>                                                                \
  static __device__ __forceinline__ void NAME(float (&d)[N / 2], u64 a, u64 b, u32 scale) {  \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" SS                                     \
                 ", 0;\nwgmma.mma_async.sync.aligned.m64n" #N "k16." TYPES " " GG_WGMMA_D##N \
                 ", %" SA ", %" SB ", p, 1, 1, %" STA ", %" STB ";\n}\n"                     \
                 : GG_WGMMA_OUT##N                                                           \
                 : "l"(a), "l"(b), "r"(scale), "n"(kTA), "n"(kTB));                          \
  }
#define GG_WGMMA_RS(N, NAME, TYPES, RA0, RA1, RA2, RA3, RB, RS, RTB)                            \
  template <int kTB>                                                                            \
  static __device__ __forceinline__ void NAME(float (&d)[N / 2], const u32(&a)[4], u64 b,       \
                                              u32 scale) {                                      \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" RS                                        \
                 ", 0;\nwgmma.mma_async.sync.aligned.m64n" #N "k16." TYPES " " GG_WGMMA_D##N    \
                 ", {%" RA0 ", %" RA1 ", %" RA2 ", %" RA3 "}, %" RB ", p, 1, 1, %" RTB ";\n}\n" \
                 : GG_WGMMA_OUT##N                                                              \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(scale), "n"(kTB));   \
  }
#define GG_WGMMA_SS8(N, NAME, TYPES, SA, SB, SS)                                             \
  static __device__ __forceinline__ void NAME(float (&d)[N / 2], u64 a, u64 b, u32 scale) {  \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" SS                                     \
                 ", 0;\nwgmma.mma_async.sync.aligned.m64n" #N "k32." TYPES " " GG_WGMMA_D##N \
                 ", %" SA ", %" SB ", p, 1, 1;\n}\n"                                         \
                 : GG_WGMMA_OUT##N                                                           \
                 : "l"(a), "l"(b), "r"(scale));                                              \
  }
// The operand numbers of each form: the N/2 accumulators come first.
#define GG_WGMMA_SHAPE(N, SA, SB, SS, STA, STB, RA0, RA1, RA2, RA3, RB, RS, RTB) \
  template <>                                                                    \
  struct WgmmaAsm<N> {                                                           \
    GG_WGMMA_SS(N, ss_bf16, "f32.bf16.bf16", SA, SB, SS, STA, STB)               \
    GG_WGMMA_SS(N, ss_f16, "f32.f16.f16", SA, SB, SS, STA, STB)                  \
    GG_WGMMA_RS(N, rs_bf16, "f32.bf16.bf16", RA0, RA1, RA2, RA3, RB, RS, RTB)    \
    GG_WGMMA_RS(N, rs_f16, "f32.f16.f16", RA0, RA1, RA2, RA3, RB, RS, RTB)       \
    GG_WGMMA_SS8(N, ss_e4m3, "f32.e4m3.e4m3", SA, SB, SS)                        \
    GG_WGMMA_SS8(N, ss_e5m2, "f32.e5m2.e5m2", SA, SB, SS)                        \
  };

// The accumulator registers and operand lists of each N (written out: the
// preprocessor cannot count).
#define GG_WGMMA_D8 "{%0, %1, %2, %3}"
#define GG_WGMMA_OUT8 "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
GG_WGMMA_SHAPE(8, "4", "5", "6", "7", "8", "4", "5", "6", "7", "8", "9", "10")
#define GG_WGMMA_D16 "{%0, %1, %2, %3, %4, %5, %6, %7}"
#define GG_WGMMA_OUT16 \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
GG_WGMMA_SHAPE(16, "8", "9", "10", "11", "12", "8", "9", "10", "11", "12", "13", "14")
#define GG_WGMMA_D32 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}"
#define GG_WGMMA_OUT32                                                                            \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
      "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]),    \
      "+f"(d[15])
GG_WGMMA_SHAPE(32, "16", "17", "18", "19", "20", "16", "17", "18", "19", "20", "21", "22")
#define GG_WGMMA_D64                                                       \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15," \
  " %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define GG_WGMMA_OUT64                                                                            \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
      "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]),    \
      "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]),  \
      "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]),  \
      "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
GG_WGMMA_SHAPE(64, "32", "33", "34", "35", "36", "32", "33", "34", "35", "36", "37", "38")
#define GG_WGMMA_D96                                                                 \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"           \
  " %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31," \
  " %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47}"
#define GG_WGMMA_OUT96                                                                            \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
      "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]),    \
      "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]),  \
      "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]),  \
      "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]),  \
      "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]),  \
      "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47])
GG_WGMMA_SHAPE(96, "48", "49", "50", "51", "52", "48", "49", "50", "51", "52", "53", "54")
#define GG_WGMMA_D128                                                                \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"           \
  " %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31," \
  " %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47," \
  " %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}"
#define GG_WGMMA_OUT128                                                                           \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
      "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]),    \
      "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]),  \
      "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]),  \
      "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]),  \
      "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]),  \
      "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]),  \
      "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]),  \
      "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
GG_WGMMA_SHAPE(128, "64", "65", "66", "67", "68", "64", "65", "66", "67", "68", "69", "70")
#define GG_WGMMA_D192                                                                \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"           \
  " %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31," \
  " %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47," \
  " %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63," \
  " %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79," \
  " %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95}"
#define GG_WGMMA_OUT192                                                                           \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
      "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]),    \
      "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]),  \
      "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]),  \
      "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]),  \
      "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]),  \
      "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]),  \
      "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]),  \
      "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),  \
      "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]),  \
      "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]),  \
      "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]),  \
      "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]),  \
      "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95])
GG_WGMMA_SHAPE(192, "96", "97", "98", "99", "100", "96", "97", "98", "99", "100", "101", "102")
#define GG_WGMMA_D256                                                                            \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"                       \
  " %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31,"             \
  " %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47,"             \
  " %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63,"             \
  " %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79,"             \
  " %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95,"             \
  " %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111," \
  " %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, "  \
  "%127}"
#define GG_WGMMA_OUT256                                                                           \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
      "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]),    \
      "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]),  \
      "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]),  \
      "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]),  \
      "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]),  \
      "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]),  \
      "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]),  \
      "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),  \
      "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]),  \
      "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]),  \
      "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]),  \
      "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]),  \
      "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]),  \
      "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]),          \
      "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]),         \
      "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]),         \
      "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]),         \
      "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
GG_WGMMA_SHAPE(256, "128", "129", "130", "131", "132", "128", "129", "130", "131", "132", "133",
               "134")

#undef GG_WGMMA_SHAPE
#undef GG_WGMMA_SS8
#undef GG_WGMMA_RS
#undef GG_WGMMA_SS

}  // namespace sm90_detail
#endif

#if defined(GG_EMU)
namespace sm90_detail {

struct WgmmaIn {
  u64 desc_a, desc_b;
  u32 a[4];
  u32 flags;
};
struct WgmmaOut {
  unsigned short tile[16][16];
};

// Issues one wgmma for the calling thread. A warp-collective first: the
// lanes must agree on the operands, and with A in registers every lane gets
// its warp's 16 rows of A.
template <int N>
GG_EMU_ALWAYS_INLINE void emu_wgmma(const char* op, float (&d)[N / 2], u64 desc_a,
                                    const u32* a_regs, u64 desc_b, bool accumulate, bool trans_a,
                                    bool trans_b, unsigned k, unsigned elem_bytes,
                                    double (*value)(unsigned)) {
  WgmmaIn in{desc_a,
             desc_b,
             {},
             (a_regs != nullptr ? 1u : 0u) | (trans_a ? 2u : 0u) | (trans_b ? 4u : 0u) |
                 (accumulate ? 8u : 0u)};
  if (a_regs != nullptr) {
    for (int i = 0; i < 4; ++i)
      in.a[i] = a_regs[i];
  }
  const WgmmaOut out = gg::emu::warp_collective<WgmmaIn, WgmmaOut>(
      op, 0xffffffffu, in, [](unsigned lane, const WgmmaIn* const* ins) {
        WgmmaOut o{};
        for (unsigned l = 0; l < 32; ++l) {
          if (ins[l]->desc_b != ins[lane]->desc_b || ins[l]->flags != ins[lane]->flags ||
              ((ins[lane]->flags & 1u) == 0 && ins[l]->desc_a != ins[lane]->desc_a)) {
            gg::emu::fail(
                "wgmma.mma_async: lanes %u and %u of a warp pass different descriptors or flags", l,
                lane);
          }
        }
        if (ins[lane]->flags & 1u) {
          for (unsigned l = 0; l < 32; ++l) {
            for (unsigned j = 0; j < 8; ++j) {
              unsigned m, kk;
              gg::emu::sm90::a_fragment_coord(l, j, &m, &kk);
              o.tile[m][kk] = static_cast<unsigned short>(ins[l]->a[j / 2] >> (16 * (j % 2)));
            }
          }
        }
        return o;
      });
  gg::emu::sm90::WgmmaOp w;
  w.n = N;
  w.k = k;
  w.desc_a = desc_a;
  w.desc_b = desc_b;
  w.a_regs = a_regs != nullptr;
  w.trans_a = trans_a;
  w.trans_b = trans_b;
  w.scale_d = accumulate;
  w.eb = elem_bytes;
  w.value = value;
  std::memcpy(w.a_tile, out.tile, sizeof w.a_tile);
  if (a_regs != nullptr) {
    w.a_addr = a_regs;
    std::memcpy(w.a_vals, a_regs, sizeof w.a_vals);
  }
  gg::emu::sm90::wgmma_issue(std::move(w), d);
}

}  // namespace sm90_detail
#endif

#define GG_WGMMA_CHECK_N(N)                                                                        \
  static_assert((N) >= 8 && (N) <= 256 && ((N) % 16 == 0 || (N) <= 32) &&                          \
                    ((N) == 8 || (N) == 16 || (N) == 32 || (N) == 64 || (N) == 96 || (N) == 128 || \
                     (N) == 192 || (N) == 256),                                                    \
                "gg::wgmma: N must be one of 8, 16, 32, 64, 96, 128, 192, 256")

// D (64 x N, f32; this thread's N/2 values) = A (64 x 16) * B (16 x N) + (accumulate ? D : 0),
// A and B in shared memory through descriptors, K-major unless kTransA / kTransB (M-/N-major).
template <int N, bool kTransA = false, bool kTransB = false, int kNever = 0>
__device__ __forceinline__ void wgmma_m64nNk16_bf16_ss(float (&d)[N / 2], u64 desc_a, u64 desc_b,
                                                       bool accumulate) {
  GG_WGMMA_CHECK_N(N);
#if defined(__CUDA_ARCH__)
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  sm90_detail::WgmmaAsm<N>::template ss_bf16<kTransA ? 1 : 0, kTransB ? 1 : 0>(
      d, desc_a, desc_b, accumulate ? 1u : 0u);
#else
  static_assert(kNever != 0, "gg::wgmma needs sm_90a");
#endif
#elif defined(GG_EMU)
  sm90_detail::emu_wgmma<N>("wgmma.mma_async.m64nNk16.bf16", d, desc_a, nullptr, desc_b, accumulate,
                            kTransA, kTransB, 16, 2, emu_detail::bf16_value);
#endif
}

template <int N, bool kTransA = false, bool kTransB = false, int kNever = 0>
__device__ __forceinline__ void wgmma_m64nNk16_f16_ss(float (&d)[N / 2], u64 desc_a, u64 desc_b,
                                                      bool accumulate) {
  GG_WGMMA_CHECK_N(N);
#if defined(__CUDA_ARCH__)
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  sm90_detail::WgmmaAsm<N>::template ss_f16<kTransA ? 1 : 0, kTransB ? 1 : 0>(d, desc_a, desc_b,
                                                                              accumulate ? 1u : 0u);
#else
  static_assert(kNever != 0, "gg::wgmma needs sm_90a");
#endif
#elif defined(GG_EMU)
  sm90_detail::emu_wgmma<N>("wgmma.mma_async.m64nNk16.f16", d, desc_a, nullptr, desc_b, accumulate,
                            kTransA, kTransB, 16, 2, emu_detail::f16_value);
#endif
}

// A from registers: a[4] is this thread's A fragment (the mma.m16n8k16 A
// layout of its warp's 16 rows: gg::frag::a_m16n8k16, rows + 16 * warp).
template <int N, bool kTransB = false, int kNever = 0>
__device__ __forceinline__ void wgmma_m64nNk16_bf16_rs(float (&d)[N / 2], const u32 (&a)[4],
                                                       u64 desc_b, bool accumulate) {
  GG_WGMMA_CHECK_N(N);
#if defined(__CUDA_ARCH__)
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  sm90_detail::WgmmaAsm<N>::template rs_bf16<kTransB ? 1 : 0>(d, a, desc_b, accumulate ? 1u : 0u);
#else
  static_assert(kNever != 0, "gg::wgmma needs sm_90a");
#endif
#elif defined(GG_EMU)
  sm90_detail::emu_wgmma<N>("wgmma.mma_async.m64nNk16.bf16.rs", d, 0, a, desc_b, accumulate, false,
                            kTransB, 16, 2, emu_detail::bf16_value);
#endif
}

template <int N, bool kTransB = false, int kNever = 0>
__device__ __forceinline__ void wgmma_m64nNk16_f16_rs(float (&d)[N / 2], const u32 (&a)[4],
                                                      u64 desc_b, bool accumulate) {
  GG_WGMMA_CHECK_N(N);
#if defined(__CUDA_ARCH__)
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  sm90_detail::WgmmaAsm<N>::template rs_f16<kTransB ? 1 : 0>(d, a, desc_b, accumulate ? 1u : 0u);
#else
  static_assert(kNever != 0, "gg::wgmma needs sm_90a");
#endif
#elif defined(GG_EMU)
  sm90_detail::emu_wgmma<N>("wgmma.mma_async.m64nNk16.f16.rs", d, 0, a, desc_b, accumulate, false,
                            kTransB, 16, 2, emu_detail::f16_value);
#endif
}

// FP8: D (64 x N, f32) = A (64 x 32) * B (32 x N) + ..., both K-major.
template <int N, int kNever = 0>
__device__ __forceinline__ void wgmma_m64nNk32_e4m3_ss(float (&d)[N / 2], u64 desc_a, u64 desc_b,
                                                       bool accumulate) {
  GG_WGMMA_CHECK_N(N);
#if defined(__CUDA_ARCH__)
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  sm90_detail::WgmmaAsm<N>::ss_e4m3(d, desc_a, desc_b, accumulate ? 1u : 0u);
#else
  static_assert(kNever != 0, "gg::wgmma needs sm_90a");
#endif
#elif defined(GG_EMU)
  sm90_detail::emu_wgmma<N>("wgmma.mma_async.m64nNk32.e4m3", d, desc_a, nullptr, desc_b, accumulate,
                            false, false, 32, 1, emu_detail::e4m3_value);
#endif
}

template <int N, int kNever = 0>
__device__ __forceinline__ void wgmma_m64nNk32_e5m2_ss(float (&d)[N / 2], u64 desc_a, u64 desc_b,
                                                       bool accumulate) {
  GG_WGMMA_CHECK_N(N);
#if defined(__CUDA_ARCH__)
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  sm90_detail::WgmmaAsm<N>::ss_e5m2(d, desc_a, desc_b, accumulate ? 1u : 0u);
#else
  static_assert(kNever != 0, "gg::wgmma needs sm_90a");
#endif
#elif defined(GG_EMU)
  sm90_detail::emu_wgmma<N>("wgmma.mma_async.m64nNk32.e5m2", d, desc_a, nullptr, desc_b, accumulate,
                            false, false, 32, 1, emu_detail::e5m2_value);
#endif
}

#undef GG_WGMMA_CHECK_N

}  // namespace gg
