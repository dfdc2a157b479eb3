// gg_runtime.cuh: the one header a gemmgen CUDA kernel includes.
//
// Under nvcc it gives CUDA's number types and the gg:: primitives (PTX). Under
// a host compiler (g++, for the CPU emulation of gemmgen's test tier) it first
// includes gg_emu.h, which defines the CUDA keywords and builtins on top of
// fibers, and the same primitives then run on the emulator.
#pragma once

#if !defined(__CUDACC__)
#include "gg_emu.h"
#else
// The emulator finds `extern "C" __global__` kernels by itself; this names
// others (e.g. in an extern "C" { } block) for it, and means nothing to nvcc.
#define GG_EMU_REGISTER_KERNEL(name)
#endif

#include "gg_primitives.cuh"
// The tile GEMM's body and its configuration (gg_gemm_config.cuh).
#include "gg_gemm.cuh"
// The Hopper (sm_90a) tile GEMM: TMA + wgmma, warp specialized.
#include "gg_gemm_sm90.cuh"
// Its weight-only consumers: narrow weights widened into wgmma's A registers.
#include "gg_gemm_sm90_mixed.cuh"
// The datacenter Blackwell (sm_100a) tile GEMM: TMA + tcgen05.mma, the
// accumulators in tensor memory (and its primitives, gg_primitives_sm100.cuh).
#include "gg_gemm_sm100.cuh"
// Its weight-only tiles: narrow weights widened in shared memory by a
// transform warpgroup before tcgen05.mma reads them.
#include "gg_gemm_sm100_mixed.cuh"
