// gg_emu_core.cc: the emulator's execution core, compiled once per build
// mode (gemmgen.harness.cuda_emu's core objects) and linked into every
// kernel library: the kernel registry, errors, the thread-local state, the
// module's shared memory, guarded device buffers, poisoned fiber stacks and
// the fault handler, and the calls of gg_emu_core.h into the BlockRunner
// (gg_emu_runner.h).
#include "gg_emu_runner.h"

// The builtin variables gridDim and blockDim (gg_emu.h), set by the runner
// at each block start (each CUDA thread's OS thread in TSan mode). NB: a
// nonzero initialiser keeps them in .tdata, out of the .tbss that fiber mode
// poisons as shared memory.
thread_local constinit dim3 gridDim{1, 1, 1};
thread_local constinit dim3 blockDim{1, 1, 1};

namespace gg::emu {

thread_local constinit Tls tls{nullptr, nullptr, 0x67676575u};

std::vector<KernelInfo>& kernel_registry() {
  static std::vector<KernelInfo> registry;
  return registry;
}

KernelInfo* find_kernel(const char* name) {
  for (KernelInfo& k : kernel_registry()) {
    if (k.name == name) return &k;
  }
  return nullptr;
}

KernelInfo* find_kernel_at(const void* fn) {
  for (KernelInfo& k : kernel_registry()) {
    if (k.fn == fn) return &k;
  }
  return nullptr;
}

LaunchBoundsRegistration::LaunchBoundsRegistration(const char* name, long long max_threads, long long, long long) {
  if (KernelInfo* k = find_kernel(name)) k->max_threads = static_cast<unsigned>(max_threads);
}

// ---------------------------------------------------------------------------
// Errors.

std::string vformat(const char* fmt, va_list ap) {
  va_list copy;
  va_copy(copy, ap);
  const int n = std::vsnprintf(nullptr, 0, fmt, copy);
  va_end(copy);
  std::string s(n > 0 ? static_cast<std::size_t>(n) : 0, '\0');
  std::vsnprintf(s.data(), s.size() + 1, fmt, ap);
  return s;
}

std::string format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
std::string format(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::string s = vformat(fmt, ap);
  va_end(ap);
  return s;
}

std::string where();

[[noreturn]] void fail_with_status(int status, const std::string& message) {
  const std::string text = "gg-emu: error: " + message + "\n" + where();
  std::fwrite(text.data(), 1, text.size(), stderr);
  std::fflush(stderr);
  std::fflush(stdout);
  _exit(status);
}

[[noreturn]] void fail(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
[[noreturn]] void fail(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  const std::string message = vformat(fmt, ap);
  va_end(ap);
  fail_with_status(kExitKernelError, message);
}

#if !defined(GG_EMU_TSAN)
// The calling thread's instance of this module's .tbss: every static
// `__shared__` variable and gg_emu_dynamic_smem, nothing else (see Tls).
SharedRegion module_tbss() {
  struct Search {
    std::uintptr_t probe;
    SharedRegion region;
    bool found;
  } search{reinterpret_cast<std::uintptr_t>(&module_tbss), {}, false};
  // Reading a thread_local makes sure this thread's TLS block for the module
  // exists before dl_iterate_phdr reports it.
  const auto* runtime_tls = reinterpret_cast<const unsigned char*>(&tls);
  if (*static_cast<const volatile unsigned*>(&tls.magic) == 0) fail("internal: runtime TLS is not initialised");
  dl_iterate_phdr(
      [](dl_phdr_info* info, std::size_t, void* data) -> int {
        auto* s = static_cast<Search*>(data);
        bool ours = false;
        const ElfW(Phdr)* tls_phdr = nullptr;
        for (int i = 0; i < info->dlpi_phnum; ++i) {
          const ElfW(Phdr)& ph = info->dlpi_phdr[i];
          const std::uintptr_t lo = info->dlpi_addr + ph.p_vaddr;
          if (ph.p_type == PT_LOAD && s->probe >= lo && s->probe < lo + ph.p_memsz) ours = true;
          if (ph.p_type == PT_TLS) tls_phdr = &ph;
        }
        if (!ours) return 0;
        s->found = true;
        if (tls_phdr != nullptr && info->dlpi_tls_data != nullptr) {
          auto* block = static_cast<unsigned char*>(info->dlpi_tls_data);
          s->region = {block + tls_phdr->p_filesz, block + tls_phdr->p_memsz};
        }
        return 1;
      },
      &search);
  if (!search.found || search.region.begin == nullptr ||
      (runtime_tls + sizeof(Tls) > search.region.begin && runtime_tls < search.region.end)) {
    fail("internal: cannot locate this module's thread-local shared memory (.tbss)");
  }
  return search.region;
}
#endif

// ---------------------------------------------------------------------------
// Device buffers with guard regions and canaries.

Registry& registry() {
  static Registry r;
  return r;
}


// A buffer of `bytes` whose end is 16-byte aligned against a 64 KiB PROT_NONE
// guard region; another guards the page before it. Everything between the
// guards that is not the buffer holds 0xFF canaries.
void* device_malloc(std::size_t bytes, int tag) {
  const std::size_t page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  const std::size_t padded = round_up(bytes, 16);
  const std::size_t body = std::max(round_up(padded, page), page);
  const std::size_t map_bytes = kGuardBytes + body + kGuardBytes;
  void* m = mmap(nullptr, map_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (m == MAP_FAILED) fail("gg_emu_malloc(%zu): mmap failed: %s", bytes, std::strerror(errno));
  auto* map = static_cast<unsigned char*>(m);
  mprotect(map, kGuardBytes, PROT_NONE);
  mprotect(map + kGuardBytes + body, kGuardBytes, PROT_NONE);
  std::memset(map + kGuardBytes, kPoison, body);
  unsigned char* data = map + kGuardBytes + body - padded;
  std::lock_guard<std::mutex> lock(registry().mu);
  registry().buffers.push_back({map, map_bytes, data, bytes, padded, tag});
  return data;
}

void device_free(void* p) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  for (std::size_t i = 0; i < r.buffers.size(); ++i) {
    if (r.buffers[i].data == p) {
      munmap(r.buffers[i].map, r.buffers[i].map_bytes);
      r.buffers.erase(r.buffers.begin() + static_cast<std::ptrdiff_t>(i));
      return;
    }
  }
}

std::string describe_buffer(const DeviceBuffer& b) {
  return b.tag >= 0 ? format("argument #%d (%zu bytes)", b.tag, b.bytes) : format("buffer %p (%zu bytes)", b.data, b.bytes);
}

// Finds writes into the canary bytes around every live buffer.
void check_canaries() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  for (const DeviceBuffer& b : r.buffers) {
    const unsigned char* lead = b.map + kGuardBytes;
    for (const unsigned char* p = lead; p < b.data; ++p) {
      if (*p != kPoison) {
        fail("out-of-bounds write: %zu bytes before the start of %s was written", static_cast<std::size_t>(b.data - p),
             describe_buffer(b).c_str());
      }
    }
    for (std::size_t i = b.bytes; i < b.padded; ++i) {
      if (b.data[i] != kPoison) {
        fail("out-of-bounds write at byte offset %zu of %s", i, describe_buffer(b).c_str());
      }
    }
  }
}

// ---------------------------------------------------------------------------
// Poisoned fiber stacks (gg_emu_internal.h) and the fault handler.

StackArea stack_areas[kMaxStackAreas];

std::size_t page_bytes() {
  static const std::size_t page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  return page;
}

GG_EMU_UNCHECKED void fill_stack_poison(unsigned char* p, std::size_t bytes) {
  typedef std::uint32_t Words __attribute__((vector_size(16)));
  const Words poison = {kStackPoison, kStackPoison, kStackPoison, kStackPoison};
  auto* w = reinterpret_cast<Words*>(p);  // page-aligned
  for (std::size_t i = 0; i < bytes / sizeof(Words); ++i) w[i] = poison;
}

// Called by the fault handler: true when `addr` lies in the not yet
// accessible part of a fiber stack, which is then made accessible.
GG_EMU_UNCHECKED bool grow_fiber_stack(const unsigned char* addr) {
  for (StackArea& a : stack_areas) {
    if (!a.in_use.load(std::memory_order_acquire)) continue;
    if (addr < a.map || addr >= a.map + a.count * a.each) continue;
    const std::size_t i = static_cast<std::size_t>(addr - a.map) / a.each;
    unsigned char* lowest = a.map + i * a.each + kGuardBytes;
    unsigned char* low = a.low[i];
    if (addr < lowest || addr >= low) return false;  // the guard, or not ours
    const std::size_t page = page_bytes();
    const auto at = reinterpret_cast<std::uintptr_t>(addr) / page * page;
    unsigned char* from = std::max(lowest, reinterpret_cast<unsigned char*>(at) - 3 * page);
    if (mprotect(from, static_cast<std::size_t>(low - from), PROT_READ | PROT_WRITE) != 0) return false;
    fill_stack_poison(from, static_cast<std::size_t>(low - from));
    a.low[i] = from;
    return true;
  }
  return false;
}

// The SIGSEGV and SIGBUS handlers installed before ours. Several emulated
// libraries may share a process (XLA's CPU platform loads one per FFI
// handler, docs/cuda-emulation.md, "Inside XLA"): each installs its handler
// once, and a fault that is none of its own (another library's fiber stack
// growing, or its buffers) goes on to the handler it replaced, when that is
// one taking siginfo as ours do.
struct sigaction previous_fault_handler[2];

void on_fault(int sig, siginfo_t* info, void* context) {
  const auto* addr = static_cast<const unsigned char*>(info->si_addr);
#if !defined(GG_EMU_TSAN)
  if ((sig == SIGSEGV || sig == SIGBUS) && grow_fiber_stack(addr)) return;
#endif
  std::string what = format("invalid memory access (%s) at address %p", sig == SIGBUS ? "SIGBUS" : "SIGSEGV", info->si_addr);
  bool ours = false;
  Registry& r = registry();
  for (const DeviceBuffer& b : r.buffers) {
    if (addr >= b.map && addr < b.map + b.map_bytes) {
      ours = true;
      if (addr < b.data) {
        what = format("out-of-bounds access %zu bytes before the start of %s", static_cast<std::size_t>(b.data - addr),
                      describe_buffer(b).c_str());
      } else {
        what = format("out-of-bounds access at byte offset %zu of %s", static_cast<std::size_t>(addr - b.data),
                      describe_buffer(b).c_str());
      }
    }
  }
  for (const ExitedSmem& e : r.exited_smem) {
    if (addr >= e.begin && addr < e.end) {
      ours = true;
      what = format("%s (byte %zu of its dynamic shared memory)", e.what,
                    static_cast<std::size_t>(addr - e.dyn));
    }
  }
  for (const StackGuard& g : r.stack_guards) {
    if (addr >= g.begin && addr < g.end) {
      ours = true;
      what = format("stack overflow in a CUDA thread (each has %zu KiB; set GG_EMU_STACK_KB)", r.stack_bytes >> 10);
    }
  }
  const struct sigaction& previous = previous_fault_handler[sig == SIGBUS ? 1 : 0];
  if (!ours && (previous.sa_flags & SA_SIGINFO) != 0 && previous.sa_sigaction != nullptr) {
    previous.sa_sigaction(sig, info, context);
    return;
  }
  fail_with_status(kExitFault, what);
}

void install_fault_handler() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction sa {};
    sa.sa_sigaction = &on_fault;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, &previous_fault_handler[0]);
    sigaction(SIGBUS, &sa, &previous_fault_handler[1]);
  });
}

std::string where() {
  const ThreadCtx* t = tls.thread;
  if (t == nullptr || t->runner == nullptr) return "";
  return format("  in kernel %s, block (%u,%u,%u), thread (%u,%u,%u) = warp %u lane %u\n",
                t->runner->launch().kernel->name.c_str(), t->block_idx.x, t->block_idx.y, t->block_idx.z,
                t->thread_idx.x, t->thread_idx.y, t->thread_idx.z, t->warp, t->lane);
}

// ---------------------------------------------------------------------------
// gg_emu_core.h's calls into the calling thread's BlockRunner.

void collective(ThreadCtx& t, const char* op, unsigned mask, const void* in, void* out, CollectiveFn fn) {
  t.runner->collective(t, op, mask, in, out, fn);
}

void block_sync(ThreadCtx& t) { t.runner->syncthreads(t); }

GG_EMU_UNCHECKED unsigned active_lanes(const ThreadCtx& t) { return t.runner->lanes_present(t.warp); }

GG_EMU_UNCHECKED bool in_shared_memory(const ThreadCtx& t, const void* p, std::size_t bytes) {
  return t.runner->is_shared(p, bytes);
}

void land_cp_async(ThreadCtx& t, unsigned keep) { BlockRunner::land_cp_async(t, keep); }

void syncwarp(unsigned mask) {
  warp_collective<char, char>("__syncwarp", mask, char{}, [](unsigned, const char* const*) { return char{}; });
}

unsigned ballot(unsigned mask, bool predicate) {
  return warp_collective<int, unsigned>("vote.sync.ballot", mask, predicate ? 1 : 0,
                                        [](unsigned, const int* const* ins) {
                                          unsigned bits = 0;
                                          for (unsigned l = 0; l < kWarpSize; ++l) {
                                            if (ins[l] != nullptr && *ins[l] != 0) bits |= 1u << l;
                                          }
                                          return bits;
                                        });
}

}  // namespace gg::emu
