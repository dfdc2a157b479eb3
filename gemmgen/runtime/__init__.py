"""Running and checking generated kernels: the CPU emulation of CUDA
(cuda_emu), static nvcc checks (nvcc), real-GPU launches (cuda_gpu) and the
toolchain lookup they share (toolchain). The C++ side lives in runtime/cuda/."""
