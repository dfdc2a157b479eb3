// gg_emu_host.cc: the child process that runs an emulated launch in
// ThreadSanitizer mode. CPython cannot load a TSan-instrumented library (the
// TSan runtime must start with the process), so gemmgen.harness.cuda_emu runs
// this program, built with -fsanitize=thread, instead of its ctypes child:
//
//   gg_emu_host <kernel library.so> <request file> <response file>
#include <dlfcn.h>

#include <cstdio>

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s LIBRARY REQUEST RESPONSE\n", argv[0]);
    return 2;
  }
  void* lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    std::fprintf(stderr, "gg-emu: error: cannot load %s: %s\n", argv[1], dlerror());
    return 2;
  }
  using RunRequest = int (*)(const char*, const char*);
  auto run = reinterpret_cast<RunRequest>(dlsym(lib, "gg_emu_run_request"));
  if (run == nullptr) {
    std::fprintf(stderr, "gg-emu: error: %s has no gg_emu_run_request\n", argv[1]);
    return 2;
  }
  return run(argv[2], argv[3]);
}
