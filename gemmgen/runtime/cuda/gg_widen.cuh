// gg_widen.cuh: a stored B element widened to the tensor-core type, exactly.
//
// Every weight format a tile GEMM takes is representable in its tensor-core
// type (docs/cuda.md): int8, int4, fp4, e4m3 and e5m2 in bf16 and f16, int4
// in int8. A new weight format is one more branch here (and a test in
// tests/test_cuda_gemm_helpers.py).
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
  } else if constexpr (From == Format::kInt4 || From == Format::kFp4) {
    const unsigned code = (row[e >> 1] >> (4 * (e & 1))) & 0xFu;
    if constexpr (From == Format::kFp4) {
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

}  // namespace gg::gemm
