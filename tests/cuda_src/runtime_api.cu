// The emulated CUDA runtime API as host code sees it (gg_emu_cudart.h):
// launches with <<<>>> and cudaLaunchKernel against the driver's checks,
// attributes, device queries, streams, copies and the last error. The host
// program (gg_emu_host_main) writes one "name value" line per check to its
// output "report"; tests/cuda/emulator/test_cuda_launch_emulation.py compares them with
// what a GPU of the emulated arch gives.
#include "gg_runtime.cuh"

#include <string>

extern __shared__ __align__(16) unsigned char dynamic_bytes[];

// out[i] = i + 1 for the block's threads; at most 128 of them.
extern "C" __global__ void __launch_bounds__(128) bounded(int* out) {
  const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  out[i] = static_cast<int>(i) + 1;
}

// Writes every byte of its dynamic shared memory, then thread 0 sums them:
// out[block] = n.
extern "C" __global__ void fill_smem(int* out, int n) {
  for (int i = static_cast<int>(threadIdx.x); i < n; i += static_cast<int>(blockDim.x)) dynamic_bytes[i] = 1;
  __syncthreads();
  if (threadIdx.x == 0) {
    int sum = 0;
    for (int i = 0; i < n; ++i) sum += dynamic_bytes[i];
    out[blockIdx.x] = sum;
  }
}

// Counts its blocks.
extern "C" __global__ void count_blocks(unsigned* counter) {
  if (threadIdx.x == 0) atomicAdd(counter, 1u);
}

extern "C" int gg_emu_host_input(const char* name, const void** data, size_t* bytes);
extern "C" void gg_emu_host_output(const char* name, const void* data, size_t bytes);

namespace {

std::string report;

void put(const char* name, long long value) { report += std::string(name) + " " + std::to_string(value) + "\n"; }
void put(const char* name, const char* value) { report += std::string(name) + " " + value + "\n"; }

// The error a launch left, and that cudaGetLastError then reads success.
void launched(const char* name) {
  const cudaError_t peek = cudaPeekAtLastError();
  const cudaError_t last = cudaGetLastError();
  put(name, cudaGetErrorName(last));
  if (peek != last || cudaGetLastError() != cudaSuccess) put("error_not_reset", name);
}

int input(const char* name) {
  const void* data = nullptr;
  size_t bytes = 0;
  int v = 0;
  if (gg_emu_host_input(name, &data, &bytes) && bytes == sizeof v) std::memcpy(&v, data, sizeof v);
  return v;
}

}  // namespace

extern "C" int gg_emu_host_main(void) {
  int* out = nullptr;
  cudaMalloc(reinterpret_cast<void**>(&out), 1024 * sizeof(int));
  int host[1024];

  // Block and grid limits, launch bounds.
  bounded<<<2, 128>>>(out);
  launched("bounds_128");
  cudaMemcpy(host, out, 256 * sizeof(int), cudaMemcpyDeviceToHost);
  put("bounds_128_last", host[255]);
  bounded<<<1, 256>>>(out);
  launched("bounds_256");
  bounded<<<1, dim3(64, 4)>>>(out);
  launched("bounds_64x4");
  count_blocks<<<1, 1025>>>(reinterpret_cast<unsigned*>(out));
  launched("block_1025");
  count_blocks<<<1, dim3(1, 1, 65)>>>(reinterpret_cast<unsigned*>(out));
  launched("block_z_65");
  count_blocks<<<dim3(2147483648u), 32>>>(reinterpret_cast<unsigned*>(out));
  launched("grid_x_2pow31");
  count_blocks<<<dim3(1, 65536), 32>>>(reinterpret_cast<unsigned*>(out));
  launched("grid_y_65536");
  count_blocks<<<dim3(1, 1, 65536), 32>>>(reinterpret_cast<unsigned*>(out));
  launched("grid_z_65536");
  count_blocks<<<dim3(0, 1, 1), 32>>>(reinterpret_cast<unsigned*>(out));
  launched("grid_x_0");
  if (input("big_grid")) {
    unsigned* counter = nullptr;
    cudaMalloc(reinterpret_cast<void**>(&counter), sizeof(unsigned));
    cudaMemset(counter, 0, sizeof(unsigned));
    count_blocks<<<dim3(1, 65535, 1), 1>>>(counter);
    launched("grid_y_65535");
    unsigned blocks = 0;
    cudaMemcpy(&blocks, counter, sizeof blocks, cudaMemcpyDeviceToHost);
    put("grid_y_65535_blocks", blocks);
    cudaFree(counter);
  }

  // Dynamic shared memory: 48 KiB by default, the arch's opt-in limit at most.
  int optin = 0, smem_default = 0, major = 0, minor = 0;
  cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0);
  cudaDeviceGetAttribute(&smem_default, cudaDevAttrMaxSharedMemoryPerBlock, 0);
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0);
  put("optin", optin);
  put("smem_default", smem_default);
  put("cc", major * 10 + minor);
  cudaDeviceProp prop;
  put("props", cudaGetErrorName(cudaGetDeviceProperties(&prop, 0)));
  put("props_optin", static_cast<long long>(prop.sharedMemPerBlockOptin));
  put("props_cc", prop.major * 10 + prop.minor);
  put("props_threads", prop.maxThreadsPerBlock);
  put("props_grid", static_cast<long long>(prop.maxGridSize[0]) + prop.maxGridSize[1] + prop.maxGridSize[2]);
  int value = 0;
  put("attr_unmodelled", cudaGetErrorName(cudaDeviceGetAttribute(&value, cudaDevAttrL2CacheSize, 0)));
  cudaGetLastError();

  fill_smem<<<1, 64, 48 * 1024>>>(out, 48 * 1024);
  launched("smem_48k");
  fill_smem<<<1, 64, 48 * 1024 + 16>>>(out, 48 * 1024 + 16);
  launched("smem_48k_16_unset");
  put("set_optin_plus_1", cudaGetErrorName(cudaFuncSetAttribute(fill_smem, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                                optin + 1)));
  cudaGetLastError();
  put("set_optin", cudaGetErrorName(cudaFuncSetAttribute(fill_smem, cudaFuncAttributeMaxDynamicSharedMemorySize, optin)));
  cudaMemset(out, 0, sizeof(int));
  fill_smem<<<1, 64, optin>>>(out, optin);
  launched("smem_optin");
  cudaMemcpy(host, out, sizeof(int), cudaMemcpyDeviceToHost);
  put("smem_optin_sum", host[0]);
  fill_smem<<<1, 64, optin + 16>>>(out, optin + 16);
  launched("smem_optin_16");
  cudaFuncAttributes attributes;
  cudaFuncGetAttributes(&attributes, bounded);
  put("func_max_threads", attributes.maxThreadsPerBlock);
  cudaFuncGetAttributes(&attributes, fill_smem);
  put("func_max_dynamic_smem", attributes.maxDynamicSharedSizeBytes);

  // cudaLaunchKernel checks the same.
  void* args[] = {&out};
  put("launch_kernel_256", cudaGetErrorName(cudaLaunchKernel(reinterpret_cast<const void*>(bounded), dim3(1),
                                                             dim3(256), args, 0, nullptr)));
  cudaGetLastError();
  put("launch_kernel_not_a_kernel", cudaGetErrorName(cudaLaunchKernel(reinterpret_cast<const void*>(&input), dim3(1),
                                                                       dim3(32), args, 0, nullptr)));
  cudaGetLastError();

  // Streams, copies, frees.
  cudaStream_t stream = nullptr;
  put("stream_create", cudaGetErrorName(cudaStreamCreate(&stream)));
  bounded<<<1, 128, 0, stream>>>(out);
  launched("stream_launch");
  put("stream_sync", cudaGetErrorName(cudaStreamSynchronize(stream)));
  put("stream_destroy", cudaGetErrorName(cudaStreamDestroy(stream)));
  put("stream_destroy_again", cudaGetErrorName(cudaStreamDestroy(stream)));
  cudaGetLastError();
  bounded<<<1, 128, 0, stream>>>(out);
  launched("destroyed_stream_launch");
  put("copy_past_end", cudaGetErrorName(cudaMemcpy(out, host, 1025 * sizeof(int), cudaMemcpyHostToDevice)));
  cudaGetLastError();
  put("copy_in_bounds", cudaGetErrorName(cudaMemcpy(out + 1000, host, 24 * sizeof(int), cudaMemcpyHostToDevice)));
  put("free_not_allocated", cudaGetErrorName(cudaFree(host)));
  cudaGetLastError();
  put("set_device_1", cudaGetErrorName(cudaSetDevice(1)));
  put("string", cudaGetErrorString(cudaGetLastError()));
  put("free", cudaGetErrorName(cudaFree(out)));
  gg_emu_host_output("report", report.data(), report.size());
  return 0;
}
