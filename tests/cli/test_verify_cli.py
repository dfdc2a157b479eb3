"""`gemmgen verify` as a user meets it: rows printed as they finish, Ctrl-C
keeping them, a case at the user's own shape, and clear errors (exit 2) for
a bad shape, arch, kernel or backend."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from gemmgen import ir, verify
from gemmgen.build import render_spec
from gemmgen.cases import standard_cases
from gemmgen.cli import main
from gemmgen.harness.runner import Runner
from gemmgen.reference import reference

REPO = Path(__file__).resolve().parents[2]


class Recording(Runner):
    """A Pallas-side runner that returns the reference result and records
    what the table held when each case started; `interrupt_at` raises
    KeyboardInterrupt (as Ctrl-C does) in that call."""

    name = "pallas-interpret"

    def __init__(self, out: io.StringIO, interrupt_at: int | None = None):
        self.out, self.interrupt_at, self.seen = out, interrupt_at, []

    def run(self, kernel, case, inputs):
        self.seen.append(self.out.getvalue())
        if len(self.seen) == self.interrupt_at:
            raise KeyboardInterrupt
        return reference(kernel, **inputs)


def run_recording(monkeypatch, interrupt_at=None, **kw):
    out, progress = io.StringIO(), io.StringIO()
    runner = Recording(out, interrupt_at)
    monkeypatch.setattr(verify, "_runners", lambda: [runner])
    rendered = render_spec(REPO / "specs" / "moe.gemm")
    code = verify.main(rendered, backends=["pallas-interpret"], seed=0, kernels=["gmm_bf16_kn"],
                       out=out, progress=progress, resources=False, **kw)
    return code, out.getvalue(), runner


def test_rows_are_printed_as_they_finish(monkeypatch):
    code, out, runner = run_recording(monkeypatch)
    assert code == 0, out
    assert len(runner.seen) == 2
    # The header is out before the first case runs, the first row before the second.
    assert runner.seen[0].splitlines()[0].split()[:3] == ["kernel", "backend", "case"]
    assert len(runner.seen[0].splitlines()) == 2
    assert "ragged_groups" in runner.seen[1].splitlines()[2]
    assert out.rstrip().endswith("2 passed, 0 failed")


def test_an_interrupt_keeps_the_rows_done(monkeypatch):
    code, out, runner = run_recording(monkeypatch, interrupt_at=2)
    assert code == 130
    lines = out.splitlines()
    assert "ragged_groups" in lines[2] and lines[2].rstrip().endswith("pass")
    assert "sharded_existing_out" not in out
    assert "interrupted (Ctrl-C) after 1 of 2 cases: 1 passed, 0 failed" in out


class Timed(Runner):
    """Returns the reference result and records when each case started and
    ended. With `gate`, the cases of the table's first kernel (gmm_bf16)
    wait until the second kernel's cases are done (at most 60 s): a run that
    does not run them at once takes a minute and fails."""

    name = "pallas-interpret"

    def __init__(self, serial: bool, gate: bool):
        self.serial, self.gate, self.spans = serial, gate, []
        self.lock = threading.Lock()
        self.second_done = threading.Event()

    def run(self, kernel, case, inputs):
        start = time.monotonic()
        if self.gate and kernel.name == "gmm_bf16":
            self.second_done.wait(60)
        time.sleep(0.05)
        with self.lock:
            self.spans.append((kernel.name, case.name, start, time.monotonic()))
            if sum(s[0] == "gmm_bf16_kn" for s in self.spans) == 2:
                self.second_done.set()
        return reference(kernel, **inputs)


def run_timed(monkeypatch, *, serial: bool, gate: bool, workers: int):
    out, progress = io.StringIO(), io.StringIO()
    runner = Timed(serial, gate)
    monkeypatch.setattr(verify, "_runners", lambda: [runner])
    rendered = render_spec(REPO / "specs" / "moe.gemm")
    code = verify.main(rendered, backends=["pallas-interpret"], seed=0,
                       kernels=["gmm_bf16_kn", "gmm_bf16"], out=out, progress=progress,
                       resources=False, workers=workers)
    assert code == 0, out.getvalue()
    return out.getvalue(), runner.spans


def _overlap(spans) -> bool:
    return any(a[2] < b[3] and b[2] < a[3] for i, a in enumerate(spans) for b in spans[i + 1:])


def test_kernels_run_at_once_and_rows_keep_the_table_order(monkeypatch):
    """With two workers the second kernel's cases run (and finish) while the
    first one's wait, yet the rows come out in the table's order, the same
    as with one worker; a kernel's own cases run one after another."""
    t0 = time.monotonic()
    parallel, spans = run_timed(monkeypatch, serial=False, gate=True, workers=2)
    assert time.monotonic() - t0 < 50, "the kernels did not run at once"
    for name in ("gmm_bf16_kn", "gmm_bf16"):
        assert not _overlap([s for s in spans if s[0] == name])
    rows = [line.split()[0] for line in parallel.splitlines()[2:6]]
    assert rows == ["gmm_bf16"] * 2 + ["gmm_bf16_kn"] * 2
    one_worker, _ = run_timed(monkeypatch, serial=False, gate=False, workers=1)
    assert one_worker == parallel


def test_a_serial_runner_runs_one_case_at_a_time(monkeypatch):
    """A serial runner (one real device: pallas-tpu, cuda) runs its cases
    one after another, whatever the number of workers."""
    _, spans = run_timed(monkeypatch, serial=True, gate=False, workers=4)
    assert len(spans) == 4 and not _overlap(spans)


def test_jobs_must_be_positive(project, capsys):
    with pytest.raises(SystemExit) as e:
        main(["verify", "specs/moe.gemm", "--jobs", "0"])
    assert e.value.code == 2
    assert "positive integer" in capsys.readouterr().err


def test_ctrl_c_in_a_real_run(project):
    """A real Ctrl-C (SIGINT to the whole process group, as a terminal sends
    it) in the middle of a case that a worker process runs: exit 130, the
    finished row and the summary printed, no traceback from any process,
    and no worker left behind."""
    script = project / "ctrl_c.py"
    # Spawned workers import this file as their main module: the patch reaches
    # them, and the guarded part runs in the parent only.
    script.write_text(textwrap.dedent("""
        import os, signal, sys, time
        from gemmgen.harness import verify_pallas
        real = verify_pallas.PallasInterpret.run
        calls = []
        def run(self, kernel, case, inputs):
            calls.append(case.name)
            if len(calls) == 2:
                os.killpg(os.getpgid(0), signal.SIGINT)
                time.sleep(30)
            return real(self, kernel, case, inputs)
        verify_pallas.PallasInterpret.run = run
        if __name__ == "__main__":
            signal.signal(signal.SIGINT, signal.default_int_handler)
            from gemmgen.cli import main
            sys.exit(main(sys.argv[1:]))
    """))
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, str(script), "verify", "specs/moe.gemm", "--kernel",
                        "gmm_bf16_kn", "--backend", "pallas-interpret"], cwd=project, env=env,
                       capture_output=True, text=True, timeout=90, start_new_session=True)
    assert r.returncode == 130, r.stderr
    assert time.monotonic() - t0 < 25, "the busy worker was waited for, not stopped"
    assert "Traceback" not in r.stderr
    assert "gmm_bf16_kn  pallas-interpret  ragged_groups" in r.stdout
    assert "interrupted (Ctrl-C) after 1 of 2 cases: 1 passed, 0 failed" in r.stdout


def _first_case(name: str):
    """The first standard case of a Pallas-only kernel of specs/moe.gemm."""
    return standard_cases(render_spec(REPO / "specs" / "moe.gemm").spec.kernel(name))[0]


def test_the_users_shape_runs_beside_the_standard_cases(monkeypatch):
    from gemmgen.cases import Shape

    code, out, runner = run_recording(monkeypatch, shape=Shape(m=40, group_sizes=(5, 0, 17)))
    assert code == 0, out
    assert len(runner.seen) == 3
    row = out.splitlines()[4]
    assert row.split()[:3] == ["gmm_bf16_kn", "pallas-interpret", "your_shape"]
    # n and k not given: the kernel's first standard case's.
    base = _first_case("gmm_bf16_kn")
    assert f"m=40 n={base.n} k={base.k} groups=[5, 0, 17]" in row and row.endswith("pass")


@pytest.mark.slow
def test_verify_at_the_users_shape(project, capsys):
    code = main(["verify", "specs/moe.gemm", "--kernel", "gmm_bf16_kn", "--backend",
                 "pallas-interpret", "--m", "40", "--group-sizes", "5,0,17"])
    out = capsys.readouterr().out
    assert code == 0, out
    row = next(line for line in out.splitlines() if "your_shape" in line)
    base = _first_case("gmm_bf16_kn")
    assert f"m=40 n={base.n} k={base.k} groups=[5, 0, 17]" in row and row.endswith("pass")
    assert "3 passed, 0 failed" in out


def test_users_shape_fills_in_and_splits_groups():
    from gemmgen.cases import Shape, user_case

    spec = render_spec(REPO / "specs" / "moe.gemm").spec
    grouped, masked = spec.kernel("gmm_bf16_kn"), spec.kernel("moe_fp8_masked_gemm")
    case = user_case(grouped, Shape(m=10, k=64, groups=3))
    base = _first_case("gmm_bf16_kn")
    assert (case.m, case.n, case.k, case.group_sizes) == (10, base.n, 64, (4, 3, 3))
    # A kernel with a TPU tile of its own: the defaults of its CUDA view.
    both = spec.kernel("moe_fp8_grouped_gemm")
    case = user_case(both, Shape(m=10, groups=2))
    cuda_base = standard_cases(both.for_backend(ir.Backend.CUDA))[0]
    assert (case.n, case.k, case.group_sizes) == (cuda_base.n, cuda_base.k, (5, 5))
    case = user_case(masked, Shape(group_sizes=(5, 0, 17)))
    assert (case.m, case.masked_m, case.group_sizes) == (17, (5, 0, 17), None)
    dense = render_spec(REPO / "specs" / "dense.gemm").spec.kernel("dense_gemm_bf16")
    case = user_case(dense, Shape(m=3, n=64, k=48))
    assert (case.m, case.n, case.k, case.group_sizes) == (3, 64, 48, None)


@pytest.mark.parametrize("args, message", [
    (["--m", "-3"], "--m -3: must be >= 0"),
    (["--k", "0"], "--k 0: must be positive"),
    (["--groups", "2", "--group-sizes", "1,2,3"], "--groups 2 but --group-sizes gives 3 groups"),
    (["--group-sizes", "5,x"], "expected comma-separated integers"),
    (["--m", "4", "--group-sizes", "5,0,17"], "add up to 22 rows, more than m = 4"),
    (["--kernel", "moe_fp8_grouped_gemm", "--k", "2001"],
     "moe_fp8_grouped_gemm refuses m=165 n=256 k=2001"),
])
def test_a_bad_shape_is_bad_input(project, capsys, args, message):
    try:
        code = main(["verify", "specs/moe.gemm", "--backend", "pallas-interpret", *args])
    except SystemExit as e:  # argparse's refusal
        code = e.code
    assert code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_a_refused_shape_names_the_launchers_condition(project, capsys):
    assert main(["verify", "specs/moe.gemm", "--kernel", "moe_fp8_grouped_gemm",
                 "--kernel", "gmm_bf16_kn", "--k", "2001"]) == 2
    err = capsys.readouterr().err
    assert "k must be a multiple of 16" in err and "(k % 16 == 0)" in err
    assert "gmm_bf16_kn" not in err  # Pallas takes any k
    assert "--kernel picks the kernels to run at this shape" in err


def test_a_dense_kernel_has_no_groups(project, capsys):
    assert main(["verify", "specs/dense.gemm", "--kernel", "dense_gemm_bf16", "--groups",
                 "4"]) == 2
    assert "dense_gemm_bf16 is not grouped" in capsys.readouterr().err


@pytest.mark.parametrize("arch, hint", [("sm_122", "did you mean 'sm_121'?"),
                                        ("sm_999", "expected 'sm_80'"),
                                        ("sm_100", "did you mean 'sm_100a'?")])
def test_an_unknown_arch_is_bad_input(project, capsys, arch, hint):
    assert main(["verify", "specs/dense.gemm", "--cuda-arch", arch]) == 2
    err = capsys.readouterr().err
    assert f"--cuda-arch {arch}: not an arch gemmgen knows" in err and hint in err
    assert all(a in err for a in ir.CUDA_ARCHS)
    assert main(["compile", "specs/dense.gemm", "--cuda-arch", arch]) == 2


def test_a_misspelt_kernel_or_backend_gets_a_suggestion(project, capsys):
    assert main(["verify", "specs/dense.gemm", "--kernel", "dense_gemm_bf1"]) == 2
    assert "has no kernel 'dense_gemm_bf1'; did you mean 'dense_gemm_bf16'?" in \
        capsys.readouterr().err
    assert main(["verify", "specs/dense.gemm", "--backend", "cuda-em"]) == 2
    assert "did you mean 'cuda-emu'?" in capsys.readouterr().err


def test_a_backend_no_kernel_targets(project, capsys):
    code = main(["verify", "specs/dense.gemm", "--kernel", "dense_gemm_bf16", "--backend",
                 "pallas-interpret"])
    err = capsys.readouterr().err
    assert code == 2
    assert ("no kernel chosen (--kernel) targets pallas-interpret (pallas_tpu); they target "
            "cuda: run them with 'cuda-emu', 'cuda-emu-cpp' or 'cuda'") in err


def test_without_cupy_the_cuda_backend_says_how_to_install_it(monkeypatch):
    from gemmgen.harness.verify_cuda import CudaGpu

    monkeypatch.setitem(sys.modules, "cupy", None)  # import cupy fails as when not installed
    reason = CudaGpu().unavailable()
    assert reason.startswith("CuPy is not installed") and "pip install '.[gpu]'" in reason




def test_a_cuda_only_spec_asked_for_pallas(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "cuda_only.gemm").write_text(textwrap.dedent("""\
        target cuda {
          archs sm_89
        }

        kernel only_cuda_gemm {
          op dense
          lhs bf16 [m, k]
          rhs bf16 [n, k]
          out bf16
          tile m=128 n=128 k=32
          backends cuda
        }
    """))
    assert main(["verify", "cuda_only.gemm", "--backend", "pallas-interpret"]) == 2
    err = capsys.readouterr().err
    assert ("nothing was run: no kernel of cuda_only.gemm targets pallas-interpret (pallas_tpu); "
            "its kernels target cuda: run them with 'cuda-emu', 'cuda-emu-cpp' or 'cuda'") in err
    assert "available backend" not in err


class Exits(Runner):
    """A runner whose run calls sys.exit: not an Exception."""

    name = "pallas-interpret"

    def run(self, kernel, case, inputs):
        raise SystemExit(3)


def test_a_runner_that_exits_fails_its_rows_and_the_table_ends(monkeypatch):
    out, progress = io.StringIO(), io.StringIO()
    monkeypatch.setattr(verify, "_runners", lambda: [Exits()])
    rendered = render_spec(REPO / "specs" / "moe.gemm")
    result: list[int] = []
    thread = threading.Thread(target=lambda: result.append(verify.main(
        rendered, backends=["pallas-interpret"], seed=0, kernels=["gmm_bf16_kn"], out=out,
        progress=progress, resources=False, workers=2)), daemon=True)
    thread.start()
    thread.join(60)
    assert result == [1], "verify hung on a runner that raised SystemExit"
    assert out.getvalue().count("FAIL") >= 2 and "SystemExit: 3" in out.getvalue()
