// gg_emu_sm80.h: the emulator's sm_80 warp-level primitives that are not
// templates: cp.async and its groups, and the shared-memory check of
// ldmatrix's row addresses. Included by gg_emu.h only.
//
// The sm_80 family's other instructions are warp-collectives
// (gg_emu_core.h's warp_collective) whose CPU bodies are templates on the
// fragment types, so they live with the PTX in gg_primitives.cuh: mma.sync
// (every shape and type gemmgen emits; exact products summed in double,
// rounded once to f32), ldmatrix (x1/x2/x4, .trans) and the shuffles.
// cp.async stays inline here: the memory checker names the kernel's line by
// the return address of mc::on_cp_async.
#pragma once

namespace gg::emu {

// cp.async: the destination reads as poison (0xFF) from issue until the
// thread's cp.async.wait_group lands the copy.
GG_EMU_ALWAYS_INLINE void cp_async(void* dst, const void* src, unsigned cp_size, unsigned src_size) {
  ThreadCtx& t = current();
  const auto d = reinterpret_cast<std::uintptr_t>(dst);
  const auto s = reinterpret_cast<std::uintptr_t>(src);
  if (src_size > cp_size) fail("cp.async: src-size %u exceeds cp-size %u", src_size, cp_size);
  if (d % cp_size != 0 || s % cp_size != 0) {
    fail("cp.async of %u bytes needs %u-byte aligned addresses; got dst %p, src %p", cp_size, cp_size, dst, src);
  }
  if (!in_shared_memory(t, dst, cp_size)) fail("cp.async: destination %p is not in shared memory", dst);
  mc::on_cp_async(dst, src, cp_size, src_size);
  std::memset(dst, kPoison, cp_size);
  t.cp_pending.push_back({dst, src, cp_size, src_size, t.cp_committed});
}

inline void cp_async_commit() { ++current().cp_committed; }

inline void cp_async_wait(unsigned keep) { land_cp_async(current(), keep); }

inline unsigned lane_id() { return current().lane; }

inline void check_shared(const void* p, std::size_t bytes, const char* what) {
  if (!in_shared_memory(current(), p, bytes)) fail("%s: address %p is not in shared memory", what, p);
}

}  // namespace gg::emu
