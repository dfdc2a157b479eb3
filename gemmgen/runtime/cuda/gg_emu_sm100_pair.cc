// gg_emu_sm100_pair.cc: cta_group::2, the 2-CTA forms over a CTA pair: TMEM
// allocation, tcgen05.mma and the multicast commit. Part of the emulator's
// model of tensor memory and tcgen05 (gg_emu_sm100.h), compiled once per
// build mode into the core objects.
#include "gg_emu_sm100_state.h"

namespace gg::emu {

namespace sm100 {

// ---------------------------------------------------------------------------
// cta_group::2: the pair of CTAs (ranks 2i and 2i + 1 of a cluster) that one
// tcgen05.mma.cta_group::2 spans (PTX ISA, tcgen05 "CTA pair"; CuTe's
// SM100_MMA_*_2x1SM_SS traits). Each CTA keeps its own TMEM and its own
// record of the op (its reads, its D cells), so that the stage release rule
// and the retirement work per CTA as for cta_group::1.

void tmem_alloc_pair(unsigned* slot, unsigned ncols) {
  static constexpr const char* kOp = "tcgen05.alloc.cta_group::2";
  pair_peer(kOp);
  tmem_alloc_group(slot, ncols, 2, kOp);
}

void tmem_dealloc_pair(unsigned taddr, unsigned ncols) {
  static constexpr const char* kOp = "tcgen05.dealloc.cta_group::2";
  require_arch(kOp);
  if (current().lane == 0) {
    const Alloc* a = allocation_of(block(), taddr & 0xFFFFu);
    if (a != nullptr && a->group != 2) {
      fail("%s of TMEM columns [%u, %u), which tcgen05.alloc.cta_group::1 allocated (warp %u)", kOp,
           a->column, a->column + a->ncols, a->warp);
    }
  }
  tmem_dealloc_named(taddr, ncols, kOp);
}

void tmem_relinquish_pair() {
  pair_peer("tcgen05.relinquish_alloc_permit.cta_group::2");
  tmem_relinquish();
}

void mma_pair(int kind, unsigned d_tmem, unsigned long long adesc, unsigned long long bdesc,
              unsigned idesc, bool accumulate) {
  const char* op_name =
      kind == 0 ? "tcgen05.mma.cta_group::2.kind::f16" : "tcgen05.mma.cta_group::2.kind::f8f6f4";
  require_arch(op_name);
  BlockRunner& self = runner();
  BlockRunner& peer = pair_peer(op_name);
  const unsigned rank = self.cluster_rank();
  if (rank % 2 != 0) {
    fail("%s issued by CTA rank %u, an odd CTA: a cta_group::2 MMA is issued by one thread of "
         "the even (leader) CTA of the pair (ranks %u and %u)",
         op_name, rank, rank - 1, rank);
  }
  const std::string bad = check_idesc(idesc, kind, 2);
  if (!bad.empty())
    fail("%s: instruction descriptor 0x%08x: %s", op_name, idesc, bad.c_str());
  const Idesc id = decode_idesc(idesc);
  const bool a_mn = id.a_mn != 0, b_mn = id.b_mn != 0;
  for (int which = 0; which < 2; ++which) {
    const std::string why = check_desc(which == 0 ? adesc : bdesc, which == 0 ? a_mn : b_mn);
    if (!why.empty()) {
      fail("%s: the %s matrix descriptor 0x%016llx: %s", op_name, which == 0 ? "A" : "B",
           which == 0 ? adesc : bdesc, why.c_str());
    }
  }
  if ((d_tmem >> 16) != 0)
    fail("%s: the D address 0x%08x names lane %u; a cta_group::2 accumulator starts at lane 0",
         op_name, d_tmem, d_tmem >> 16);
  const unsigned column = d_tmem & 0xFFFFu;
  const unsigned mh = id.m / 2, nh = id.n / 2;
  const unsigned ncols = id.m == 256 ? id.n : nh;
  const unsigned k = kind == 0 ? 16 : 32, eb = kind == 0 ? 2 : 1;
  const unsigned tid = current().linear;
  // Each CTA's half of A (mh rows) and of B (nh rows), at the descriptors'
  // addresses in its own shared memory.
  std::vector<double> av[2], bv[2];
  BlockRunner* ctas[2] = {&self, &peer};
  // The descriptors name shared::cta addresses, the same offsets in both
  // CTAs; the emulator's window address of an offset differs per CTA.
  const std::uint32_t base0 = addr_of(self.shared_region().begin);
  if ((reinterpret_cast<std::uintptr_t>(self.shared_region().begin) -
       reinterpret_cast<std::uintptr_t>(peer.shared_region().begin)) % 1024 != 0) {
    fail("internal: the shared memory of the two CTAs of the pair is not laid out alike (1024-byte "
         "alignment of the worker threads' TLS)");
  }
  const auto rebase = [&](unsigned long long desc, const BlockRunner& to) {
    const std::uint32_t start = static_cast<std::uint32_t>(desc & 0x3FFFu) << 4;
    const std::uint32_t moved = (start - base0 + addr_of(to.shared_region().begin)) % sm90::kWindow;
    return (desc & ~0x3FFFull) | ((moved >> 4) & 0x3FFFu);
  };
  MmaOp ops[2];
  for (unsigned v = 0; v < 2; ++v) {
    OnPeer on(ctas[v]);
    Sm100Block& b = block();
    for (unsigned c = column; c < column + ncols; ++c) {
      const Alloc* a = c < kColumns ? allocation_of(b, c) : nullptr;
      if (a == nullptr) {
        fail("%s writes TMEM columns %u..%u of CTA rank %u, outside every allocation of that CTA "
             "(%s)",
             op_name, column, column + ncols - 1, rank + v, describe_allocs(b).c_str());
      }
      if (a->group != 2) {
        fail("%s writes TMEM columns %u..%u of CTA rank %u, which tcgen05.alloc.cta_group::1 "
             "allocated (warp %u, columns [%u, %u)): a cta_group::2 MMA writes D in both CTAs of "
             "the pair and needs their columns from tcgen05.alloc.cta_group::2",
             op_name, column, column + ncols - 1, rank + v, a->warp, a->column, a->column + a->ncols);
      }
    }
    check_inherited(column, column + ncols, op_name);
    const SharedRegion& s = runner().shared_region();
    const std::uint32_t base = addr_of(s.begin);
    const Desc da = decode_desc(rebase(adesc, *ctas[v])), db = decode_desc(rebase(bdesc, *ctas[v]));
    MmaOp& op = ops[v];
    op.id = b.next_id++;
    op.thread = tid;
    op.m = op.n = 0;  // its cells are listed
    op.column = column;
    op.lane0 = 0;
    op.kind = kind;
    op.name = op_name;
    op.issuer = static_cast<int>(rank);
    operand_reads(op.reads, da, a_mn, eb, mh, k, base);
    const std::size_t a_ranges = op.reads.size();
    operand_reads(op.reads, db, b_mn, eb, nh, k, base);
    for (std::size_t i = 0; i < op.reads.size(); ++i) {
      const sm90::Range& r = op.reads[i];
      const bool is_a = i < a_ranges;
      const std::string reader =
          format("%s (its %s operand in CTA rank %u, %s)", op_name, is_a ? "A" : "B", rank + v,
                 layout_name((is_a ? da : db).layout));
      const unsigned layout = (is_a ? da : db).layout;
      sm90::check_async_read(r.lo, r.hi, layout == 1 ? 1u : layout_span(layout), reader.c_str());
      hopper_check_ordered_read(self, r.lo, r.hi, reader.c_str());
      op.bytes.insert(op.bytes.end(), s.begin + r.lo, s.begin + r.hi);
    }
    auto bits_at = [&](std::uint32_t a) {
      unsigned x = 0;
      std::memcpy(&x, s.begin + (a - base) % sm90::kWindow, eb);
      return x;
    };
    auto decode = [&](unsigned fmt, unsigned bits) {
      if (kind == 0)
        return id.a_format == 1 ? bf16_value(bits) : f16_value(bits);
      return fmt == 0 ? e4m3_value(bits) : e5m2_value(bits);
    };
    const double sa = id.negate_a ? -1.0 : 1.0, sb = id.negate_b ? -1.0 : 1.0;
    av[v].resize(static_cast<std::size_t>(mh) * k);
    bv[v].resize(static_cast<std::size_t>(nh) * k);
    for (unsigned m = 0; m < mh; ++m)
      for (unsigned kk = 0; kk < k; ++kk)
        av[v][m * k + kk] = sa * decode(id.a_format, bits_at(operand_address(da, a_mn, eb, m, kk)));
    for (unsigned n = 0; n < nh; ++n)
      for (unsigned kk = 0; kk < k; ++kk)
        bv[v][n * k + kk] = sb * decode(id.b_format, bits_at(operand_address(db, b_mn, eb, n, kk)));
  }
  // D in CTA v: its rows of A times all of B (B's rows n < N / 2 from the
  // even CTA, the others from the odd one).
  for (unsigned v = 0; v < 2; ++v) {
    OnPeer on(ctas[v]);
    Sm100Block& b = block();
    MmaOp& op = ops[v];
    for (unsigned m = 0; m < mh; ++m) {
      for (unsigned n = 0; n < id.n; ++n) {
        const std::vector<double>& bsrc = bv[n / nh];
        const unsigned nn = n % nh;
        double acc = 0.0;
        for (unsigned kk = 0; kk < k; ++kk)
          acc += av[v][m * k + kk] * bsrc[nn * k + kk];
        unsigned lane, col;
        pair_d_cell(id.m, id.n, m, n, &lane, &col);
        const std::size_t c = cell(lane, column + col);
        const unsigned p = b.pending[c];
        const MmaOp* other = p != 0 ? op_by_id(b, p) : nullptr;
        if (other != nullptr && (other->thread != tid || other->issuer != op.issuer)) {
          fail("%s writes TMEM lane %u column %u of CTA rank %u, which a %s of thread %u still "
               "writes (tcgen05.mma of different threads are not ordered)",
               op_name, lane, column + col, rank + v, other->name, other->thread);
        }
        if (!accumulate)
          check_overwrite(b, c, op_name, format(" of CTA rank %u", rank + v).c_str());
        float prev;
        std::memcpy(&prev, &b.cells[c], sizeof prev);
        const float result =
            static_cast<float>((accumulate ? static_cast<double>(prev) : 0.0) + acc);
        std::memcpy(&b.cells[c], &result, sizeof result);
        b.pending[c] = op.id;
        b.written[c] = 1;
        b.unread[c] = 1;
        op.cells.push_back(c);
      }
    }
    b.ops.push_back(std::move(op));
  }
}

void commit_pair(void* bar, unsigned short mask) {
  static constexpr const char* kOp =
      "tcgen05.commit.cta_group::2.mbarrier::arrive::one.shared::cluster.multicast::cluster";
  require_arch(kOp);
  BlockRunner& self = runner();
  pair_peer(kOp);
  const unsigned n = sm90::cluster_nctarank();
  const unsigned rank = self.cluster_rank();
  if (mask == 0)
    fail("%s: ctaMask is 0 (no CTA gets the arrival)", kOp);
  if ((mask >> n) != 0) {
    fail("%s: ctaMask 0x%04x names CTA rank %u, but the cluster has %u CTAs", kOp, mask,
         31 - __builtin_clz(static_cast<unsigned>(mask)), n);
  }
  if (!self.is_shared(bar, 8))
    fail("%s: %p is not the calling CTA's shared memory", kOp, bar);
  const unsigned tid = current().linear;
  const std::size_t off = static_cast<std::size_t>(static_cast<unsigned char*>(bar) -
                                                   self.shared_region().begin);
  // The arrival on each CTA of the mask covers every earlier op of this
  // thread, in both CTAs of the pair (each keeps its half).
  BlockRunner* pair[2] = {&self, self.cluster()->ctas[rank ^ 1u]};
  for (unsigned r = 0; r < n; ++r) {
    if (((mask >> r) & 1u) == 0)
      continue;
    BlockRunner* cta = self.cluster()->ctas[r];
    unsigned long long phase;
    {
      OnPeer on(cta);
      phase = sm90::mbarrier_phase(cta->shared_region().begin + off, kOp);
    }
    const std::uint32_t at = addr_of(cta->shared_region().begin + off);
    for (BlockRunner* x : pair) {
      if (x->sm100 == nullptr || !x->sm100->used)
        continue;
      for (MmaOp& op : x->sm100->ops) {
        const bool mine = op.thread == tid && (op.issuer == static_cast<int>(rank) ||
                                               (x == &self && op.issuer < 0));
        if (mine)
          op.commits.push_back({at, phase, cta});
      }
    }
  }
  for (unsigned r = 0; r < n; ++r) {
    if (((mask >> r) & 1u) != 0)
      sm90::mbarrier_arrive_cluster(sm90::map_shared_cluster(addr_of(bar), r));
  }
  // tcgen05.commit implies tcgen05.fence::before_thread_sync.
  me().unfenced.clear();
}

}  // namespace sm100

}  // namespace gg::emu
