"""How `gemmgen verify` runs its cases: one case (`run_one`: inputs, the
runner, the reference, the comparison, as a table `Row`), and many at once
(`Execution`: lanes of cases on threads, rows printed in the table's order).

Runners whose work is Python (`Runner.processes`: the Pallas runners, whose
tracing, lowering and interpret-mode callbacks hold the GIL, and whose
interpreter keeps its simulated TPU in process-global state) run their lanes
in worker processes of their own (`_Workers`), one case at a time per
process: on a machine of N cores, N of their cases run at once, beside the
CUDA emulator's child processes.
"""

from __future__ import annotations

import multiprocessing
import os
import queue
import shutil
import signal
import sys
import tempfile
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

import numpy as np

from gemmgen import ir
from gemmgen.build import Rendered
from gemmgen.cases import Case, tile_label
from gemmgen.harness.runner import Runner
from gemmgen.reference import compare, reference


@dataclass
class Row:
    kernel: str
    backend: str
    case: str
    shapes: str
    tile: str
    error: str
    tolerance: str
    passed: bool
    detail: str = ""



@dataclass
class _Entry:
    """One (kernel, backend, case) of `Shared`: made under its own lock."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    inputs: dict | None = None
    expected: object = None


class Shared:
    """The inputs of a (kernel, backend, case), and the reference's result
    on them, made once for every runner of that backend (pallas-interpret and
    pallas-lower, cuda-emu and cuda-emu-cpp draw the same inputs from the same
    seed): drawing a large operand and computing the reference were a third
    of a warm `verify`. Each entry is dropped once its last job took it; the
    arrays are read-only, so no runner can change what the next one sees."""

    def __init__(self, jobs: list[tuple[ir.Kernel, Runner, Case]], seed: int) -> None:
        self.seed = seed
        self.users: dict[tuple, int] = {}
        for kernel, runner, case in jobs:
            key = self.key(kernel, runner, case)
            self.users[key] = self.users.get(key, 0) + 1
        self.entries: dict[tuple, _Entry] = {}
        self.lock = threading.Lock()

    @staticmethod
    def key(kernel: ir.Kernel, runner: Runner, case: Case) -> tuple:
        return (kernel.name, runner.backend, case)

    def _entry(self, kernel: ir.Kernel, runner: Runner, case: Case) -> _Entry:
        with self.lock:
            return self.entries.setdefault(self.key(kernel, runner, case), _Entry())

    def inputs(self, kernel: ir.Kernel, runner: Runner, case: Case) -> dict[str, np.ndarray]:
        entry = self._entry(kernel, runner, case)
        with entry.lock:
            if entry.inputs is None:
                inputs = case.inputs(kernel, self.seed)
                for v in inputs.values():
                    if isinstance(v, np.ndarray):
                        v.flags.writeable = False
                entry.inputs = inputs
            return entry.inputs

    def expected(self, kernel: ir.Kernel, runner: Runner, case: Case, inputs: dict):
        entry = self._entry(kernel, runner, case)
        with entry.lock:
            if entry.expected is None:
                entry.expected = reference(kernel, **inputs)
            return entry.expected

    def done(self, kernel: ir.Kernel, runner: Runner, case: Case) -> None:
        key = self.key(kernel, runner, case)
        with self.lock:
            self.users[key] -= 1
            if self.users[key] == 0:
                self.entries.pop(key, None)


def run_one(kernel: ir.Kernel, runner: Runner, case: Case, seed: int,
             shared: Shared | None = None) -> Row:
    if shared is None:
        shared = Shared([(kernel, runner, case)], seed)
    try:
        return _run_checked(kernel, runner, case, shared)
    except KeyboardInterrupt:
        raise
    # Outside the run itself (making the inputs, the reference), or not an
    # Exception (a SystemExit from a runner): a failed row, never a thread
    # that dies and leaves the table waiting for it.
    except BaseException as e:  # noqa: BLE001
        return Row(kernel.name, runner.name, case.name, case.describe(), tile_label(kernel, case),
                   "raised", "-", False, "".join(traceback.format_exception_only(type(e), e)).strip())
    finally:
        shared.done(kernel, runner, case)


def _run_checked(kernel: ir.Kernel, runner: Runner, case: Case, shared: Shared) -> Row:
    inputs = shared.inputs(kernel, runner, case)
    shapes = case.describe()
    tile = tile_label(kernel, case)
    try:
        t0 = time.perf_counter()
        actual = runner.run(kernel, case, inputs)
        dt = time.perf_counter() - t0
    except Exception as e:
        detail = "".join(traceback.format_exception_only(type(e), e)).strip()
        if os.environ.get("GEMMGEN_VERIFY_TRACEBACK"):
            detail = traceback.format_exc()
        return Row(kernel.name, runner.name, case.name, shapes, tile, "raised", "-", False, detail)
    if not runner.checks_numbers:
        return Row(kernel.name, runner.name, case.name, shapes, tile, "lowered", "-", True,
                   f"{dt:.2f}s")
    expected = shared.expected(kernel, runner, case, inputs)
    result = compare(actual, expected, kernel, k=case.k, inputs=inputs)
    err = f"{result.max_abs_err:.3g}"
    finite = result.allowed[np.isfinite(result.allowed)] if hasattr(result.allowed, "shape") \
        else np.asarray([])
    tol = f"{float(finite.max()):.3g}" if finite.size else "-"
    return Row(kernel.name, runner.name, case.name, shapes, tile, err, tol, result.passed,
               result.detail)


def same_terminal(out: TextIO, progress: TextIO) -> bool:
    """Whether the table and the progress lines go to one terminal."""
    try:
        return out.isatty() and progress.isatty() and \
            os.path.samestat(os.fstat(out.fileno()), os.fstat(progress.fileno()))
    except (AttributeError, OSError, ValueError):
        return False


Job = tuple[ir.Kernel, Runner, Case]


class Execution:
    """Runs the jobs on `workers` threads and prints each row in job order
    as soon as it and every row before it are done (so the table reads the
    same whatever the parallelism).

    Jobs run in lanes, each lane's cases one after another: a kernel's cases
    on one runner form a lane (its first case compiles or loads what the
    others reuse), and a `serial` runner's cases (one real device) form a
    single lane. The Pallas runners (`Runner.processes`) run a kernel's cases
    of both (pallas-interpret, then pallas-lower on the same inputs) as one
    lane in a worker process. Lanes run side by side: a CUDA kernel compiles
    or runs on the emulator (child processes) while worker processes run
    Pallas cases, on every core. Ctrl-C (in the main thread, or raised by a
    runner) ends the run at once with the rows printed so far; the threads
    are daemons, left to die with the process, and the worker processes are
    stopped."""

    def __init__(self, jobs: list[Job], seed: int, table, progress: TextIO, workers: int | None,
                 rendered: Rendered, cuda_arch: str | None) -> None:
        self.jobs, self.seed, self.table, self.progress = jobs, seed, table, progress
        self.shared = Shared(jobs, seed)
        lanes: dict[tuple[str, str], list[int]] = {}
        for i, (kernel, runner, case) in enumerate(jobs):
            if runner.processes:
                key = ("processes", kernel.name)
            else:
                key = (runner.name, "" if runner.serial else kernel.name)
            lanes.setdefault(key, []).append(i)
        self.lanes: queue.SimpleQueue[list[int]] = queue.SimpleQueue()
        for lane in lanes.values():
            # A lane of both Pallas runners: each case's jobs side by side.
            lane.sort(key=lambda i: (jobs[i][2].name, i) if jobs[i][1].processes else (i,))
            self.lanes.put(lane)
        self.workers = max(1, min(workers or os.cpu_count() or 1, len(lanes)))
        self.processes = _Workers(rendered, cuda_arch, self.workers)  # started when a lane needs one
        self.done: dict[int, Row] = {}
        self.printed = 0
        self.stop = threading.Event()
        self.interrupted = False
        self.lock = threading.Condition()
        self.transient = same_terminal(table.out, progress)

    def run(self) -> tuple[list[Row], bool]:
        """The rows printed (in job order), and whether Ctrl-C ended the run."""
        for _ in range(self.workers):
            threading.Thread(target=self._worker, daemon=True, name="gemmgen-verify").start()
        try:
            try:
                with self.lock:
                    while self.printed < len(self.jobs) and not self.interrupted:
                        self.lock.wait()
            except KeyboardInterrupt:
                self.stop.set()
                self.interrupted = True
        finally:
            self.processes.close(self.interrupted)
        with self.lock:
            self.stop.set()
            if self.transient:
                self.progress.write("\x1b[K")
                self.progress.flush()
            return [self.done[i] for i in range(self.printed)], self.interrupted

    def _worker(self) -> None:
        while not self.stop.is_set():
            try:
                lane = self.lanes.get_nowait()
            except queue.Empty:
                return
            try:
                if self.jobs[lane[0]][1].processes:
                    self._process_lane(lane)
                else:
                    self._thread_lane(lane)
            except KeyboardInterrupt:  # a runner interrupted (tests, a child's SIGINT)
                with self.lock:
                    self.interrupted = True
                    self.stop.set()
                    self.lock.notify_all()
                return

    def _thread_lane(self, lane: list[int]) -> None:
        for i in lane:
            if self.stop.is_set():
                return
            kernel, runner, case = self.jobs[i]
            self._started(i)
            self._finished(i, run_one(kernel, runner, case, self.seed, self.shared))

    def _process_lane(self, lane: list[int]) -> None:
        jobs = [(self.jobs[i][1].name, self.jobs[i][0].name, self.jobs[i][2]) for i in lane]
        for what, j, row in self.processes.run_lane(jobs, self.seed, self.stop):
            if what == "start":
                self._started(lane[j])
            else:
                self._finished(lane[j], row)

    def _started(self, i: int) -> None:
        kernel, runner, case = self.jobs[i]
        line = f"[{i + 1}/{len(self.jobs)}] {kernel.name} on {runner.name}: {case.name} " \
               f"({case.describe()})"
        with self.lock:
            if self.stop.is_set():
                return
            if self.transient:  # one terminal: a transient line the next row replaces
                width = shutil.get_terminal_size().columns - 1
                self.progress.write("\x1b[K" + line[:width] + "\r")
                self.progress.flush()
            else:
                print(line, file=self.progress, flush=True)

    def _finished(self, i: int, row: Row) -> None:
        with self.lock:
            self.done[i] = row
            if self.stop.is_set():
                return
            while self.printed in self.done:
                if self.transient:
                    self.progress.write("\x1b[K")
                    self.progress.flush()
                self.table.row(self.done[self.printed])
                self.printed += 1
            self.lock.notify_all()


class _Workers:
    """Worker processes for the `Runner.processes` runners, started when a
    lane first needs one (spawned: a fresh interpreter, no inherited
    threads), at most `limit`. A lane checks one out, sends its jobs, and
    reads a "start" and then a "row" message per job as each happens; a
    worker that dies gives its remaining jobs a "raised" row naming its
    exit status. Workers ignore SIGINT: Ctrl-C is the main process's, which
    stops them (`close`)."""

    def __init__(self, rendered: Rendered, cuda_arch: str | None, limit: int) -> None:
        self.rendered, self.cuda_arch, self.limit = rendered, cuda_arch, limit
        self.idle: queue.SimpleQueue = queue.SimpleQueue()
        self.all: list = []
        self.lock = threading.Lock()
        self.closed = False

    def _checkout(self):
        try:
            return self.idle.get_nowait()
        except queue.Empty:
            pass
        with self.lock:
            if self.closed:
                raise KeyboardInterrupt
            if len(self.all) < self.limit:
                ctx = multiprocessing.get_context("spawn")
                ours, theirs = ctx.Pipe()
                proc = ctx.Process(target=_worker_main, args=(theirs, self.rendered, self.cuda_arch),
                                   daemon=True, name="gemmgen-verify-worker")
                proc.start()
                theirs.close()
                self.all.append((proc, ours))
                return proc, ours
        return self.idle.get()

    def run_lane(self, jobs: list[tuple[str, str, Case]], seed: int, stop: threading.Event):
        proc, conn = self._checkout()
        done = 0
        try:
            conn.send((jobs, seed))
            while done < len(jobs):
                try:
                    what, j, row = conn.recv()
                except (EOFError, OSError):
                    if stop.is_set() or self.closed:
                        return
                    proc.join(1)
                    why = f"the worker process running it ended (exit status {proc.exitcode})"
                    for j in range(done, len(jobs)):
                        runner_name, kernel_name, case = jobs[j]
                        yield "row", j, Row(kernel_name, runner_name, case.name, case.describe(), "-",
                                            "raised", "-", False, why)
                    with self.lock:
                        self.all = [(p, c) for p, c in self.all if p is not proc]
                    return
                if what == "row":
                    done += 1
                yield what, j, row
        finally:
            if done == len(jobs) and proc.is_alive():
                self.idle.put((proc, conn))

    def close(self, interrupted: bool = False) -> None:
        """Stops every worker: idle ones exit when told; busy ones, and all
        of them after Ctrl-C, are terminated (SIGTERM: a worker removes its
        temporary folder on the way out), killed if that does not do."""
        with self.lock:
            self.closed = True
            workers = list(self.all)
        for proc, conn in workers:
            try:
                conn.send(None)
            except OSError:
                pass
            if interrupted:
                proc.terminate()
        deadline = time.monotonic() + (1.0 if interrupted else 5.0)
        for proc, _ in workers:
            proc.join(max(0.0, deadline - time.monotonic()))
            if proc.is_alive():
                proc.terminate()
                proc.join(5)
            if proc.is_alive():
                proc.kill()
                proc.join()


def _worker_main(conn, rendered: Rendered, cuda_arch: str | None) -> None:
    """A worker process: prepares the process runners once, then runs lanes
    until told to stop (None) or the main process goes away."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    # XLA compiles every interpret-mode case anew (its host callbacks keep the
    # executables out of JAX's persistent cache); its CPU code is a loop of
    # callbacks, which LLVM's expensive passes do not speed up: without them
    # a case compiles in about 70 % of the time. A user's own setting wins.
    flags = os.environ.get("XLA_FLAGS", "")
    if "xla_backend_optimization_level" not in flags:
        os.environ["XLA_FLAGS"] = (flags + " --xla_backend_optimization_level=0"
                                   " --xla_llvm_disable_expensive_passes=true").strip()
    from gemmgen.harness import verify_cuda, verify_pallas

    runners = {r.name: r for r in (*verify_pallas.runners(), *verify_cuda.runners()) if r.processes}
    with tempfile.TemporaryDirectory(prefix="gemmgen-verify-worker-") as tmp:
        for name, r in runners.items():
            r.cuda_arch = cuda_arch
            r.prepare(rendered, Path(tmp) / name)
        while True:
            try:
                message = conn.recv()
            except (EOFError, OSError):
                return
            if message is None:
                return
            lane, seed = message
            views = [(rendered.spec.kernel(k).for_backend(runners[r].backend), runners[r], c)
                     for r, k, c in lane]
            shared = Shared(views, seed)
            for j, (kernel, runner, case) in enumerate(views):
                conn.send(("start", j, None))
                conn.send(("row", j, run_one(kernel, runner, case, seed, shared)))
