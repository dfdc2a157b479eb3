// gg_convert.cuh: number-format conversions for gemmgen's CUDA kernels.
//
// Every conversion a kernel does between storage formats, the tensor-core
// input types and f32 lives here, written once for nvcc, NVRTC and the CPU
// emulation (no inline PTX: that belongs to gg_primitives.cuh).
//
// Widening a narrow weight to the tensor-core type is exact: int8, int4,
// fp4 (e2m1), e4m3 and e5m2 values are all representable in bf16 and f16,
// so weight-only quantized GEMMs multiply exactly the stored values and
// apply their scales to the f32 partial products (docs/cuda.md).
#pragma once

#include "gg_runtime.cuh"

namespace gg {

__device__ __forceinline__ float bits_to_float(unsigned bits) {
#if defined(GG_EMU)
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
#else
  return __uint_as_float(bits);
#endif
}

__device__ __forceinline__ unsigned short bf16_bits(__nv_bfloat16 v) {
#if defined(GG_EMU)
  unsigned short b;
  std::memcpy(&b, &v, sizeof b);
  return b;
#else
  return __bfloat16_as_ushort(v);
#endif
}

__device__ __forceinline__ unsigned short f16_bits(__half v) {
#if defined(GG_EMU)
  unsigned short b;
  std::memcpy(&b, &v, sizeof b);
  return b;
#else
  return __half_as_ushort(v);
#endif
}

__device__ __forceinline__ unsigned float_to_bits(float v) {
#if defined(GG_EMU)
  unsigned b;
  std::memcpy(&b, &v, sizeof b);
  return b;
#else
  return __float_as_uint(v);
#endif
}

// ---------------------------------------------------------------------------
// Exact power-of-two scaling (docs/semantics.md, "e8m0").
//
// An e8m0 byte e means 2^(e - 127); byte 0 is 2^-127, an f32 subnormal, and a
// product of two e8m0 scales lies anywhere in 2^-254 .. 2^254, mostly outside
// f32. GPUs flush f32 subnormals to zero in kernels built with -ftz (nvcc
// --use_fast_math), so no kernel multiplies by a subnormal or out-of-range
// f32 power of two: a scale that is not a normal f32, or a product of scales
// that is not, is applied as an integer exponent (split_exp2, mul_exp2), in
// f64 arithmetic, which holds every such power of two and product exactly
// and which -ftz does not touch. The result is the exact product rounded
// once to f32, whatever the build does with subnormals (only a result that
// is itself an f32 subnormal is flushed under -ftz).

// The bits of 2^(e - 127) for an e8m0 byte e: 2^-127 (byte 0) as its
// subnormal bit pattern, 255 as NaN. Only moved, compared and split
// (split_exp2), never used in f32 arithmetic while subnormal: apply it with
// mul_scale / mul_scales.
__device__ __forceinline__ float e8m0_to_float(unsigned char e) {
  if (e == 0xFFu)
    return bits_to_float(0x7FC00000u);
  if (e == 0u)
    return bits_to_float(0x00400000u);
  return bits_to_float(static_cast<unsigned>(e) << 23);
}

// 2^e as an f32 for e in [-126, 127], a normal number (built from its bits).
__device__ __forceinline__ float exp2_normal(int e) {
  return bits_to_float(static_cast<unsigned>(e + 127) << 23);
}

// 2^e as an f64 for e in [-1022, 1023] (built from its bits).
__device__ __forceinline__ double exp2_f64(int e) {
  const unsigned long long bits = static_cast<unsigned long long>(e + 1023) << 52;
#if defined(GG_EMU)
  double d;
  std::memcpy(&d, &bits, sizeof d);
  return d;
#else
  return __longlong_as_double(static_cast<long long>(bits));
#endif
}

// x * 2^e rounded once to f32, for any e in [-1022, 1023] (e8m0 exponents
// and their sums stay within [-254, 254]): the f64 product is exact, then one
// f32 rounding. No f32 power of two is formed at all.
__device__ __forceinline__ float mul_exp2(float x, int e) {
  return static_cast<float>(static_cast<double>(x) * exp2_f64(e));
}

// An f32 s as m * 2^e exactly, m in [1, 2) with s's sign: for a normal s and
// for a subnormal one (normalised with integer arithmetic, so -ftz cannot
// flush it; this covers e8m0 byte 0). Zero, infinities and NaN give m = s,
// e = 0.
__device__ __forceinline__ float split_exp2(float s, int& e) {
  const unsigned b = float_to_bits(s);
  const unsigned field = (b >> 23) & 0xFFu, mant = b & 0x7FFFFFu, sign = b & 0x80000000u;
  if (field - 1u < 254u) {  // normal
    e = static_cast<int>(field) - 127;
    return bits_to_float(sign | 0x3F800000u | mant);
  }
  if (field == 0u && mant != 0u) {                        // subnormal: mant * 2^-149
    const int lead = 31 - __clz(static_cast<int>(mant));  // the leading one's bit, 0..22
    e = lead - 149;
    return bits_to_float(sign | 0x3F800000u | ((mant << (23 - lead)) & 0x7FFFFFu));
  }
  e = 0;
  return s;
}

// x * s rounded once, for any f32 s and in particular an e8m0 scale from
// e8m0_to_float: one multiplication when s is normal, else (2^-127, an f32
// subnormal s) exactly through split_exp2 and mul_exp2. 0, inf and NaN scales
// multiply as IEEE says.
__device__ __forceinline__ float mul_scale(float x, float s) {
  if (((float_to_bits(s) >> 23) & 0xFFu) - 1u < 254u)
    return x * s;
  int e;
  const float m = split_exp2(s, e);
  return mul_exp2(x * m, e);
}

// x * a * b rounded once for two scales a and b (f32, or e8m0 from
// e8m0_to_float), whose product may lie outside f32 (2^-254 .. 2^254 for two
// e8m0 scales): the mantissas multiply x (at most 4x), the exponents add.
__device__ __forceinline__ float mul_scales_exact(float x, float a, float b) {
  int ea, eb;
  const float ma = split_exp2(a, ea);
  const float mb = split_exp2(b, eb);
  return mul_exp2(x * ma * mb, ea + eb);
}

// mul_scales_exact on the scales' bits, kept out of line. The tile GEMM's
// promotion calls it for each accumulator only when one of its thread's scale
// products is not a normal f32 (rare); inlined into all of them, its
// latency-hiding schedule raised fp8_gemm_blockscaled (e8m0 lhs scales) from
// 122 to 155 registers on sm_89 and from 139 to 175 on sm_90a.
#if defined(GG_EMU)
__attribute__((noinline)) inline float mul_scales_out_of_line(float x, unsigned a, unsigned b) {
#else
__device__ __noinline__ inline float mul_scales_out_of_line(float x, unsigned a, unsigned b) {
#endif
  return mul_scales_exact(x, bits_to_float(a), bits_to_float(b));
}

// The biased exponent field of a scale (a sign makes it > 255: never normal).
__device__ __forceinline__ unsigned exponent_field(float s) {
  return float_to_bits(s) >> 23;
}

// Whether a * b is exact for every pair of scales a and b whose biased f32
// exponent fields lie in [lo_a, hi_a] and [lo_b, hi_b], when one of them is a
// power of two (e8m0): both normal and their product normal.
__device__ __forceinline__ bool product_is_normal(unsigned lo_a, unsigned hi_a, unsigned lo_b,
                                                  unsigned hi_b) {
  return lo_a >= 1u && hi_a <= 254u && lo_b >= 1u && hi_b <= 254u && lo_a + lo_b >= 128u &&
         hi_a + hi_b <= 381u;
}

// x * a * b rounded once, where one of the scales is a power of two (e8m0):
// one multiplication by a * b when that product is a normal f32, else
// mul_scales_exact.
__device__ __forceinline__ float mul_scales(float x, float a, float b) {
  const unsigned fa = exponent_field(a), fb = exponent_field(b);
  if (product_is_normal(fa, fa, fb, fb))
    return x * (a * b);
  return mul_scales_exact(x, a, b);
}

// Scalar loads of every scale / bias format as f32.
__device__ __forceinline__ float to_float(float v) {
  return v;
}
__device__ __forceinline__ float to_float(__nv_bfloat16 v) {
  return __bfloat162float(v);
}
__device__ __forceinline__ float to_float(__half v) {
  return __half2float(v);
}
__device__ __forceinline__ float to_float(__nv_fp8_e4m3 v) {
  return static_cast<float>(v);
}
__device__ __forceinline__ float to_float(__nv_fp8_e5m2 v) {
  return static_cast<float>(v);
}
__device__ __forceinline__ float to_float(signed char v) {
  return static_cast<float>(v);
}

// 4-bit codes (one nibble): two's-complement int4 and e2m1 (fp4).
__device__ __forceinline__ int int4_value(unsigned code) {
  return static_cast<int>(code & 0xFu) - ((code & 0x8u) ? 16 : 0);
}
__device__ __forceinline__ float fp4_value(unsigned code) {
  // e2m1 magnitudes for codes 0..7: 0, 0.5, 1, 1.5, 2, 3, 4, 6.
  const unsigned mag = code & 0x7u;
  const float v = mag < 2u ? 0.5f * static_cast<float>(mag)
                           : static_cast<float>((2u + (mag & 1u)) << ((mag >> 1) - 1u)) * 0.5f;
  return (code & 0x8u) ? -v : v;
}

// Output casts: round to nearest even; bf16 / f16 overflow to infinity.
template <class T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}
template <>
__device__ __forceinline__ __half from_float<__half>(float v) {
  return __float2half_rn(v);
}
// FP8 casts saturate to the largest finite value (e4m3fn has no infinity).
template <>
__device__ __forceinline__ __nv_fp8_e4m3 from_float<__nv_fp8_e4m3>(float v) {
  __nv_fp8_e4m3 r;
  r.__x = __nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3);
  return r;
}
template <>
__device__ __forceinline__ __nv_fp8_e5m2 from_float<__nv_fp8_e5m2>(float v) {
  __nv_fp8_e5m2 r;
  r.__x = __nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E5M2);
  return r;
}

// 16-byte vectors (one gg::ld_global_nc_128) widened to f32: element i of the
// vector, in memory order, lands in f[i]. All exact.
template <class T>
struct Vec16 {
  static constexpr int kElems = 16 / static_cast<int>(sizeof(T));
};

template <class T>
__device__ __forceinline__ void widen16(const uint4& v, float (&f)[Vec16<T>::kElems]);

template <>
__device__ __forceinline__ void widen16<float>(const uint4& v, float (&f)[4]) {
  f[0] = bits_to_float(v.x);
  f[1] = bits_to_float(v.y);
  f[2] = bits_to_float(v.z);
  f[3] = bits_to_float(v.w);
}

template <>
__device__ __forceinline__ void widen16<__nv_bfloat16>(const uint4& v, float (&f)[8]) {
  const unsigned w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {  // bf16 is the top half of an f32
    f[2 * i] = bits_to_float(w[i] << 16);
    f[2 * i + 1] = bits_to_float(w[i] & 0xFFFF0000u);
  }
}

template <>
__device__ __forceinline__ void widen16<__half>(const uint4& v, float (&f)[8]) {
  const unsigned w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    __half2_raw raw;  // trivially copyable, unlike __half2 (g++ -Wclass-memaccess)
    memcpy(&raw, &w[i], sizeof raw);
    const float2 t = __half22float2(__half2(raw));
    f[2 * i] = t.x;
    f[2 * i + 1] = t.y;
  }
}

// FP8 to f32, exactly, for every code. From sm_89 the hardware converts pairs
// (cvt.rn.f16x2.e4m3x2 / e5m2x2, then f16 -> f32); before that (and on the
// emulator) the code's bits are placed in an f32 and rebased by one exact
// multiplication, which also covers subnormals: e4m3 seeeemmm becomes
// s eeee mmm << 20 times 2^(127 - 7), e5m2 seeeeemm s eeeee mm << 21 times
// 2^(127 - 15); the codes without a finite value are patched afterwards.
__device__ __forceinline__ float e4m3_bits_to_float(unsigned b) {
  const unsigned mag = b & 0x7Fu;
  const float v =
      bits_to_float(((b & 0x80u) << 24) | (mag << 20)) * bits_to_float(0x7B800000u);  // 2^120
  return mag == 0x7Fu ? bits_to_float(0x7FC00000u) : v;  // S.1111.111 is NaN
}
__device__ __forceinline__ float e5m2_bits_to_float(unsigned b) {
  const unsigned mag = b & 0x7Fu;
  const float v =
      bits_to_float(((b & 0x80u) << 24) | (mag << 21)) * bits_to_float(0x77800000u);  // 2^112
  if (mag < 0x7Cu)
    return v;
  return mag == 0x7Cu ? bits_to_float(((b & 0x80u) << 24) | 0x7F800000u)
                      : bits_to_float(0x7FC00000u);
}

__device__ __forceinline__ void widen_fp8x16(const uint4& v, __nv_fp8_interpretation_t kind,
                                             float (&f)[16]) {
  const unsigned w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const __half2_raw raw = __nv_cvt_fp8x2_to_halfraw2(
          static_cast<__nv_fp8x2_storage_t>((w[i] >> (16 * j)) & 0xFFFFu), kind);
      const float2 t = __half22float2(__half2(raw));
      f[4 * i + 2 * j] = t.x;
      f[4 * i + 2 * j + 1] = t.y;
    }
#else
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const unsigned b = (w[i] >> (8 * j)) & 0xFFu;
      f[4 * i + j] = kind == __NV_E4M3 ? e4m3_bits_to_float(b) : e5m2_bits_to_float(b);
    }
#endif
  }
}

template <>
__device__ __forceinline__ void widen16<__nv_fp8_e4m3>(const uint4& v, float (&f)[16]) {
  widen_fp8x16(v, __NV_E4M3, f);
}

template <>
__device__ __forceinline__ void widen16<__nv_fp8_e5m2>(const uint4& v, float (&f)[16]) {
  widen_fp8x16(v, __NV_E5M2, f);
}

// The e8m0 byte of the smallest power of two 2^e with x <= fp8_max * 2^e,
// i.e. 2^ceil(log2(x / fp8_max)) for a positive finite x: the FP8 activation
// scale rounded up, so that no |value| / 2^e exceeds fp8_max (DeepGEMM's
// rule, gemmgen.reference's `_e8m0_scale_bytes`). The rounded quotient only
// gives a first guess; exact comparisons (fp8_max * 2^e is exact, and formed
// by mul_exp2 without subnormals) settle e, so an x of exactly fp8_max * 2^e
// gives 2^e and one ulp more 2^(e+1). e is clamped to [-127, 127]; an
// infinite or NaN x gives 0xFF (NaN: the scale of a non-finite group).
__device__ __forceinline__ unsigned char e8m0_round_up_ratio(float x, float fp8_max) {
  if (!(x <= 3.40282347e38f))
    return 0xFFu;  // inf or NaN
  const float ratio = __fdiv_rn(x, fp8_max);
  int e = static_cast<int>((float_to_bits(ratio) >> 23) & 0xFFu) -
          127;  // floor(log2(ratio)) when normal
  e = e < -127 ? -127 : (e > 127 ? 127 : e);
  while (e < 127 && x > mul_exp2(fp8_max, e))
    ++e;
  while (e > -127 && x <= mul_exp2(fp8_max, e - 1))
    --e;
  return static_cast<unsigned char>(e + 127);
}

// Activations of the epilogue, in f32.
__device__ __forceinline__ float silu(float x) {
  return x / (1.0f + expf(-x));
}
// GPT-OSS's clamped gated activation: the gate clamped to at most limit, up
// to [-limit, limit] (a NaN stays NaN, as the reference's), then
// gate * sigmoid(alpha_gate * gate) * (up + 1).
__device__ __forceinline__ float swiglu_clamped(float gate, float up, float alpha_gate,
                                                float limit) {
  gate = gate > limit ? limit : gate;
  up = up > limit ? limit : (up < -limit ? -limit : up);
  return gate / (1.0f + expf(-alpha_gate * gate)) * (up + 1.0f);
}
__device__ __forceinline__ float gelu_tanh(float x) {
  const float c = 0.7978845608028654f;  // sqrt(2 / pi)
  return 0.5f * x * (1.0f + tanhf(c * (x + 0.044715f * x * x * x)));
}
__device__ __forceinline__ float relu(float x) {
  return x < 0.0f ? 0.0f : x;
}  // NaN stays NaN

}  // namespace gg
