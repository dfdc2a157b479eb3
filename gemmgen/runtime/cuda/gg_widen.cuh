// gg_widen.cuh: a stored B element widened to the tensor-core type, exactly.
//
// Every weight format a tile GEMM takes is representable in its tensor-core
// type (docs/cuda.md): int8, int4, uint4, fp4, e4m3 and e5m2 in bf16 and f16, int4
// in int8. A new weight format is one more branch here (and a test in
// tests/cuda/sm80/test_cuda_gemm_helpers.py).
#pragma once

#include "gg_convert.cuh"
#include "gg_gemm_config.cuh"

namespace gg::gemm {

// Element `e` of a staged row of B (bytes as stored, `From` format) as `To`.
// Packed 4-bit rows hold element 2i in the low nibble of byte i.
template <Format From, class To>
__device__ __forceinline__ To widen(const unsigned char* row, int e) {
  if constexpr (kSame<storage_t<From>, To>) {
    To v;
    memcpy(&v, row + e * (int)sizeof(To), sizeof(To));
    return v;
  } else if constexpr (From == Format::kInt4 || From == Format::kUint4 || From == Format::kFp4) {
    const unsigned code = (row[e >> 1] >> (4 * (e & 1))) & 0xFu;
    if constexpr (From == Format::kUint4) {
      return gg::from_float<To>(static_cast<float>(code));  // 0..15
    } else if constexpr (From == Format::kFp4) {
      return gg::from_float<To>(gg::fp4_value(code));
    } else if constexpr (kSame<To, signed char>) {
      return static_cast<signed char>(gg::int4_value(code));
    } else {
      return gg::from_float<To>(static_cast<float>(gg::int4_value(code)));
    }
  } else if constexpr (From == Format::kInt8) {
    return gg::from_float<To>(static_cast<float>(static_cast<signed char>(row[e])));
  } else {
    storage_t<From> v;
    memcpy(&v, row + e * (int)sizeof(storage_t<From>), sizeof(storage_t<From>));
    return gg::from_float<To>(gg::to_float(v));
  }
}

// Elements 0 and 1 of a stored row (both nibbles of p[0] for 4-bit
// formats; p[0] and p[1] for 8-bit ones) widened to the 16-bit type To and
// packed in one register, element 0 in the low half: a register of a 16-bit
// MMA's A fragment. int4 and int8 take a short exact path of integer and
// f32 adds (no int-to-float conversion, which issues at a quarter of the
// rate): the value plus a bias (8 or 128, so 0 .. 2 * bias - 1) in the low
// mantissa bits of 2^23 is the f32 2^23 + x + bias, and subtracting
// 2^23 + bias leaves x exactly; a small integer's f32 has a zero low half,
// so its high half is its bf16. Other formats widen element by element.
template <Format From, class To>
__device__ __forceinline__ u32 widen_pair(const unsigned char* p) {
  static_assert(sizeof(To) == 2, "a 16-bit tensor-core type");
  if constexpr (From == Format::kInt4 || From == Format::kInt8) {
    constexpr unsigned kBias = From == Format::kInt4 ? 8u : 128u;
    constexpr unsigned kTwo23 = 0x4B000000u;  // the f32 2^23
    unsigned lo, hi;
    if constexpr (From == Format::kInt4) {
      const unsigned b = p[0];
      lo = ((b & 0xFu) ^ kBias) | kTwo23;  // two's complement nibble ^ 8 = x + 8
      hi = ((b >> 4) ^ kBias) | kTwo23;
    } else {
      lo = (static_cast<unsigned>(p[0]) ^ kBias) | kTwo23;  // byte ^ 128 = x + 128
      hi = (static_cast<unsigned>(p[1]) ^ kBias) | kTwo23;
    }
    constexpr float kOffset = 8388608.0f + static_cast<float>(kBias);
    const float flo = gg::bits_to_float(lo) - kOffset, fhi = gg::bits_to_float(hi) - kOffset;
    if constexpr (kSame<To, __nv_bfloat16>) {
      return (gg::float_to_bits(flo) >> 16) | (gg::float_to_bits(fhi) & 0xFFFF0000u);
    } else {
      const To v[2] = {gg::from_float<To>(flo), gg::from_float<To>(fhi)};
      u32 out;
      memcpy(&out, v, sizeof out);
      return out;
    }
  } else {
    const To v[2] = {widen<From, To>(p, 0), widen<From, To>(p, 1)};
    u32 out;
    memcpy(&out, v, sizeof out);
    return out;
  }
}

}  // namespace gg::gemm
