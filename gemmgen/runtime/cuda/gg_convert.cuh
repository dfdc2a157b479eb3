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

// e8m0 (OCP MX): byte e is 2^(e - 127); 255 is NaN. e = 0 is the f32
// subnormal 2^-127.
__device__ __forceinline__ float e8m0_to_float(unsigned char e) {
  if (e == 0xFFu) return bits_to_float(0x7FC00000u);
  if (e == 0u) return bits_to_float(0x00400000u);
  return bits_to_float(static_cast<unsigned>(e) << 23);
}

// Scalar loads of every scale / bias format as f32.
__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(__nv_fp8_e4m3 v) { return static_cast<float>(v); }
__device__ __forceinline__ float to_float(__nv_fp8_e5m2 v) { return static_cast<float>(v); }
__device__ __forceinline__ float to_float(signed char v) { return static_cast<float>(v); }

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
__device__ __forceinline__ float from_float<float>(float v) { return v; }
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }
template <>
__device__ __forceinline__ __half from_float<__half>(float v) { return __float2half_rn(v); }
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
    __half2 h;
    memcpy(&h, &w[i], sizeof h);
    const float2 t = __half22float2(h);
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
  const float v = bits_to_float(((b & 0x80u) << 24) | (mag << 20)) * bits_to_float(0x7B800000u);  // 2^120
  return mag == 0x7Fu ? bits_to_float(0x7FC00000u) : v;  // S.1111.111 is NaN
}
__device__ __forceinline__ float e5m2_bits_to_float(unsigned b) {
  const unsigned mag = b & 0x7Fu;
  const float v = bits_to_float(((b & 0x80u) << 24) | (mag << 21)) * bits_to_float(0x77800000u);  // 2^112
  if (mag < 0x7Cu) return v;
  return mag == 0x7Cu ? bits_to_float(((b & 0x80u) << 24) | 0x7F800000u) : bits_to_float(0x7FC00000u);
}

__device__ __forceinline__ void widen_fp8x16(const uint4& v, __nv_fp8_interpretation_t kind, float (&f)[16]) {
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

// 2^e as an f32 for e in [-127, 127] (2^-127 is subnormal).
__device__ __forceinline__ float exp2_int(int e) {
  return e <= -127 ? bits_to_float(0x00400000u) : bits_to_float(static_cast<unsigned>(e + 127) << 23);
}

// The e8m0 byte of the smallest power of two 2^e with x <= fp8_max * 2^e,
// i.e. 2^ceil(log2(x / fp8_max)) for a positive finite x: the FP8 activation
// scale rounded up, so that no |value| / 2^e exceeds fp8_max (DeepGEMM's
// rule, gemmgen.reference's `_e8m0_scale_bytes`). The rounded quotient only
// gives a first guess; exact comparisons (fp8_max * 2^e is exact) settle e,
// so an x of exactly fp8_max * 2^e gives 2^e and one ulp more 2^(e+1).
// e is clamped to [-127, 127]; a NaN x gives 0xFF (NaN).
__device__ __forceinline__ unsigned char e8m0_round_up_ratio(float x, float fp8_max) {
  if (x != x) return 0xFFu;
  unsigned q;
  const float ratio = x / fp8_max;
  memcpy(&q, &ratio, sizeof q);
  int e = static_cast<int>((q >> 23) & 0xFFu) - 127;  // floor(log2(ratio)) when normal
  e = e < -127 ? -127 : (e > 127 ? 127 : e);
  while (e < 127 && x > fp8_max * exp2_int(e)) ++e;
  while (e > -127 && x <= fp8_max * exp2_int(e - 1)) --e;
  return static_cast<unsigned char>(e + 127);
}

// Activations of the epilogue, in f32.
__device__ __forceinline__ float silu(float x) { return x / (1.0f + expf(-x)); }
__device__ __forceinline__ float gelu_tanh(float x) {
  const float c = 0.7978845608028654f;  // sqrt(2 / pi)
  return 0.5f * x * (1.0f + tanhf(c * (x + 0.044715f * x * x * x)));
}
__device__ __forceinline__ float relu(float x) { return x < 0.0f ? 0.0f : x; }  // NaN stays NaN

}  // namespace gg
