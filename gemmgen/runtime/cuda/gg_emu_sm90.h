// gg_emu_sm90.h: the emulator's model of the Hopper (sm_90a) machinery that
// gg_primitives_sm90.cuh gives kernels: mbarrier, TMA (cp.async.bulk.tensor)
// and tensor maps, the async proxy, wgmma. Included by gg_emu.h only;
// docs/cuda-hopper.md has the full story.
//
// Model, per block (HopperBlock, hung off the BlockRunner):
// - Shared-window addresses: a shared address is the host address modulo
//   2^18 (the block's shared memory is smaller than that), so swizzles work
//   on the same address bits as on a GPU, and a 14-bit descriptor field finds
//   its bytes again.
// - mbarrier: a table keyed by the barrier's shared address: arrivals per
//   phase, arrivals and transaction bytes still missing in the current phase,
//   the phase number, who initialised it and whether a fence followed. A
//   phase completes when no arrival and no byte is missing. A wait blocks
//   the CUDA thread (BlockRunner::wait_until); a wait that can never complete
//   is a deadlock report that names the barrier, its phase and what is missing.
// - TMA loads: the destination reads as 0xFF (NaN) from issue until a thread's
//   wait on the barrier sees the phase complete; then the box is copied as the
//   tensor map says (box, strides, swizzle, zero fill out of bounds). A
//   completed load nobody waited for is reported at the end of the block.
// - TMA stores read shared memory through the async proxy; they are written
//   to global memory at cp.async.bulk.wait_group (or when the thread exits).
// - The async proxy's view of shared memory is a shadow copy, refreshed by
//   every fence.proxy.async and written by TMA loads. An async-proxy read
//   (a TMA store, a wgmma operand) of bytes whose generic-proxy value differs
//   from the shadow is a missing fence.proxy.async.
// - wgmma: the accumulators hold signalling NaNs from issue until the
//   wait_group that retires the op; the floating-point "invalid" trap is on
//   while a thread has ops in flight, so arithmetic on them stops the kernel
//   with a report. With A in registers, the thread's fragment array must
//   keep its values at issue until the op retires (checked at the thread's
//   next wgmma.fence / mma_async / commit_group / wait_group). wait_group
//   yields until the block stalls, so other threads run while the op is in
//   flight: a TMA load into shared memory an unretired wgmma reads is
//   reported. Operands are read through the matrix descriptors per the PTX
//   ISA's canonical layouts.
// Clusters: see gg_emu_cluster.cc and docs/cuda-emulation.md, "Clusters".
// Not modelled: im2col and interleaved tensor maps,
// element strides, the 128B_ATOM swizzles, descriptor base offsets, TSan
// mode (GG_EMU_TSAN): the primitives stop there with a message.
//
// This header holds what the primitives' templates (gg_primitives_sm90.cuh)
// need: the shared window, the tensor map's bits, the in-flight wgmma, and
// the model's entry points. The model itself is compiled once per build mode
// in gg_emu_sm90_*.cc, a file per instruction family (_tensor_map, _mbarrier,
// _tma, _wgmma; _block: the per-block hooks), which share gg_emu_sm90_state.h.
#pragma once

#include <cuda.h>

namespace gg::emu {

namespace sm90 {

inline constexpr std::uint32_t kWindow = 1u << 18;
// Shared::cluster addresses: a shared::cta address (below kWindow) names the
// calling CTA; mapa.shared::cluster makes kClusterTag | rank << 18 | the
// window address in CTA `rank`.
inline constexpr std::uint32_t kClusterTag = 1u << 23;

// ---------------------------------------------------------------------------
// Tensor maps: the emulated cuTensorMapEncodeTiled writes this into the 128
// opaque bytes of a CUtensorMap.

inline constexpr std::uint32_t kMapMagic = 0x4d544747u;  // "GGTM"

struct MapBits {
  std::uint32_t magic;
  std::uint8_t dtype, rank, swizzle, elem_bytes;
  std::uint64_t address;
  std::uint64_t dims[5];
  std::uint64_t strides[5];  // bytes; strides[0] is the element size
  std::uint32_t box[5];
};
static_assert(sizeof(MapBits) <= sizeof(CUtensorMap));

struct Range {
  std::uint32_t lo, hi;  // [lo, hi): offsets in the block's shared memory
};

// One wgmma.mma_async of a thread, in flight until its group retires.
struct WgmmaOp {
  unsigned n = 0, k = 0, group = 0;
  std::uint64_t desc_a = 0, desc_b = 0;
  bool a_regs = false, trans_a = false, trans_b = false, scale_d = true;
  unsigned eb = 2;
  double (*value)(unsigned) = nullptr;
  std::uint16_t a_tile[16][16];  // A from registers: the warp's 16 rows (k16 types)
  // A from registers: the calling thread's fragment array and its values at
  // issue; the array must hold them until the op retires.
  const std::uint32_t* a_addr = nullptr;
  std::uint32_t a_vals[4] = {};
  float* d = nullptr;
  std::vector<float> c;      // D's value when issued (or the previous op's result)
  int chained = -1;          // index of the earlier in-flight op writing the same d
  std::vector<Range> reads;  // shared memory the op reads
};

inline std::uint32_t addr_of(const void* p) {
  return static_cast<std::uint32_t>(reinterpret_cast<std::uintptr_t>(p) % kWindow);
}


// The entry points of gg_primitives_sm90.cuh's CPU bodies (gg_emu_sm90_*.cc).
void mbarrier_init(void* bar, unsigned count);
void mbarrier_inval(void* bar);
void fence_mbarrier_init();
unsigned long long mbarrier_arrive(void* bar, unsigned long long tx);
// Register work by the calling thread while a wgmma with A in registers is in flight is a hazard.
void register_work(const char* what);
bool mbarrier_wait(void* bar, unsigned parity, const char* op);
void fence_proxy_async();
const MapBits& map_bits(const CUtensorMap* map, const char* op);
void tma_load(void* dst, const CUtensorMap* map, void* bar, const int* coords, unsigned rank);
void tma_store(const CUtensorMap* map, const void* src, const int* coords, unsigned rank);
void bulk_commit();
void bulk_wait(unsigned keep, bool read_only);
// (issue 30) cp.async.bulk (non-tensor) global -> shared, completing on `bar`.
void bulk_load(void* dst, const void* src, unsigned bytes, void* bar);
void wgmma_fence();
void wgmma_commit();
void wgmma_issue(WgmmaOp op, float* d);
void wgmma_wait(unsigned keep);
void setmaxnreg(unsigned regs);

// Clusters (gg_emu_cluster.cc; the remote arrive and the multicast and
// 2-CTA TMA loads in gg_emu_sm90_tma.cc). A shared::cluster address is a
// shared::cta address (the calling CTA) or what mapa.shared::cluster made.
unsigned cluster_ctarank();
unsigned cluster_nctarank();
uint3 cluster_id();
dim3 cluster_nctaid();
uint3 cluster_ctaid();
dim3 cluster_nclusterid();
void cluster_arrive();
void cluster_wait();
void* map_shared(const void* p, unsigned rank);
std::uint32_t map_shared_cluster(std::uint32_t addr, unsigned rank);
void load_cluster(std::uint32_t addr, void* out, unsigned bytes);
void store_cluster(std::uint32_t addr, const void* in, unsigned bytes);
// mbarrier.arrive.release.cluster.shared::cluster.b64 on the barrier at
// shared::cluster address `addr` (any CTA of the cluster).
void mbarrier_arrive_cluster(std::uint32_t addr);
// cp.async.bulk.tensor ... .multicast::cluster: the box lands at dst's
// offset in every CTA of `mask`, completing on the barrier at bar's offset
// in each.
void tma_load_multicast(void* dst, const CUtensorMap* map, void* bar, const int* coords, unsigned rank,
                        std::uint16_t mask);
// cp.async.bulk.tensor ... .cta_group::2 [.multicast::cluster]: the box
// lands at dst's offset in the calling CTA (mask 0) or in every CTA of
// `mask`, and completes on the barrier at bar's offset in the pair leader
// (the even CTA) of each destination, as CUTLASS's SM100_TMA_2SM_LOAD does.
void tma_load_pair(void* dst, const CUtensorMap* map, void* bar, const int* coords, unsigned rank,
                   std::uint16_t mask);
// The (m, k) of element j of warpgroup thread t's A fragment (registers).
void a_fragment_coord(unsigned t, unsigned j, unsigned* m, unsigned* k);

}  // namespace sm90

}  // namespace gg::emu
