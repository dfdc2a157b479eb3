"""The masked grouped layout (docs/spec.md, "The masked layout";
docs/semantics.md, "masked"): op grouped with lhs [g, m, k], m the capacity of
each group and masked_m [g] its valid rows; out [g, m, n_out], zero past each
count.

- the spec language: a [g, m, k] lhs selects the layout; misuses are
  positioned errors (exit 2 from the CLI);
- the reference against a plain NumPy loop, counts outside [0, m] clipped;
- Pallas (TPU interpret mode) and the CUDA emulator against the reference on
  the edges: counts 0, 1 and m, a capacity that is not a multiple of the m
  tile, k not a multiple of the k tile, 16 groups; the CUDA harness poisons
  the output, so rows past a count must be written as zeros;
- the launchers: bad calls refused, empty calls launch nothing, the int32
  row check.
"""

from __future__ import annotations

import functools
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gemmgen import backends, ir
from gemmgen.backends import cuda as cuda_backend
from gemmgen.build import render_spec
from gemmgen.cases import Case, standard_cases
from gemmgen.diagnostics import SpecError
from gemmgen.harness.runner import load_generated_module
from gemmgen.harness.toolchain import find_nvcc
from gemmgen.harness.verify_cuda import emulated_arch, run_launcher
from gemmgen.parse import parse
from gemmgen.reference import compare, random_inputs, reference
from gemmgen.validate import validate

REPO = Path(__file__).resolve().parents[3]
SPEC_KERNEL = "moe_fp8_masked_gemm"  # specs/moe.gemm

# Kernels beside the spec's: bf16 with rhs [g, k, n], per-row and per-column
# epilogue scales, a per-group bias and silu_mul; and a plain bf16 one.
LOCAL_SPEC = """\
target cuda {
  archs sm_89 sm_90a
}

target pallas_tpu {
  tpu v5e
}

kernel masked_bf16_kn {
  op grouped
  lhs bf16 [g, m, k]
  rhs bf16 [g, k, n]
  out f32
  lhs_scale per_token f32
  rhs_scale per_channel f32
  bias f32 [g, 1, n]
  epilogue silu_mul
  tile m=32 n=128 k=128
  backends pallas_tpu cuda
}

kernel masked_bf16 {
  op grouped
  lhs bf16 [g, m, k]
  rhs bf16 [g, n, k]
  out bf16
  tile m=32 n=128 k=128
  backends pallas_tpu cuda
}
"""


def load(text: str, path: str = "specs/masked.gemm") -> ir.Spec:
    return validate(parse(text, path), diagnose=backends.diagnose)


def errors(text: str) -> list[str]:
    with pytest.raises(SpecError) as info:
        load(text)
    return [f"{d.loc}: {d.message}" for d in info.value.diagnostics]


# ---------------------------------------------------------------------------
# The spec language


def test_a_3d_lhs_selects_the_masked_layout():
    spec = load(LOCAL_SPEC)
    assert spec.kernel("masked_bf16_kn").masked and spec.kernel("masked_bf16").masked
    moe = render_spec(REPO / "specs" / "moe.gemm").spec
    assert moe.kernel(SPEC_KERNEL).masked
    assert not moe.kernel("moe_w8a8_grouped_gemm").masked


def _kernel_text(op: str, lhs: str, rhs: str, extra: str = "") -> str:
    return ("target cuda {\n  archs sm_90a\n}\n\n"
            f"kernel bad {{\n  op {op}\n  lhs bf16 {lhs}\n  rhs bf16 {rhs}\n  out f32\n"
            f"{extra}  backends cuda\n}}\n")


@pytest.mark.parametrize("op,lhs,rhs,extra,where,message", [
    ("dense", "[g, m, k]", "[n, k]", "", "specs/masked.gemm:7:12",
     ("lhs shape must be '[m, k]' for op 'dense', not [g, m, k] ([g, m, k] is the masked "
      "layout of op 'grouped')")),
    ("tgmm", "[g, m, k]", "[m, n]", "", "specs/masked.gemm:7:12",
     ("lhs shape must be '[m, k]' for op 'tgmm', not [g, m, k] ([g, m, k] is the masked "
      "layout of op 'grouped')")),
    ("grouped", "[g, cap, k]", "[g, n, k]", "", "specs/masked.gemm:7:12",
     ("lhs shape must be '[m, k]' or '[g, m, k]' for op 'grouped', not [g, cap, k] (a 3-d "
      "lhs is the masked layout [g, m, k]: m rows of capacity per group)")),
])
def test_misuses_are_positioned_errors(op, lhs, rhs, extra, where, message):
    (error,) = errors(_kernel_text(op, lhs, rhs, extra))
    assert error.startswith(f"{where}: kernel 'bad': ")
    assert message in error


def test_the_cli_reports_a_misuse_with_exit_2(tmp_path):
    path = tmp_path / "bad.gemm"
    path.write_text(_kernel_text("dense", "[g, m, k]", "[n, k]"))
    proc = subprocess.run([sys.executable, "-m", "gemmgen", "check", str(path)],
                          capture_output=True, text=True, cwd=tmp_path, check=False,
                          env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 2, proc.stderr
    assert "bad.gemm:7:12: error: kernel 'bad': lhs shape must be '[m, k]'" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_the_hopper_body_is_taken_by_auto_on_sm90a():
    """mma auto on sm_90a: a masked kernel gets the Hopper body there, as
    one persistent launch like the mma.sync one (no fill, no worklist, no
    workspace); tests/cuda/sm90/test_cuda_sm90_generated_fp8.py runs it."""
    spec = load(LOCAL_SPEC)
    kernel = spec.kernel("masked_bf16")
    assert kernel.wgmma_obstacle() is None and kernel.uses_wgmma("sm_90a")
    assert not kernel.uses_wgmma("sm_89")
    lp = cuda_backend.plan(kernel, spec)
    assert lp.has_paths and not lp.has_workspace
    assert all(len(v.steps) == 1 and len(v.path("wgmma").steps) == 1 for v in lp.variants)


# ---------------------------------------------------------------------------
# The reference


def _loop(kernel: ir.Kernel, inputs: dict) -> np.ndarray:
    """out[i, r, j], element by element: the semantics written as loops
    (per K block for main-loop scales), clipping the counts to [0, m]."""
    lhs = np.asarray(inputs["lhs"]).astype(np.float64)
    rhs = np.asarray(inputs["rhs"]).astype(np.float64)
    if kernel.rhs_operand.layout is ir.Layout.KN:
        rhs = np.swapaxes(rhs, 1, 2)  # [g, n, k]
    g, cap, k = lhs.shape
    n = rhs.shape[1]
    ls = inputs.get("lhs_scale")
    rs = inputs.get("rhs_scale")
    bias = inputs.get("bias")
    silu = kernel.epilogue.activation is ir.Activation.SILU_MUL
    out = np.zeros((g, cap, n // 2 if silu else n))
    bk = 128 if kernel.lhs_scale.mode is ir.ScaleMode.TOKEN_GROUP else k
    for i in range(g):
        count = min(max(int(inputs["masked_m"][i]), 0), cap)
        for r in range(count):
            acc = np.zeros(n)
            for j in range(n):
                for k0 in range(0, k, bk):
                    part = float(lhs[i, r, k0:k0 + bk] @ rhs[i, j, k0:k0 + bk])
                    if kernel.lhs_scale.mode is ir.ScaleMode.TOKEN_GROUP:
                        part *= float(ls[i, r, k0 // bk]) * float(rs[i, j // 128, k0 // bk])
                    acc[j] += part
            if kernel.lhs_scale.mode is ir.ScaleMode.TOKEN:
                acc = acc * float(ls[i, r]) * rs[i].astype(np.float64)
            if bias is not None:
                acc = acc + bias[i, 0].astype(np.float64)
            if silu:
                gate, up = acc[: n // 2], acc[n // 2:]
                acc = gate / (1.0 + np.exp(-gate)) * up
            out[i, r] = acc
    return out


@functools.cache
def moe_kernel() -> ir.Kernel:
    return render_spec(REPO / "specs" / "moe.gemm").spec.kernel(SPEC_KERNEL)


@pytest.mark.parametrize("which,counts", [
    ("fp8", (0, 9, 1, 4)),
    ("bf16_kn", (-3, 12, 9, 2**31 - 1)),  # clipped: 0, 9, 9, 9
])
def test_reference_is_the_plain_loop(which, counts):
    kernel = moe_kernel() if which == "fp8" else load(LOCAL_SPEC).kernel("masked_bf16_kn")
    rng = np.random.default_rng(7)
    k = 256 if which == "fp8" else 40
    inputs = random_inputs(kernel, m=9, n=256 if which == "fp8" else 12, k=k, rng=rng,
                           masked_m=np.asarray(counts, np.int32))
    expected = _loop(kernel, inputs)
    got = reference(kernel, **inputs)
    assert got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-9)
    assert not got[0].any() and got[1].any()


def test_reference_takes_masked_arguments_only():
    kernel = moe_kernel()
    inputs = random_inputs(kernel, m=4, n=128, k=128, rng=np.random.default_rng(1), g_local=2)
    with pytest.raises(ValueError, match="masked_m, not group_sizes"):
        reference(kernel, **inputs, group_offset=np.int32(0))
    bad = dict(inputs, masked_m=np.zeros(3, np.int32))
    with pytest.raises(ValueError, match=r"masked_m must be an integer array of shape \(2,\)"):
        reference(kernel, **bad)


def test_a_nonzero_row_past_a_count_fails_the_comparison():
    kernel = moe_kernel()
    inputs = random_inputs(kernel, m=8, n=128, k=128, rng=np.random.default_rng(2),
                           masked_m=np.asarray([3, 8], np.int32))
    expected = reference(kernel, **inputs)
    actual = expected.copy()
    assert compare(actual, expected, kernel, k=128, inputs=inputs).passed
    actual[0, 5, 7] = 2.0**-20  # a tiny value where the row must be exactly zero
    assert not compare(actual, expected, kernel, k=128, inputs=inputs).passed


# ---------------------------------------------------------------------------
# Pallas, in TPU interpret mode


@pytest.fixture(scope="module")
def pallas_modules(tmp_path_factory):
    import pallas_helpers as ph

    folder = tmp_path_factory.mktemp("masked_pallas")
    local = ph.build(LOCAL_SPEC, folder / "local")
    moe = ph.build((REPO / "specs" / "moe.gemm").read_text(), folder / "moe", "specs/moe.gemm")
    return {"local": local, "moe": moe}


def _pallas_check(gen, name: str, case: Case, seed: int = 0):
    import pallas_helpers as ph

    kernel = gen.kernel(name)
    inputs = case.inputs(kernel, seed)
    return ph.check(kernel, gen.fn(name), inputs, k=case.k)


def test_pallas_matches_the_reference(pallas_modules):
    kernel = moe_kernel()
    _pallas_check(pallas_modules["moe"], SPEC_KERNEL,
                  standard_cases(kernel.for_backend(ir.Backend.PALLAS_TPU))[0])


@pytest.mark.slow
def test_pallas_every_standard_case(pallas_modules):
    kernel = moe_kernel()
    for case in standard_cases(kernel.for_backend(ir.Backend.PALLAS_TPU))[1:]:
        _pallas_check(pallas_modules["moe"], SPEC_KERNEL, case)


@pytest.mark.slow
@pytest.mark.parametrize("case", [
    Case("k_partial_tile", m=50, n=256, k=320, masked_m=(50, 0, 33, 1)),  # k % 128 = 64
    Case("all_empty", m=24, n=128, k=256, masked_m=(0,) * 3),
    Case("all_full_g16", m=8, n=128, k=128, masked_m=(8,) * 16),
], ids=lambda c: c.name)
def test_pallas_edges(pallas_modules, case):
    out = _pallas_check(pallas_modules["moe"], SPEC_KERNEL, case)
    if not any(case.masked_m):
        assert not np.asarray(out, np.float32).any()


@pytest.mark.slow
def test_pallas_bf16_kn_bias_silu_mul(pallas_modules):
    case = Case("kn", m=45, n=512, k=100, masked_m=(45, 0, 33, 1, 2**30))
    _pallas_check(pallas_modules["local"], "masked_bf16_kn", case)


def test_pallas_rejects_bad_calls(pallas_modules):
    gen = pallas_modules["moe"]
    kernel, fn = moe_kernel(), gen.fn(SPEC_KERNEL)
    inputs = random_inputs(kernel, m=8, n=128, k=128, rng=np.random.default_rng(3), g_local=2)
    with pytest.raises(ValueError, match=r"masked_m must have shape \[2\]"):
        fn(**dict(inputs, masked_m=np.zeros(3, np.int32)), interpret=True)
    with pytest.raises(ValueError, match="lhs has g = 1 but rhs has g = 2"):
        fn(**dict(inputs, lhs=inputs["lhs"][:1], lhs_scale=inputs["lhs_scale"][:1]),
           interpret=True)


# ---------------------------------------------------------------------------
# CUDA, on the CPU emulator (the harness poisons the output)


@functools.cache
def cuda_generated(which: str):
    import tempfile

    if which == "moe":
        rendered = render_spec(REPO / "specs" / "moe.gemm")
    else:
        folder = Path(tempfile.mkdtemp(prefix="gemmgen-masked-spec-"))
        (folder / "specs").mkdir()
        (folder / "specs" / "masked.gemm").write_text(LOCAL_SPEC)
        rendered = render_spec(folder / "specs" / "masked.gemm")
    d = Path(tempfile.mkdtemp(prefix=f"gemmgen-masked-{which}-"))
    for rel, text in rendered.files.items():
        if rel.parts[0] == "cuda":
            (d / rel.name).write_text(text)
    return rendered.spec, d


_modules: dict = {}


def cuda_launcher(which: str, name: str):
    _, d = cuda_generated(which)
    return load_generated_module(d / f"{name}.py", f"test_masked_{which}_{name}")


def cuda_run(which: str, name: str, inputs: dict):
    spec, d = cuda_generated(which)
    source = (d / f"{name}.cu").read_text()
    return run_launcher(cuda_launcher(which, name), source, f"masked/{which}/{name}.cu", inputs,
                        modules=_modules, arch=emulated_arch(spec))


def cuda_check(which: str, name: str, case: Case, seed: int = 0) -> np.ndarray:
    spec, _ = cuda_generated(which)
    kernel = spec.kernel(name)
    inputs = case.inputs(kernel, seed)
    actual = cuda_run(which, name, inputs)
    result = compare(actual, reference(kernel, **inputs), kernel, k=case.k, inputs=inputs)
    assert result.passed, f"{name} {case.describe()}:\n{result.detail}"
    return actual


def test_cuda_edges_on_the_emulator():
    """Counts 0, 1 and m, one past a tile edge, a capacity that is not a
    multiple of the 64-row tile, and k not a multiple of the 128 k tile."""
    cuda_check("moe", SPEC_KERNEL, Case("edges", m=70, n=128, k=320, masked_m=(0, 70, 1, 65)))


@pytest.mark.slow
def test_cuda_every_standard_case_on_the_emulator():
    for case in standard_cases(moe_kernel().for_backend(ir.Backend.CUDA)):
        cuda_check("moe", SPEC_KERNEL, case)


@pytest.mark.slow
@pytest.mark.parametrize("case", [
    Case("g16_small_cap", m=5, n=256, k=128, masked_m=(0, 5, 1, 3) * 4),
    Case("all_empty", m=40, n=128, k=128, masked_m=(0, 0)),
    Case("counts_outside", m=33, n=128, k=256, masked_m=(-1, 40, 2**31 - 1, 32)),
], ids=lambda c: c.name)
def test_cuda_edges_more(case):
    out = cuda_check("moe", SPEC_KERNEL, case)
    if not any(c > 0 for c in case.masked_m):
        assert not np.asarray(out, np.float32).any()


@pytest.mark.slow
@pytest.mark.parametrize("name,case", [
    ("masked_bf16_kn", Case("kn", m=45, n=256, k=104, masked_m=(45, 0, 33, 1))),
    ("masked_bf16", Case("plain", m=70, n=136, k=72, masked_m=(64, 65, 0, 70, 3))),
], ids=["kn_bias_silu_mul", "plain"])
def test_cuda_bf16_kernels(name, case):
    cuda_check("local", name, case)


def test_cuda_launcher_refuses_bad_calls():
    kernel = moe_kernel()
    lm = cuda_launcher("moe", SPEC_KERNEL)
    inputs = random_inputs(kernel, m=8, n=128, k=128, rng=np.random.default_rng(4), g_local=2)
    lm.validate(**inputs)
    with pytest.raises(ValueError, match=r"masked_m must have shape \[2\]"):
        lm.validate(**dict(inputs, masked_m=np.zeros(3, np.int32)))
    with pytest.raises(ValueError, match=r"lhs must have shape \[2, 8, 128\], got \[1, 8, 128\]"):
        lm.validate(**dict(inputs, lhs=inputs["lhs"][:1]))
    # g * m past int32: broadcast views hold the shapes without the memory.
    huge = {name: np.broadcast_to(np.zeros((), v.dtype), shape) for name, v, shape in (
        ("lhs", inputs["lhs"], (2, 2**30, 128)), ("rhs", inputs["rhs"], (2, 128, 128)),
        ("masked_m", inputs["masked_m"], (2,)), ("lhs_scale", inputs["lhs_scale"], (2, 2**30, 1)),
        ("rhs_scale", inputs["rhs_scale"], (2, 1, 1)))}
    with pytest.raises(ValueError, match=r"g \* m \(the rows of lhs and out\) must fit in int32"):
        lm.validate(**huge)


@pytest.mark.parametrize("g,m", [(0, 8), (3, 0)])
def test_cuda_empty_calls_launch_nothing(g, m):
    kernel = moe_kernel()
    lm = cuda_launcher("moe", SPEC_KERNEL)
    inputs = random_inputs(kernel, m=m, n=128, k=128, rng=np.random.default_rng(5), g_local=g)
    dims = lm.validate(**inputs)
    assert lm.launches(dims) == []
    assert lm.output_shapes(dims) == {"out": (g, m, 128)}


def test_cuda_grid_covers_every_group_and_m_tile():
    lm = cuda_launcher("moe", SPEC_KERNEL)
    (launch,) = lm.launches({"m": 70, "k": 256, "g": 5, "n": 256, "n_out": 256})
    assert launch.grid == (2, 5 * 2, 1)  # n tiles, g * cdiv(70, 64) (group, m tile) pairs
    (launch,) = lm.launches({"m": 20, "k": 256, "g": 5, "n": 256, "n_out": 256})
    assert launch.entry == f"{SPEC_KERNEL}_t0" and launch.grid == (2, 5, 1)  # the 32-row rule


@pytest.mark.slow
def test_verify_runs_the_masked_kernel_on_both_backends(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "gemmgen", "verify", "specs/moe.gemm", "--kernel", SPEC_KERNEL],
        capture_output=True, text=True, cwd=REPO, timeout=1800, check=False,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", "HOME": str(Path.home()),
             "TMPDIR": str(tmp_path)})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for backend in ("pallas-interpret", "pallas-lower", "cuda-emu"):
        assert f"{SPEC_KERNEL}  {backend}" in proc.stdout
    assert " 0 failed" in proc.stdout


def test_explain_counts_every_row_of_capacity():
    """`gemmgen explain`: m is the capacity of each of the groups, all valid
    at most: the cost of g * m contiguous rows, and no existing_out."""
    import dataclasses

    from gemmgen import explain
    from gemmgen.backends import pallas
    from gemmgen.explain.plans import pallas_lines

    kernel = moe_kernel()
    flops, moved = explain.cost(kernel, 128, 4096, 7168, 32)
    assert flops == 2 * 32 * 128 * 4096 * 7168
    plain = dataclasses.replace(kernel, masked=False)
    assert (flops, moved) == explain.cost(plain, 32 * 128, 4096, 7168, 32)
    spec = render_spec(REPO / "specs" / "moe.gemm").spec
    assert pallas.existing_out_saving(pallas.plan(kernel, spec), 128, 4096) is None
    text = "\n".join(pallas_lines(spec, kernel, 100, 256, 256, 5))
    # The kernel's own Pallas tile, 256 x 1024 x 512: one m tile of each of
    # the 5 groups' capacity of 100 rows, one n and one k tile.
    assert "tile m=256 n=1024 k=512" in text
    assert "grid ~ (1, 5, 1) (n tiles, (group, m tile) pairs" in text
    assert "existing_out" not in text


@pytest.mark.slow
@pytest.mark.skipif(find_nvcc() is None, reason="nvcc not found")
@pytest.mark.parametrize("name", ["masked_bf16_kn", "masked_bf16"])
def test_local_kernels_compile_for_every_arch_without_spills(name):
    """sm_89 and sm_90a, -Werror: every entry (the mma.sync masked body and,
    in the sm_90a build, the Hopper one) without spills."""
    from gemmgen.harness import nvcc

    spec, d = cuda_generated("local")
    lp = cuda_backend.plan(spec.kernel(name), spec)
    for arch in lp.archs:
        result = nvcc.compile_check((d / f"{name}.cu").read_text(), arch,
                                    name_for_errors=f"{name}.cu", include_dirs=(d,),
                                    extra_flags=("-Werror", "all-warnings"))
        assert set(result.kernels) == set(lp.entries)
        for entry, usage in result.kernels.items():
            assert usage.spill_stores == 0 and usage.spill_loads == 0, (arch, entry, usage)


# Planted bugs in the masked body (gg_gemm.cuh): the edge tests above must
# fail on each, so they are not vacuous.
PLANTED = [
    # no zeros past a count: the poisoned output shows through
    ("const int zero_from = count > lo ? count : lo;", "const int zero_from = hi;"),
    # a count past the capacity is not clipped: rows of the next group are
    # overwritten with this group's product
    ("(masked_m[gl] > cap ? cap : masked_m[gl])", "masked_m[gl]"),
    # the partial last m tile of a capacity forgotten (and the pairs misindexed)
    ("static_cast<unsigned>((cap + T::kBM - 1) / T::kBM)", "static_cast<unsigned>(cap / T::kBM)"),
]


@pytest.mark.slow
@pytest.mark.parametrize("old,new", PLANTED, ids=["no_zeros", "no_clip", "floor_tiles"])
def test_planted_bugs_in_the_masked_body_fail(old, new):
    from cuda_helpers import with_mutated_runtime

    from gemmgen.harness.cuda_emu import EmuRaceError

    # The mma.sync masked body: the local spec's plain bf16 kernel on sm_89
    # (specs/moe.gemm declares sm_90a only, where its FP8 kernel runs the
    # Hopper body and an edit of gg_gemm.cuh would change nothing).
    name = "masked_bf16"
    spec, d = cuda_generated("local")
    assert emulated_arch(spec) == "sm_89"
    kernel = spec.kernel(name)
    source = (d / f"{name}.cu").read_text()
    case = Case("planted", m=70, n=128, k=256, masked_m=(0, 90, 1, 65))
    inputs = case.inputs(kernel, 0)
    expected = reference(kernel, **inputs)
    good = run_launcher(cuda_launcher("local", name), source, f"masked/local/{name}.cu",
                        inputs, modules=_modules, arch=emulated_arch(spec))
    assert compare(good, expected, kernel, k=case.k, inputs=inputs).passed
    mutant = with_mutated_runtime(source, "gg_gemm.cuh", old, new)
    try:
        bad = run_launcher(cuda_launcher("local", name), mutant,
                           f"masked/local/{name}.planted.{PLANTED.index((old, new))}.cu",
                           inputs, modules=_modules, arch=emulated_arch(spec))
    except EmuRaceError:
        return  # two blocks wrote one element: the emulator caught it
    assert not compare(bad, expected, kernel, k=case.k, inputs=inputs).passed


@pytest.mark.slow
@settings(max_examples=12, deadline=None)
@given(data=st.data())
def test_cuda_drawn_capacities_and_counts(data):
    """Hypothesis: capacities around the 32- and 64-row tiles (both LUT
    entries), 1..8 groups, counts anywhere in [-2, cap + 2]."""
    cap = data.draw(st.integers(1, 140), label="cap")
    g = data.draw(st.integers(1, 8), label="g")
    counts = data.draw(st.lists(st.integers(-2, cap + 2), min_size=g, max_size=g), label="counts")
    cuda_check("moe", SPEC_KERNEL, Case("drawn", m=cap, n=128, k=256, masked_m=tuple(counts)))


def _nan_padding(kernel: ir.Kernel, case: Case) -> dict:
    """The case's inputs with NaN in every lhs row (and lhs scale) past a
    count: padding a kernel must never let into a stored row."""
    inputs = case.inputs(kernel, 3)
    lhs = inputs["lhs"].copy()
    scale = inputs["lhs_scale"].copy()
    for i, c in enumerate(case.masked_m):
        lhs[i, max(c, 0):] = np.nan
        scale[i, max(c, 0):] = np.nan
    return dict(inputs, lhs=lhs, lhs_scale=scale)


NAN_CASE = Case("nan_padding", m=70, n=128, k=256, masked_m=(0, 70, 1, 65, 33))


@pytest.mark.slow
def test_nan_padding_stays_out_on_both_backends(pallas_modules):
    import pallas_helpers as ph

    kernel = moe_kernel()
    inputs = _nan_padding(kernel, NAN_CASE)
    expected = reference(kernel, **inputs)
    assert np.isfinite(expected).all()
    actual = cuda_run("moe", SPEC_KERNEL, inputs)
    assert compare(actual, expected, kernel, k=NAN_CASE.k, inputs=inputs).passed
    ph.check(kernel, pallas_modules["moe"].fn(SPEC_KERNEL), inputs, k=NAN_CASE.k)
