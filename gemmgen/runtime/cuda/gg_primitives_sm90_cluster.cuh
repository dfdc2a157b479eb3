// gg_primitives_sm90_cluster.cuh: thread-block clusters: the
// special registers, barrier.cluster, mapa and shared::cluster accesses, the
// remote mbarrier arrive, and the multicast TMA loads.
// Part of gg_primitives_sm90.cuh, which includes it after what the parts
// share (u64, SmemSwizzle, sm90_detail::smem_addr): include that header,
// not this one.
#pragma once

namespace gg {

// ---------------------------------------------------------------------------
// Thread-block clusters (sm_90; docs/cuda-hopper.md, "Clusters"). A kernel
// launched with cudaLaunchKernelEx and cudaLaunchAttributeClusterDimension
// runs its blocks in clusters whose CTAs are resident at once and reach each
// other's shared memory. A launch without the attribute is a cluster of one
// CTA per block (rank 0 of 1).
//
// - cluster_ctarank() / cluster_nctarank(): %cluster_ctarank (x fastest
//   over the cluster's CTAs) and %cluster_nctarank; cluster_id() (%clusterid),
//   cluster_ctaid() (%cluster_ctaid: the CTA's position in its cluster),
//   cluster_nctaid() (%cluster_nctaid), cluster_nclusterid() (%nclusterid).
// - cluster_arrive() (barrier.cluster.arrive.release.aligned),
//   cluster_arrive_relaxed() (.relaxed), cluster_wait()
//   (barrier.cluster.wait.acquire.aligned), cluster_sync() (both): every
//   non-exited thread of the cluster arrives; a wait returns once all have.
//   Required before a CTA exits while its peers may still touch its shared
//   memory, and after mbarrier_init before a peer signals the barrier.
// - cluster_map_shared(p, rank): mapa.u64, the generic address of the same
//   shared variable in CTA `rank`; cluster_map_shared_addr(p, rank):
//   mapa.shared::cluster.u32, its shared::cluster address, for
//   ld_shared_cluster / st_shared_cluster (ld / st.shared::cluster) and
//   mbarrier_arrive_cluster (mbarrier.arrive.release.cluster.shared::cluster:
//   one arrival on a barrier of any CTA of the cluster).
// - tma_load_2d/3d_multicast(dst, &map, bar, c..., mask): one box read from
//   global memory lands at dst's offset in every CTA whose bit is set in the
//   16-bit ctaMask, and completes its bytes on the mbarrier at bar's offset in
//   each of them (each destination announces them with expect_tx).

namespace sm90_detail {
template <int kNever>
__device__ __forceinline__ u32 special_u32(int which) {
  u32 v = 0;
#if defined(__CUDA_ARCH__)
#if __CUDA_ARCH__ >= 900
  switch (which) {
    case 0: asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(v)); break;
    case 1: asm volatile("mov.u32 %0, %%cluster_nctarank;\n" : "=r"(v)); break;
    case 2: asm volatile("mov.u32 %0, %%clusterid.x;\n" : "=r"(v)); break;
    case 3: asm volatile("mov.u32 %0, %%clusterid.y;\n" : "=r"(v)); break;
    case 4: asm volatile("mov.u32 %0, %%clusterid.z;\n" : "=r"(v)); break;
    case 5: asm volatile("mov.u32 %0, %%cluster_ctaid.x;\n" : "=r"(v)); break;
    case 6: asm volatile("mov.u32 %0, %%cluster_ctaid.y;\n" : "=r"(v)); break;
    case 7: asm volatile("mov.u32 %0, %%cluster_ctaid.z;\n" : "=r"(v)); break;
    case 8: asm volatile("mov.u32 %0, %%cluster_nctaid.x;\n" : "=r"(v)); break;
    case 9: asm volatile("mov.u32 %0, %%cluster_nctaid.y;\n" : "=r"(v)); break;
    case 10: asm volatile("mov.u32 %0, %%cluster_nctaid.z;\n" : "=r"(v)); break;
    case 11: asm volatile("mov.u32 %0, %%nclusterid.x;\n" : "=r"(v)); break;
    case 12: asm volatile("mov.u32 %0, %%nclusterid.y;\n" : "=r"(v)); break;
    default: asm volatile("mov.u32 %0, %%nclusterid.z;\n" : "=r"(v)); break;
  }
#else
  static_assert(kNever != 0, "gg's cluster special registers need sm_90 or newer");
#endif
#elif defined(GG_EMU)
  namespace e = gg::emu::sm90;
  switch (which) {
    case 0: v = e::cluster_ctarank(); break;
    case 1: v = e::cluster_nctarank(); break;
    case 2: v = e::cluster_id().x; break;
    case 3: v = e::cluster_id().y; break;
    case 4: v = e::cluster_id().z; break;
    case 5: v = e::cluster_ctaid().x; break;
    case 6: v = e::cluster_ctaid().y; break;
    case 7: v = e::cluster_ctaid().z; break;
    case 8: v = e::cluster_nctaid().x; break;
    case 9: v = e::cluster_nctaid().y; break;
    case 10: v = e::cluster_nctaid().z; break;
    case 11: v = e::cluster_nclusterid().x; break;
    case 12: v = e::cluster_nclusterid().y; break;
    default: v = e::cluster_nclusterid().z; break;
  }
#else
  (void)which;
#endif
  return v;
}
}  // namespace sm90_detail

template <int kNever = 0>
__device__ __forceinline__ u32 cluster_ctarank() {
  return sm90_detail::special_u32<kNever>(0);
}
template <int kNever = 0>
__device__ __forceinline__ u32 cluster_nctarank() {
  return sm90_detail::special_u32<kNever>(1);
}
template <int kNever = 0>
__device__ __forceinline__ dim3 cluster_id() {
  return dim3(sm90_detail::special_u32<kNever>(2), sm90_detail::special_u32<kNever>(3),
              sm90_detail::special_u32<kNever>(4));
}
template <int kNever = 0>
__device__ __forceinline__ dim3 cluster_ctaid() {
  return dim3(sm90_detail::special_u32<kNever>(5), sm90_detail::special_u32<kNever>(6),
              sm90_detail::special_u32<kNever>(7));
}
template <int kNever = 0>
__device__ __forceinline__ dim3 cluster_nctaid() {
  return dim3(sm90_detail::special_u32<kNever>(8), sm90_detail::special_u32<kNever>(9),
              sm90_detail::special_u32<kNever>(10));
}
template <int kNever = 0>
__device__ __forceinline__ dim3 cluster_nclusterid() {
  return dim3(sm90_detail::special_u32<kNever>(11), sm90_detail::special_u32<kNever>(12),
              sm90_detail::special_u32<kNever>(13));
}

template <int kNever = 0>
__device__ __forceinline__ void cluster_arrive() {
#if defined(__CUDA_ARCH__)
#if __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory");
#else
  static_assert(kNever != 0, "gg::cluster_arrive needs sm_90 or newer");
#endif
#elif defined(GG_EMU)
  gg::emu::sm90::cluster_arrive();
#endif
}

// No release: the thread's earlier writes are not ordered before the wait's
// return in the other CTAs (the emulator keeps them all: threads of a
// cluster run one at a time).
template <int kNever = 0>
__device__ __forceinline__ void cluster_arrive_relaxed() {
#if defined(__CUDA_ARCH__)
#if __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");
#else
  static_assert(kNever != 0, "gg::cluster_arrive_relaxed needs sm_90 or newer");
#endif
#elif defined(GG_EMU)
  gg::emu::sm90::cluster_arrive();
#endif
}

template <int kNever = 0>
__device__ __forceinline__ void cluster_wait() {
#if defined(__CUDA_ARCH__)
#if __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
#else
  static_assert(kNever != 0, "gg::cluster_wait needs sm_90 or newer");
#endif
#elif defined(GG_EMU)
  gg::emu::sm90::cluster_wait();
#endif
}

template <int kNever = 0>
__device__ __forceinline__ void cluster_sync() {
  cluster_arrive<kNever>();
  cluster_wait<kNever>();
}

// The generic address of `p`'s variable in CTA `rank` of the cluster.
template <class T, int kNever = 0>
__device__ __forceinline__ T* cluster_map_shared(T* p, u32 rank) {
#if defined(__CUDA_ARCH__)
#if __CUDA_ARCH__ >= 900
  u64 out;
  asm volatile("mapa.u64 %0, %1, %2;\n" : "=l"(out) : "l"(reinterpret_cast<u64>(p)), "r"(rank));
  return reinterpret_cast<T*>(out);
#else
  static_assert(kNever != 0, "gg::cluster_map_shared needs sm_90 or newer");
  return p;
#endif
#elif defined(GG_EMU)
  return static_cast<T*>(gg::emu::sm90::map_shared(p, rank));
#else
  (void)rank;
  return p;
#endif
}

// The shared::cluster address of `p`'s variable in CTA `rank`.
template <int kNever = 0>
__device__ __forceinline__ u32 cluster_map_shared_addr(const void* p, u32 rank) {
  u32 out = 0;
#if defined(__CUDA_ARCH__)
#if __CUDA_ARCH__ >= 900
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n"
               : "=r"(out)
               : "r"(sm90_detail::smem_addr(p)), "r"(rank));
#else
  static_assert(kNever != 0, "gg::cluster_map_shared_addr needs sm_90 or newer");
#endif
#elif defined(GG_EMU)
  out = gg::emu::sm90::map_shared_cluster(sm90_detail::smem_addr(p), rank);
#else
  (void)p;
  (void)rank;
#endif
  return out;
}

template <int kNever = 0>
__device__ __forceinline__ u32 ld_shared_cluster(u32 cluster_addr) {
  u32 v = 0;
#if defined(__CUDA_ARCH__)
#if __CUDA_ARCH__ >= 900
  asm volatile("ld.shared::cluster.u32 %0, [%1];\n" : "=r"(v) : "r"(cluster_addr) : "memory");
#else
  static_assert(kNever != 0, "gg::ld_shared_cluster needs sm_90 or newer");
#endif
#elif defined(GG_EMU)
  gg::emu::sm90::load_cluster(cluster_addr, &v, 4);
#else
  (void)cluster_addr;
#endif
  return v;
}

template <int kNever = 0>
__device__ __forceinline__ void st_shared_cluster(u32 cluster_addr, u32 v) {
#if defined(__CUDA_ARCH__)
#if __CUDA_ARCH__ >= 900
  asm volatile("st.shared::cluster.u32 [%0], %1;\n" ::"r"(cluster_addr), "r"(v) : "memory");
#else
  static_assert(kNever != 0, "gg::st_shared_cluster needs sm_90 or newer");
#endif
#elif defined(GG_EMU)
  gg::emu::sm90::store_cluster(cluster_addr, &v, 4);
#else
  (void)cluster_addr;
  (void)v;
#endif
}

// One arrival (release, cluster scope) on the mbarrier at shared::cluster
// address `cluster_bar` (from cluster_map_shared_addr; any CTA).
template <int kNever = 0>
__device__ __forceinline__ void mbarrier_arrive_cluster(u32 cluster_bar) {
#if defined(__CUDA_ARCH__)
#if __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];\n" ::"r"(cluster_bar)
               : "memory");
#else
  static_assert(kNever != 0, "gg::mbarrier_arrive_cluster needs sm_90 or newer");
#endif
#elif defined(GG_EMU)
  gg::emu::sm90::mbarrier_arrive_cluster(cluster_bar);
#else
  (void)cluster_bar;
#endif
}

template <int kNever = 0>
__device__ __forceinline__ void tma_load_2d_multicast(void* smem_dst, const CUtensorMap* map, u64* bar,
                                                      int c0, int c1, unsigned short cta_mask) {
#if defined(__CUDA_ARCH__)
#if __CUDA_ARCH__ >= 900
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::"
      "cluster [%0], [%1, {%3, %4}], [%2], %5;\n" ::"r"(sm90_detail::smem_addr(smem_dst)),
      "l"(reinterpret_cast<u64>(map)), "r"(sm90_detail::smem_addr(bar)), "r"(c0), "r"(c1),
      "h"(cta_mask)
      : "memory");
#else
  static_assert(kNever != 0, "gg::tma_load_2d_multicast needs sm_90 or newer");
#endif
#elif defined(GG_EMU)
  const int c[2] = {c0, c1};
  gg::emu::sm90::tma_load_multicast(smem_dst, map, bar, c, 2, cta_mask);
#endif
}

template <int kNever = 0>
__device__ __forceinline__ void tma_load_3d_multicast(void* smem_dst, const CUtensorMap* map, u64* bar,
                                                      int c0, int c1, int c2, unsigned short cta_mask) {
#if defined(__CUDA_ARCH__)
#if __CUDA_ARCH__ >= 900
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::"
      "cluster [%0], [%1, {%3, %4, %5}], [%2], %6;\n" ::"r"(sm90_detail::smem_addr(smem_dst)),
      "l"(reinterpret_cast<u64>(map)), "r"(sm90_detail::smem_addr(bar)), "r"(c0), "r"(c1), "r"(c2),
      "h"(cta_mask)
      : "memory");
#else
  static_assert(kNever != 0, "gg::tma_load_3d_multicast needs sm_90 or newer");
#endif
#elif defined(GG_EMU)
  const int c[3] = {c0, c1, c2};
  gg::emu::sm90::tma_load_multicast(smem_dst, map, bar, c, 3, cta_mask);
#endif
}

}  // namespace gg
