// gg_emu_compile.h: the meaning of the emulator's marker tokens.
//
// gg_emu.h maps `__global__` to `__gg_global__` and `__shared__` to
// `__gg_shared__`. gemmgen.harness.cuda_emu preprocesses a kernel with
// GG_EMU_PREPROCESS defined, so the markers survive into the preprocessed
// text (`__launch_bounds__` too, as `__gg_launch_bounds__`); there it finds
// the extern "C" kernels, their launch bounds and the dynamic `extern
// __shared__` arrays (in included files too), rewrites `extern __gg_shared__`
// to `extern __gg_dyn_shared__` and `kernel<<<...>>>(args)` to
// `::gg::emu::chevron(kernel, ...)(args)`, appends one GG_EMU_REGISTER_KERNEL /
// GG_EMU_LAUNCH_BOUNDS / GG_EMU_DYNAMIC_SHARED line per name, and compiles
// the result with this header force-included (-include). Of a library built
// from several translation units, one (the first that includes the runtime)
// gets GG_EMU_DYNAMIC_SMEM_BUFFER and the GG_EMU_DYNAMIC_SHARED lines of all
// of them.
// A direct g++ build of a .cu (no GG_EMU_PREPROCESS) includes it from
// gg_emu.h instead (and records no launch bounds).
//
// Static shared memory must be one copy per block:
// - fiber mode: every CUDA thread of a block runs as a fiber on one worker OS
//   thread, and a worker runs one block at a time, so `thread_local` (static
//   storage at block scope) is exactly per-block storage;
// - TSan mode (GG_EMU_TSAN): every CUDA thread is an OS thread and the blocks
//   of a launch run one after another, so plain `static` storage is per block.
//   The named section lets the runtime poison it at each block start.
// Every dynamic `extern __shared__` array aliases gg_emu_dynamic_smem, the
// runtime's per-block buffer, through its assembler name.
#pragma once

#define __gg_global__
// __launch_bounds__ (gg_emu.h keeps it as this marker while preprocessing):
// cuda_emu records the bound with GG_EMU_LAUNCH_BOUNDS below.
#define __gg_launch_bounds__(...)

#if defined(GG_EMU_TSAN)
#define __gg_shared__ static __attribute__((section("gg_shared")))
#define __gg_dyn_shared__
#else
#define __gg_shared__ thread_local
#define __gg_dyn_shared__ thread_local
#endif

// Makes kernel `name` launchable by name through gg_emu_launch.
#define GG_EMU_REGISTER_KERNEL(name) \
  static const ::gg::emu::KernelRegistration gg_emu_kernel_##name{#name, &name};

// Records the __launch_bounds__(max_threads[, min_blocks[, max_cluster]]) of
// registered kernel `name`: a launch with more threads per block fails, as on
// a GPU. Appended by cuda_emu after the kernel's registration.
#define GG_EMU_LAUNCH_BOUNDS(name, ...) \
  static const ::gg::emu::LaunchBoundsRegistration gg_emu_launch_bounds_##name{#name, __VA_ARGS__};

// Defines the runtime's dynamic shared buffer (gg_emu.h only declares it
// while preprocessing). Appended by cuda_emu to one translation unit of a
// library, before its GG_EMU_DYNAMIC_SHARED lines.
#if defined(GG_EMU_TSAN)
#define GG_EMU_DYNAMIC_SMEM_BUFFER \
  extern "C" {                     \
  alignas(1024) unsigned char gg_emu_dynamic_smem[::gg::emu::kMaxDynamicSmem]; \
  }
#else
#define GG_EMU_DYNAMIC_SMEM_BUFFER \
  extern "C" {                     \
  alignas(1024) thread_local unsigned char gg_emu_dynamic_smem[::gg::emu::kMaxDynamicSmem]; \
  }
#endif

// Binds the dynamic shared array `name` (declared `extern __shared__ T name[]`
// in the global namespace) to the runtime's dynamic shared memory.
#define GG_EMU_DYNAMIC_SHARED(name)                                             \
  extern "C" __gg_dyn_shared__ unsigned char gg_emu_dynamic_shared_##name[]     \
      __asm__(#name) __attribute__((alias("gg_emu_dynamic_smem")));
