// gg_emu_sm100_tmem.cc: tensor memory: tcgen05.alloc / dealloc /
// relinquish_alloc_permit, the tcgen05 fences, and tcgen05.ld / st with
// their waits. Part of the emulator's model of tensor memory and tcgen05
// (gg_emu_sm100.h), compiled once per build mode into the core objects.
#include "gg_emu_sm100_state.h"

namespace gg::emu {

namespace sm100 {

// ---------------------------------------------------------------------------
// TMEM allocation.

struct FitArg {
  const Sm100Block* b;
  unsigned ncols;
};

// The lowest column of a free run of `ncols` columns aligned to ncols, or kColumns.
inline unsigned find_free(const Sm100Block& b, unsigned ncols) {
  for (unsigned c = 0; c + ncols <= kColumns; c += ncols) {
    bool free = true;
    for (const Alloc& a : b.allocs)
      free = free && (a.column + a.ncols <= c || c + ncols <= a.column);
    if (free)
      return c;
  }
  return kColumns;
}

void tmem_alloc_group(unsigned* slot, unsigned ncols, unsigned group, const char* kOp) {
  require_arch(kOp);
  agree(kOp, addr_of(slot), ncols);
  const ThreadCtx& t = current();
  if (t.lane == 0) {
    check_ncols(ncols, kOp);
    if (!runner().is_shared(slot, 4) || reinterpret_cast<std::uintptr_t>(slot) % 4 != 0)
      fail("%s: the address slot %p is not 4-byte aligned shared memory", kOp,
           static_cast<void*>(slot));
    Sm100Block& b = block();
    if (b.relinquished) {
      fail(
          "%s after tcgen05.relinquish_alloc_permit: the block gave up its right to allocate TMEM "
          "(warp %u asks for %u columns)",
          kOp, t.warp, ncols);
    }
    if (find_free(b, ncols) == kColumns) {
      b.alloc_waits[t.warp] = ncols;
      Sm100Thread& u = me();
      u.wait_text =
          format("tcgen05.alloc of %u TMEM columns (%s)", ncols, describe_allocs(b).c_str());
      const FitArg arg{&b, ncols};
      runner().wait_until(
          current(), u.wait_text.c_str(),
          [](const void* p) {
            const auto* f = static_cast<const FitArg*>(p);
            return find_free(*f->b, f->ncols) != kColumns;
          },
          &arg);
      b.alloc_waits[t.warp] = 0;
    }
    const unsigned column = find_free(b, ncols);
    if (group == 2) {
      // The pair's allocation: the same columns in both CTAs (each CTA's
      // warp of the same warp id issues it; the emulator allocates in each
      // CTA's own TMEM when its warp does, and checks that they agree).
      const BlockRunner& peer = *runner().cluster()->ctas[runner().cluster_rank() ^ 1u];
      if (peer.sm100 != nullptr && peer.sm100->used) {
        for (const Alloc& a : peer.sm100->allocs) {
          if (a.group == 2 && a.warp == t.warp && a.ncols == ncols && a.column != column) {
            fail("%s: this CTA's free columns give [%u, %u), but the pair peer (CTA rank %u) got "
                 "[%u, %u): a CTA pair allocates the same columns in both",
                 kOp, column, column + ncols, runner().cluster_rank() ^ 1u, a.column,
                 a.column + ncols);
          }
        }
      }
    }
    b.allocs.push_back({column, ncols, t.warp, group});
    std::erase_if(b.freed, [&](const Alloc& a) {
      return a.column < column + ncols && column < a.column + a.ncols;
    });
    for (unsigned lane = 0; lane < kLanes; ++lane) {
      for (unsigned c = column; c < column + ncols; ++c) {
        b.cells[cell(lane, c)] = kCellPoison;
        b.epoch[cell(lane, c)] = 0;
        b.written[cell(lane, c)] = 0;
        b.unread[cell(lane, c)] = 0;
      }
    }
    *slot = column;  // lane 0, the first column
  }
  syncwarp(0xffffffffu);  // the other lanes see the slot after lane 0 wrote it
}

void tmem_alloc(unsigned* slot, unsigned ncols) {
  tmem_alloc_group(slot, ncols, 1, "tcgen05.alloc");
}

void tmem_dealloc_named(unsigned taddr, unsigned ncols, const char* kOp) {
  require_arch(kOp);
  agree(kOp, taddr, ncols);
  const ThreadCtx& t = current();
  if (t.lane == 0) {
    check_ncols(ncols, kOp);
    Sm100Block& b = block();
    const unsigned column = taddr & 0xFFFFu, lane = taddr >> 16;
    if (lane != 0)
      fail("%s: the address 0x%08x names lane %u; an allocation starts at lane 0", kOp, taddr,
           lane);
    auto it = std::find_if(b.allocs.begin(), b.allocs.end(),
                           [&](const Alloc& a) { return a.column == column && a.ncols == ncols; });
    if (it == b.allocs.end()) {
      for (const Alloc& a : b.freed) {
        if (a.column == column && a.ncols == ncols) {
          fail(
              "%s of TMEM columns [%u, %u), which were already freed (allocated by warp %u): a "
              "double free (%s)",
              kOp, column, column + ncols, a.warp, describe_allocs(b).c_str());
        }
      }
      fail("%s of TMEM columns [%u, %u), which are not one allocation (%s)", kOp, column,
           column + ncols, describe_allocs(b).c_str());
    }
    check_inherited(column, column + ncols, kOp);
    for (unsigned l = 0; l < kLanes; ++l) {
      for (unsigned c = column; c < column + ncols; ++c) {
        if (b.pending[cell(l, c)] != 0) {
          fail(
              "%s of TMEM columns [%u, %u) while a tcgen05.mma still writes lane %u column %u: "
              "wait on its tcgen05.commit's mbarrier phase first",
              kOp, column, column + ncols, l, c);
        }
      }
    }
    b.freed.push_back(*it);
    b.allocs.erase(it);
    runner().wake_waiters();
  }
  syncwarp(0xffffffffu);
}

void tmem_dealloc(unsigned taddr, unsigned ncols) {
  tmem_dealloc_named(taddr, ncols, "tcgen05.dealloc");
}

void tmem_relinquish() {
  static constexpr const char* kOp = "tcgen05.relinquish_alloc_permit";
  require_arch(kOp);
  agree(kOp, 0, 0);
  if (current().lane == 0)
    block().relinquished = true;
  syncwarp(0xffffffffu);
}

void fence_before() {
  require_arch("tcgen05.fence::before_thread_sync");
  Sm100Block& b = block();
  Sm100Thread& t = b.threads[current().linear];
  t.unfenced.clear();
  const unsigned lane = 32 * ((current().linear / 32) % 4) + current().linear % 32;
  b.handback[lane] = std::max(b.handback[lane], t.fence_epoch);
}

void fence_after() {
  require_arch("tcgen05.fence::after_thread_sync");
  Sm100Block& b = block();
  b.threads[current().linear].fence_epoch = b.retire_epoch;
}

// ---------------------------------------------------------------------------
// tcgen05.ld / st.

// The lanes [lane(addr), + span) a warp's access touches must lie in the
// warp's quarter of TMEM (PTX ISA, tcgen05 "Access restrictions": warp w of
// a warpgroup reaches lanes 32 * (w % 4) .. + 31); a 32-lane shape starts
// at the quarter's first lane, a 16-lane one at its first or 17th.
inline void check_lanes(unsigned taddr, unsigned span, const char* op) {
  const ThreadCtx& t = current();
  const unsigned lane = taddr >> 16, quarter = t.warp % 4;
  if (lane < 32 * quarter || lane + span > 32 * quarter + 32 || lane % span != 0) {
    fail(
        "%s: warp %u (position %u in its warpgroup) accesses TMEM lanes %u..%u, but it reaches "
        "only lanes %u..%u (PTX ISA, tcgen05 \"Access restrictions\")%s",
        op, t.warp, quarter, lane, lane + span - 1, 32 * quarter, 32 * quarter + 31,
        lane % span != 0 ? format(", from a lane that is a multiple of %u", span).c_str() : "");
  }
}

// The shapes of tcgen05.ld (PTX ISA, "Matrix fragments for tcgen05.ld /
// st", the figures of .32x32b and .16x256b): the lane and column, relative
// to the address, of register `reg` of lane `t` of the warp.
enum class LdShape { s32x32b, s16x256b };

inline void ld_cell(LdShape shape, unsigned t, unsigned reg, unsigned* lane, unsigned* column) {
  if (shape == LdShape::s32x32b) {
    *lane = t;
    *column = reg;
    return;
  }
  // .16x256b: 16 lanes x 8 columns per .num; registers 0, 1 at lane t / 4,
  // columns 2 (t % 4) and + 1; registers 2, 3 the same 8 lanes further.
  const unsigned rep = reg / 4, j = reg % 4;
  *lane = t / 4 + 8 * (j / 2);
  *column = 8 * rep + 2 * (t % 4) + j % 2;
}

inline void load(LdShape shape, const char* op, unsigned* r, unsigned nregs, unsigned taddr) {
  require_arch(op);
  agree(op, taddr, nregs);
  const unsigned span = shape == LdShape::s32x32b ? 32 : 16;
  const unsigned ncols =
      shape == LdShape::s32x32b ? nregs : 2 * nregs;  // 16x256b: 8 columns per 4 registers
  check_lanes(taddr, span, op);
  Sm100Block& b = block();
  const unsigned column0 = taddr & 0xFFFFu, lane0 = taddr >> 16, me_lane = current().lane;
  check_columns(b, column0, ncols, op);
  Sm100Thread& t = b.threads[current().linear];
  LdPending p{r, nregs, std::vector<std::uint32_t>(nregs)};
  for (unsigned j = 0; j < nregs; ++j) {
    unsigned dl, dc;
    ld_cell(shape, me_lane, j, &dl, &dc);
    const unsigned lane = lane0 + dl, column = column0 + dc;
    const std::size_t c = cell(lane, column);
    if (b.pending[c] != 0) {
      const MmaOp* mma_op = op_by_id(b, b.pending[c]);
      fail(
          "%s reads TMEM lane %u column %u, which a %s issued by thread %u still writes "
          "(%s): the %s is read before a thread waited on the mbarrier phase of a "
          "tcgen05.commit after that %s",
          op, lane, column, mma_op->name, mma_op->thread, commits_text(*mma_op).c_str(),
          mma_op->kind < 0 ? "copy's destination" : "accumulator",
          mma_op->kind < 0 ? "copy" : "MMA");
    }
    if (b.epoch[c] > t.fence_epoch) {
      fail(
          "missing tcgen05.fence::after_thread_sync: %s reads TMEM lane %u column %u, which a "
          "tcgen05.mma completed into after this thread's last tcgen05.fence::after_thread_sync "
          "(wait on the commit's mbarrier, then fence, then tcgen05.ld)",
          op, lane, column);
    }
    p.values[j] = b.cells[c];
    b.unread[c] = 0;
    r[j] = kLdPoison;
  }
  t.lds.push_back(std::move(p));
  t.unfenced.push_back({0, 0, current().linear, column0, column0 + ncols, op});
  sm90::set_invalid_trap(true);
}

void tmem_ld(unsigned* r, unsigned n, unsigned taddr) {
  load(LdShape::s32x32b, "tcgen05.ld.32x32b", r, n, taddr);
}

void tmem_ld_16x256b(unsigned* r, unsigned num, unsigned taddr) {
  load(LdShape::s16x256b, "tcgen05.ld.16x256b", r, 4 * num, taddr);
}

void wait_ld() {
  require_arch("tcgen05.wait::ld");
  agree("tcgen05.wait::ld", 0, 0);
  Sm100Thread& t = me();
  for (const LdPending& p : t.lds) {
    for (unsigned j = 0; j < p.n; ++j) {
      if (p.r[j] != kLdPoison) {
        fail(
            "the destination registers of a tcgen05.ld (r[%u] of %u) were written before "
            "tcgen05.wait::ld",
            j, p.n);
      }
      p.r[j] = p.values[j];
    }
  }
  const bool had = !t.lds.empty();
  t.lds.clear();
  if (had)
    sm90::set_invalid_trap(false);
}

void tmem_st(const unsigned* r, unsigned n, unsigned taddr) {
  static constexpr const char* kOp = "tcgen05.st.32x32b";
  require_arch(kOp);
  agree(kOp, taddr, n);
  check_lanes(taddr, 32, kOp);
  Sm100Block& b = block();
  const unsigned column = taddr & 0xFFFFu, lane = (taddr >> 16) + current().lane;
  check_columns(b, column, n, kOp);
  check_inherited(column, column + n, kOp);
  for (unsigned j = 0; j < n; ++j) {
    const std::size_t c = cell(lane, column + j);
    if (b.pending[c] != 0) {
      fail("%s writes TMEM lane %u column %u, which a tcgen05.mma issued by thread %u still writes",
           kOp, lane, column + j, op_by_id(b, b.pending[c])->thread);
    }
    b.cells[c] = r[j];
    b.epoch[c] = 0;
    b.written[c] = 1;
    b.unread[c] = 0;
  }
  Sm100Thread& t = me();
  t.st_pending = true;
  t.unfenced.push_back({0, 0, current().linear, column, column + n, kOp});
}

void wait_st() {
  require_arch("tcgen05.wait::st");
  agree("tcgen05.wait::st", 0, 0);
  me().st_pending = false;
}

}  // namespace sm100

}  // namespace gg::emu
