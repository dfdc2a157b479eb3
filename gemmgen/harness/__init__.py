"""Running and checking generated kernels (never imported by the generator):
the runners of `gemmgen verify` (runner, verify_pallas, verify_cuda), the
CPU emulation of CUDA (cuda_emu, counters), static nvcc checks (nvcc),
real-GPU launches (cuda_gpu) and the toolchain lookup they share
(toolchain). The C++ side lives in gemmgen/runtime/cuda/."""
