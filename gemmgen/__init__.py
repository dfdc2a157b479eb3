"""gemmgen: one GEMM spec, JAX Pallas and CUDA kernels with their launchers."""

__version__ = "0.1.0"
