// gg_emu_sm90_tensor_map.cc: the emulated cuTensorMapEncodeTiled (the driver's
// checks and CUresults), a kernel's tensor-map arguments checked against
// their buffers, and the decoding of a map a TMA operation gets. Part of the
// emulator's Hopper model (gg_emu_sm90.h), compiled once per build mode into
// the core objects.
#include "gg_emu_sm90_state.h"

namespace gg::emu {

namespace sm90 {

inline int dtype_bytes(int dtype) {
  switch (dtype) {
    case CU_TENSOR_MAP_DATA_TYPE_UINT8:
      return 1;
    case CU_TENSOR_MAP_DATA_TYPE_UINT16:
    case CU_TENSOR_MAP_DATA_TYPE_FLOAT16:
    case CU_TENSOR_MAP_DATA_TYPE_BFLOAT16:
      return 2;
    case CU_TENSOR_MAP_DATA_TYPE_UINT32:
    case CU_TENSOR_MAP_DATA_TYPE_INT32:
    case CU_TENSOR_MAP_DATA_TYPE_FLOAT32:
    case CU_TENSOR_MAP_DATA_TYPE_FLOAT32_FTZ:
    case CU_TENSOR_MAP_DATA_TYPE_TFLOAT32:
    case CU_TENSOR_MAP_DATA_TYPE_TFLOAT32_FTZ:
      return 4;
    case CU_TENSOR_MAP_DATA_TYPE_UINT64:
    case CU_TENSOR_MAP_DATA_TYPE_INT64:
    case CU_TENSOR_MAP_DATA_TYPE_FLOAT64:
      return 8;
    default:
      return 0;
  }
}

inline CUresult encode_error(CUresult code, const std::string& why) {
  last_error() = "cuTensorMapEncodeTiled: " + why;
  std::fprintf(
      stderr, "gg-emu: rejected: %s (%s)\n", last_error().c_str(),
      code == CUDA_ERROR_INVALID_VALUE ? "CUDA_ERROR_INVALID_VALUE" : "CUDA_ERROR_NOT_SUPPORTED");
  std::fflush(stderr);
  return code;
}

// cuTensorMapEncodeTiled, with the driver's documented checks: the same
// CUresult for the same arguments, and a message saying why.
CUresult encode_tiled(CUtensorMap* map, CUtensorMapDataType dtype, cuuint32_t rank,
                             void* address, const cuuint64_t* dims, const cuuint64_t* strides,
                             const cuuint32_t* box, const cuuint32_t* element_strides,
                             CUtensorMapInterleave interleave, CUtensorMapSwizzle swizzle,
                             CUtensorMapL2promotion l2, CUtensorMapFloatOOBfill oob) {
  const CUresult bad = CUDA_ERROR_INVALID_VALUE;
  if (map == nullptr || reinterpret_cast<std::uintptr_t>(map) % 64 != 0) {
    return encode_error(bad,
                        format("tensorMap %p is not 64-byte aligned", static_cast<void*>(map)));
  }
  const int eb = dtype_bytes(dtype);
  if (static_cast<unsigned>(dtype) > CU_TENSOR_MAP_DATA_TYPE_16U6_ALIGN16B) {
    return encode_error(
        bad, format("tensorDataType %d is not a CUtensorMapDataType", static_cast<int>(dtype)));
  }
  if (eb == 0)
    return encode_error(CUDA_ERROR_NOT_SUPPORTED,
                        "packed 4/6-bit data types are not modelled by the emulator");
  if (rank == 0 || rank > 5)
    return encode_error(bad, format("tensorRank %u is not in 1..5", rank));
  if (static_cast<unsigned>(interleave) > CU_TENSOR_MAP_INTERLEAVE_32B) {
    return encode_error(
        bad, format("interleave %d is not a CUtensorMapInterleave", static_cast<int>(interleave)));
  }
  if (interleave != CU_TENSOR_MAP_INTERLEAVE_NONE && rank < 3) {
    return encode_error(bad, format("an interleaved layout needs tensorRank >= 3, got %u", rank));
  }
  const unsigned align = interleave == CU_TENSOR_MAP_INTERLEAVE_32B ? 32 : 16;
  if (reinterpret_cast<std::uintptr_t>(address) % align != 0) {
    return encode_error(bad, format("globalAddress %p is not %u-byte aligned", address, align));
  }
  for (cuuint32_t i = 0; i < rank; ++i) {
    if (dims[i] == 0 || dims[i] > (1ull << 31)) {
      return encode_error(bad, format("globalDim[%u] = %llu is not in 1..2^31", i,
                                      static_cast<unsigned long long>(dims[i])));
    }
  }
  for (cuuint32_t i = 0; i + 1 < rank; ++i) {
    if (strides[i] % align != 0 || strides[i] >= (1ull << 40)) {
      return encode_error(bad, format("globalStrides[%u] = %llu is not a multiple of %u below 2^40",
                                      i, static_cast<unsigned long long>(strides[i]), align));
    }
  }
  for (cuuint32_t i = 0; i < rank; ++i) {
    if (box[i] == 0 || box[i] > 256)
      return encode_error(bad, format("boxDim[%u] = %u is not in 1..256", i, box[i]));
    if (element_strides[i] == 0 || element_strides[i] > 8) {
      return encode_error(bad,
                          format("elementStrides[%u] = %u is not in 1..8", i, element_strides[i]));
    }
  }
  if (interleave == CU_TENSOR_MAP_INTERLEAVE_NONE && box[0] * eb % 16 != 0) {
    return encode_error(
        bad, format("boxDim[0] * element size = %u bytes is not a multiple of 16", box[0] * eb));
  }
  if (static_cast<unsigned>(swizzle) > CU_TENSOR_MAP_SWIZZLE_128B_ATOM_64B) {
    return encode_error(
        bad, format("swizzle %d is not a CUtensorMapSwizzle", static_cast<int>(swizzle)));
  }
  if (interleave == CU_TENSOR_MAP_INTERLEAVE_32B && swizzle != CU_TENSOR_MAP_SWIZZLE_32B) {
    return encode_error(bad, "CU_TENSOR_MAP_INTERLEAVE_32B needs CU_TENSOR_MAP_SWIZZLE_32B");
  }
  if (interleave == CU_TENSOR_MAP_INTERLEAVE_NONE && swizzle != CU_TENSOR_MAP_SWIZZLE_NONE) {
    const unsigned span = swizzle >= CU_TENSOR_MAP_SWIZZLE_128B ? 128u : swizzle_span(swizzle);
    if (box[0] * eb > span) {
      return encode_error(
          bad, format("the inner box dimension is %u bytes (boxDim[0] = %u), over the %u-byte "
                      "swizzle span",
                      box[0] * eb, box[0], span));
    }
  }
  if (static_cast<unsigned>(l2) > CU_TENSOR_MAP_L2_PROMOTION_L2_256B) {
    return encode_error(
        bad, format("l2Promotion %d is not a CUtensorMapL2promotion", static_cast<int>(l2)));
  }
  if (static_cast<unsigned>(oob) > CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA) {
    return encode_error(
        bad, format("oobFill %d is not a CUtensorMapFloatOOBfill", static_cast<int>(oob)));
  }
  const bool is_float = dtype >= CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  if (oob == CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA && !is_float) {
    return encode_error(
        bad, "CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA needs a floating-point data type");
  }
  // The driver accepts these; the emulator does not model them.
  if (interleave != CU_TENSOR_MAP_INTERLEAVE_NONE)
    return encode_error(CUDA_ERROR_NOT_SUPPORTED, "interleaved layouts are not modelled");
  if (swizzle > CU_TENSOR_MAP_SWIZZLE_128B)
    return encode_error(CUDA_ERROR_NOT_SUPPORTED, "the 128B_ATOM swizzles are not modelled");
  if (oob != CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE)
    return encode_error(CUDA_ERROR_NOT_SUPPORTED, "NaN out-of-bounds fill is not modelled");
  for (cuuint32_t i = 1; i < rank; ++i) {
    if (element_strides[i] != 1)
      return encode_error(CUDA_ERROR_NOT_SUPPORTED, "elementStrides other than 1 are not modelled");
  }
  MapBits m{};
  m.magic = kMapMagic;
  m.dtype = static_cast<std::uint8_t>(dtype);
  m.rank = static_cast<std::uint8_t>(rank);
  m.swizzle = static_cast<std::uint8_t>(swizzle);
  m.elem_bytes = static_cast<std::uint8_t>(eb);
  m.address = reinterpret_cast<std::uintptr_t>(address);
  m.strides[0] = static_cast<std::uint64_t>(eb);
  for (cuuint32_t i = 0; i < rank; ++i) {
    m.dims[i] = dims[i];
    m.box[i] = box[i];
    if (i > 0)
      m.strides[i] = strides[i - 1];
  }
  std::memset(static_cast<void*>(map), 0, sizeof(CUtensorMap));
  std::memcpy(static_cast<void*>(map), &m, sizeof m);
  return CUDA_SUCCESS;
}

// The name of a CUresult the encoder returns.
inline const char* result_name(CUresult code) {
  switch (code) {
    case CUDA_SUCCESS:
      return "CUDA_SUCCESS";
    case CUDA_ERROR_INVALID_VALUE:
      return "CUDA_ERROR_INVALID_VALUE";
    case CUDA_ERROR_NOT_SUPPORTED:
      return "CUDA_ERROR_NOT_SUPPORTED";
    default:
      return "an unknown CUresult";
  }
}

// The last byte a map reaches in global memory, plus one: every dimension at
// its last index (0: a dimension of size 0, which encode_tiled rejects).
inline std::uint64_t map_extent(const MapBits& m) {
  std::uint64_t end = m.elem_bytes;
  for (unsigned d = 0; d < m.rank; ++d) {
    if (m.dims[d] == 0)
      return 0;
    end += (m.dims[d] - 1) * m.strides[d];
  }
  return end;
}

static_assert(sizeof(CUtensorMap) == 128 && alignof(CUtensorMap) >= 64);

// A tensor-map argument of a request (gg_emu.h's run_request): encoded as a
// launcher encodes it, then checked against its buffer. The driver cannot
// check the extent (it does not know the allocation), but a map that reaches
// past its buffer reads or writes memory that belongs to nobody, and the TMA
// engine's copies are not bounds-checked, so the launch is refused here.
bool encode_map_argument(void* map, const MapArgument& a, unsigned char* buffer,
                                std::size_t buffer_bytes, std::string& why) {
  if (a.offset > buffer_bytes) {
    why = format("the offset %llu is past the end of the buffer",
                 static_cast<unsigned long long>(a.offset));
    return false;
  }
  // Pad the arrays to the driver's maximum rank: encode_tiled reads at most
  // `rank` entries, and rejects a rank over 5 before reading any.
  std::vector<cuuint64_t> dims(a.dims.begin(), a.dims.end()),
      strides(a.strides.begin(), a.strides.end());
  std::vector<cuuint32_t> box(a.box.begin(), a.box.end()),
      estrides(a.element_strides.begin(), a.element_strides.end());
  dims.resize(std::max<std::size_t>(dims.size(), 5), 1);
  strides.resize(std::max<std::size_t>(strides.size(), 4), 0);
  box.resize(std::max<std::size_t>(box.size(), 5), 1);
  estrides.resize(std::max<std::size_t>(estrides.size(), 5), 1);
  auto* m = static_cast<CUtensorMap*>(map);
  const CUresult r = encode_tiled(m, static_cast<CUtensorMapDataType>(a.dtype), a.rank,
                                  buffer + a.offset, dims.data(), strides.data(), box.data(),
                                  estrides.data(), static_cast<CUtensorMapInterleave>(a.interleave),
                                  static_cast<CUtensorMapSwizzle>(a.swizzle),
                                  static_cast<CUtensorMapL2promotion>(a.l2_promotion),
                                  static_cast<CUtensorMapFloatOOBfill>(a.oob_fill));
  if (r != CUDA_SUCCESS) {
    const std::string prefix = "cuTensorMapEncodeTiled: ";
    const std::string& e = last_error();
    why = format("cuTensorMapEncodeTiled returned %s (%d): %s", result_name(r), static_cast<int>(r),
                 (e.compare(0, prefix.size(), prefix) == 0 ? e.substr(prefix.size()) : e).c_str());
    return false;
  }
  const MapBits& bits = *reinterpret_cast<const MapBits*>(m);
  const std::uint64_t extent = map_extent(bits);
  if (a.offset + extent > buffer_bytes) {
    std::string shape;
    for (unsigned d = 0; d < bits.rank; ++d) {
      shape += format("%s%llu", d == 0 ? "" : ", ", static_cast<unsigned long long>(bits.dims[d]));
    }
    why = format(
        "the map reaches %llu bytes past the offset %llu (globalDim {%s}, globalStrides and the "
        "element size), beyond the buffer's end",
        static_cast<unsigned long long>(extent), static_cast<unsigned long long>(a.offset),
        shape.c_str());
    return false;
  }
  return true;
}

const MapBits& map_bits(const CUtensorMap* map, const char* op) {
  const auto* m = reinterpret_cast<const MapBits*>(map);
  if (m->magic != kMapMagic)
    fail("%s: the tensor map at %p was not made by cuTensorMapEncodeTiled", op,
         static_cast<const void*>(map));
  return *m;
}

}  // namespace sm90

}  // namespace gg::emu

// The emulated cuTensorMapEncodeTiled with the driver's signature, exported
// so that tests can drive a host-side caller's exact call (argument types,
// array layout, the 128-byte result) without a GPU: cuda_gpu.encode_tensor_map
// takes it in place of libcuda's (tests/cuda/sm90/test_cuda_sm90_tensor_map_args.py).
GG_EMU_API CUresult gg_emu_cuTensorMapEncodeTiled(
    CUtensorMap* map, CUtensorMapDataType dtype, cuuint32_t rank, void* address,
    const cuuint64_t* dims, const cuuint64_t* strides, const cuuint32_t* box,
    const cuuint32_t* element_strides, CUtensorMapInterleave interleave, CUtensorMapSwizzle swizzle,
    CUtensorMapL2promotion l2, CUtensorMapFloatOOBfill oob) {
  return gg::emu::sm90::encode_tiled(map, dtype, rank, address, dims, strides, box, element_strides,
                                     interleave, swizzle, l2, oob);
}
