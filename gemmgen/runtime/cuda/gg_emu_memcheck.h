// gg_emu_memcheck.h: the fiber emulator's memory checker and performance
// counters (docs/cuda-emulation.md, "Memory checks" and "Counters").
// Included by gg_emu.h; a kernel never includes it.
//
// GG_EMU_MEMCHECK builds compile the kernel with GCC's ThreadSanitizer
// instrumentation (-fsanitize=thread) but do not link ThreadSanitizer's
// runtime: every load and store of the kernel calls one of the __tsan_*
// functions defined at the end of this file, which
//
// - find the device buffer (or the block's shared memory) the address lies
//   in, and ignore everything else (stacks, the emulator's own data);
// - check the alignment of every typed access: GCC calls __tsan_read8 for an
//   access whose type is 8-byte aligned (a uint2, a double, ...; with
//   -fno-tree-sra an aggregate stays one access), and a GPU stops such an
//   access at an address that is not a multiple of 8 with "misaligned
//   address"; so does the emulator (status 71);
// - keep, per byte of each device buffer and per launch, which block wrote it
//   (and whether atomically) and which block read it first (and whether
//   another did too). Two blocks writing one byte without atomics, or one
//   block reading what another block writes in the same launch, is a race
//   between blocks: CUDA does not order blocks, so the result depends on
//   which runs first. Every conflicting pair is found whatever the order the
//   workers run the blocks in (the shadow word of a byte is updated with one
//   compare-and-swap), and the report, made when the launch ends, names the
//   lowest conflicting byte, so the verdict is the same for any schedule and
//   number of workers (status 72);
// - when GG_EMU_COUNTERS names a file, record every access of every lane,
//   grouped per (warp, access site, n-th execution by the lane), and turn each
//   group into what the GPU would do with that warp-level request:
//   shared-memory wavefronts (32 banks of 4 bytes) and global 32-byte sectors.
//
// The emulator's own code runs with the same instrumentation; its accesses
// go to stacks and heap memory, and the warp-collective computations run while
// The primitives (cp.async, ldmatrix, mma) and __syncthreads report their
// accesses through the hooks below; the checker itself (shadow memory, the
// access path, the counters, the __tsan_* functions) is compiled once per
// build mode in gg_emu_memcheck.cc.
#pragma once

namespace gg::emu::mc {

// Access kinds, in the order of the counters' table.
enum Op : unsigned char {
  kLdGlobal,
  kStGlobal,
  kAtomGlobal,
  kLdShared,
  kStShared,
  kAtomShared,
  kCpAsyncGlobal,  // cp.async: the global source
  kCpAsyncShared,  // cp.async: the shared destination
  kLdmatrix,
  kMma,
  kBarrier,
  kOpCount,
};

inline constexpr const char* kOpNames[kOpCount] = {
    "ld.global", "st.global", "atom.global", "ld.shared", "st.shared", "atom.shared",
    "cp.async.global", "cp.async.shared", "ldmatrix", "mma", "bar.sync",
};

#if defined(GG_EMU_MEMCHECK) && !defined(GG_EMU_TSAN)

// Explicit reports of the primitives. noinline, and called from code that
// inlines into the kernel: the return address names the access site in the
// kernel.
GG_EMU_UNCHECKED __attribute__((noinline)) void on_cp_async(void* dst, const void* src, unsigned cp_size,
                                                            unsigned src_size);
GG_EMU_UNCHECKED __attribute__((noinline)) void on_ldmatrix(const void* row, unsigned matrices);
GG_EMU_UNCHECKED __attribute__((noinline)) void on_mma();
GG_EMU_UNCHECKED __attribute__((noinline)) void on_barrier();

// Launch and block boundaries (called by the core).
GG_EMU_UNCHECKED void on_launch_begin(const Launch& l);
GG_EMU_UNCHECKED void block_begin(unsigned long long linear_block, const unsigned char* smem_begin,
                                  const unsigned char* smem_end);
GG_EMU_UNCHECKED void block_end();
// At the end of a worker's blocks.
GG_EMU_UNCHECKED void worker_end();
// Reports the lowest conflicting byte, writes the counters, frees the shadow memory.
GG_EMU_UNCHECKED void on_launch_end(const Launch& l);

#else  // no memory checker: nothing to do

inline void on_cp_async(void*, const void*, unsigned, unsigned) {}
inline void on_ldmatrix(const void*, unsigned) {}
inline void on_mma() {}
inline void on_barrier() {}
inline void on_launch_begin(const Launch&) {}
inline void block_begin(unsigned long long, const unsigned char*, const unsigned char*) {}
inline void block_end() {}
inline void worker_end() {}
inline void on_launch_end(const Launch&) {}

#endif

}  // namespace gg::emu::mc
