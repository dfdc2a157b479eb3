"""The CUDA tgmm kind (ragged K: per group lhsᵀ · rhs, the MoE d rhs).

The generated kernels run on the CPU emulator through their own Python
launchers (`run_launcher`: the launcher's validate() and launch sequence,
not a copy) and are compared with the NumPy reference; nvcc checks
registers, spills, shared memory and the SASS mix for sm_80 and sm_90a;
the launcher rejects bad calls before anything is launched; and the plan
and diagnostics are checked on their own.
"""

from __future__ import annotations

import importlib.util
import itertools
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from gemmgen import backends, ir
from gemmgen.backends import cuda
from gemmgen.backends.cuda import tgmm as cuda_tgmm
from gemmgen.diagnostics import SpecError
from gemmgen.parse import parse
from gemmgen.reference import compare, random_inputs, reference
from gemmgen.harness import nvcc
from gemmgen.harness.verify_cuda import run_launcher
from gemmgen.validate import validate

ARCHS = ("sm_80", "sm_90a")

# Three kernels that between them cover: both operand types, every out type,
# alpha, 2 to 4 stages, several warps per block, and more than one k and n
# tile on small shapes.
SPEC = """\
target cuda {
  archs sm_80 sm_90a
}

kernel tgmm_bf16 {
  op tgmm
  lhs bf16 [m, k]
  rhs bf16 [m, n]
  out f32
  tile m=16 n=32 k=32
  warp_tile m=16 n=16
  stages 2
  backends cuda
}

kernel tgmm_f16_alpha {
  op tgmm
  lhs f16 [m, k]
  rhs f16 [m, n]
  out bf16
  epilogue alpha=0.5
  tile m=32 n=32 k=64
  warp_tile m=32 n=16
  stages 3
  backends cuda
}

kernel tgmm_bf16_out_f16 {
  op tgmm
  lhs bf16 [m, k]
  rhs bf16 [m, n]
  out f16
  tile m=16 n=64 k=64
  stages 4
  backends cuda
}
"""

KERNELS = ("tgmm_bf16", "tgmm_f16_alpha", "tgmm_bf16_out_f16")


def load_spec(text: str) -> ir.Spec:
    return validate(parse(text, "specs/tgmm.gemm"), diagnose=backends.diagnose)


@dataclass
class Generated:
    kernel: ir.Kernel
    launcher: ModuleType
    source: str
    folder: Path


_modules: dict = {}  # EmuModules by source name, shared by every test
_ids = itertools.count()


@pytest.fixture(scope="module")
def generated(tmp_path_factory) -> dict[str, Generated]:
    spec = load_spec(SPEC)
    folder = tmp_path_factory.mktemp("tgmm")
    for rel, text in cuda.render(spec).items():
        dest = folder / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text(text)
    out = {}
    for kernel in spec.kernels:
        path = folder / "cuda" / f"{kernel.name}.py"
        name = f"gg_test_tgmm_{kernel.name}_{next(_ids)}"
        module_spec = importlib.util.spec_from_file_location(name, path)
        assert module_spec is not None and module_spec.loader is not None
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[name] = module  # dataclasses look their module up while it loads
        module_spec.loader.exec_module(module)
        source = (folder / "cuda" / f"{kernel.name}.cu").read_text()
        out[kernel.name] = Generated(kernel, module, source, folder / "cuda")
    return out


def run(gen: Generated, inputs: dict[str, np.ndarray], schedule: str = "run-ahead") -> np.ndarray:
    return run_launcher(gen.launcher, gen.source, f"tgmm/{gen.kernel.name}.cu", inputs,
                        schedule=schedule, modules=_modules)


def make_inputs(kernel: ir.Kernel, m: int, n: int, k: int, sizes, *, seed: int = 0,
                group_offset: int | None = None, g_local: int | None = None,
                existing_out: bool = False) -> dict[str, np.ndarray]:
    rng = np.random.default_rng([seed, m, n, k, len(sizes)])
    return random_inputs(kernel, m=m, n=n, k=k, rng=rng, group_sizes=np.asarray(sizes, np.int32),
                         group_offset=group_offset, g_local=g_local,
                         with_existing_out=existing_out)


def check(gen: Generated, inputs: dict[str, np.ndarray], schedule: str = "run-ahead") -> np.ndarray:
    got = run(gen, inputs, schedule)
    expected = reference(gen.kernel, **inputs)
    k = max(int(np.max(inputs["group_sizes"], initial=0)), 1)
    result = compare(got, expected, gen.kernel, k=k, inputs=inputs)
    assert result.passed, result.detail
    return got


# ---------------------------------------------------------------------------
# On the emulator, against the reference


@dataclass(frozen=True)
class Case:
    m: int
    n: int
    k: int
    sizes: tuple[int, ...]
    group_offset: int | None = None
    g_local: int | None = None
    existing_out: bool = False


CASES = {
    # Empty groups first, between and last; rows past sum(group_sizes).
    "zero_groups": Case(m=80, n=40, k=48, sizes=(0, 33, 0, 0, 30, 0)),
    # One group spans several pipeline stages and k / n tiles.
    "group_larger_than_tiles": Case(m=90, n=72, k=80, sizes=(7, 83)),
    "all_rows_one_group": Case(m=70, n=32, k=64, sizes=(0, 70, 0)),
    "sum_below_m": Case(m=61, n=24, k=40, sizes=(10, 20, 3)),
    "no_rows": Case(m=0, n=16, k=24, sizes=(0, 0)),
    # k and n are not multiples of any tile: partial tiles in both.
    "ragged_edges": Case(m=37, n=56, k=88, sizes=(12, 0, 25)),
    # This shard owns groups [1, 3): existing_out is added to both blocks.
    "sharded_existing_out": Case(m=64, n=40, k=48, sizes=(9, 20, 0, 17, 18), group_offset=1,
                                 g_local=2, existing_out=True),
    # Without existing_out a shard owns every group from group_offset on.
    "offset_without_existing_out": Case(m=50, n=24, k=32, sizes=(5, 0, 30, 15),
                                        group_offset=2),
    "existing_out_unsharded": Case(m=40, n=16, k=16, sizes=(0, 25, 15), existing_out=True),
}


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("kernel", KERNELS)
def test_matches_reference(generated, kernel, name):
    gen = generated[kernel]
    c = CASES[name]
    inputs = make_inputs(gen.kernel, c.m, c.n, c.k, c.sizes, group_offset=c.group_offset,
                         g_local=c.g_local, existing_out=c.existing_out)
    got = check(gen, inputs)
    g = c.g_local if c.g_local is not None else len(c.sizes) - (c.group_offset or 0)
    assert got.shape == (g, c.k, c.n)
    # An empty local group gives exactly zeros, or existing_out.
    offset = c.group_offset or 0
    for i in range(g):
        if c.sizes[offset + i] == 0:
            want = inputs["existing_out"][i] if c.existing_out else np.zeros((c.k, c.n))
            np.testing.assert_array_equal(got[i].astype(np.float64), want.astype(np.float64))


@st.composite
def group_problems(draw):
    """m, n, k and group sizes with sum <= m, zero-sized groups likely."""
    m = draw(st.integers(0, 120))
    num_groups = draw(st.integers(1, 6))
    sizes, left = [], m
    for _ in range(num_groups):
        s = min(draw(st.one_of(st.just(0), st.integers(1, 80))), left)
        sizes.append(s)
        left -= s
    n = 8 * draw(st.integers(1, 8))
    k = 8 * draw(st.integers(1, 8))
    return m, n, k, tuple(sizes)


@given(problem=group_problems())
@example(problem=(64, 32, 32, (0, 64, 0)))  # all rows in one group, empty neighbours
@example(problem=(100, 40, 48, (3, 0, 90)))  # a group longer than a stage and a tile
@example(problem=(50, 8, 8, (7, 11)))  # sum(group_sizes) < m; one-element-wide tiles
def test_any_group_sizes(generated, problem):
    m, n, k, sizes = problem
    gen = generated["tgmm_bf16"]
    check(gen, make_inputs(gen.kernel, m, n, k, sizes, seed=1))


def test_sharded_any_group_sizes_reverse_schedule(generated):
    """The other warp schedule (missing barriers show as NaN) on a sharded call."""
    gen = generated["tgmm_f16_alpha"]
    inputs = make_inputs(gen.kernel, 75, 48, 72, (4, 30, 0, 41), group_offset=1, g_local=2,
                         existing_out=True, seed=2)
    check(gen, inputs, schedule="reverse")


def test_zero_local_groups_launch_nothing(generated):
    launcher = generated["tgmm_bf16"].launcher
    dims = launcher.validate(lhs=np.zeros((8, 16), np.uint16), rhs=np.zeros((8, 16), np.uint16),
                             group_sizes=np.array([4, 4], np.int32), group_offset=2)
    assert dims["g"] == 0
    assert launcher.launches(dims) == []
    assert launcher.output_shapes(dims) == {"out": (0, 16, 16)}


# ---------------------------------------------------------------------------
# The launch plan


def test_launch_is_one_step_with_the_plans_grid(generated):
    gen = generated["tgmm_bf16"]
    launcher = gen.launcher
    dims = launcher.validate(lhs=np.zeros((50, 72), np.uint16), rhs=np.zeros((50, 40), np.uint16),
                             group_sizes=np.array([10, 0, 30, 10], np.int32), group_offset=1)
    assert dims["g"] == 3
    (step,) = launcher.launches(dims)
    # tile m=16 n=32 k=32: (k tiles, n tiles, local groups); 2 x 2 warps.
    assert step.entry == "tgmm_bf16"
    assert step.grid == (3, 2, 3)
    assert step.block == (128, 1, 1)
    p = cuda_tgmm.plan(gen.kernel, load_spec(SPEC))
    assert step.smem == p.smem_bytes == 2 * 16 * (32 * 2 + 16) * 2
    assert launcher.workspace_ints(dims) == 0
    assert [type(a).__name__ for a in step.args[5:]] == ["int32"] * 5  # m n k num_groups offset


def test_plan_numbers():
    spec = load_spec(SPEC)
    p = cuda_tgmm.plan(spec.kernel("tgmm_f16_alpha"), spec)
    assert (p.tile_k, p.tile_n, p.tile_rows) == (64, 32, 32)
    assert (p.warps_k, p.warps_n, p.threads) == (2, 2, 128)
    assert (p.mi, p.ni, p.ksteps) == (2, 2, 2)
    assert (p.a_stride, p.b_stride) == (64 * 2 + 16, 32 * 2 + 16)
    assert p.smem_bytes == 3 * 32 * (144 + 80)
    assert p.mma == "mma_m16n8k16_f16" and p.alpha == 0.5
    # The default warp tile: 64 x 32 where the block allows.
    p = cuda_tgmm.plan(spec.kernel("tgmm_bf16_out_f16"), spec)
    assert (p.warp_k, p.warp_n, p.threads) == (64, 32, 64)


def test_plan_prints_one_parameter_list():
    """The entry's head, and the launch step's arguments, come from the
    plan's one parameter list; the grid is a tree the launch step reuses."""
    spec = load_spec(SPEC)
    kernel = spec.kernel("tgmm_f16_alpha")
    p = cuda_tgmm.plan(kernel, spec)
    names = [q.name for q in p.params]
    assert names == ["lhs", "rhs", "group_sizes", "existing_out", "out", "m", "n", "k",
                     "num_groups", "group_offset"]
    assert p.entry_signature.startswith('extern "C" __global__ void __launch_bounds__(128) ')
    assert all(q.decl in " ".join(p.entry_signature.split()) for q in p.params)
    (step,) = cuda.plan(kernel, spec).variants[0].steps
    assert [a.name or a.value.py for a in step.args] == \
        names[:5] + [f"gg_i32({d})" for d in names[5:]]
    assert step.grid == p.grid
    assert [g.py for g in p.grid] == ["gg_cdiv(k, 64)", "gg_cdiv(n, 32)", "g"]


def test_cpp_header_documents_how_g_is_set(generated):
    header = (generated["tgmm_bf16"].folder / "tgmm_bf16.h").read_text()
    assert ("  // existing_out.shape[0], or num_groups - group_offset without existing_out\n"
            "  int g = 0;\n") in header
    assert "const float* existing_out = nullptr;" in header


# ---------------------------------------------------------------------------
# Launcher validation: a bad call raises before anything is launched


def _call(**overrides):
    base = dict(lhs=np.zeros((20, 16), np.uint16), rhs=np.zeros((20, 24), np.uint16),
                group_sizes=np.array([5, 10, 5], np.int32))
    base.update(overrides)
    return {k: v for k, v in base.items() if v is not None or k in ("lhs", "rhs", "group_sizes")}


BAD_CALLS = {
    "lhs_dtype": (dict(lhs=np.zeros((20, 16), np.float32)), "lhs must be bfloat16"),
    "rhs_rows": (dict(rhs=np.zeros((21, 24), np.uint16)), r"rhs must have shape \[20, 24\]"),
    "rhs_ndim": (dict(rhs=np.zeros((20, 24, 1), np.uint16)), "rhs must have 2 dims"),
    "group_sizes_dtype": (dict(group_sizes=np.array([5, 10, 5], np.int64)),
                          "group_sizes must be int32"),
    "missing_group_sizes": (dict(group_sizes=None), "group_sizes is required"),
    "k_unaligned": (dict(lhs=np.zeros((20, 12), np.uint16)), "k must be a multiple of 8"),
    "n_unaligned": (dict(rhs=np.zeros((20, 20), np.uint16)), "n must be a multiple of 8"),
    "k_zero": (dict(lhs=np.zeros((20, 0), np.uint16)), "n, k positive"),
    # Without existing_out, g = num_groups - group_offset: an output shape.
    "offset_past_groups": (dict(group_offset=4), "no local groups: g = num_groups - group_offset "
                           "is negative"),
    "offset_past_int32": (dict(group_offset=2**31, existing_out=np.zeros((1, 16, 24), np.float32)),
                          "group_offset must fit in int32"),
    "offset_not_scalar": (dict(group_offset=np.array([1], np.int32)),
                          "group_offset must be a scalar"),
    "existing_out_shape": (dict(existing_out=np.zeros((3, 16, 16), np.float32)),
                           r"existing_out must have shape \[3, 16, 24\]"),
    "existing_out_dtype": (dict(existing_out=np.zeros((3, 16, 24), np.float16)),
                           "existing_out must be float32"),
    "out_shape": (dict(out=np.zeros((2, 16, 24), np.float32)),
                  r"out must have shape \[3, 16, 24\]"),
    "lhs_misaligned": (dict(lhs=np.zeros(20 * 16 + 1, np.uint16)[1:].reshape(20, 16)),
                       "lhs must be 16-byte aligned"),
    "rhs_not_contiguous": (dict(rhs=np.zeros((20, 48), np.uint16)[:, ::2]),
                           "rhs must be C-contiguous"),
    "lhs_not_an_array": (dict(lhs=[[0] * 16] * 20), "lhs must be an array"),
}


@pytest.mark.parametrize("name", list(BAD_CALLS))
def test_launcher_rejects_bad_calls(generated, name):
    overrides, message = BAD_CALLS[name]
    with pytest.raises(ValueError, match=message):
        generated["tgmm_bf16"].launcher.validate(**_call(**overrides))


def test_launcher_accepts_good_calls(generated):
    launcher = generated["tgmm_bf16"].launcher
    assert launcher.validate(**_call())["g"] == 3
    assert launcher.validate(**_call(group_offset=np.int32(1)))["g"] == 2
    existing = np.zeros((1, 16, 24), np.float32)
    dims = launcher.validate(**_call(group_offset=1, existing_out=existing))
    assert (dims["g"], dims["group_offset"], dims["num_groups"]) == (1, 1, 3)
    # Any group_offset is defined (docs/semantics.md, "tgmm"): local groups
    # that group_sizes lacks are empty.
    assert launcher.validate(**_call(group_offset=-1))["g"] == 4
    assert launcher.validate(**_call(group_offset=3))["g"] == 0
    for offset in (-(2**31), 2, 5, 2**31 - 1):
        dims = launcher.validate(**_call(group_offset=offset,
                                         existing_out=np.zeros((3, 16, 24), np.float32)))
        assert (dims["g"], dims["group_offset"]) == (3, offset)


# ---------------------------------------------------------------------------
# Diagnostics


def _diagnostics(text: str) -> str:
    with pytest.raises(SpecError) as info:
        load_spec(text)
    return "\n".join(d.message for d in info.value.diagnostics)


def _tgmm(*fields: str, archs: str = "sm_90a") -> str:
    body = "".join(f"  {f}\n" for f in ("op tgmm", *fields, "backends cuda"))
    return f"target cuda {{\n  archs {archs}\n}}\n\nkernel t {{\n{body}}}\n"


@pytest.mark.parametrize("fields, message", [
    (("lhs f32 [m, k]", "rhs f32 [m, n]", "out f32"), "takes bf16 x bf16 or f16 x f16"),
    (("lhs bf16 [m, k]", "rhs f16 [m, n]", "out f32"), "lhs 'bf16' x rhs 'f16'"),
    (("lhs bf16 [m, k]", "rhs bf16 [m, n]", "out f32", "tile m=24 n=64 k=64"),
     "tile m=24 .* must be a multiple of 16"),
    (("lhs bf16 [m, k]", "rhs bf16 [m, n]", "out f32", "tile m=32 n=64 k=64", "stages 1"),
     "needs stages >= 2"),
])
def test_diagnostics(fields, message):
    assert re.search(message, _diagnostics(_tgmm(*fields)))


def test_shared_memory_over_an_archs_limit_is_a_diagnostic():
    text = _tgmm("lhs bf16 [m, k]", "rhs bf16 [m, n]", "out f32", "tile m=128 n=128 k=128",
                 "stages 2", archs="sm_80 sm_89")
    msg = _diagnostics(text)
    assert "over the" in msg and "sm_89" in msg and "sm_80" not in msg


# ---------------------------------------------------------------------------
# nvcc: registers, spills, shared memory, SASS

needs_nvcc = pytest.mark.skipif(nvcc.find_nvcc() is None, reason="nvcc is not installed")
needs_cuobjdump = pytest.mark.skipif(nvcc.find_cuda_tool("cuobjdump") is None,
                                     reason="cuobjdump is not installed")


@needs_nvcc
@needs_cuobjdump
@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("kernel", KERNELS)
def test_nvcc_no_spills_and_tensor_core_sass(generated, kernel, arch):
    gen = generated[kernel]
    p = cuda_tgmm.plan(gen.kernel, load_spec(SPEC))
    result = nvcc.compile_check(gen.source, arch, name_for_errors=f"tgmm/{kernel}.cu")
    usage = result.kernels[kernel]
    assert usage.spill_stores == usage.spill_loads == usage.stack_frame == 0, usage
    assert 0 < usage.registers <= 255
    assert usage.static_smem + p.smem_bytes <= nvcc.shared_memory_limit(arch)
    sass = nvcc.sass_summary(result.cubin)[kernel]
    # One stage's MMAs per thread, unrolled: rows / 16 x (k, n) fragments
    # (f16 is the opcode's default type: HMMA.16816.F32 without a suffix).
    bf16 = sass.count("HMMA", "16816", "F32", "BF16")
    assert bf16 == (p.ksteps * p.mi * p.ni if p.operand is ir.DType.BF16 else 0)
    assert sass.count("HMMA", "16816", "F32") == p.ksteps * p.mi * p.ni
    assert sass.count("LDSM", "MT88", "4") == p.ksteps * (p.mi + p.ni // 2)
    assert sass.count("LDGSTS", "128", "ZFILL") > 0


@needs_nvcc
def test_host_launcher_compiles(generated):
    """The .cu with its nvcc host launcher (launch_<kernel>) builds as a TU."""
    import subprocess

    from gemmgen.harness.toolchain import RUNTIME_INCLUDE_DIR

    gen = generated["tgmm_f16_alpha"]
    obj = gen.folder / "tgmm_f16_alpha.o"
    proc = subprocess.run([str(nvcc.find_nvcc()), "-c", "-std=c++17", nvcc.gencode("sm_90a"),
                           f"-I{RUNTIME_INCLUDE_DIR}", str(gen.folder / "tgmm_f16_alpha.cu"),
                           "-o", str(obj)], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    assert b"launch_tgmm_f16_alpha" in obj.read_bytes()


def test_hostile_group_sizes_are_clamped_not_out_of_bounds(generated):
    """group_sizes live on the device, so the launcher cannot check them: the
    kernel counts a negative size as 0 and clamps the rows to m (the
    emulator faults on any access outside an argument)."""
    gen = generated["tgmm_bf16"]
    inputs = make_inputs(gen.kernel, 40, 24, 32, (0, 30, 10), seed=3)
    expected = reference(gen.kernel, **inputs)
    hostile = dict(inputs, group_sizes=np.array([-5, 30, 1000], np.int32))
    got = run(gen, hostile)
    assert compare(got, expected, gen.kernel, k=30, inputs=inputs).passed


BIG = 2**31 - 1
EDGE_GROUPS = {
    # Sizes whose prefix sums overflow int32, negative sizes, groups cut at m.
    "four_2^30": ((2**30,) * 4, None, False),
    "int32_max_then_more": ((BIG, 5, 7), None, True),
    "negative_mixed": ((5, -3, BIG, 7), None, False),
    "int32_min": ((-(2**31), 20, -1, 15), None, True),
    # Offsets before, across and past the ends of group_sizes.
    "offset_negative": ((10, 20, 9), -2, False),  # g = 5: two empty groups first
    "offset_far_negative": ((10, 20, 9), -(2**31), True),
    "offset_across_end": ((10, 20, 9), 2, True),  # existing_out has 3 groups: 2 missing
    "offset_past_end": ((10, 20, 9), 7, True),
    "offset_int32_max": ((10, 20, 9), BIG, True),
    "offset_with_huge_sizes": ((2**30, -4, 2**30), 1, True),
}


@pytest.mark.parametrize("name", list(EDGE_GROUPS))
def test_any_group_sizes_and_offset_values(generated, name):
    """Every group_sizes / group_offset value is defined (docs/semantics.md,
    "grouped", "tgmm"), computed without int32 overflow and without reading
    outside group_sizes (the emulator faults on such a read)."""
    sizes, offset, existing = EDGE_GROUPS[name]
    gen = generated["tgmm_bf16"]
    g_local = 3 if existing else len(sizes) - (offset or 0)
    inputs = make_inputs(gen.kernel, 45, 24, 32, sizes, group_offset=offset, g_local=g_local,
                         existing_out=existing, seed=5)
    got = check(gen, inputs)
    assert got.shape == (g_local, 32, 24)


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
@pytest.mark.parametrize("kernel", ["tgmm_bf16", "tgmm_bf16_out_f16"])
def test_nonfinite_inputs_and_overflow(generated, kernel):
    """inf / NaN in the rows of a group this shard does not own, in rows past
    sum(group_sizes), in the last row of an owned group (the partial last
    stage) and in existing_out; a group whose sums overflow f16. Other
    elements stay finite; the reference says what the rest must be."""
    gen = generated[kernel]
    sizes = (6, 19, 17, 5)  # rows 0-5, 6-24, 25-41, 42-46; m = 52
    inputs = make_inputs(gen.kernel, 52, 40, 48, sizes, group_offset=1, g_local=2,
                         existing_out=True, seed=6)
    lhs, rhs = inputs["lhs"], inputs["rhs"]
    lhs[2, 5] = np.inf  # group 0: not this shard's
    rhs[44, 7] = np.nan  # group 3: not this shard's
    lhs[50, 0] = -np.inf  # past sum(group_sizes)
    rhs[41, 39] = np.inf  # the last row of owned group 2, last column
    lhs[10] = (lhs[10].astype(np.float32) * 3e4).astype(lhs.dtype)  # group 1 past f16
    inputs["existing_out"][0, 3, 4] = np.nan
    check(gen, inputs)
    got = run(gen, inputs).astype(np.float64)
    assert np.isnan(got[0, 3, 4]) and np.isinf(got[1, :, 39]).sum() > 20
    assert np.isfinite(got[1, :, :39]).all()
    if kernel == "tgmm_bf16_out_f16":
        assert np.isinf(got[0]).sum() > 20  # the same infinities as the reference


def test_thread_sanitizer_finds_no_race(generated):
    """One call under ThreadSanitizer (one OS thread per CUDA thread)."""
    from gemmgen.harness.cuda_emu import EmuModule

    gen = generated["tgmm_f16_alpha"]
    name = "tgmm/tgmm_f16_alpha.tsan.cu"
    modules = {name: EmuModule(gen.source, name, tsan=True, include_dirs=[gen.folder])}
    inputs = make_inputs(gen.kernel, 40, 32, 64, (0, 25, 15), existing_out=True, seed=4)
    got = run_launcher(gen.launcher, gen.source, name, inputs, modules=modules)
    result = compare(got, reference(gen.kernel, **inputs), gen.kernel, k=25, inputs=inputs)
    assert result.passed, result.detail


def test_docs_example_is_a_valid_spec():
    doc = Path(__file__).resolve().parents[3] / "docs" / "cuda-tgmm.md"
    (block,) = re.findall(r"```gemm\n(.*?)```", doc.read_text(), re.S)
    spec = load_spec(block)
    p = cuda_tgmm.plan(spec.kernels[0], spec)
    assert (p.tile_k, p.tile_n, p.tile_rows, p.threads, p.smem_bytes) == (128, 128, 32, 256, 52224)
