// A CPU stand-in for libcuda (tests/launchers/test_rust_launchers.py builds it with
// gcc as libcuda.so): the driver calls of a generated crate's CudaDriver,
// and cuModuleLoadData for the test's engine, with the signatures of
// cuda.h (this file includes it, so a prototype that differs does not
// compile) and the driver API's documented checks. What runs on a device
// runs on the CPU emulator, through the table gg_standin_bind() gets from
// the host program: kernel lookup, launch, the shared-memory attribute,
// device attributes and the emulator's cuTensorMapEncodeTiled (the
// driver's checks of a tiled map). Every call is logged (gg_standin_log).
// cuLaunchKernelEx (a cluster launch) makes the driver's checks of its
// CUlaunchConfig and attributes (cuda.h's structs: the layout is the
// header's), logs the cluster and launches the clusters on the emulator.
#include <cuda.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

struct StandinEmu {
  const void* (*kernel)(const char*);
  int (*launch)(const void*, const unsigned*, const unsigned*, unsigned, void*, void**);
  int (*set_smem)(const void*, unsigned);
  int (*attribute)(int, int*);
  CUresult (*encode)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                     const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                     CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
  // A cluster launch of `cluster` blocks per axis (the emulated runtime's
  // cudaLaunchKernelExC).
  int (*launch_cluster)(const void*, const unsigned*, const unsigned*, const unsigned*, unsigned,
                        void*, void**);
};

struct CUmod_st {
  int loaded;
};

#define MAX_FUNCTIONS 32
#define DEFAULT_SMEM (48 * 1024)

struct CUfunc_st {
  const void* fn;
  char name[128];
  int max_dynamic_smem;  // CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
};

static const struct StandinEmu* emu;
static struct CUmod_st module;
static struct CUfunc_st functions[MAX_FUNCTIONS];
static int function_count;
static char log_text[1 << 16];
static size_t log_length;

static void note(const char* format, ...) {
  va_list ap;
  va_start(ap, format);
  int n = vsnprintf(log_text + log_length, sizeof log_text - log_length, format, ap);
  va_end(ap);
  if (n > 0 && log_length + (size_t)n + 1 < sizeof log_text) {
    log_length += (size_t)n;
    log_text[log_length++] = '\n';
    log_text[log_length] = 0;
  }
}

void gg_standin_bind(const struct StandinEmu* table) { emu = table; }

const char* gg_standin_log(void) { return log_text; }

static int is_function(CUfunction f) {
  return f >= functions && f < functions + function_count;
}

CUresult cuModuleLoadData(CUmodule* out, const void* image) {
  note("cuModuleLoadData");
  if (emu == NULL) return CUDA_ERROR_NOT_INITIALIZED;
  if (out == NULL || image == NULL) return CUDA_ERROR_INVALID_VALUE;
  module.loaded = 1;
  *out = &module;
  return CUDA_SUCCESS;
}

CUresult cuModuleGetFunction(CUfunction* hfunc, CUmodule hmod, const char* name) {
  note("cuModuleGetFunction %s", name != NULL ? name : "(null)");
  if (emu == NULL) return CUDA_ERROR_NOT_INITIALIZED;
  if (hfunc == NULL || name == NULL) return CUDA_ERROR_INVALID_VALUE;
  if (hmod != &module || !module.loaded) return CUDA_ERROR_INVALID_HANDLE;
  for (int i = 0; i < function_count; ++i) {
    if (strcmp(functions[i].name, name) == 0) {
      *hfunc = &functions[i];
      return CUDA_SUCCESS;
    }
  }
  const void* fn = emu->kernel(name);
  if (fn == NULL) return CUDA_ERROR_NOT_FOUND;
  if (function_count == MAX_FUNCTIONS || strlen(name) >= sizeof functions[0].name)
    return CUDA_ERROR_OUT_OF_MEMORY;
  struct CUfunc_st* f = &functions[function_count++];
  f->fn = fn;
  strcpy(f->name, name);
  f->max_dynamic_smem = DEFAULT_SMEM;
  *hfunc = f;
  return CUDA_SUCCESS;
}

CUresult cuCtxGetDevice(CUdevice* device) {
  note("cuCtxGetDevice");
  if (emu == NULL) return CUDA_ERROR_NOT_INITIALIZED;
  if (device == NULL) return CUDA_ERROR_INVALID_VALUE;
  *device = 0;
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetAttribute(int* pi, CUdevice_attribute attrib, CUdevice dev) {
  note("cuDeviceGetAttribute %d", (int)attrib);
  if (emu == NULL) return CUDA_ERROR_NOT_INITIALIZED;
  if (pi == NULL) return CUDA_ERROR_INVALID_VALUE;
  if (dev != 0) return CUDA_ERROR_INVALID_DEVICE;
  switch (attrib) {
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT:
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR:
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR:
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN:
      return emu->attribute((int)attrib, pi) == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    default:  // not one the stand-in knows: a wrong attribute number fails
      return CUDA_ERROR_INVALID_VALUE;
  }
}

CUresult cuFuncSetAttribute(CUfunction hfunc, CUfunction_attribute attrib, int value) {
  note("cuFuncSetAttribute %s %d %d", is_function(hfunc) ? hfunc->name : "?", (int)attrib, value);
  if (emu == NULL) return CUDA_ERROR_NOT_INITIALIZED;
  if (!is_function(hfunc)) return CUDA_ERROR_INVALID_HANDLE;
  if (attrib != CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES) return CUDA_ERROR_INVALID_VALUE;
  int optin = 0;
  if (emu->attribute(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, &optin) != 0)
    return CUDA_ERROR_INVALID_VALUE;
  if (value < 0 || value > optin) return CUDA_ERROR_INVALID_VALUE;
  if (emu->set_smem(hfunc->fn, (unsigned)value) != 0) return CUDA_ERROR_INVALID_VALUE;
  hfunc->max_dynamic_smem = value;
  return CUDA_SUCCESS;
}

static void note_list64(char* out, size_t size, const cuuint64_t* v, unsigned n) {
  size_t at = 0;
  for (unsigned i = 0; i < n && at < size; ++i)
    at += (size_t)snprintf(out + at, size - at, i ? ",%llu" : "%llu", (unsigned long long)v[i]);
}

static void note_list32(char* out, size_t size, const cuuint32_t* v, unsigned n) {
  size_t at = 0;
  for (unsigned i = 0; i < n && at < size; ++i)
    at += (size_t)snprintf(out + at, size - at, i ? ",%u" : "%u", (unsigned)v[i]);
}

CUresult cuTensorMapEncodeTiled(CUtensorMap* tensorMap, CUtensorMapDataType tensorDataType,
                                cuuint32_t tensorRank, void* globalAddress,
                                const cuuint64_t* globalDim, const cuuint64_t* globalStrides,
                                const cuuint32_t* boxDim, const cuuint32_t* elementStrides,
                                CUtensorMapInterleave interleave, CUtensorMapSwizzle swizzle,
                                CUtensorMapL2promotion l2Promotion,
                                CUtensorMapFloatOOBfill oobFill) {
  if (emu == NULL) return CUDA_ERROR_NOT_INITIALIZED;
  CUresult r = CUDA_ERROR_INVALID_VALUE;
  char dims[128] = "", strides[128] = "", box[64] = "", es[64] = "";
  const unsigned rank = tensorRank <= 5 ? tensorRank : 0;
  if (globalDim != NULL && boxDim != NULL && elementStrides != NULL &&
      (globalStrides != NULL || rank <= 1)) {
    note_list64(dims, sizeof dims, globalDim, rank);
    if (rank > 1) note_list64(strides, sizeof strides, globalStrides, rank - 1);
    note_list32(box, sizeof box, boxDim, rank);
    note_list32(es, sizeof es, elementStrides, rank);
    // The driver's checks of a tiled map (64-byte aligned map, rank 1..5,
    // address and strides, box, swizzle span, enum values): the emulator's
    // encoder makes them.
    r = emu->encode(tensorMap, tensorDataType, tensorRank, globalAddress, globalDim, globalStrides,
                    boxDim, elementStrides, interleave, swizzle, l2Promotion, oobFill);
  }
  note("cuTensorMapEncodeTiled dtype=%d rank=%u dims=%s strides=%s box=%s elementStrides=%s "
       "interleave=%d swizzle=%d l2=%d oob=%d aligned64=%d -> %d",
       (int)tensorDataType, (unsigned)tensorRank, dims, strides, box, es, (int)interleave,
       (int)swizzle, (int)l2Promotion, (int)oobFill, (int)((uintptr_t)tensorMap % 64 == 0), (int)r);
  return r;
}

CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                        unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
                        unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
                        void** kernelParams, void** extra) {
  CUresult r = CUDA_SUCCESS;
  if (emu == NULL) {
    r = CUDA_ERROR_NOT_INITIALIZED;
  } else if (!is_function(f)) {
    r = CUDA_ERROR_INVALID_HANDLE;
  } else if (kernelParams == NULL || extra != NULL) {
    r = CUDA_ERROR_INVALID_VALUE;  // the launchers pass kernelParams, never extra
  } else if (gridDimX == 0 || gridDimY == 0 || gridDimZ == 0 || blockDimX == 0 ||
             blockDimY == 0 || blockDimZ == 0) {
    r = CUDA_ERROR_INVALID_VALUE;
  } else if ((int)sharedMemBytes > f->max_dynamic_smem) {
    // Over 48 KiB without the attribute raised first: the driver refuses.
    r = CUDA_ERROR_INVALID_VALUE;
  } else {
    const unsigned grid[3] = {gridDimX, gridDimY, gridDimZ};
    const unsigned block[3] = {blockDimX, blockDimY, blockDimZ};
    r = emu->launch(f->fn, grid, block, sharedMemBytes, (void*)hStream, kernelParams) == 0
            ? CUDA_SUCCESS
            : CUDA_ERROR_INVALID_VALUE;
  }
  note("cuLaunchKernel %s grid=%u,%u,%u block=%u,%u,%u smem=%u -> %d",
       is_function(f) ? f->name : "?", gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY,
       blockDimZ, sharedMemBytes, (int)r);
  return r;
}

#define MAX_CLUSTER_BLOCKS 8  // the portable cluster size

CUresult cuLaunchKernelEx(const CUlaunchConfig* config, CUfunction f, void** kernelParams,
                          void** extra) {
  CUresult r = CUDA_SUCCESS;
  unsigned cluster[3] = {1, 1, 1};
  char ids[64] = "";
  size_t at = 0;
  int major = 0;
  if (emu == NULL) {
    r = CUDA_ERROR_NOT_INITIALIZED;
  } else if (config == NULL || (config->numAttrs > 0 && config->attrs == NULL)) {
    r = CUDA_ERROR_INVALID_VALUE;
  } else if (!is_function(f)) {
    r = CUDA_ERROR_INVALID_HANDLE;
  } else if (kernelParams == NULL || extra != NULL) {
    r = CUDA_ERROR_INVALID_VALUE;  // the launchers pass kernelParams, never extra
  } else {
    for (unsigned i = 0; i < config->numAttrs && r == CUDA_SUCCESS; ++i) {
      const CUlaunchAttribute* a = &config->attrs[i];
      at += (size_t)snprintf(ids + at, at < sizeof ids ? sizeof ids - at : 0, i ? ",%d" : "%d",
                             (int)a->id);
      if (a->id != CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION) {
        r = CUDA_ERROR_INVALID_VALUE;  // not an attribute the stand-in knows
      } else {
        cluster[0] = a->value.clusterDim.x;
        cluster[1] = a->value.clusterDim.y;
        cluster[2] = a->value.clusterDim.z;
      }
    }
  }
  if (r == CUDA_SUCCESS) {
    const unsigned grid[3] = {config->gridDimX, config->gridDimY, config->gridDimZ};
    const unsigned block[3] = {config->blockDimX, config->blockDimY, config->blockDimZ};
    const unsigned blocks = cluster[0] * cluster[1] * cluster[2];
    if (grid[0] == 0 || grid[1] == 0 || grid[2] == 0 || block[0] == 0 || block[1] == 0 ||
        block[2] == 0) {
      r = CUDA_ERROR_INVALID_VALUE;
    } else if (blocks > 1 &&
               (emu->attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, &major) != 0 ||
                major < 9)) {
      r = CUDA_ERROR_INVALID_CLUSTER_SIZE;  // clusters need compute capability 9.0
    } else if (blocks == 0 || blocks > MAX_CLUSTER_BLOCKS || grid[0] % cluster[0] != 0 ||
               grid[1] % cluster[1] != 0 || grid[2] % cluster[2] != 0) {
      r = CUDA_ERROR_INVALID_CLUSTER_SIZE;
    } else if ((int)config->sharedMemBytes > f->max_dynamic_smem) {
      r = CUDA_ERROR_INVALID_VALUE;
    } else if (blocks > 1) {
      r = emu->launch_cluster(f->fn, grid, block, cluster, config->sharedMemBytes,
                              (void*)config->hStream, kernelParams) == 0
              ? CUDA_SUCCESS
              : CUDA_ERROR_INVALID_VALUE;
    } else {
      r = emu->launch(f->fn, grid, block, config->sharedMemBytes, (void*)config->hStream,
                      kernelParams) == 0
              ? CUDA_SUCCESS
              : CUDA_ERROR_INVALID_VALUE;
    }
  }
  if (config != NULL) {
    note("cuLaunchKernelEx %s grid=%u,%u,%u block=%u,%u,%u smem=%u attrs=%s cluster=%u,%u,%u -> %d",
         is_function(f) ? f->name : "?", config->gridDimX, config->gridDimY, config->gridDimZ,
         config->blockDimX, config->blockDimY, config->blockDimZ, config->sharedMemBytes, ids,
         cluster[0], cluster[1], cluster[2], (int)r);
  } else {
    note("cuLaunchKernelEx (null config) -> %d", (int)r);
  }
  return r;
}
