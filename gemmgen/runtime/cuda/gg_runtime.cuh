// gg_runtime.cuh: the one header a gemmgen CUDA kernel includes.
//
// Under nvcc it gives CUDA's number types and the gg:: primitives (PTX). Under
// a host compiler (g++, for the CPU emulation of gemmgen's test tier) it first
// includes gg_emu.h, which defines the CUDA keywords and builtins on top of
// fibers, and the same primitives then run on the emulator.
#pragma once

#if !defined(__CUDACC__)
#include "gg_emu.h"
#endif

#include "gg_primitives.cuh"
