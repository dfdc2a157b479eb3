// gg_emu_launch.cc: launches on the emulated device, compiled once per build
// mode into the core objects: the device and the driver's launch checks,
// the worker threads of a launch, request files (how
// gemmgen.harness.cuda_emu hands a launch to its child process) and the C
// ABI of an emulated kernel library (docs/cuda-emulation.md, "The C ABI").
#include "gg_emu_runner.h"

namespace gg::emu {

unsigned env_unsigned(const char* name, unsigned fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  return static_cast<unsigned>(std::strtoul(v, nullptr, 10));
}

std::string& last_error() {
  static std::string e;
  return e;
}

// Rejects a launch or a runtime call: `code` is the cudaError_t a GPU
// returns, the message says why.
int reject(int code, const std::string& message) {
  last_error() = message;
  return code;
}

Device read_device() {
  Device d;
  const char* arch = std::getenv("GG_EMU_ARCH");
  const char* optin = std::getenv("GG_EMU_SMEM_OPTIN");
  d.arch = arch != nullptr && *arch != '\0' ? arch : "sm_90a";
  if (optin != nullptr && *optin != '\0') {
    d.smem_optin = std::strtoull(optin, nullptr, 10);
  } else if (arch == nullptr || *arch == '\0') {
    d.smem_optin = 232448;  // sm_90a
  } else {
    fail("GG_EMU_ARCH=%s needs GG_EMU_SMEM_OPTIN, the arch's opt-in shared memory per block", arch);
  }
  unsigned number = 0;
  if (std::sscanf(d.arch.c_str(), "sm_%u", &number) != 1 || number < 10) {
    fail("GG_EMU_ARCH=%s: expected an arch such as sm_80 or sm_90a", d.arch.c_str());
  }
  if (d.smem_optin == 0 || d.smem_optin > kMaxDynamicSmem) {
    fail("GG_EMU_SMEM_OPTIN=%zu: expected 1..%zu", d.smem_optin, kMaxDynamicSmem);
  }
  d.major = static_cast<int>(number / 10);
  d.minor = static_cast<int>(number % 10);
  if (const char* sms = std::getenv("GG_EMU_SM_COUNT"); sms != nullptr && *sms != '\0') {
    const long count = std::strtol(sms, nullptr, 10);
    if (count < 1 || count > 1024) {
      fail("GG_EMU_SM_COUNT=%s: expected 1..1024", sms);
    }
    d.sm_count = static_cast<int>(count);
  }
  return d;
}

const Device& device() {
  static const Device d = read_device();
  return d;
}

const char* device_arch() { return device().arch.c_str(); }

// cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes).
int set_max_dynamic_smem(KernelInfo& k, long long bytes) {
  const Device& d = device();
  if (bytes < 0 || static_cast<unsigned long long>(bytes) > d.smem_optin) {
    return reject(cudaErrorInvalidValue,
                  format("cudaFuncSetAttribute(%s, cudaFuncAttributeMaxDynamicSharedMemorySize, %lld): over the "
                         "opt-in limit of %zu bytes per block of the emulated %s (cudaErrorInvalidValue)",
                         k.name.c_str(), bytes, d.smem_optin, d.arch.c_str()));
  }
  k.max_dynamic_smem = static_cast<int>(bytes);
  return 0;
}

// The cluster checks of a launch with cudaLaunchAttributeClusterDimension:
// 0, or the cudaError_t a GPU returns.
int check_cluster(const KernelInfo& k, const unsigned grid[3], const unsigned cluster[3]) {
  const Device& d = device();
  const char* name = k.name.c_str();
  if (cluster[0] == 0 || cluster[1] == 0 || cluster[2] == 0) {
    return reject(cudaErrorInvalidClusterSize,
                  format("kernel %s: cluster dimension (%u,%u,%u) has a zero size (cudaErrorInvalidClusterSize)", name,
                         cluster[0], cluster[1], cluster[2]));
  }
  const unsigned long long size = static_cast<unsigned long long>(cluster[0]) * cluster[1] * cluster[2];
  if (size > 1 && d.major < 9) {
    return reject(cudaErrorNotSupported,
                  format("kernel %s: a cluster of %llu blocks on the emulated %s: thread-block clusters need compute "
                         "capability 9.0 or newer (cudaDevAttrClusterLaunch is 0) (cudaErrorNotSupported)",
                         name, size, d.arch.c_str()));
  }
  for (int i = 0; i < 3; ++i) {
    if (grid[i] % cluster[i] != 0) {
      return reject(cudaErrorInvalidClusterSize,
                    format("kernel %s: grid (%u,%u,%u) is not a multiple of the cluster dimension (%u,%u,%u): %c = %u "
                           "is not divisible by %u (cudaErrorInvalidClusterSize)",
                           name, grid[0], grid[1], grid[2], cluster[0], cluster[1], cluster[2], "xyz"[i], grid[i],
                           cluster[i]));
    }
  }
  const unsigned limit = k.non_portable_cluster ? kMaxClusterNonPortable : kMaxClusterPortable;
  if (size > limit) {
    return reject(cudaErrorInvalidClusterSize,
                  format("kernel %s: a cluster of %llu blocks (%u,%u,%u) is over the %s limit of %u blocks%s "
                         "(cudaErrorInvalidClusterSize)",
                         name, size, cluster[0], cluster[1], cluster[2],
                         k.non_portable_cluster ? "non-portable" : "portable", limit,
                         k.non_portable_cluster
                             ? ""
                             : "; larger clusters need cudaFuncAttributeNonPortableClusterSizeAllowed = 1"));
  }
  if (size > static_cast<unsigned long long>(d.sm_count)) {
    return reject(cudaErrorInvalidClusterSize,
                  format("kernel %s: a cluster of %llu blocks cannot be resident at once on the emulated device's %d "
                         "SMs (cudaErrorInvalidClusterSize)",
                         name, size, d.sm_count));
  }
  return 0;
}

// What the driver checks before it launches `k`: 0, or the cudaError_t a
// GPU returns (with last_error() saying why).
int check_launch(const KernelInfo& k, const unsigned grid[3], const unsigned block[3],
                        std::size_t dynamic_smem, const unsigned* cluster) {
  const char* name = k.name.c_str();
  const unsigned long long threads = static_cast<unsigned long long>(block[0]) * block[1] * block[2];
  if (threads == 0 || threads > kMaxBlockThreads || block[0] > kMaxBlockXY || block[1] > kMaxBlockXY ||
      block[2] > kMaxBlockZ) {
    return reject(cudaErrorInvalidConfiguration,
                  format("kernel %s: invalid block (%u,%u,%u): CUDA allows 1..%u threads per block, x and y "
                         "<= %u, z <= %u (cudaErrorInvalidConfiguration)",
                         name, block[0], block[1], block[2], kMaxBlockThreads, kMaxBlockXY, kMaxBlockZ));
  }
  if (grid[0] == 0 || grid[1] == 0 || grid[2] == 0 || grid[0] > kMaxGridX || grid[1] > kMaxGridYZ ||
      grid[2] > kMaxGridYZ) {
    return reject(cudaErrorInvalidConfiguration,
                  format("kernel %s: invalid grid (%u,%u,%u): CUDA allows x in 1..%llu, y and z in 1..%u "
                         "(cudaErrorInvalidConfiguration)",
                         name, grid[0], grid[1], grid[2], kMaxGridX, kMaxGridYZ));
  }
  if (k.max_threads != 0 && threads > k.max_threads) {
    return reject(cudaErrorLaunchOutOfResources,
                  format("kernel %s: a block of %llu threads is over the kernel's __launch_bounds__(%u) "
                         "(cudaErrorLaunchOutOfResources)",
                         name, threads, k.max_threads));
  }
  if (dynamic_smem > static_cast<std::size_t>(k.max_dynamic_smem)) {
    const bool unset = k.max_dynamic_smem == kDefaultDynamicSmem;
    return reject(cudaErrorInvalidValue,
                  format("kernel %s: %zu bytes of dynamic shared memory requested, over the kernel's limit of %d "
                         "(cudaFuncAttributeMaxDynamicSharedMemorySize%s) (cudaErrorInvalidValue)",
                         name, dynamic_smem, k.max_dynamic_smem,
                         unset ? ": 48 KiB unless cudaFuncSetAttribute raises it, up to the arch's opt-in limit" : ""));
  }
  if (cluster != nullptr) return check_cluster(k, grid, cluster);
  return 0;
}

#if !defined(GG_EMU_TSAN)
// A cluster launch: `l.workers` groups of cluster_size() OS threads, each
// group running one cluster at a time (rank r's thread runs CTA r with its
// own BlockRunner and shared memory; see Cluster in gg_emu_internal.h).
void run_clusters(Launch& l) {
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  l.workers = static_cast<unsigned>(
      std::min<unsigned long long>(std::max(1u, env_unsigned("GG_EMU_WORKERS", cores)), l.num_clusters()));
  const unsigned size = l.cluster_size();
  std::vector<std::unique_ptr<Cluster>> groups;
  std::vector<std::thread> threads;
  for (unsigned w = 0; w < l.workers; ++w) {
    groups.push_back(std::make_unique<Cluster>());
    Cluster& c = *groups.back();
    c.launch = &l;
    c.size = size;
    c.ctas.assign(size, nullptr);
    c.exited.assign(size, false);
  }
  for (unsigned w = 0; w < l.workers; ++w) {
    for (unsigned rank = 0; rank < size; ++rank) {
      threads.emplace_back([&l, c = groups[w].get(), rank] {
        SignalStack signal_stack;
        BlockRunner runner(l);
        runner.join_cluster(c, rank);
        unsigned long long seen = 0;
        for (;;) {
          if (rank == 0) {
            const unsigned long long next = l.next_block.fetch_add(1);
            std::lock_guard<std::mutex> lock(c->mu);
            if (next >= l.num_clusters()) {
              c->stop = true;
            } else {
              c->index = next;
              c->ready = c->finished = c->done = 0;
              c->baton = -1;
              c->exited.assign(c->size, false);
              c->barrier_phase = 0;
              c->barrier_arrived = 0;
              c->barrier_clock.reset();
            }
            ++c->generation;
            c->cv.notify_all();
          }
          unsigned long long index;
          {
            std::unique_lock<std::mutex> lock(c->mu);
            c->cv.wait(lock, [&] { return c->generation != seen; });
            seen = c->generation;
            if (c->stop) break;
            index = c->index;
          }
          runner.run_in_cluster(l.cluster_block(index, rank));
          // Rank 0 starts the next cluster once every CTA of this one is done.
          std::unique_lock<std::mutex> lock(c->mu);
          ++c->done;
          c->cv.notify_all();
          if (rank == 0) c->cv.wait(lock, [&] { return c->done == c->size; });
        }
      });
    }
  }
  for (std::thread& t : threads) t.join();
}
#endif

// Runs kernel `k` (after check_launch): 0, or the check's error code.
int run_kernel(const KernelInfo* k, const unsigned grid[3], const unsigned block[3],
                         std::size_t dynamic_smem, void* const* args, const unsigned* cluster) {
  if (const int code = check_launch(*k, grid, block, dynamic_smem, cluster)) return code;
  const char* schedule = std::getenv("GG_EMU_SCHEDULE");
  Launch l;
  l.kernel = k;
  l.args = args;
  l.grid = dim3(grid[0], grid[1], grid[2]);
  l.block = dim3(block[0], block[1], block[2]);
  l.dynamic_smem = dynamic_smem;
  if (cluster != nullptr) l.cluster = dim3(cluster[0], cluster[1], cluster[2]);
  if (schedule != nullptr && std::strcmp(schedule, "reverse") == 0) {
    l.schedule = Schedule::reverse;
  } else if (schedule != nullptr && *schedule != '\0' && std::strcmp(schedule, "run-ahead") != 0) {
    return reject(cudaErrorInvalidValue, format("GG_EMU_SCHEDULE=%s: expected run-ahead or reverse", schedule));
  }
  l.stack_bytes = std::max(64u, env_unsigned("GG_EMU_STACK_KB", 256)) * std::size_t{1024};
  l.flush_subnormals = env_unsigned("GG_EMU_FTZ", 0) != 0;
  if (l.flush_subnormals && !ftz_supported()) {
    return reject(cudaErrorInvalidValue, "GG_EMU_FTZ=1: flushing subnormals is modelled on x86 only");
  }
  install_fault_handler();
#if defined(GG_EMU_TSAN)
  if (l.cluster_size() > 1) {
    return reject(cudaErrorNotSupported,
                  format("kernel %s: clusters are modelled in fiber mode only, not in TSan mode", k->name.c_str()));
  }
  l.workers = 1;
  BlockRunner runner(l);
  for (unsigned long long b = 0; b < l.num_blocks(); ++b) runner.run(b);
#else
  mc::on_launch_begin(l);
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  l.workers = static_cast<unsigned>(
      std::min<unsigned long long>(std::max(1u, env_unsigned("GG_EMU_WORKERS", cores)), l.num_blocks()));
  if (l.cluster_size() > 1) {
    run_clusters(l);
    mc::on_launch_end(l);
    return 0;
  }
  std::vector<std::thread> workers;
  for (unsigned w = 0; w < l.workers; ++w) {
    workers.emplace_back([&l] {
      SignalStack signal_stack;
      BlockRunner runner(l);
      for (;;) {
        const unsigned long long b = l.next_block.fetch_add(1);
        if (b >= l.num_blocks()) break;
        runner.run(b);
      }
    });
  }
  for (std::thread& w : workers) w.join();
  mc::on_launch_end(l);
#endif
  return 0;
}

// Runs the kernel named `kernel` (gg_emu_launch): 0, or a nonzero
// cudaError_t code when the launch is rejected.
int launch(const char* kernel, const unsigned grid[3], const unsigned block[3], std::size_t dynamic_smem,
                  void* const* args, std::size_t nargs, const unsigned* cluster) {
  const KernelInfo* k = find_kernel(kernel);
  if (k == nullptr) {
    std::string names;
    for (const KernelInfo& i : kernel_registry()) names += (names.empty() ? "" : ", ") + i.name;
    return reject(cudaErrorInvalidDeviceFunction,
                  format("no kernel named '%s' in this module (it has: %s)", kernel, names.c_str()));
  }
  if (nargs != k->params.size()) {
    return reject(cudaErrorInvalidValue,
                  format("kernel %s takes %zu arguments, %zu given", kernel, k->params.size(), nargs));
  }
  return run_kernel(k, grid, block, dynamic_smem, args, cluster);
}

// ---------------------------------------------------------------------------
// Request files: how gemmgen.harness.cuda_emu hands a launch to a child
// process. Little-endian:
//   "GGEMUREQ" u32 version(=4; 3 is read too)
//   u32 name_len, name bytes; u32 grid[3]; u32 block[3];
//   u32 cluster[3] (version 4 only: cudaLaunchAttributeClusterDimension; 1,1,1: none)
//   u64 dynamic_smem
//   i64 max_dynamic_smem: the kernel's cudaFuncAttributeMaxDynamicSharedMemorySize,
//     set with cudaFuncSetAttribute before the launch (-1: left unset, 48 KiB)
//   u32 nargs (entries), then per entry:
//     u32 kind (0 buffer, 1 value, 2 null pointer, 3 tensor map), u32 flags
//     (1 return it, 2 poison it instead of reading data, 4 a buffer that is
//     not a kernel parameter: only tensor maps reach it), u64 nbytes, data
//     (absent for a poisoned buffer and for null)
//   The kernel's parameters are the entries without flag 4, in order. The
//   data of a tensor map (kind 3) is what cuTensorMapEncodeTiled takes, with
//   a buffer entry in place of the address:
//     u32 buffer (an entry index), u32 dtype, u32 rank, u32 interleave,
//     u32 swizzle, u32 l2_promotion, u32 oob_fill, u64 offset (bytes into the
//     buffer), u64 global_dim[rank], u64 global_strides[rank - 1] (bytes),
//     u32 box_dim[rank], u32 element_strides[rank]
//   The child encodes it with the emulated cuTensorMapEncodeTiled against
//   the buffer's device address plus the offset, and passes the 128-byte
//   CUtensorMap by value.
// The response: "GGEMURSP" u32 count, then per returned buffer:
//   u32 entry index, u64 nbytes, data.

// (Reader: gg_emu_internal.h.)

std::vector<unsigned char> read_file(const char* path) {
  std::vector<unsigned char> data;
  FILE* f = std::fopen(path, "rb");
  if (f == nullptr) fail("cannot open %s: %s", path, std::strerror(errno));
  unsigned char buf[1 << 16];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) data.insert(data.end(), buf, buf + n);
  std::fclose(f);
  return data;
}

// Decodes the data of a tensor-map entry; false when its size does not match its rank.
bool read_map_argument(const unsigned char* data, std::size_t bytes, sm90::MapArgument& a) {
  Reader r{data, data + bytes};
  if (bytes < 36) return false;
  a.buffer = r.get<std::uint32_t>();
  a.dtype = r.get<std::uint32_t>();
  a.rank = r.get<std::uint32_t>();
  a.interleave = r.get<std::uint32_t>();
  a.swizzle = r.get<std::uint32_t>();
  a.l2_promotion = r.get<std::uint32_t>();
  a.oob_fill = r.get<std::uint32_t>();
  a.offset = r.get<std::uint64_t>();
  const std::uint64_t rank = a.rank, strides = rank > 0 ? rank - 1 : 0;
  if (rank > 64 || bytes != 36 + 8 * rank + 8 * strides + 4 * rank + 4 * rank) return false;
  a.dims.resize(rank);
  a.strides.resize(strides);
  a.box.resize(rank);
  a.element_strides.resize(rank);
  for (std::uint64_t& d : a.dims) d = r.get<std::uint64_t>();
  for (std::uint64_t& d : a.strides) d = r.get<std::uint64_t>();
  for (std::uint32_t& d : a.box) d = r.get<std::uint32_t>();
  for (std::uint32_t& d : a.element_strides) d = r.get<std::uint32_t>();
  return true;
}

int run_request(const char* request_path, const char* response_path) {
  enum Kind : unsigned { kBuffer = 0, kValue = 1, kNull = 2, kTensorMap = 3 };
  enum Flag : unsigned { kReturn = 1, kPoison = 2, kNotParameter = 4 };
  const std::vector<unsigned char> request = read_file(request_path);
  Reader r{request.data(), request.data() + request.size()};
  if (std::memcmp(r.take(8), "GGEMUREQ", 8) != 0) fail("not a gg-emu request file");
  const std::uint32_t version = r.get<std::uint32_t>();
  if (version != 3 && version != 4) {
    fail("a gg-emu request file of version %u; this emulator reads versions 3 and 4", version);
  }
  const std::uint32_t name_len = r.get<std::uint32_t>();
  const std::string name(reinterpret_cast<const char*>(r.take(name_len)), name_len);
  unsigned grid[3], block[3], cluster[3] = {1, 1, 1};
  for (unsigned& g : grid) g = r.get<std::uint32_t>();
  for (unsigned& b : block) b = r.get<std::uint32_t>();
  if (version >= 4) {
    for (unsigned& c : cluster) c = r.get<std::uint32_t>();
  }
  const bool clustered = cluster[0] != 1 || cluster[1] != 1 || cluster[2] != 1;
  const std::size_t smem = r.get<std::uint64_t>();
  const std::int64_t max_dynamic_smem = r.get<std::int64_t>();
  const std::uint32_t nargs = r.get<std::uint32_t>();

  KernelInfo* k = find_kernel(name.c_str());
  struct Arg {
    unsigned kind, flags;
    std::size_t bytes;
    void* device;
    const unsigned char* value;
    std::uint32_t param;  // its parameter index (entries without kNotParameter)
  };
  // The 128-byte CUtensorMap of each tensor-map entry, aligned as cuda.h
  // aligns CUtensorMap (the encoder requires 64).
  struct alignas(128) MapStorage {
    unsigned char bytes[128];
  };
  std::vector<Arg> parsed(nargs);
  std::vector<MapStorage> maps(nargs);
  std::vector<void*> args;
  const auto rejected = [&](const std::string& why) {
    std::fprintf(stderr, "gg-emu: error: kernel %s: %s\n", name.c_str(), why.c_str());
    return 2;
  };
  for (std::uint32_t i = 0; i < nargs; ++i) {
    Arg& a = parsed[i];
    a.kind = r.get<std::uint32_t>();
    a.flags = r.get<std::uint32_t>();
    a.bytes = r.get<std::uint64_t>();
    a.device = nullptr;
    a.value = nullptr;
    a.param = static_cast<std::uint32_t>(args.size());
    if (a.kind > kTensorMap) fail("malformed request file: argument kind %u", a.kind);
    if ((a.flags & kNotParameter) != 0 && a.kind != kBuffer) {
      fail("malformed request file: entry #%u is not a buffer but is not a kernel parameter", i);
    }
    if (a.kind == kValue || a.kind == kTensorMap || (a.kind == kBuffer && (a.flags & kPoison) == 0)) {
      a.value = r.take(a.bytes);
    }
    const bool parameter = (a.flags & kNotParameter) == 0;
    if (k != nullptr && parameter && a.param < k->params.size()) {
      const ParamInfo& p = k->params[a.param];
      const bool by_value = a.kind == kValue || a.kind == kTensorMap;
      const bool is_map = p.type.find("CUtensorMap") != std::string::npos;
      if (by_value == p.is_pointer || (a.kind == kValue && a.bytes != p.size) ||
          (a.kind == kTensorMap && !(is_map && p.size == sizeof(MapStorage)))) {
        const std::string given =
            a.kind == kValue       ? format("a value of %zu bytes", a.bytes)
            : a.kind == kTensorMap ? std::string("a tensor map")
                                   : std::string(a.kind == kNull ? "None" : "an array");
        return rejected(format("argument #%u is `%s` (%zu bytes) but %s was passed", a.param, p.type.c_str(),
                               p.size, given.c_str()));
      }
    }
    if (a.kind == kBuffer) {
      a.device = device_malloc(a.bytes, parameter ? static_cast<int>(a.param) : -1);
      if (a.value != nullptr) std::memcpy(a.device, a.value, a.bytes);
      if (parameter) args.push_back(&a.device);
    } else if (a.kind == kNull) {
      args.push_back(&a.device);
    } else if (a.kind == kTensorMap) {
      args.push_back(maps[i].bytes);
    } else {
      args.push_back(const_cast<unsigned char*>(a.value));
    }
  }
  // Tensor maps last: their buffers may come after them.
  for (std::uint32_t i = 0; i < nargs; ++i) {
    const Arg& a = parsed[i];
    if (a.kind != kTensorMap) continue;
    sm90::MapArgument m;
    if (!read_map_argument(a.value, a.bytes, m)) fail("malformed request file: tensor map entry #%u", i);
    if (m.buffer >= nargs || parsed[m.buffer].kind != kBuffer) {
      return rejected(format("argument #%u is a tensor map over entry #%u, which is not an array", a.param,
                             m.buffer));
    }
    std::string why;
    const Arg& b = parsed[m.buffer];
    if (!sm90::encode_map_argument(maps[i].bytes, m, static_cast<unsigned char*>(b.device), b.bytes, why)) {
      const std::string buffer = (b.flags & kNotParameter) != 0 ? format("buffer #%u", m.buffer)
                                                               : format("argument #%u", b.param);
      return rejected(format("argument #%u (a tensor map over %s, %zu bytes): %s", a.param, buffer.c_str(), b.bytes,
                             why.c_str()));
    }
  }
  if (k != nullptr && max_dynamic_smem >= 0 && set_max_dynamic_smem(*k, max_dynamic_smem) != 0) {
    std::fprintf(stderr, "gg-emu: error: %s\n", last_error().c_str());
    return 2;
  }
  if (launch(name.c_str(), grid, block, smem, args.data(), args.size(), clustered ? cluster : nullptr) != 0) {
    std::fprintf(stderr, "gg-emu: error: %s\n", last_error().c_str());
    return 2;
  }
  check_canaries();

  FILE* f = std::fopen(response_path, "wb");
  if (f == nullptr) fail("cannot write %s: %s", response_path, std::strerror(errno));
  std::uint32_t count = 0;
  for (const Arg& a : parsed) count += a.kind == kBuffer && (a.flags & 1u);
  std::fwrite("GGEMURSP", 1, 8, f);
  std::fwrite(&count, sizeof(count), 1, f);
  for (std::uint32_t i = 0; i < nargs; ++i) {
    const Arg& a = parsed[i];
    if (a.kind != kBuffer || (a.flags & 1u) == 0) continue;
    const std::uint64_t bytes = a.bytes;
    std::fwrite(&i, sizeof(i), 1, f);
    std::fwrite(&bytes, sizeof(bytes), 1, f);
    std::fwrite(a.device, 1, a.bytes, f);
  }
  std::fclose(f);
  for (const Arg& a : parsed) {
    if (a.device != nullptr) device_free(a.device);
  }
  return 0;
}

}  // namespace gg::emu

// ---------------------------------------------------------------------------
// The C ABI of an emulated kernel library (see docs/cuda-emulation.md).

// Runs kernel `kernel` like cuLaunchKernel: args[i] points to the value of
// parameter i (for a pointer parameter, to the pointer). Returns 0, or the
// nonzero cudaError_t a GPU gives when the launch is rejected
// (gg_emu_last_error says why). Errors while the kernel runs end the process
// (status 70 or 71).
GG_EMU_API int gg_emu_launch(const char* kernel, const unsigned grid[3], const unsigned block[3],
                             std::size_t dynamic_smem, void* const* args, std::size_t nargs) {
  return gg::emu::launch(kernel, grid, block, dynamic_smem, args, nargs);
}
// gg_emu_launch with a cluster dimension (cudaLaunchAttributeClusterDimension's
// x, y, z; {1, 1, 1} is checked as a cluster launch of one block per cluster).
GG_EMU_API int gg_emu_launch_cluster(const char* kernel, const unsigned grid[3], const unsigned block[3],
                                     const unsigned cluster[3], std::size_t dynamic_smem, void* const* args,
                                     std::size_t nargs) {
  return gg::emu::launch(kernel, grid, block, dynamic_smem, args, nargs, cluster);
}
GG_EMU_API const char* gg_emu_last_error() { return gg::emu::last_error().c_str(); }
// Device memory between guard regions (content: 0xFF bytes).
GG_EMU_API void* gg_emu_malloc(std::size_t bytes) { return gg::emu::device_malloc(bytes, -1); }
GG_EMU_API void gg_emu_free(void* p) { gg::emu::device_free(p); }
// Ends the process with a report if a kernel wrote next to a live buffer.
GG_EMU_API void gg_emu_check_buffers() { gg::emu::check_canaries(); }
// Runs the launch a request file describes and writes the response file.
GG_EMU_API int gg_emu_run_request(const char* request_path, const char* response_path) {
  return gg::emu::run_request(request_path, response_path);
}
