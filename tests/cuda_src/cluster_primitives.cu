// Thread-block clusters (gg_primitives_sm90.cuh, "Thread-block clusters"):
// the special registers, distributed shared memory through mapa and
// shared::cluster addresses, barrier.cluster, remote mbarrier arrivals and
// the multicast TMA load, each in a small kernel, with the bugs the emulator
// must report planted behind a `bug` argument
// (tests/cuda/emulator/test_cuda_clusters.py). The host program
// (gg_emu_host_main, emulator only) launches through cudaLaunchKernelEx with
// cudaLaunchAttributeClusterDimension, as a launcher does, and reports the
// cudaError_t and message of each launch the runtime refuses.
#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstring>

#include "gg_runtime.cuh"

using gg::u32;
using gg::u64;

extern __shared__ __align__(16) unsigned char smem_raw[];
__device__ __forceinline__ unsigned char* smem_1024() {
  return reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) &
                                          ~uintptr_t{1023});
}

// ---------------------------------------------------------------------------
// The special registers: 16 words per block (linear block index order).
extern "C" __global__ void cluster_ids(unsigned* out) {
  if (threadIdx.x != 0)
    return;
  const unsigned b = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  unsigned* o = out + 16 * b;
  const dim3 id = gg::cluster_id(), ctaid = gg::cluster_ctaid(), nctaid = gg::cluster_nctaid(),
             ncl = gg::cluster_nclusterid();
  o[0] = gg::cluster_ctarank();
  o[1] = gg::cluster_nctarank();
  o[2] = id.x;
  o[3] = id.y;
  o[4] = id.z;
  o[5] = ctaid.x;
  o[6] = ctaid.y;
  o[7] = ctaid.z;
  o[8] = nctaid.x;
  o[9] = nctaid.y;
  o[10] = nctaid.z;
  o[11] = ncl.x;
  o[12] = ncl.y;
  o[13] = ncl.z;
  o[14] = blockIdx.x + 1000 * blockIdx.y + 1000000 * blockIdx.z;
  o[15] = 0xC1u;
}

// ---------------------------------------------------------------------------
// Distributed shared memory: every CTA fills 256 words of its shared memory,
// then each thread reads the word of CTA (rank + 1) % n through a generic
// mapa pointer and CTA (rank + n - 1) % n through ld.shared::cluster, and
// adds 1 to the word of CTA (rank + 1) % n with st.shared::cluster after a
// second cluster barrier. bug 1: no cluster barrier before exiting (a CTA
// may exit while a peer still reads its shared memory); bug 2: the same with
// the read through ld.shared::cluster; bug 3: a mapa rank outside the
// cluster; bug 4: a shared::cluster address past the launch's dynamic shared
// memory (8 KiB a CTA). The words sit 4 KiB into the dynamic shared memory: the emulator
// protects the whole pages of an exited CTA's dynamic shared memory.
extern "C" __global__ void dsmem_exchange(const unsigned* in, unsigned* out, int bug) {
  auto* mine = reinterpret_cast<unsigned*>(smem_raw + 4096);
  const unsigned rank = gg::cluster_ctarank(), n = gg::cluster_nctarank();
  const unsigned t = threadIdx.x;
  const unsigned b = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  mine[t] = in[256 * b + t];
  gg::cluster_sync();
  const unsigned next = (rank + 1) % n, prev = (rank + n - 1) % n;
  const unsigned* peer = gg::cluster_map_shared(mine, bug == 3 ? n : next);
  const unsigned from_next = peer[t];
  const u32 prev_addr = gg::cluster_map_shared_addr(bug == 4 ? &mine[2048 + t] : &mine[t], prev);
  const unsigned from_prev = gg::ld_shared_cluster(prev_addr);
  out[3 * (256 * b + t)] = from_next;
  out[3 * (256 * b + t) + 1] = from_prev;
  gg::cluster_sync();
  gg::st_shared_cluster(gg::cluster_map_shared_addr(&mine[t], next), from_next + 1);
  if (bug == 1 || bug == 2) {
    // Rank 0 comes back for its neighbour's words after that CTA has gone.
    if (rank == 0) {
      gg::cluster_arrive();
      gg::cluster_wait();
      out[3 * (256 * b + t) + 2] = bug == 1 ? peer[t] : gg::ld_shared_cluster(prev_addr);
    }
    return;
  }
  gg::cluster_sync();
  out[3 * (256 * b + t) + 2] = mine[t];
}

// ---------------------------------------------------------------------------
// Remote arrivals: every CTA's barrier counts one arrival per CTA of the
// cluster; thread 0 of each CTA arrives once on every CTA's barrier
// (including its own, through its own shared::cluster address) after
// writing its word into that CTA's shared memory; then all threads of each
// CTA wait and read the words. Three rounds, so the parity flips. bug 1:
// CTA 1 skips its arrival on CTA 0 (a deadlock naming every CTA's threads
// and the barrier's missing arrival).
extern "C" __global__ void remote_arrive(unsigned* out, int bug) {
  __shared__ __align__(8) u64 bar;
  __shared__ unsigned words[16];
  const unsigned rank = gg::cluster_ctarank(), n = gg::cluster_nctarank();
  const unsigned b = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  if (threadIdx.x == 0) {
    gg::mbarrier_init(&bar, n);
    gg::fence_mbarrier_init();
  }
  gg::cluster_sync();
  for (unsigned round = 0; round < 3; ++round) {
    if (threadIdx.x == 0) {
      for (unsigned r = 0; r < n; ++r) {
        gg::st_shared_cluster(gg::cluster_map_shared_addr(&words[rank], r), 100 * round + 10 * rank + r);
        if (bug == 1 && rank == 1 && r == 0)
          continue;
        gg::mbarrier_arrive_cluster(gg::cluster_map_shared_addr(&bar, r));
      }
    }
    gg::mbarrier_wait(&bar, round & 1);
    if (threadIdx.x < n)
      out[(b * 3 + round) * 16 + threadIdx.x] = words[threadIdx.x];
    // Nobody writes words[] of the next round before every CTA has read it.
    gg::cluster_sync();
  }
}

// ---------------------------------------------------------------------------
// Multicast: CTA r of a cluster of n loads rows [r * rows / n, (r + 1) * rows
// / n) of a (rows x 64) bf16 tile with one TMA multicast to every CTA of
// `mask`; every CTA expects the whole tile and copies it out. The map's box
// is (64 elements, rows / n rows). bug 1: the mask leaves out the last CTA
// (it never gets its data: a deadlock in its wait); bug 2: the mask names a
// CTA outside the cluster.
extern "C" __global__ void multicast_tile(const __grid_constant__ CUtensorMap map, unsigned short* out, int rows,
                                          int bug) {
  unsigned char* tile = smem_1024();
  __shared__ __align__(8) u64 bar;
  const unsigned rank = gg::cluster_ctarank(), n = gg::cluster_nctarank();
  const unsigned c = gg::cluster_id().x;
  if (threadIdx.x == 0) {
    gg::mbarrier_init(&bar, 1);
    gg::fence_mbarrier_init();
  }
  gg::cluster_sync();
  if (threadIdx.x == 0) {
    gg::mbarrier_arrive_expect_tx(&bar, rows * 64 * 2);
    unsigned short mask = static_cast<unsigned short>((1u << n) - 1);
    if (bug == 1)
      mask = static_cast<unsigned short>(mask >> 1);
    if (bug == 2)
      mask = static_cast<unsigned short>(mask | (1u << n));
    const int slice = rows / static_cast<int>(n);
    gg::tma_load_2d_multicast(tile + rank * slice * 64 * 2, &map, &bar, 0,
                              static_cast<int>(c) * rows + static_cast<int>(rank) * slice, mask);
  }
  gg::mbarrier_wait(&bar, 0);
  const unsigned b = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  const auto* src = reinterpret_cast<const unsigned short*>(tile);
  for (int i = threadIdx.x; i < rows * 64; i += blockDim.x)
    out[static_cast<long>(b) * rows * 64 + i] = src[i];
  // No CTA exits while a multicast into it may still be issued by a peer.
  gg::cluster_sync();
}

// ---------------------------------------------------------------------------
// The host program: cudaLaunchKernelEx with a cluster attribute; "case"
// names the launch. Writes "status" (the cudaError_t), "message" (the
// runtime's reason for a refusal, read back through the C ABI) and "ids"
// (cluster_ids' output).
extern "C" int gg_emu_host_input(const char* name, const void** data, size_t* bytes);
extern "C" void gg_emu_host_output(const char* name, const void* data, size_t bytes);
extern "C" const char* gg_emu_last_error(void);

namespace {
unsigned input_u32(const char* name, unsigned fallback) {
  const void* data = nullptr;
  size_t bytes = 0;
  unsigned v = fallback;
  if (gg_emu_host_input(name, &data, &bytes) && bytes == sizeof v)
    std::memcpy(&v, data, sizeof v);
  return v;
}
}  // namespace

extern "C" int gg_emu_host_main(void) {
  const dim3 grid(input_u32("gx", 1), input_u32("gy", 1), input_u32("gz", 1));
  const unsigned cx = input_u32("cx", 1), cy = input_u32("cy", 1), cz = input_u32("cz", 1);
  const bool non_portable = input_u32("non_portable", 0) != 0;
  const bool typed = input_u32("typed", 0) != 0;
  const size_t blocks = static_cast<size_t>(grid.x) * grid.y * grid.z;
  unsigned* ids = nullptr;
  cudaMalloc(&ids, blocks * 16 * sizeof(unsigned));
  if (non_portable) {
    const cudaError_t e = cudaFuncSetAttribute(cluster_ids, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
    if (e != cudaSuccess) {
      const int status = static_cast<int>(e);
      gg_emu_host_output("status", &status, sizeof status);
      gg_emu_host_output("message", gg_emu_last_error(), std::strlen(gg_emu_last_error()));
      return 0;
    }
  }
  cudaLaunchAttribute attr[2];
  std::memset(attr, 0, sizeof attr);
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = cx;
  attr[0].val.clusterDim.y = cy;
  attr[0].val.clusterDim.z = cz;
  attr[1].id = cudaLaunchAttributePriority;
  attr[1].val.priority = 0;
  if (input_u32("cooperative", 0) != 0) {  // an attribute the emulator does not model
    attr[1].id = cudaLaunchAttributeCooperative;
    attr[1].val.cooperative = 1;
  }
  cudaLaunchConfig_t config;
  std::memset(&config, 0, sizeof config);
  config.gridDim = grid;
  config.blockDim = dim3(32, 1, 1);
  config.dynamicSmemBytes = 0;
  config.stream = nullptr;
  config.attrs = attr;
  config.numAttrs = 2;
  cudaError_t e;
  if (typed) {
    e = cudaLaunchKernelEx(&config, cluster_ids, ids);  // cuda_runtime.h's template
  } else {
    void* args[] = {&ids};
    e = cudaLaunchKernelExC(&config, reinterpret_cast<const void*>(cluster_ids), args);
  }
  const int status = static_cast<int>(e);
  gg_emu_host_output("status", &status, sizeof status);
  if (e != cudaSuccess) {
    gg_emu_host_output("message", gg_emu_last_error(), std::strlen(gg_emu_last_error()));
    const int last = static_cast<int>(cudaGetLastError());
    gg_emu_host_output("last_error", &last, sizeof last);
  } else {
    unsigned* host = new unsigned[blocks * 16];
    cudaMemcpy(host, ids, blocks * 16 * sizeof(unsigned), cudaMemcpyDeviceToHost);
    gg_emu_host_output("ids", host, blocks * 16 * sizeof(unsigned));
    delete[] host;
  }
  cudaFree(ids);
  return 0;
}
