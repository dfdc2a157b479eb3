// gg_emu_sm90.cc: the emulator's model of the Hopper (sm_90a) machinery
// (gg_emu_sm90.h describes it; docs/cuda-hopper.md has the full story),
// compiled once per build mode into the core objects.
#include "gg_emu_runner.h"

#include <cfenv>
#include <optional>
#include <csignal>

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

// The swizzle span in bytes of a CU_TENSOR_MAP_SWIZZLE_* (0: none).
inline unsigned swizzle_span(int swizzle) {
  return swizzle == 0 ? 0u : 16u << swizzle;
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

// ---------------------------------------------------------------------------
// Matrix descriptors and the canonical layouts (PTX ISA, "Shared Memory
// Matrix Layout": the table of canonical layouts in CuTe notation, and
// "Matrix Descriptor Format"). Pure functions: the tests check them against
// CuTe (gg_emu_sm90_operand_address below).

struct Desc {
  std::uint32_t start;  // bytes
  std::uint32_t lbo;    // bytes
  std::uint32_t sbo;    // bytes
  unsigned base_offset;
  unsigned mode;  // 0 none, 1 128B, 2 64B, 3 32B
};

inline Desc decode_desc(std::uint64_t d) {
  return {static_cast<std::uint32_t>(d & 0x3FFF) << 4,
          static_cast<std::uint32_t>((d >> 16) & 0x3FFF) << 4,
          static_cast<std::uint32_t>((d >> 32) & 0x3FFF) << 4, static_cast<unsigned>((d >> 49) & 7),
          static_cast<unsigned>((d >> 62) & 3)};
}

// Swizzle bytes of a descriptor's layout type (0: none).
inline unsigned desc_span(unsigned mode) {
  return mode == 0 ? 0u : (mode == 1 ? 128u : (mode == 2 ? 64u : 32u));
}

// Swizzle<B,4,3> on a byte address: bits [4, 4+B) ^= bits [7, 7+B), B = log2(span / 16).
inline std::uint32_t swizzle_address(std::uint32_t addr, unsigned span) {
  if (span == 0)
    return addr;
  const std::uint32_t mask = span / 16 - 1;
  return addr ^ (((addr >> 7) & mask) << 4);
}

// The shared address of element (mn, k) of a wgmma operand (A: m x k, B:
// n x k) that `d` describes, `mn_major` for an M/N-major operand (imm-trans 1),
// elements of `eb` bytes. The canonical layouts, in bytes, with T = 16 / eb
// elements per 16 bytes and S the swizzle span:
//   K-major,  none:     (mn%8)*16 + (mn/8)*SBO + (k/T)*LBO + (k%T)*eb
//   K-major,  swizzled: (mn%8)*S  + (mn/8)*SBO + k*eb                  (LBO unused)
//   MN-major, none:     (mn%T)*eb + (mn/T)*SBO + (k%8)*16 + (k/8)*LBO
//   MN-major, swizzled: (mn%T)*eb + ((mn/T)%(S/16))*16 + (mn/(T*S/16))*LBO + (k%8)*S + (k/8)*SBO
// then Swizzle<log2(S/16),4,3> on the address.
inline std::uint32_t operand_address(const Desc& d, bool mn_major, unsigned eb, unsigned mn,
                                     unsigned k) {
  const unsigned t = 16 / eb;
  const unsigned span = desc_span(d.mode);
  std::uint32_t off;
  if (!mn_major) {
    off = span == 0 ? (mn % 8) * 16 + (mn / 8) * d.sbo + (k / t) * d.lbo + (k % t) * eb
                    : (mn % 8) * span + (mn / 8) * d.sbo + k * eb;
  } else if (span == 0) {
    off = (mn % t) * eb + (mn / t) * d.sbo + (k % 8) * 16 + (k / 8) * d.lbo;
  } else {
    const unsigned w = span / 16;
    off = (mn % t) * eb + ((mn / t) % w) * 16 + (mn / (t * w)) * d.lbo + (k % 8) * span +
          (k / 8) * d.sbo;
  }
  return swizzle_address((d.start + off) % kWindow, span);
}

// The wgmma accumulator fragment (PTX ISA, figures "WGMMA .m64nNk16 / k32
// register fragment layout for accumulator matrix D"): thread t of the
// warpgroup, value i of its N/2 f32 registers.
inline void accumulator_coord(unsigned t, unsigned i, unsigned* m, unsigned* n) {
  const unsigned warp = t / 32, lane = t % 32;
  *m = 16 * warp + lane / 4 + 8 * ((i / 2) % 2);
  *n = 8 * (i / 4) + 2 * (lane % 4) + i % 2;
}

// The A fragment of wgmma .m64nNk16 with A in registers: value j (0..7) of
// thread t, two 16-bit values per register, low half first.
void a_fragment_coord(unsigned t, unsigned j, unsigned* m, unsigned* k) {
  const unsigned warp = t / 32, lane = t % 32;
  *m = 16 * warp + lane / 4 + 8 * ((j / 2) % 2);
  *k = 2 * (lane % 4) + j % 2 + 8 * (j / 4);
}

// ---------------------------------------------------------------------------
// Per-block state.

// (issue 30) The write order between the CTAs of a cluster, per CTA (a vector
// clock of CTAs): at[r] is the last of CTA r's shared-memory writes (its
// numbered TMA loads landing there, and the generic stores each
// fence.proxy.async makes visible) that a signal of r made after them
// carried here. A signal (an arrival, a TMA load's complete_tx) carries what
// its CTA has seen and its own writes so far onto the barrier's phase; a
// wait that observes the phase merges them into its CTA; a cluster barrier
// merges every CTA's into all. Per CTA, not per thread: any thread's wait
// counts for its CTA (looser than the hardware, never stricter).
struct Seen {
  std::uint32_t at[kMaxClusterNonPortable] = {};
  void merge(const Seen& o) {
    for (unsigned i = 0; i < kMaxClusterNonPortable; ++i)
      at[i] = std::max(at[i], o.at[i]);
  }
};

struct Barrier {
  std::uint32_t addr = 0;
  unsigned count = 0;    // arrivals per phase
  unsigned pending = 0;  // arrivals still missing in the current phase
  long long tx = 0;      // transaction bytes still missing (expect_tx adds, complete_tx subtracts)
  long long announced = 0;       // bytes announced by expect_tx in the current phase
  long long delivered = 0;       // bytes delivered by TMA in the current phase
  unsigned long long phase = 0;  // completed phases
  unsigned init_thread = 0;
  bool fenced = false;   // fence.mbarrier_init (or fence.proxy.async) by the initialising thread
  order::Clock arrived;  // the happens-before clocks of the current phase's arrivals
  order::Clock done;     // and of the last completed phase (a wait acquires it)
  Seen carry;            // the write order the current phase's signals carry
  Seen carried;          // ... and the completed phases'
};

struct TmaLoad {
  MapBits map;
  int coords[5];
  BlockRunner* dst_cta;  // the CTA whose shared memory dst is in (a 2-CTA load: the peer's)
  unsigned char* dst;
  std::size_t bytes;
  std::uint32_t barrier;
  unsigned long long phase;  // the barrier phase whose transaction count it is part of
  unsigned thread;
};

struct TmaStore {
  MapBits map;
  int coords[5];
  const unsigned char* src;
  std::vector<unsigned char> data;  // what the async proxy read at issue
  unsigned group;
  bool read_done = false;
};

struct HopperThread {
  std::vector<WgmmaOp> wgmma;
  unsigned wgmma_committed = 0;
  bool fence_needed = true;  // wgmma.fence before the next wgmma.mma_async
  bool stalled = false;      // wait_group: the block stalled since it began waiting
  std::vector<TmaStore> stores;
  unsigned bulk_committed = 0;
  std::string wait_text;  // the description of the thread's current wait
};

}  // namespace sm90

struct HopperBlock {
  std::vector<sm90::Barrier> barriers;
  std::vector<sm90::TmaLoad> loads;
  std::vector<sm90::HopperThread> threads;
  std::vector<unsigned char> shadow;  // the async proxy's view of the block's shared memory
  // Per byte of shared memory, the fence.proxy.async that published its
  // generic write (an index into `fences`; 0: none, or an async-proxy
  // write): the fencing thread (cluster-wide index) and its epoch
  // (namespace order in gg_emu_internal.h).
  std::vector<std::uint32_t> writer;
  struct Fence {
    unsigned thread;
    std::uint32_t epoch;
  };
  std::vector<Fence> fences;
  struct Filled {
    std::uint32_t lo, hi;
    unsigned span;  // the swizzle span of the TMA load that filled [lo, hi)
  };
  std::vector<Filled> filled;
  // The shared memory each wgmma operand seen in this block reads (cached_reads).
  struct Reads {
    std::uint64_t desc;
    bool mn_major;
    unsigned eb, rows, k;
    std::vector<sm90::Range> ranges;
  };
  std::vector<Reads> reads;
  // (issue 30) This CTA's shared-memory writes, numbered (TMA loads, the
  // generic stores a fence.proxy.async publishes), the number of the last
  // one of each 16-byte granule, and what the CTA has seen of every CTA's
  // (sm90::Seen).
  std::uint32_t writes = 0;
  std::vector<std::uint32_t> written_at;
  sm90::Seen seen;
  bool used = false;
};

namespace sm90 {

[[noreturn]] inline void tsan_unsupported() {
  fail(
      "the Hopper primitives (mbarrier, TMA, wgmma) are modelled in fiber mode only, not in TSan "
      "mode");
}

inline BlockRunner& runner() {
  return *current().runner;
}

inline HopperBlock& block() {
#if defined(GG_EMU_TSAN)
  tsan_unsupported();
#else
  BlockRunner& r = runner();
  if (r.hopper == nullptr)
    r.hopper = new HopperBlock();
  HopperBlock& h = *r.hopper;
  if (!h.used) {
    const SharedRegion& s = r.shared_region();
    if (static_cast<std::size_t>(s.end - s.begin) > kWindow) {
      fail("internal: the block's shared memory (%zu bytes) is over the 2^18-byte shared window",
           static_cast<std::size_t>(s.end - s.begin));
    }
    h.threads.assign(r.num_threads(), HopperThread{});
    // The async proxy's view at block start: the poison every block starts with.
    h.shadow.assign(static_cast<std::size_t>(s.end - s.begin), kPoison);
    h.writer.assign(static_cast<std::size_t>(s.end - s.begin), 0u);
    h.fences.assign(1, {});
    h.writes = 0;
    h.written_at.assign(static_cast<std::size_t>(s.end - s.begin) / 16 + 1, 0);
    h.seen = Seen{};
    h.used = true;
  }
  return h;
#endif
}

inline HopperThread& me() {
  return block().threads[current().linear];
}

// The bytes at shared address `a`, `bytes` long, in this block's shared memory.
inline unsigned char* at(std::uint32_t a, std::size_t bytes, const char* what) {
  const SharedRegion& s = runner().shared_region();
  const std::uint32_t base = addr_of(s.begin);
  const std::size_t off = (a - base) % kWindow;
  if (off + bytes > static_cast<std::size_t>(s.end - s.begin)) {
    fail("%s: shared address 0x%05x (+%zu bytes) is outside the block's shared memory", what, a,
         bytes);
  }
  return s.begin + off;
}

// The offset in the block's shared memory of shared address `a` (ranges
// are kept as offsets: the window address of the region may wrap at 2^18).
inline std::uint32_t rel(std::uint32_t a) {
  return (a - addr_of(runner().shared_region().begin)) % kWindow;
}

inline std::size_t shadow_offset(const void* p) {
  return static_cast<std::size_t>(static_cast<const unsigned char*>(p) -
                                  runner().shared_region().begin);
}

// (issue 30) A write of [off, off + bytes) of this CTA's shared memory.
inline void note_write(HopperBlock& h, std::size_t off, std::size_t bytes) {
  ++h.writes;
  for (std::size_t g = off / 16; g <= (off + bytes - 1) / 16; ++g)
    h.written_at[g] = h.writes;
}

// What a signal of CTA `r` carries: what r has seen, and its own writes.
inline Seen signal_of(const BlockRunner& r) {
  Seen s;
  if (r.hopper != nullptr && r.hopper->used) {
    s = r.hopper->seen;
    const unsigned rank = r.cluster_rank();
    s.at[rank] = std::max(s.at[rank], r.hopper->writes);
  }
  return s;
}

inline std::string where_smem(const void* p) {
  return format("shared address 0x%05x", addr_of(p));
}

inline Barrier* find_barrier(const void* bar) {
  const std::uint32_t a = addr_of(bar);
  for (Barrier& b : block().barriers) {
    if (b.addr == a)
      return &b;
  }
  return nullptr;
}

inline void check_barrier_address(const void* bar, const char* op) {
  if (reinterpret_cast<std::uintptr_t>(bar) % 8 != 0)
    fail("%s: mbarrier address %p is not 8-byte aligned", op, bar);
  check_shared(bar, 8, op);
}

inline Barrier& barrier(const void* bar, const char* op) {
  check_barrier_address(bar, op);
  Barrier* b = find_barrier(bar);
  if (b == nullptr) {
    fail("%s: the mbarrier at %s was not initialised (mbarrier.init), or was invalidated", op,
         where_smem(bar).c_str());
  }
  return *b;
}

inline std::string describe_barrier(const Barrier& b) {
  std::string s = format(
      "mbarrier at shared address 0x%05x: phase %llu (parity %llu) incomplete: %u of %u arrivals "
      "missing",
      b.addr, b.phase, b.phase & 1, b.pending, b.count);
  if (b.tx > 0) {
    s += format(", %lld transaction bytes missing (expect_tx announced %lld, TMA delivered %lld)",
                b.tx, b.announced, b.delivered);
  } else if (b.tx < 0) {
    s += format(
        ", %lld transaction bytes more than announced (expect_tx announced %lld, TMA delivered "
        "%lld)",
        -b.tx, b.announced, b.delivered);
  }
  return s;
}

GG_EMU_UNCHECKED inline void copy_box(const TmaLoad& l);

// Ends the current phase when nothing is missing; wakes the waiters.
inline void maybe_complete(Barrier& b) {
  if (b.pending != 0 || b.tx != 0)
    return;
  b.carried.merge(b.carry);
  b.carry = Seen{};
  ++b.phase;
  b.pending = b.count;
  b.announced = b.delivered = 0;
  b.done = std::move(b.arrived);
  b.arrived.clear();
  runner().wake_waiters();
}

inline bool phase_done(const Barrier& b, unsigned parity) {
  return (b.phase & 1) != parity;
}

// Lands the TMA loads of every completed phase of barrier `b` (a thread's
// wait has seen the phase complete).
GG_EMU_UNCHECKED inline void land_loads(const Barrier& b) {
  HopperBlock& h = block();
  std::size_t kept = 0;
  for (std::size_t i = 0; i < h.loads.size(); ++i) {
    const TmaLoad& l = h.loads[i];
    if (l.barrier == b.addr && l.phase < b.phase) {
      if (l.dst_cta != &runner()) {
        if (l.dst_cta->cta_exited()) {
          fail("a TMA load into the shared memory of CTA rank %u (mbarrier at 0x%05x, phase %llu) lands after "
               "every thread of that CTA exited: its shared memory is released; a CTA must wait for its "
               "peers (barrier.cluster.arrive + wait) before it exits",
               l.dst_cta->cluster_rank(), l.barrier, l.phase);
        }
        OnPeer on(l.dst_cta);
        copy_box(l);
      } else {
        copy_box(l);
      }
    } else {
      h.loads[kept++] = h.loads[i];
    }
  }
  h.loads.resize(kept);
}

struct WaitArg {
  HopperBlock* h;
  std::uint32_t addr;
  unsigned parity;
};

inline bool wait_ready(const void* p) {
  const auto* w = static_cast<const WaitArg*>(p);
  for (const Barrier& b : w->h->barriers) {
    if (b.addr == w->addr)
      return phase_done(b, w->parity);
  }
  return true;  // invalidated: the wait reports it when it resumes
}

// ---------------------------------------------------------------------------
// Operations behind gg_primitives_sm90.cuh.

void mbarrier_init(void* bar, unsigned count) {
  check_barrier_address(bar, "mbarrier.init");
  if (count == 0 || count > (1u << 20) - 1)
    fail("mbarrier.init: count %u is not in 1..2^20-1", count);
  HopperBlock& h = block();
  Barrier* b = find_barrier(bar);
  if (b == nullptr) {
    h.barriers.push_back({});
    b = &h.barriers.back();
  }
  *b = Barrier{};
  b->addr = addr_of(bar);
  b->count = b->pending = count;
  b->init_thread = current().linear;
  std::memset(bar, 0, 8);
}

void mbarrier_inval(void* bar) {
  barrier(bar, "mbarrier.inval");
  HopperBlock& h = block();
  const std::uint32_t a = addr_of(bar);
  for (const TmaLoad& l : h.loads) {
    if (l.barrier == a)
      fail("mbarrier.inval: TMA loads that signal the mbarrier at %s are still in flight",
           where_smem(bar).c_str());
  }
  std::erase_if(h.barriers, [a](const Barrier& b) { return b.addr == a; });
  runner().wake_waiters();
}

void fence_mbarrier_init() {
  const unsigned self = current().linear;
  for (Barrier& b : block().barriers) {
    if (b.init_thread == self)
      b.fenced = true;
  }
}

unsigned long long mbarrier_arrive(void* bar, unsigned long long tx) {
  Barrier& b = barrier(bar, tx != 0 ? "mbarrier.arrive.expect_tx" : "mbarrier.arrive");
  if (b.pending == 0)
    fail("mbarrier.arrive: more arrivals than the count of %s", describe_barrier(b).c_str());
  const unsigned long long token = b.phase;
  tcgen05_on_arrive(runner(), b.addr, token);
  order::release(current(), b.arrived);
  b.carry.merge(signal_of(runner()));
  b.tx += static_cast<long long>(tx);
  b.announced += static_cast<long long>(tx);
  --b.pending;
  maybe_complete(b);
  return token;
}

// Register work of the thread (`what`: widening weights into registers,
// spinning on an mbarrier) while one of its wgmmas with A in registers is in
// flight. The C++ arrays may all differ, but ptxas does not reserve an
// in-flight wgmma's A registers across code that branches, and gives their
// physical registers to the new values (docs/cuda-hopper.md, "Register-
// sourced wgmma hazards"): such a wgmma's batch must be waited for first.
void register_work(const char* what) {
  const HopperThread& t = me();
  for (const WgmmaOp& op : t.wgmma) {
    if (op.a_regs) {
      const unsigned tid = current().linear;
      fail(
          "%s while a wgmma.mma_async with A in registers is in flight (thread %u, warpgroup %u, "
          "commit group %u): ptxas may give the in-flight A fragment's registers to the new "
          "values; wgmma.wait_group first",
          what, tid, tid / 128, op.group);
    }
  }
}

bool mbarrier_wait(void* bar, unsigned parity, const char* op) {
  register_work("a spin on an mbarrier (mbarrier.try_wait)");
  Barrier* b = &barrier(bar, op);
  if (!phase_done(*b, parity)) {
    HopperThread& t = me();
    t.wait_text = format("%s (mbarrier at shared address 0x%05x, parity %u)", op, b->addr, parity);
    const WaitArg arg{&block(), b->addr, parity};
    runner().wait_until(current(), t.wait_text.c_str(), &wait_ready, &arg);
    b = &barrier(bar, op);
  }
  land_loads(*b);
  block().seen.merge(b->carried);
  tcgen05_retire(runner(), b->addr, b->phase);
  order::acquire(current(), b->done);
  return true;
}

unsigned long long mbarrier_phase(void* bar, const char* op) {
  return barrier(bar, op).phase;
}

// The async proxy reads [p, p + bytes): its bytes must be what the last
// fence.proxy.async (or an async-proxy write) left.
inline void check_async_view(const unsigned char* p, std::size_t bytes, const char* reader) {
  const HopperBlock& h = block();
  const std::size_t off = shadow_offset(p);
  for (std::size_t i = 0; i < bytes; ++i) {
    if (p[i] != h.shadow[off + i]) {
      fail(
          "missing fence.proxy.async: %s reads shared memory at %s (byte %zu of %zu) that the "
          "generic proxy wrote "
          "(st.shared) after the last fence.proxy.async; write, then fence.proxy.async, then a "
          "barrier, then the "
          "async-proxy read",
          reader, where_smem(p + i).c_str(), i, bytes);
    }
  }
}

void fence_proxy_async() {
  HopperBlock& h = block();
  const SharedRegion& s = runner().shared_region();
  // The bytes the generic proxy changed since the last fence are this
  // thread's to publish, in its present epoch (order::release ends it).
  const std::size_t size = static_cast<std::size_t>(s.end - s.begin);
  std::uint32_t id = 0;
  for (std::size_t lo = 0; lo < size; lo += 64) {
    const std::size_t n = std::min<std::size_t>(64, size - lo);
    if (std::memcmp(s.begin + lo, h.shadow.data() + lo, n) == 0)
      continue;
    if (id == 0) {
      ThreadCtx& t = current();
      id = static_cast<std::uint32_t>(h.fences.size());
      h.fences.push_back({t.hb_self, order::clock(t)[t.hb_self]});
    }
    for (std::size_t i = lo; i < lo + n; ++i) {
      if (s.begin[i] != h.shadow[i])
        h.writer[i] = id;
    }
  }
  // The cluster's write order (the CTA's numbered writes): the generic
  // stores it makes visible are one numbered write (the granules that
  // differ from the async proxy's view).
  bool any = false;
  for (std::size_t g = 0; g < size; g += 16) {
    const std::size_t n = std::min<std::size_t>(16, size - g);
    if (std::memcmp(s.begin + g, h.shadow.data() + g, n) != 0) {
      if (!any)
        ++h.writes;
      any = true;
      h.written_at[g / 16] = h.writes;
    }
  }
  std::memcpy(h.shadow.data(), s.begin, size);
  fence_mbarrier_init();  // the proxy fence also orders the thread's mbarrier.init
}

// Walks every element of a TMA box: f(offset of the element in the box
// (elements), its global coordinates, whether all are in bounds).
template <class F>
GG_EMU_UNCHECKED inline void for_box(const MapBits& m, const int* coords, F f) {
  std::size_t count = 1;
  for (unsigned d = 0; d < m.rank; ++d)
    count *= m.box[d];
  for (std::size_t e = 0; e < count; ++e) {
    std::size_t rest = e;
    bool inside = true;
    long long g[5] = {};
    for (unsigned d = 0; d < m.rank; ++d) {
      g[d] = static_cast<long long>(coords[d]) + static_cast<long long>(rest % m.box[d]);
      rest /= m.box[d];
      inside = inside && g[d] >= 0 && g[d] < static_cast<long long>(m.dims[d]);
    }
    f(e, g, inside);
  }
}

inline std::size_t box_bytes(const MapBits& m) {
  std::size_t n = m.elem_bytes;
  for (unsigned d = 0; d < m.rank; ++d)
    n *= m.box[d];
  return n;
}

// Byte `byte` of a box that starts at `dst`, after the swizzle (which only
// moves bits 4-6 of the address, so the host address serves).
inline unsigned char* box_byte(unsigned char* dst, std::size_t byte, unsigned swizzle) {
  std::uintptr_t a = reinterpret_cast<std::uintptr_t>(dst) + byte;
  const unsigned span = swizzle_span(swizzle);
  if (span != 0)
    a ^= ((a >> 7) & (span / 16 - 1)) << 4;
  return reinterpret_cast<unsigned char*>(a);
}

GG_EMU_UNCHECKED inline void copy_box(const TmaLoad& l) {
  HopperBlock& h = block();
  const MapBits& m = l.map;
  const auto* g = reinterpret_cast<const unsigned char*>(static_cast<std::uintptr_t>(m.address));
  const std::size_t off0 = shadow_offset(l.dst);
  const std::uint32_t lo = static_cast<std::uint32_t>(shadow_offset(l.dst)),
                      hi = lo + static_cast<std::uint32_t>(l.bytes);
  std::erase_if(h.filled, [&](const HopperBlock::Filled& f) { return f.lo < hi && lo < f.hi; });
  h.filled.push_back({lo, hi, swizzle_span(m.swizzle)});
  for_box(m, l.coords, [&](std::size_t e, const long long* c, bool inside) {
    unsigned char* s = box_byte(l.dst, e * m.elem_bytes, m.swizzle);
    if (inside) {
      std::size_t go = 0;
      for (unsigned d = 0; d < m.rank; ++d)
        go += static_cast<std::size_t>(c[d]) * m.strides[d];
      std::memcpy(s, g + go, m.elem_bytes);
    } else {
      std::memset(s, 0, m.elem_bytes);
    }
    std::memcpy(&h.shadow[off0 + static_cast<std::size_t>(s - l.dst)], s, m.elem_bytes);
  });
}

const MapBits& map_bits(const CUtensorMap* map, const char* op) {
  const auto* m = reinterpret_cast<const MapBits*>(map);
  if (m->magic != kMapMagic)
    fail("%s: the tensor map at %p was not made by cuTensorMapEncodeTiled", op,
         static_cast<const void*>(map));
  return *m;
}

// Shared memory that an in-flight wgmma of some thread reads, overlapping
// [lo, hi): a report, or nothing.
inline void check_no_wgmma_reads(std::uint32_t lo, std::uint32_t hi, const char* writer) {
  const HopperBlock& h = block();
  for (unsigned t = 0; t < h.threads.size(); ++t) {
    for (const WgmmaOp& op : h.threads[t].wgmma) {
      for (const Range& r : op.reads) {
        if (r.lo < hi && lo < r.hi) {
          const std::uint32_t base = addr_of(runner().shared_region().begin);
          fail(
              "%s overwrites shared memory [0x%05x, 0x%05x) that a wgmma.mma_async of thread %u "
              "(warpgroup %u, "
              "commit group %u) still reads: the stage was released before wgmma.wait_group "
              "retired that wgmma (or "
              "the wgmma was issued before the data it reads had arrived: no wait on the full "
              "barrier)",
              writer, (base + std::max(lo, r.lo)) % kWindow, (base + std::min(hi, r.hi)) % kWindow,
              t, t / 128, op.group);
        }
      }
    }
  }
}

// A TMA load into `dst` (the current CTA's shared memory) completing on
// `bar` in CTA `bar_cta` (the current one, or its pair peer for a 2-CTA load).
// Fails when [dst, dst + bytes) of `dst_cta`'s shared memory is still being
// filled by an earlier TMA or bulk load no thread waited for. Loads in flight
// are kept with their barrier: a 2-CTA load into this CTA's shared memory may
// be kept by its pair peer.
void check_no_load_in_flight(const BlockRunner* dst_cta, const void* dst, std::size_t bytes, const char* op) {
  const auto* d0 = static_cast<const unsigned char*>(dst);
  const Cluster* c = dst_cta->cluster();
  const unsigned n = c != nullptr ? c->size : 1;
  for (unsigned r = 0; r < n; ++r) {
    const BlockRunner* holder = c != nullptr ? c->ctas[r] : dst_cta;
    if (holder->hopper == nullptr || !holder->hopper->used) continue;
    for (const TmaLoad& l : holder->hopper->loads) {
      if (l.dst_cta != dst_cta) continue;
      if (l.dst < d0 + bytes && d0 < l.dst + l.bytes) {
        fail(
            "%s into shared memory at 0x%05x that an earlier TMA load (mbarrier at 0x%05x, phase "
            "%llu) still fills: "
            "no thread waited for it",
            op, addr_of(dst), l.barrier, l.phase);
      }
    }
  }
}

void tma_load_into(void* dst, const CUtensorMap* map, BlockRunner* bar_cta, void* bar, const int* coords,
                   unsigned rank, const char* kOp);

void tma_load(void* dst, const CUtensorMap* map, void* bar, const int* coords,
                     unsigned rank) {
  tma_load_into(dst, map, &runner(), bar, coords, rank, "cp.async.bulk.tensor (TMA load)");
}

void tma_load_into(void* dst, const CUtensorMap* map, BlockRunner* bar_cta, void* bar, const int* coords,
                   unsigned rank, const char* kOp) {
  const MapBits& m = map_bits(map, kOp);
  if (m.rank != rank)
    fail("%s: a %uD copy through a tensor map of rank %u", kOp, rank, m.rank);
  if (reinterpret_cast<std::uintptr_t>(dst) % 128 != 0)
    fail("%s: destination %p is not 128-byte aligned", kOp, dst);
  const std::size_t bytes = box_bytes(m);
  check_shared(dst, bytes, kOp);
  BlockRunner* dst_cta = &runner();
  std::optional<OnPeer> on_bar;
  if (bar_cta != dst_cta) on_bar.emplace(bar_cta);
  Barrier& b = barrier(bar, kOp);
  on_bar.reset();
  if (!b.fenced) {
    fail(
        "missing fence.mbarrier_init: a TMA load signals the mbarrier at shared address 0x%05x, "
        "but thread %u "
        "initialised it and no fence.mbarrier_init (or fence.proxy.async) of that thread followed, "
        "so the async "
        "proxy may not see the initialisation",
        b.addr, b.init_thread);
  }
  const std::uint32_t lo = static_cast<std::uint32_t>(shadow_offset(dst));
  check_no_wgmma_reads(lo, lo + static_cast<std::uint32_t>(bytes), "a TMA load");
  tcgen05_check_writes(runner(), lo, lo + static_cast<std::uint32_t>(bytes), "a TMA load");
  HopperBlock& h = block();
  check_no_load_in_flight(dst_cta, dst, bytes, kOp);
  auto* d = static_cast<unsigned char*>(dst);
  std::memset(d, kPoison, bytes);
  std::memset(&h.shadow[shadow_offset(d)], kPoison, bytes);
  std::fill_n(&h.writer[shadow_offset(d)], bytes, 0u);
  note_write(h, shadow_offset(d), bytes);
  const Seen sig = signal_of(*dst_cta);
  TmaLoad l{m, {}, dst_cta, d, bytes, b.addr, b.phase, current().linear};
  for (unsigned i = 0; i < rank; ++i)
    l.coords[i] = coords[i];
  // The load is kept (and lands) where its barrier is: a wait on it lands it.
  if (bar_cta != dst_cta) on_bar.emplace(bar_cta);
  block().loads.push_back(l);
  b.carry.merge(sig);
  b.tx -= static_cast<long long>(bytes);
  b.delivered += static_cast<long long>(bytes);
  maybe_complete(b);
}

void mbarrier_arrive_cluster(std::uint32_t addr) {
  static constexpr const char* kOp = "mbarrier.arrive.release.cluster.shared::cluster";
  const ClusterRef r = resolve_cluster(addr, 8, kOp);
  if (r.cta == &runner()) {
    mbarrier_arrive(r.p, 0);
    return;
  }
  const Seen sig = signal_of(runner());
  OnPeer on(r.cta);
  Barrier& b = barrier(r.p, kOp);
  if (b.pending == 0)
    fail("%s: more arrivals than the count of %s in CTA rank %u", kOp, describe_barrier(b).c_str(), r.rank);
  order::release(current(), b.arrived);
  b.carry.merge(sig);
  --b.pending;
  maybe_complete(b);
}

void tma_load_multicast(void* dst, const CUtensorMap* map, void* bar, const int* coords, unsigned rank,
                        std::uint16_t mask) {
  static constexpr const char* kOp = "cp.async.bulk.tensor .multicast::cluster (TMA multicast load)";
  BlockRunner& self = runner();
  const unsigned n = cluster_nctarank();
  if (mask == 0) fail("%s: ctaMask is 0 (no destination CTA)", kOp);
  if ((mask >> n) != 0) {
    fail("%s: ctaMask 0x%04x names CTA rank %u, but the cluster has %u CTAs (ranks 0..%u)", kOp, mask,
         31 - __builtin_clz(static_cast<unsigned>(mask)), n, n - 1);
  }
  check_shared(dst, 1, kOp);
  check_shared(bar, 8, kOp);
  const std::size_t dst_off = shadow_offset(dst);
  const std::size_t bar_off = shadow_offset(bar);
  for (unsigned r = 0; r < n; ++r) {
    if (((mask >> r) & 1u) == 0) continue;
    BlockRunner* peer = self.cluster() != nullptr ? self.cluster()->ctas[r] : &self;
    if (peer == &self) {
      tma_load_into(dst, map, &self, bar, coords, rank, kOp);
      continue;
    }
    const std::uint32_t where = addr_of(peer->shared_region().begin + dst_off);
    resolve_cluster(kClusterTag | r << 18 | where, box_bytes(map_bits(map, kOp)), kOp);
    OnPeer on(peer);
    unsigned char* base = peer->shared_region().begin;
    tma_load_into(base + dst_off, map, peer, base + bar_off, coords, rank, kOp);
  }
}

void tma_load_pair(void* dst, const CUtensorMap* map, void* bar, const int* coords, unsigned rank,
                   std::uint16_t mask) {
  const char* kOp = mask == 0 ? "cp.async.bulk.tensor .cta_group::2 (2-CTA TMA load)"
                              : "cp.async.bulk.tensor .cta_group::2 .multicast::cluster (2-CTA TMA multicast load)";
  BlockRunner& self = runner();
  const Cluster* c = self.cluster();
  const unsigned n = c != nullptr ? c->size : 1, me_rank = self.cluster_rank();
  if (c == nullptr || (me_rank ^ 1u) >= n) {
    fail("%s needs a cluster whose CTAs pair up (ranks 2i and 2i + 1); this CTA is rank %u of a cluster of %u",
         kOp, me_rank, n);
  }
  if (mask == 0) mask = static_cast<std::uint16_t>(1u << me_rank);
  if ((mask >> n) != 0) {
    fail("%s: ctaMask 0x%04x names CTA rank %u, but the cluster has %u CTAs (ranks 0..%u)", kOp, mask,
         31 - __builtin_clz(static_cast<unsigned>(mask)), n, n - 1);
  }
  check_shared(dst, 1, kOp);
  check_shared(bar, 8, kOp);
  const std::size_t dst_off = shadow_offset(dst), bar_off = shadow_offset(bar);
  for (unsigned r = 0; r < n; ++r) {
    if (((mask >> r) & 1u) == 0) continue;
    // The box lands in CTA r; its bytes complete on the barrier of r's pair
    // leader (the even CTA), at bar's offset.
    BlockRunner* dst_cta = c->ctas[r];
    BlockRunner* bar_cta = c->ctas[r & ~1u];
    for (BlockRunner* x : {dst_cta, bar_cta}) {
      if (x->cta_exited()) {
        fail("%s: CTA rank %u has exited; its shared memory is released", kOp, x->cluster_rank());
      }
    }
    unsigned char* d = dst_cta->shared_region().begin + dst_off;
    std::optional<OnPeer> on;
    if (dst_cta != &self) on.emplace(dst_cta);
    tma_load_into(d, map, bar_cta, bar_cta->shared_region().begin + bar_off, coords, rank, kOp);
  }
}

void tma_store(const CUtensorMap* map, const void* src, const int* coords, unsigned rank) {
  static constexpr const char* kOp = "cp.async.bulk.tensor (TMA store)";
  const MapBits& m = map_bits(map, kOp);
  if (m.rank != rank)
    fail("%s: a %uD copy through a tensor map of rank %u", kOp, rank, m.rank);
  if (reinterpret_cast<std::uintptr_t>(src) % 128 != 0)
    fail("%s: source %p is not 128-byte aligned", kOp, src);
  const std::size_t bytes = box_bytes(m);
  check_shared(src, bytes, kOp);
  const auto* s = static_cast<const unsigned char*>(src);
  check_async_view(s, bytes, "a TMA store");
  HopperThread& t = me();
  TmaStore st{m, {}, s, std::vector<unsigned char>(s, s + bytes), t.bulk_committed};
  for (unsigned i = 0; i < rank; ++i)
    st.coords[i] = coords[i];
  t.stores.push_back(std::move(st));
}

void bulk_commit() {
  ++me().bulk_committed;
}

GG_EMU_UNCHECKED inline void write_store(const TmaStore& st) {
  const MapBits& m = st.map;
  auto* g = reinterpret_cast<unsigned char*>(static_cast<std::uintptr_t>(m.address));
  for_box(m, st.coords, [&](std::size_t e, const long long* c, bool inside) {
    if (!inside)
      return;
    const unsigned char* s =
        box_byte(const_cast<unsigned char*>(st.src), e * m.elem_bytes, m.swizzle);
    std::size_t go = 0;
    for (unsigned d = 0; d < m.rank; ++d)
      go += static_cast<std::size_t>(c[d]) * m.strides[d];
    std::memcpy(g + go, st.data.data() + (s - st.src), m.elem_bytes);
  });
}

// cp.async.bulk.wait_group[.read] keep: the stores of every group older than
// the newest `keep` have read their source (.read) or are complete.
void bulk_wait(unsigned keep, bool read_only) {
  HopperThread& t = me();
  const unsigned limit = t.bulk_committed >= keep ? t.bulk_committed - keep : 0u;
  std::size_t kept = 0;
  for (std::size_t i = 0; i < t.stores.size(); ++i) {
    TmaStore& st = t.stores[i];
    if (st.group < limit) {
      if (!st.read_done && std::memcmp(st.data.data(), st.src, st.data.size()) != 0) {
        fail(
            "the shared-memory source of a TMA store (%s) was overwritten before "
            "cp.async.bulk.wait_group.read "
            "said it had been read",
            where_smem(st.src).c_str());
      }
      st.read_done = true;
      if (!read_only) {
        write_store(st);
        continue;
      }
    }
    if (kept != i)
      t.stores[kept] = std::move(t.stores[i]);
    ++kept;
  }
  t.stores.resize(kept);
}

// ---- wgmma -------------------------------------------------------------------

inline float wgmma_poison() {
  const std::uint32_t bits = 0x7fa0574du;  // a signalling NaN ("WM")
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

inline void on_fpe(int, siginfo_t* info, void*) {
  if (info->si_code == FPE_FLTINV) {
    if (const char* why = tcgen05_fpe_reason())
      fail_with_status(kExitKernelError, why);
    fail_with_status(
        kExitKernelError,
        "floating-point invalid operation while this thread has wgmma.mma_async in flight: an "
        "accumulator was read before wgmma.wait_group retired its wgmma (the accumulators hold "
        "signalling NaNs until then)");
  }
  fail_with_status(
      kExitKernelError,
      format("arithmetic exception (SIGFPE, code %d) in a CUDA thread", info->si_code));
}

inline void trap_invalid(bool on) {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction sa{};
    sa.sa_sigaction = &on_fpe;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGFPE, &sa, nullptr);
  });
  std::feclearexcept(FE_ALL_EXCEPT);
  if (on) {
    feenableexcept(FE_INVALID);
  } else {
    fedisableexcept(FE_INVALID);
  }
}

void set_invalid_trap(bool on) {
  trap_invalid(on);
}

// The generic writes an async-proxy read of [lo, hi) (by the calling
// thread, of the current CTA's shared memory) sees must be ordered before
// it: each tagged byte's fence epoch known to the reading thread's clock.
inline void check_ordered(std::uint32_t lo, std::uint32_t hi, const char* reader) {
  const HopperBlock& h = block();
  const ThreadCtx& t = current();
  std::uint32_t seen = 0;  // the last fence found ordered
  for (std::uint32_t i = lo; i < hi; ++i) {
    const std::uint32_t id = h.writer[i];
    if (id == 0 || id == seen)
      continue;
    const HopperBlock::Fence& f = h.fences[id];
    if (order::knows(t, f.thread, f.epoch)) {
      seen = id;
      continue;
    }
    const unsigned n = runner().num_threads();
    const std::uint32_t base = addr_of(runner().shared_region().begin);
    fail(
        "%s reads shared memory at 0x%05x of CTA rank %u that thread %u of CTA rank %u wrote "
        "(st.shared) and published with fence.proxy.async, but nothing orders that write before "
        "this read: no chain of mbarrier arrivals and waits (local or remote), __syncthreads or "
        "barrier.cluster leads from the writing thread, after its fence, to the reading thread %u "
        "of CTA rank %u (a missing arrival on, or wait for, the barrier the reader waits on?)",
        reader, (base + i) % kWindow, runner().cluster_rank(), f.thread % n, f.thread / n,
        t.hb_self % n, t.hb_self / n);
  }
}

// An async-proxy read of [lo, hi) by the sm100 tier (a tcgen05.mma operand
// through a descriptor of swizzle span `span`, 1 for the 128-byte swizzle
// with 32-byte atomicity, which no modelled TMA load writes): inside the block's shared
// memory, not filled by a TMA load still in flight, nor by one of another
// swizzle, and what the last fence.proxy.async left.
void check_async_read(std::uint32_t lo, std::uint32_t hi, unsigned span, const char* reader) {
  HopperBlock& h = block();
  const SharedRegion& s = runner().shared_region();
  const std::uint32_t base = addr_of(s.begin);
  if (hi > static_cast<std::size_t>(s.end - s.begin) || hi < lo) {
    fail("%s: shared address 0x%05x (+%u bytes) is outside the block's shared memory", reader,
         (base + lo) % kWindow, hi - lo);
  }
  for (const TmaLoad& l : h.loads) {
    const std::uint32_t llo = static_cast<std::uint32_t>(shadow_offset(l.dst)),
                        lhi = llo + static_cast<std::uint32_t>(l.bytes);
    if (lo < lhi && llo < hi) {
      fail(
          "%s reads shared memory at 0x%05x that a TMA load (mbarrier at 0x%05x, phase %llu) "
          "still fills: no thread has waited on that barrier phase (a missing wait on the full "
          "barrier?)",
          reader, (base + std::max(lo, llo)) % kWindow, l.barrier, l.phase);
    }
  }
  for (const HopperBlock::Filled& f : h.filled) {
    if (lo < f.hi && f.lo < hi && f.span != span) {
      fail(
          "%s: the descriptor says %s, but a TMA load with %s filled the shared memory it reads "
          "(at 0x%05x): the descriptor's swizzle mode must be the tensor map's",
          reader,
          span == 1   ? "a 128-byte swizzle with 32-byte atomicity"
          : span != 0 ? format("%u-byte swizzle", span).c_str()
                      : "no swizzle",
          f.span ? format("%u-byte swizzle", f.span).c_str() : "no swizzle",
          (base + std::max(lo, f.lo)) % kWindow);
    }
  }
  if (std::memcmp(s.begin + lo, h.shadow.data() + lo, hi - lo) != 0)
    check_async_view(s.begin + lo, hi - lo, reader);
  check_ordered(lo, hi, reader);
}

// The A fragment registers of the thread's in-flight wgmmas with A in
// registers must hold their values until the op retires (PTX ISA: accessing
// them before wgmma.wait_group is undefined; on a GPU an overwrite corrupts
// the product). Checked when the thread next touches wgmma (`where`) and when
// the op retires, at the wait_group that retires it.
inline void check_a_registers(const HopperThread& t, const char* where) {
  for (const WgmmaOp& op : t.wgmma) {
    if (op.a_addr == nullptr)
      continue;
    for (unsigned i = 0; i < 4; ++i) {
      std::uint32_t now;
      std::memcpy(&now, op.a_addr + i, sizeof now);
      if (now != op.a_vals[i]) {
        const unsigned tid = current().linear;
        fail(
            "the A fragment registers of a wgmma.mma_async (A in registers) were overwritten "
            "before wgmma.wait_group retired it (thread %u, warpgroup %u, commit group %u: a[%u] "
            "was 0x%08x at issue, 0x%08x at %s): build the next fragment in other registers, or "
            "wait first",
            tid, tid / 128, op.group, i, op.a_vals[i], now, where);
      }
    }
  }
}

void wgmma_fence() {
  HopperThread& t = me();
  check_a_registers(t, "the next wgmma.fence");
  t.fence_needed = false;
}

void wgmma_commit() {
  HopperThread& t = me();
  check_a_registers(t, "the next wgmma.commit_group");
  ++t.wgmma_committed;
}

// The shared memory a wgmma operand reads, as ranges of 16-byte chunks.
inline void operand_reads(std::vector<Range>& out, std::uint64_t desc, bool mn_major, unsigned eb,
                          unsigned rows, unsigned k) {
  const Desc d = decode_desc(desc);
  for (unsigned mn = 0; mn < rows; ++mn) {
    for (unsigned kk = 0; kk < k; ++kk) {
      const std::uint32_t a = rel(operand_address(d, mn_major, eb, mn, kk));
      if (!out.empty() && out.back().hi == a) {
        out.back().hi = a + eb;
      } else {
        out.push_back({a, a + eb});
      }
    }
  }
}

// The shared memory one wgmma operand reads (operand_reads), computed once
// per block for each (descriptor, major-ness, element size, shape): every
// thread of the warpgroup issues the same wgmma, and a pipelined kernel
// reuses its stages' descriptors.
inline const std::vector<Range>& cached_reads(std::uint64_t desc, bool mn_major, unsigned eb,
                                              unsigned rows, unsigned k) {
  HopperBlock& h = block();
  for (const HopperBlock::Reads& r : h.reads) {
    if (r.desc == desc && r.mn_major == mn_major && r.eb == eb && r.rows == rows && r.k == k)
      return r.ranges;
  }
  HopperBlock::Reads r{desc, mn_major, eb, rows, k, {}};
  operand_reads(r.ranges, desc, mn_major, eb, rows, k);
  h.reads.push_back(std::move(r));
  return h.reads.back().ranges;
}

// check_operand's test by ranges of bytes instead of element by element:
// true when the element-wise test cannot fail (every range inside the
// block's shared memory, no range overlapping a TMA fill of another swizzle,
// the async proxy's view equal to shared memory). False means "look
// closer": check_operand then finds the element and reports it.
inline bool operand_clean(const std::vector<Range>& ranges, std::uint64_t desc) {
  const Desc d = decode_desc(desc);
  if (d.base_offset != 0)
    return false;
  const HopperBlock& h = block();
  const SharedRegion& s = runner().shared_region();
  const std::size_t size = static_cast<std::size_t>(s.end - s.begin);
  const unsigned span = desc_span(d.mode);
  for (const Range& r : ranges) {
    if (r.hi > size || r.hi < r.lo)
      return false;
    for (const HopperBlock::Filled& f : h.filled) {
      if (r.lo < f.hi && f.lo < r.hi && f.span != span)
        return false;
    }
    if (std::memcmp(s.begin + r.lo, h.shadow.data() + r.lo, r.hi - r.lo) != 0)
      return false;
  }
  return true;
}

inline void check_operand(std::uint64_t desc, bool mn_major, unsigned eb, unsigned rows, unsigned k,
                          const char* what) {
  const Desc d = decode_desc(desc);
  if (d.base_offset != 0)
    fail("wgmma.mma_async: %s descriptor has base offset %u; only 0 is modelled", what,
         d.base_offset);
  const HopperBlock& h = block();
  for (unsigned mn = 0; mn < rows; ++mn) {
    for (unsigned kk = 0; kk < k; ++kk) {
      const std::uint32_t a = operand_address(d, mn_major, eb, mn, kk);
      for (const HopperBlock::Filled& f : h.filled) {
        if (rel(a) >= f.lo && rel(a) < f.hi && f.span != desc_span(d.mode)) {
          fail(
              "wgmma.mma_async: %s descriptor says %s, but a TMA load with %s filled the shared "
              "memory it reads "
              "(element (%u, %u) at 0x%05x): the descriptor's swizzle mode must be the tensor "
              "map's",
              what,
              desc_span(d.mode) ? format("%u-byte swizzle", desc_span(d.mode)).c_str()
                                : "no swizzle",
              f.span ? format("%u-byte swizzle", f.span).c_str() : "no swizzle", mn, kk, a);
        }
      }
      const unsigned char* p = at(a, eb, "wgmma.mma_async operand");
      check_async_view(p, eb,
                       mn_major ? "wgmma.mma_async (an MN-major operand)"
                                : "wgmma.mma_async (a K-major operand)");
    }
  }
}

// Issues one wgmma for the calling thread: checks, records the op, poisons
// the accumulators. `op` is complete but for `group`, `c`, `chained`, `reads`.
void wgmma_issue(WgmmaOp op, float* d) {
  HopperThread& t = me();
  check_a_registers(t, "the next wgmma.mma_async");
  if (t.fence_needed) {
    fail(
        "wgmma.mma_async without a wgmma.fence before it: every batch of wgmma (the first of the "
        "kernel, and the "
        "first after a wgmma.wait_group or after the accumulators were touched) needs wgmma.fence");
  }
  if (current().block_dim.x * current().block_dim.y * current().block_dim.z % 128 != 0) {
    fail("wgmma.mma_async: the block has %u threads, not whole warpgroups of 128",
         current().block_dim.x * current().block_dim.y * current().block_dim.z);
  }
  const unsigned m = 64, nv = op.n / 2;
  if (!op.a_regs) {
    const std::vector<Range>& a = cached_reads(op.desc_a, op.trans_a, op.eb, m, op.k);
    if (!operand_clean(a, op.desc_a))
      check_operand(op.desc_a, op.trans_a, op.eb, m, op.k, "the A");
    op.reads.insert(op.reads.end(), a.begin(), a.end());
  }
  const std::vector<Range>& b = cached_reads(op.desc_b, op.trans_b, op.eb, op.n, op.k);
  if (!operand_clean(b, op.desc_b))
    check_operand(op.desc_b, op.trans_b, op.eb, op.n, op.k, "the B");
  op.reads.insert(op.reads.end(), b.begin(), b.end());
  for (const TmaLoad& l : block().loads) {
    const std::uint32_t lo = static_cast<std::uint32_t>(shadow_offset(l.dst)),
                        hi = lo + static_cast<std::uint32_t>(l.bytes);
    for (const Range& r : op.reads) {
      if (r.lo < hi && lo < r.hi) {
        fail(
            "wgmma.mma_async reads shared memory at 0x%05x that a TMA load (mbarrier at 0x%05x, "
            "phase %llu) still "
            "fills: no thread has waited on that barrier phase (a missing wait on the full "
            "barrier?)",
            addr_of(l.dst), l.barrier, l.phase);
      }
    }
  }
  op.group = t.wgmma_committed;
  op.d = d;
  for (int i = static_cast<int>(t.wgmma.size()) - 1; i >= 0; --i) {
    if (t.wgmma[static_cast<std::size_t>(i)].d == d) {
      op.chained = i;
      break;
    }
  }
  if (op.chained < 0)
    op.c.assign(d, d + nv);
  const float poison = wgmma_poison();
  for (unsigned i = 0; i < nv; ++i)
    d[i] = poison;
  t.wgmma.push_back(std::move(op));
  trap_invalid(true);
}

GG_EMU_UNCHECKED inline void wgmma_compute(WgmmaOp& op, const float* c, unsigned tid) {
  const Desc da = decode_desc(op.desc_a), db = decode_desc(op.desc_b);
  const unsigned nv = op.n / 2;
  // The operands' values, decoded once: an 8-bit type through a table of its
  // 256 values; the thread's two A rows and N/4 B columns (its accumulator
  // fragment's), each read from shared memory once (wgmma_issue checked
  // every address is inside the block's shared memory).
  const SharedRegion& s = runner().shared_region();
  const std::uint32_t base = addr_of(s.begin);
  auto bits_at = [&](std::uint32_t a) {
    unsigned v = 0;
    std::memcpy(&v, s.begin + (a - base) % kWindow, op.eb);
    return v;
  };
  double table[256];
  if (op.eb == 1) {
    for (unsigned v = 0; v < 256; ++v)
      table[v] = op.value(v);
  }
  auto decode = [&](unsigned v) { return op.eb == 1 ? table[v & 0xFF] : op.value(v); };
  std::vector<double> a_rows(2 * op.k), b_cols(static_cast<std::size_t>(op.n) * op.k);
  std::vector<bool> b_done(op.n, false);
  unsigned rows[2] = {~0u, ~0u};
  for (unsigned i = 0; i < nv; ++i) {
    unsigned row, col;
    accumulator_coord(tid % 128, i, &row, &col);
    const unsigned slot = (i / 2) % 2;
    if (rows[slot] != row) {
      rows[slot] = row;
      for (unsigned kk = 0; kk < op.k; ++kk) {
        a_rows[slot * op.k + kk] = op.a_regs ? decode(op.a_tile[row % 16][kk])
                                             : decode(bits_at(operand_address(da, op.trans_a, op.eb, row, kk)));
      }
    }
    if (!b_done[col]) {
      b_done[col] = true;
      for (unsigned kk = 0; kk < op.k; ++kk)
        b_cols[static_cast<std::size_t>(col) * op.k + kk] =
            decode(bits_at(operand_address(db, op.trans_b, op.eb, col, kk)));
    }
    const double* a = &a_rows[slot * op.k];
    const double* b = &b_cols[static_cast<std::size_t>(col) * op.k];
    double acc = 0.0;
    for (unsigned kk = 0; kk < op.k; ++kk)
      acc += a[kk] * b[kk];
    op.d[i] = static_cast<float>((op.scale_d ? static_cast<double>(c[i]) : 0.0) + acc);
  }
}

// wgmma.wait_group keep: retires every op of the groups older than the newest
// `keep`, in issue order. The thread first waits until the block stalls, so
// that everything else that can run, runs while the ops are in flight.
void wgmma_wait(unsigned keep) {
  HopperThread& t = me();
  // The thread's registers cannot change while it waits: this is the check at
  // retirement, before anything the thread does after the wait.
  check_a_registers(t, "wgmma.wait_group");
  const unsigned limit = t.wgmma_committed >= keep ? t.wgmma_committed - keep : 0u;
  bool any = false;
  for (const WgmmaOp& op : t.wgmma)
    any = any || op.group < limit;
  if (any) {
    t.stalled = false;
    t.wait_text = format("wgmma.wait_group %u", keep);
    runner().wait_until(
        current(), t.wait_text.c_str(), [](const void* p) { return *static_cast<const bool*>(p); },
        &t.stalled);
  }
  HopperThread& u = me();
  trap_invalid(false);
  const unsigned tid = current().linear;
  std::vector<WgmmaOp> kept;
  std::vector<std::vector<float>> results(u.wgmma.size());
  for (std::size_t i = 0; i < u.wgmma.size(); ++i) {
    WgmmaOp& op = u.wgmma[i];
    if (op.group >= limit) {
      kept.push_back(std::move(op));
      continue;
    }
    const std::vector<float>& c =
        op.chained >= 0 ? results[static_cast<std::size_t>(op.chained)] : op.c;
    std::vector<float> scratch(op.n / 2);
    float* d = op.d;
    op.d = scratch.data();
    wgmma_compute(op, c.data(), tid);
    op.d = d;
    results[i] = std::move(scratch);
    bool later = false;
    for (std::size_t j = i + 1; j < u.wgmma.size(); ++j)
      later = later || (u.wgmma[j].d == d && u.wgmma[j].group < limit);
    bool pending_later = false;
    for (std::size_t j = i + 1; j < u.wgmma.size(); ++j)
      pending_later = pending_later || (u.wgmma[j].d == d && u.wgmma[j].group >= limit);
    if (!later && !pending_later)
      std::memcpy(d, results[i].data(), results[i].size() * sizeof(float));
    // A later op that stays in flight takes this result as its C.
    for (std::size_t j = i + 1; j < u.wgmma.size(); ++j) {
      if (u.wgmma[j].chained == static_cast<int>(i) && u.wgmma[j].group >= limit) {
        u.wgmma[j].c = results[i];
        u.wgmma[j].chained = -1;
      }
    }
  }
  // Re-index the chains of the ops kept in flight.
  for (WgmmaOp& op : kept)
    op.chained = -1;
  for (std::size_t i = 0; i < kept.size(); ++i) {
    for (std::size_t j = 0; j < i; ++j) {
      if (kept[j].d == kept[i].d && kept[i].c.empty())
        kept[i].chained = static_cast<int>(j);
    }
  }
  u.wgmma = std::move(kept);
  u.fence_needed = true;
  trap_invalid(!u.wgmma.empty());
}

// setmaxnreg: checks only (registers are not modelled).
void setmaxnreg(unsigned regs) {
  if (regs < 24 || regs > 256 || regs % 8 != 0)
    fail("setmaxnreg: %u registers is not a multiple of 8 in 24..256", regs);
}

// ---------------------------------------------------------------------------
// (issue 30) cp.async.bulk.shared::cluster.global.mbarrier::complete_tx: a
// non-tensor bulk copy, modelled as a TMA load of a 1-D box of `bytes` bytes
// (no swizzle, nothing outside), so it lands, is checked and is protected as
// one: the destination poisoned until a thread's wait observes the barrier
// phase, the async-proxy view, the stage release rule (a copy into shared
// memory an in-flight wgmma / tcgen05 op reads), an overlapping load still
// in flight. The PTX ISA's rules are checked too: 16-byte aligned addresses,
// a size that is a positive multiple of 16, and the source inside one live
// device allocation.
void bulk_load(void* dst, const void* src, unsigned bytes, void* bar) {
  static constexpr const char* kOp = "cp.async.bulk (bulk copy)";
  if (reinterpret_cast<std::uintptr_t>(dst) % 16 != 0 ||
      reinterpret_cast<std::uintptr_t>(src) % 16 != 0)
    fail("%s: the addresses must be 16-byte aligned (shared %p, global %p)", kOp, dst, src);
  if (bytes == 0 || bytes % 16 != 0)
    fail("%s: the size must be a positive multiple of 16 bytes, not %u", kOp, bytes);
  {
    // Memory the emulator allocated (cudaMalloc, a launch's arguments) must
    // hold the whole source in one allocation: a copy reaching its guards or
    // canaries, or spanning two, is refused. Memory it did not allocate is a
    // host program's own, handed in as device memory (the JAX FFI handler's
    // and the PyTorch op's CPU buffers on the emulator), which it cannot
    // bound, as TMA loads over it are not bounded either.
    const auto* c = static_cast<const unsigned char*>(src);
    Registry& reg = registry();
    std::lock_guard<std::mutex> lock(reg.mu);
    bool inside = false, emulated = false;
    for (const DeviceBuffer& b : reg.buffers) {
      inside = inside || (c >= b.data && c + bytes <= b.data + b.bytes);
      emulated = emulated || (c < b.map + b.map_bytes && c + bytes > b.map);
    }
    if (emulated && !inside)
      fail("%s: the source [%p, +%u) is not inside one live device allocation", kOp, src, bytes);
  }
  check_shared(dst, bytes, kOp);
  Barrier& b = barrier(bar, kOp);
  if (!b.fenced)
    fail("missing fence.mbarrier_init: a bulk copy signals the mbarrier at shared address 0x%05x, "
         "but thread %u initialised it and no fence.mbarrier_init (or fence.proxy.async) of that "
         "thread followed",
         b.addr, b.init_thread);
  const std::uint32_t lo = static_cast<std::uint32_t>(shadow_offset(dst));
  check_no_wgmma_reads(lo, lo + bytes, "a bulk copy");
  tcgen05_check_writes(runner(), lo, lo + bytes, "a bulk copy");
  HopperBlock& h = block();
  auto* d = static_cast<unsigned char*>(dst);
  check_no_load_in_flight(&runner(), dst, bytes, kOp);
  MapBits m{};
  m.magic = kMapMagic;
  m.rank = 1;
  m.elem_bytes = 1;
  m.address = static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(src));
  m.dims[0] = bytes;
  m.strides[0] = 1;
  m.box[0] = bytes;
  std::memset(d, kPoison, bytes);
  std::memset(&h.shadow[shadow_offset(d)], kPoison, bytes);
  std::fill_n(&h.writer[shadow_offset(d)], bytes, 0u);
  note_write(h, shadow_offset(d), bytes);
  h.loads.push_back(TmaLoad{m, {}, &runner(), d, bytes, b.addr, b.phase, current().linear});
  b.carry.merge(signal_of(runner()));
  b.tx -= static_cast<long long>(bytes);
  b.delivered += static_cast<long long>(bytes);
  maybe_complete(b);
}

}  // namespace sm90

void hopper_cluster_synced(Cluster& c) {
  sm90::Seen all;
  for (const BlockRunner* r : c.ctas)
    all.merge(sm90::signal_of(*r));
  for (BlockRunner* r : c.ctas) {
    if (r->hopper != nullptr && r->hopper->used)
      r->hopper->seen.merge(all);
  }
}

void hopper_check_ordered_read(const BlockRunner& reader, std::uint32_t lo, std::uint32_t hi,
                               const char* what) {
  const BlockRunner& self = sm90::runner();
  if (&self == &reader || self.hopper == nullptr || !self.hopper->used || hi <= lo)
    return;
  const HopperBlock& h = *self.hopper;
  const unsigned rank = self.cluster_rank();
  const std::uint32_t known =
      reader.hopper != nullptr && reader.hopper->used ? reader.hopper->seen.at[rank] : 0;
  for (std::uint32_t g = lo / 16; g <= (hi - 1) / 16; ++g) {
    if (h.written_at[g] > known) {
      const std::uint32_t at = std::max(lo, 16 * g);
      fail(
          "%s reads shared memory at 0x%05x of CTA rank %u, which that CTA's write %u filled "
          "(a TMA load into it, or generic stores a fence.proxy.async made visible), but CTA "
          "rank %u has waited on no signal of CTA rank %u made after that write (it has seen "
          "its writes up to %u): the read is not ordered after the write (after writing, CTA "
          "rank %u must signal a barrier the reader waits on: an arrival, or its TMA load's "
          "completion)",
          what, (sm90::addr_of(self.shared_region().begin) + at) % sm90::kWindow, rank,
          h.written_at[g], reader.cluster_rank(), rank, known, rank);
    }
  }
}

// ---------------------------------------------------------------------------
// The BlockRunner's hooks (declared in gg_emu.h).

void hopper_block_begin(BlockRunner& r) {
  if (r.hopper != nullptr) {
    r.hopper->barriers.clear();
    r.hopper->loads.clear();
    r.hopper->filled.clear();
    r.hopper->reads.clear();
    r.hopper->used = false;
  }
}

void hopper_thread_exit(ThreadCtx& t) {
  HopperBlock* h = t.runner->hopper;
  if (h == nullptr || !h->used)
    return;
  sm90::HopperThread& u = h->threads[t.linear];
  if (!u.wgmma.empty()) {
    fail(
        "the thread exits with %zu wgmma.mma_async not retired by wgmma.wait_group (their "
        "accumulators were never "
        "valid)",
        u.wgmma.size());
  }
  // TMA stores still in flight complete, as on a GPU; their source must still hold.
  sm90::bulk_wait(0, false);
}

void hopper_block_end(BlockRunner& r) {
  HopperBlock* h = r.hopper;
  if (h == nullptr || !h->used)
    return;
  for (const sm90::TmaLoad& l : h->loads) {
    for (const sm90::Barrier& b : h->barriers) {
      if (b.addr != l.barrier)
        continue;
      if (l.phase < b.phase) {
        fail(
            "a TMA load into shared address 0x%05x (%zu bytes, issued by thread %u) completed "
            "phase %llu of the "
            "mbarrier at 0x%05x, but no thread waited on that phase: its data was never observed "
            "(a missing wait "
            "on the full barrier?)",
            sm90::addr_of(l.dst), l.bytes, l.thread, l.phase, b.addr);
      }
      fail(
          "a TMA load into shared address 0x%05x (%zu bytes, issued by thread %u) never completed "
          "at the end of the "
          "block: %s",
          sm90::addr_of(l.dst), l.bytes, l.thread, sm90::describe_barrier(b).c_str());
    }
  }
  for (const sm90::Barrier& b : h->barriers) {
    if (b.tx < 0)
      fail("at the end of the block, %s", sm90::describe_barrier(b).c_str());
  }
}

void hopper_free(HopperBlock* h) {
  delete h;
}

// Lets threads waiting at wgmma.wait_group go on once nothing else can run;
// true when one could. Called by BlockRunner when the block stalls.
bool hopper_on_stall(BlockRunner& r) {
  HopperBlock* h = r.hopper;
  if (h == nullptr || !h->used)
    return false;
  bool any = false;
  for (unsigned i = 0; i < h->threads.size(); ++i) {
    sm90::HopperThread& t = h->threads[i];
    if (r.thread(i).state == State::at_wait && !t.stalled && !t.wgmma.empty()) {
      t.stalled = true;
      any = true;
    }
  }
  if (any)
    r.wake_waiters();
  return any;
}

// What the block's mbarriers still miss, for a deadlock report.
std::string hopper_report(const BlockRunner& r) {
  const HopperBlock* h = r.hopper;
  if (h == nullptr || !h->used)
    return "";
  std::string out;
  for (const sm90::Barrier& b : h->barriers) {
    if (b.pending != b.count || b.tx != 0)
      out += "  " + sm90::describe_barrier(b) + "\n";
  }
  for (const sm90::Barrier& b : h->barriers) {
    if (b.pending == b.count && b.tx == 0) {
      out += format(
          "  mbarrier at shared address 0x%05x: phase %llu (parity %llu): none of %u arrivals "
          "yet\n",
          b.addr, b.phase, b.phase & 1, b.count);
    }
  }
  return out;
}

}  // namespace gg::emu

// The emulator's decoding, for tests that compare it with CuTe and the PTX
// ISA (tests/cuda/sm90/test_cuda_sm90_cute_oracle.py): the shared address of element
// (mn, k) of a wgmma operand, and the (m, n) of accumulator value i of
// warpgroup thread t.
GG_EMU_API unsigned gg_emu_sm90_operand_address(unsigned long long desc, int mn_major,
                                                unsigned elem_bytes, unsigned mn, unsigned k) {
  return gg::emu::sm90::operand_address(gg::emu::sm90::decode_desc(desc), mn_major != 0, elem_bytes,
                                        mn, k);
}
GG_EMU_API void gg_emu_sm90_accumulator_coord(unsigned t, unsigned i, unsigned* m, unsigned* n) {
  gg::emu::sm90::accumulator_coord(t, i, m, n);
}
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
GG_EMU_API void gg_emu_sm90_a_fragment_coord(unsigned t, unsigned j, unsigned* m, unsigned* k) {
  gg::emu::sm90::a_fragment_coord(t, j, m, k);
}
