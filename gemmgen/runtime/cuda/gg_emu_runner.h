// gg_emu_runner.h: BlockRunner, which runs the blocks of a launch on one
// worker: the threads of a block as fibers (or OS threads in TSan mode), the
// deterministic schedule, block barriers, warp-collectives, waits, deadlock
// and divergence reports. Core units only (gg_emu_internal.h).
#pragma once

#include "gg_emu_internal.h"

namespace gg::emu {

// ---------------------------------------------------------------------------
// BlockRunner: runs the blocks of a launch on one worker, one at a time.

class BlockRunner {
 public:
  explicit BlockRunner(Launch& launch)
      : launch_(launch), nthreads_(launch.threads_per_block()), threads_(nthreads_) {
    for (unsigned i = 0; i < nthreads_; ++i) {
      ThreadCtx& t = threads_[i];
      t.linear = i;
      t.lane = i % kWarpSize;
      t.warp = i / kWarpSize;
      t.thread_idx = make_uint3(i % launch.block.x, (i / launch.block.x) % launch.block.y,
                                i / (launch.block.x * launch.block.y));
      t.block_dim = launch.block;
      t.grid_dim = launch.grid;
      t.runner = this;
      t.cp_pending.reserve(16);
    }
#if defined(GG_EMU_TSAN)
    shared_ = {__start_gg_shared, __stop_gg_shared};
#else
    shared_ = module_tbss();
    allocate_stacks();
#endif
  }

  ~BlockRunner() {
#if !defined(GG_EMU_TSAN)
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mu);
    std::erase_if(r.stack_guards, [this](const StackGuard& g) {
      return g.begin >= stacks_ && g.begin < stacks_ + stacks_bytes_;
    });
    if (stack_area_ != nullptr) stack_area_->in_use.store(false, std::memory_order_release);
    munmap(stacks_, stacks_bytes_);
    mc::worker_end();
#endif
    hopper_free(hopper);
    sm100_free(sm100);
  }

  BlockRunner(const BlockRunner&) = delete;
  BlockRunner& operator=(const BlockRunner&) = delete;

  Launch& launch() { return launch_; }
  const Launch& launch() const { return launch_; }

  void run(unsigned long long linear_block) {
    begin_block(linear_block);
#if defined(GG_EMU_TSAN)
    run_threads();
#else
    run_fibers();
#endif
    end_block();
  }

#if !defined(GG_EMU_TSAN)
  // Makes this runner CTA `rank` of the clusters of group `c` (see Cluster).
  void join_cluster(Cluster* c, unsigned rank) {
    cluster_ = c;
    rank_ = rank;
    std::lock_guard<std::mutex> lock(c->mu);
    c->ctas[rank] = this;
  }

  // Runs CTA `rank_` (block `linear_block`) of the group's current cluster.
  void run_in_cluster(unsigned long long linear_block) {
    Cluster& c = *cluster_;
    begin_block(linear_block);
    {
      std::unique_lock<std::mutex> lock(c.mu);
      if (++c.ready == c.size) {
        c.baton = launch_.schedule == Schedule::reverse ? static_cast<int>(c.size) - 1 : 0;
        c.cv.notify_all();
      }
      c.cv.wait(lock, [&] { return c.baton == static_cast<int>(rank_) || c.finished == c.size; });
    }
    run_fibers();
    {
      // The CTA's shared memory lives (and its end checks wait) until every
      // CTA of the cluster is done.
      std::unique_lock<std::mutex> lock(c.mu);
      c.cv.wait(lock, [&] { return c.finished == c.size; });
    }
    cluster_cta_released(*this);
    end_block();
  }
#endif

  Cluster* cluster() const { return cluster_; }
  // %clusterid: the cluster's position in the grid of clusters.
  uint3 cluster_id() const {
    const dim3 d = launch_.cluster;
    return make_uint3(block_idx_.x / d.x, block_idx_.y / d.y, block_idx_.z / d.z);
  }
  unsigned cluster_rank() const { return rank_; }
  uint3 block_index() const { return block_idx_; }
  unsigned live_threads() const { return n_live_; }
  // True when every thread of this CTA has exited (a cluster's CTA whose
  // shared memory its peers must no longer touch).
  bool cta_exited() const { return cluster_ != nullptr && cluster_->exited[rank_]; }

  // ---- called by kernel threads ------------------------------------------

  void syncthreads(ThreadCtx& t) {
    sync_release(&block_token_);
#if !defined(GG_EMU_TSAN)
    // Happens-before clocks (order::Gather): the arrivals' clocks join; the
    // last arrival completes the barrier's; each thread takes it on leaving.
    if (!t.hb.empty()) order::release(t, sync_clock_.acc);
    if (++sync_arrived_ == n_live_) {
      sync_clock_.complete();
      sync_arrived_ = 0;
    }
#endif
    wait_at_barrier(t);
#if !defined(GG_EMU_TSAN)
    order::acquire(t, sync_clock_.done);
#endif
    sync_acquire(&block_token_);
  }

  void collective(ThreadCtx& t, const char* op, unsigned mask, const void* in, void* out, CollectiveFn fn) {
    const void* token = &warp_tokens_[t.warp];
    sync_release(token);
    arrive_at_collective(t, op, mask, in, out, fn, token);
    sync_acquire(token);
  }

  void thread_exit(ThreadCtx& t) {
    // Copies in flight still land on a GPU after the thread has exited.
    land_cp_async(t, ~0u);
    hopper_thread_exit(t);
    sm100_thread_exit(t);
    if (cluster_ != nullptr) cluster_thread_exit(t);
    [[maybe_unused]] Guard g = guard();  // TSan mode: the block's lock, held to the end
    t.state = State::exited;
    --n_live_;
    --n_runnable_;
    ++n_exited_;
    if (n_barrier_ != 0 && n_barrier_ == n_live_) fail_barrier_after_exit();
    if (n_live_ != 0 && n_runnable_ == 0) stalled();
  }

  GG_EMU_ALWAYS_INLINE unsigned lanes_present(unsigned warp) const {
    const unsigned n = std::min(kWarpSize, nthreads_ - warp * kWarpSize);
    return n == kWarpSize ? 0xffffffffu : (1u << n) - 1u;
  }

  // Blocks the thread until `ready(arg)` holds (checked now and at every
  // wake_waiters); `what` describes the wait in a deadlock report. Fiber mode.
  GG_EMU_UNCHECKED void wait_until(ThreadCtx& t, const char* what, bool (*ready)(const void*), const void* arg) {
    Guard g = guard();
    if (ready(arg)) return;
    t.op = what;
    t.wait_ready = ready;
    t.wait_arg = arg;
    t.state = State::at_wait;
    --n_runnable_;
    if (n_runnable_ == 0) stalled();
    suspend(t, g);
  }

  // Makes every waiting thread whose condition now holds runnable.
  GG_EMU_UNCHECKED void wake_waiters() {
    for (ThreadCtx& u : threads_) {
      if (u.state == State::at_wait && u.wait_ready(u.wait_arg)) {
        u.op = nullptr;
        make_runnable(u);
      }
    }
    notify();
  }

  const SharedRegion& shared_region() const { return shared_; }
  unsigned num_threads() const { return nthreads_; }
  ThreadCtx& thread(unsigned linear) { return threads_[linear]; }
  // The Hopper model's state of the current block (gg_emu_sm90.h).
  HopperBlock* hopper = nullptr;
  // The sm_100 model's state of the current block (gg_emu_sm100.h).
  Sm100Block* sm100 = nullptr;

  // True when [p, p + bytes) lies in this block's shared memory. Only exact in
  // fiber mode; TSan mode cannot see static __shared__ in templates.
  bool is_shared(const void* p, std::size_t bytes) const {
#if defined(GG_EMU_TSAN)
    (void)p;
    (void)bytes;
    return true;
#else
    const auto* c = static_cast<const unsigned char*>(p);
    return c >= shared_.begin && c + bytes <= shared_.end;
#endif
  }

  // Lands every copy of a committed group older than the newest `keep` groups.
  static void land_cp_async(ThreadCtx& t, unsigned keep) {
    const unsigned limit = keep == ~0u ? ~0u : (t.cp_committed >= keep ? t.cp_committed - keep : 0u);
    std::size_t kept = 0;
    for (const CpAsyncCopy& c : t.cp_pending) {
      if (c.group < limit) {
        if (c.src_size != 0) std::memcpy(c.dst, c.src, c.src_size);
        std::memset(static_cast<unsigned char*>(c.dst) + c.src_size, 0, c.cp_size - c.src_size);
      } else {
        t.cp_pending[kept++] = c;
      }
    }
    t.cp_pending.resize(kept);
  }

 private:
  void begin_block(unsigned long long linear_block) {
    const dim3 g = launch_.grid;
    block_idx_ = make_uint3(static_cast<unsigned>(linear_block % g.x), static_cast<unsigned>(linear_block / g.x % g.y),
                            static_cast<unsigned>(linear_block / (static_cast<unsigned long long>(g.x) * g.y)));
    poison_shared_memory();
#if !defined(GG_EMU_TSAN)
    poison_stacks();
    mc::block_begin(linear_block, shared_.begin, shared_.end);
#endif
    n_live_ = n_runnable_ = nthreads_;
    n_barrier_ = n_exited_ = 0;
    gridDim = launch_.grid;
    blockDim = launch_.block;
    for (ThreadCtx& t : threads_) {
      t.block_idx = block_idx_;
      t.state = State::runnable;
      t.op = nullptr;
      t.cp_pending.clear();
      t.cp_committed = 0;
      t.cluster_arrived = false;
      t.hb.clear();
      t.hb_self = rank_ * nthreads_ + t.linear;
      t.hb_size = (cluster_ != nullptr ? cluster_->size : 1) * nthreads_;
    }
    sync_clock_.reset();
    sync_arrived_ = 0;
    hopper_block_begin(*this);
    sm100_block_begin(*this);
    tls.runner = this;
  }

  void end_block() {
#if !defined(GG_EMU_TSAN)
    hopper_block_end(*this);
    sm100_block_end(*this);
    mc::block_end();
#endif
    tls.runner = nullptr;
    tls.thread = nullptr;
    check_dynamic_smem();
  }

  GG_EMU_UNCHECKED void wait_at_barrier(ThreadCtx& t) {
    Guard g = guard();
    t.state = State::at_barrier;
    ++n_barrier_;
    --n_runnable_;
    if (n_barrier_ == n_live_) {
      if (n_exited_ != 0) fail_barrier_after_exit();
      for (ThreadCtx& u : threads_) {
        if (u.state == State::at_barrier) make_runnable(u);
      }
      n_barrier_ = 0;
      notify();
#if !defined(GG_EMU_TSAN)
      // Back to the scheduler, which restarts from the first warp in order.
      suspend(t, g);
#endif
      return;
    }
    if (n_runnable_ == 0) stalled();
    suspend(t, g);
  }

  GG_EMU_UNCHECKED void arrive_at_collective(ThreadCtx& t, const char* op, unsigned mask, const void* in, void* out, CollectiveFn fn,
                            const void* token) {
    Guard g = guard();
    const unsigned base = t.warp * kWarpSize;
    const unsigned present = lanes_present(t.warp);
    if (((mask >> t.lane) & 1u) == 0) {
      fail("%s: lane %u passed mask 0x%08x, which does not include the lane itself", op, t.lane, mask);
    }
    if ((mask & ~present) != 0) {
      fail("%s: mask 0x%08x names lanes that do not exist (warp %u of a %u-thread block has lanes 0x%08x)", op, mask,
           t.warp, nthreads_, present);
    }
    t.op = op;
    t.mask = mask;
    t.in = in;
    t.out = out;
    t.fn = fn;
    t.state = State::at_collective;
    --n_runnable_;
    bool complete = true;
    for (unsigned l = 0; l < kWarpSize; ++l) {
      if (((mask >> l) & 1u) == 0 || l == t.lane) continue;
      const ThreadCtx& u = threads_[base + l];
      if (u.state != State::at_collective) {
        complete = false;
      } else if (std::strcmp(u.op, op) != 0 || u.mask != mask) {
        fail("warp divergence in warp %u: lane %u reached %s (mask 0x%08x) while lane %u waits at %s (mask 0x%08x); "
             "every lane of a mask must reach the same warp-collective operation",
             t.warp, t.lane, op, mask, u.lane, u.op, u.mask);
      }
    }
    if (complete) {
      const void* ins[kWarpSize] = {};
      void* outs[kWarpSize] = {};
      for (unsigned l = 0; l < kWarpSize; ++l) {
        if ((mask >> l) & 1u) {
          ins[l] = threads_[base + l].in;
          outs[l] = threads_[base + l].out;
        }
      }
      // The instruction's own reads (shared memory, the lanes' inputs) and
      // writes (the lanes' outputs) are the kernel's: TSan checks them.
      g.expose([&] {
        sync_acquire(token);
        for (unsigned l = 0; l < kWarpSize; ++l) {
          if ((mask >> l) & 1u) fn(l, ins, outs[l]);
        }
        sync_release(token);
      });
      for (unsigned l = 0; l < kWarpSize; ++l) {
        if ((mask >> l) & 1u) {
          threads_[base + l].op = nullptr;
          make_runnable(threads_[base + l]);
        }
      }
      notify();
      return;  // the last lane to arrive carries on
    }
    if (n_runnable_ == 0) stalled();
    suspend(t, g);
  }

  // Holds the block's state for one barrier or collective step.
#if defined(GG_EMU_TSAN)
  struct Guard {
    TsanQuiet quiet;  // NB: declared first: quiet before locking, until after unlocking
    std::unique_lock<std::mutex> lock;
    template <class F>
    void expose(F&& f) {
      TsanQuiet::end();
      f();
      TsanQuiet::begin();
    }
  };
  Guard guard() { return Guard{{}, std::unique_lock<std::mutex>(mu_)}; }
  void notify() { cv_.notify_all(); }
  void suspend(ThreadCtx& t, Guard& g) {
    cv_.wait(g.lock, [&t] { return t.state == State::runnable; });
  }
#else
  struct Guard {
    template <class F>
    void expose(F&& f) {
      f();
    }
  };
  Guard guard() { return {}; }
  void notify() {}
  void suspend(ThreadCtx& t, Guard&) { swapcontext(&t.ctx, &scheduler_); }
#endif

  GG_EMU_ALWAYS_INLINE unsigned position(unsigned linear) const {
    return launch_.schedule == Schedule::reverse ? nthreads_ - 1 - linear : linear;
  }

  GG_EMU_ALWAYS_INLINE void make_runnable(ThreadCtx& t) {
    t.state = State::runnable;
    ++n_runnable_;
    resume_from_ = std::min(resume_from_, position(t.linear));
  }

  void poison_shared_memory() {
    if (shared_.begin != nullptr) std::memset(shared_.begin, kPoison, static_cast<std::size_t>(shared_.end - shared_.begin));
#if defined(GG_EMU_TSAN)
    std::memset(gg_emu_dynamic_smem, kPoison, sizeof(gg_emu_dynamic_smem));
#endif
  }

  // Writes past the dynamic shared memory the launch asked for land in
  // poisoned bytes that must stay poisoned.
  void check_dynamic_smem() const {
    constexpr std::size_t kChecked = 4096;
    const std::size_t begin = launch_.dynamic_smem;
    const std::size_t end = std::min(kMaxDynamicSmem, begin + kChecked);
    for (std::size_t i = begin; i < end; ++i) {
      if (gg_emu_dynamic_smem[i] != kPoison) {
        fail("out-of-bounds write to dynamic shared memory in block (%u,%u,%u): byte %zu written, but the launch "
             "asked for %zu bytes",
             block_idx_.x, block_idx_.y, block_idx_.z, i, launch_.dynamic_smem);
      }
    }
  }

  std::string describe(const ThreadCtx& t) const {
    switch (t.state) {
      case State::runnable:
        return "runnable";
      case State::at_barrier:
        return "wait at __syncthreads";
      case State::at_collective:
        return format("wait at %s (mask 0x%08x)", t.op, t.mask);
      case State::at_wait:
        return format("wait at %s", t.op);
      case State::exited:
        return "exited";
    }
    return "?";
  }

  // One line per run of consecutive threads in the same state.
  std::string thread_states() const {
    std::string out;
    unsigned first = 0;
    for (unsigned i = 1; i <= nthreads_; ++i) {
      if (i < nthreads_ && describe(threads_[i]) == describe(threads_[first])) continue;
      out += i - 1 == first ? format("  thread %u: ", first) : format("  threads %u-%u: ", first, i - 1);
      out += describe(threads_[first]) + "\n";
      first = i;
    }
    return out;
  }

  // No thread can run: threads waiting at wgmma.wait_group may go on
  // (gg_emu_sm90.h); otherwise a deadlock.
  // In a cluster, the CTA waits: a peer may still complete what it waits for
  // (run_fibers hands the baton on, and reports the cluster's deadlock).
  void stalled() {
    if (!hopper_on_stall(*this) && cluster_ == nullptr) deadlock();
  }

  [[noreturn]] void deadlock() const {
    fail("deadlock in block (%u,%u,%u): no thread of the block can make progress\n%s%s", block_idx_.x, block_idx_.y,
         block_idx_.z, thread_states().c_str(), (hopper_report(*this) + sm100_report(*this)).c_str());
  }

 public:
  // What the CTA's threads wait for, for a cluster's deadlock report.
  std::string state_report() const {
    return thread_states() + hopper_report(*this) + sm100_report(*this);
  }

 private:

  [[noreturn]] void fail_barrier_after_exit() const {
    fail("__syncthreads in block (%u,%u,%u) can never complete: %u threads wait at it but %u threads of the block "
         "have exited (every thread of a block must reach every __syncthreads)\n%s",
         block_idx_.x, block_idx_.y, block_idx_.z, n_barrier_, n_exited_, thread_states().c_str());
  }

#if defined(GG_EMU_TSAN)
  static void* thread_main(void* arg) {
    auto* t = static_cast<ThreadCtx*>(arg);
    tls.thread = t;
    tls.runner = t->runner;
    Launch& l = t->runner->launch_;
    gridDim = l.grid;
    blockDim = l.block;
    set_ftz(l.flush_subnormals);
    l.kernel->invoke(l.kernel->fn, l.args);
    t->runner->thread_exit(*t);
    return nullptr;
  }

  void run_threads() {
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, launch_.stack_bytes);
    for (unsigned p = 0; p < nthreads_; ++p) {
      ThreadCtx& t = threads_[position(p)];
      if (pthread_create(&t.os_thread, &attr, &thread_main, &t) != 0) {
        fail("cannot start OS thread %u of %u (TSan mode runs one per CUDA thread)", p, nthreads_);
      }
    }
    pthread_attr_destroy(&attr);
    for (ThreadCtx& t : threads_) pthread_join(t.os_thread, nullptr);
  }

  std::mutex mu_;
  std::condition_variable cv_;
#else
  void allocate_stacks() {
    const std::size_t page = page_bytes();
    const std::size_t stack = round_up(launch_.stack_bytes, page);
    const std::size_t each = kGuardBytes + stack;
    const std::size_t window = std::min(stack, round_up(kStackWindow, page));
    stacks_bytes_ = each * nthreads_;
    void* m = mmap(nullptr, stacks_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) fail("cannot map %zu bytes of fiber stacks", stacks_bytes_);
    stacks_ = static_cast<unsigned char*>(m);
    stack_low_.assign(nthreads_, nullptr);
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mu);
    r.stack_bytes = launch_.stack_bytes;
    for (unsigned i = 0; i < nthreads_; ++i) {
      unsigned char* base = stacks_ + i * each;
      mprotect(base, kGuardBytes + stack - window, PROT_NONE);  // guard, then not yet used
      r.stack_guards.push_back({base, base + kGuardBytes});
      threads_[i].stack = base + kGuardBytes;
      stack_low_[i] = base + each - window;
    }
    for (StackArea& a : stack_areas) {
      if (a.in_use.load(std::memory_order_relaxed)) continue;
      a.map = stacks_;
      a.each = each;
      a.count = nthreads_;
      a.low = stack_low_.data();
      bool expected = false;
      if (a.in_use.compare_exchange_strong(expected, true, std::memory_order_acq_rel)) {
        stack_area_ = &a;
        return;
      }
    }
    fail("more than %u block runners at once", kMaxStackAreas);
  }

  // Every block starts with poisoned stacks (kStackPoison).
  void poison_stacks() {
    const std::size_t each = stacks_bytes_ / nthreads_;
    for (unsigned i = 0; i < nthreads_; ++i) {
      unsigned char* top = stacks_ + (i + 1) * each;
      fill_stack_poison(stack_low_[i], static_cast<std::size_t>(top - stack_low_[i]));
    }
  }

  static void fiber_main() {
    ThreadCtx* t = tls.thread;
    Launch& l = t->runner->launch_;
    set_ftz(l.flush_subnormals);
    l.kernel->invoke(l.kernel->fn, l.args);
    t->runner->thread_exit(*t);
    // Returning resumes uc_link, the scheduler.
  }

  void run_fibers() {
    for (ThreadCtx& t : threads_) {
      getcontext(&t.ctx);
      t.ctx.uc_stack.ss_sp = t.stack;
      t.ctx.uc_stack.ss_size = launch_.stack_bytes;
      t.ctx.uc_link = &scheduler_;
      makecontext(&t.ctx, &fiber_main, 0);
    }
    resume_from_ = 0;
    for (;;) {
      ThreadCtx* next = pick();
      if (next == nullptr) {
        if (cluster_ == nullptr || !hand_on_baton()) break;
        continue;
      }
      tls.thread = next;
      swapcontext(&scheduler_, &next->ctx);
    }
    if (n_live_ != 0) deadlock();
  }

  // No thread of this CTA can run: the baton goes to the next CTA of the
  // cluster that can (schedule order). True when it comes back (this CTA
  // has runnable threads again); false when this CTA has finished.
  bool hand_on_baton() {
    Cluster& c = *cluster_;
    std::unique_lock<std::mutex> lock(c.mu);
    if (n_live_ == 0 && !c.exited[rank_]) {
      c.exited[rank_] = true;
      if (++c.finished != c.size) cluster_cta_exited(*this);
    }
    for (unsigned r = 0; r < c.size; ++r) {
      if (!c.exited[r]) c.ctas[r]->wake_waiters();
    }
    int next = -1;
    for (unsigned i = 1; i <= c.size; ++i) {
      const unsigned r = launch_.schedule == Schedule::reverse ? (rank_ + c.size - i) % c.size : (rank_ + i) % c.size;
      if (!c.exited[r] && c.ctas[r]->n_runnable_ != 0) {
        next = static_cast<int>(r);
        break;
      }
    }
    if (next < 0) {
      if (c.finished == c.size) {
        c.baton = -1;
        c.cv.notify_all();
        return false;
      }
      cluster_deadlock();
    }
    c.baton = next;
    c.cv.notify_all();
    if (n_live_ == 0) return false;
    c.cv.wait(lock, [&] { return c.baton == static_cast<int>(rank_); });
    tls.runner = this;
    return true;
  }

  [[noreturn]] void cluster_deadlock() const {
    const Cluster& c = *cluster_;
    std::string states;
    for (unsigned r = 0; r < c.size; ++r) {
      const BlockRunner& p = *c.ctas[r];
      states += format("CTA rank %u, block (%u,%u,%u)%s:\n", r, p.block_idx_.x, p.block_idx_.y, p.block_idx_.z,
                       c.exited[r] ? ": every thread exited" : "");
      if (!c.exited[r]) states += p.state_report();
    }
    const uint3 id = cluster_id();
    fail("deadlock in cluster (%u,%u,%u) of %u CTAs: no thread of any CTA of the cluster can make progress\n%s",
         id.x, id.y, id.z, c.size, states.c_str());
  }

  // The first runnable thread in schedule order. Threads before resume_from_
  // are never runnable: make_runnable lowers it.
  GG_EMU_UNCHECKED ThreadCtx* pick() {
    for (unsigned p = resume_from_; p < nthreads_; ++p) {
      ThreadCtx& t = threads_[position(p)];
      if (t.state == State::runnable) {
        resume_from_ = p;
        return &t;
      }
    }
    resume_from_ = nthreads_;
    return nullptr;
  }

  ucontext_t scheduler_{};
  unsigned char* stacks_ = nullptr;
  std::size_t stacks_bytes_ = 0;
  std::vector<unsigned char*> stack_low_;  // see StackArea
  StackArea* stack_area_ = nullptr;
#endif

  Launch& launch_;
  unsigned nthreads_;
  std::vector<ThreadCtx> threads_;
  SharedRegion shared_;
  uint3 block_idx_{};
  Cluster* cluster_ = nullptr;  // a cluster launch's group, or null
  unsigned rank_ = 0;           // %cluster_ctarank
  unsigned n_live_ = 0;
  unsigned n_runnable_ = 0;
  unsigned n_barrier_ = 0;
  unsigned n_exited_ = 0;
  unsigned resume_from_ = 0;
  // __syncthreads' happens-before clocks and its arrivals (fiber mode).
  order::Gather sync_clock_;
  unsigned sync_arrived_ = 0;
  // Addresses for TSan's release/acquire annotations (unused in fiber mode).
  char block_token_ = 0;
  std::vector<char> warp_tokens_ = std::vector<char>(nthreads_ / kWarpSize + 1);
};

}  // namespace gg::emu
