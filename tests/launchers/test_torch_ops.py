"""The PyTorch ops (generated/<stem>/torch/<kernel>.py) on the CPU.

Each CUDA kernel has one op, torch.ops.gemmgen_<stem>.<kernel>, whose CPU
implementation calls the kernel's C ABI (gg_<kernel>_launch(), the entry the
XLA FFI handler calls too) built against gemmgen's CPU emulator
(harness/abi.emulated_abi, what `gemmgen compile --torch --emulate` writes).
Results are compared with the NumPy reference (gemmgen/reference) on fresh
random inputs; every output the op allocates is poisoned (NaN, or 0xAB
bytes) before the launch, and existing_out holds a value no computed row
can have, so that an element the kernel should have written and did not
shows. Also: torch.library.opcheck (schema, fake, autograd registration),
torch.compile(fullgraph=True) with a dynamic M, the checks' messages, and
the gradients of the 16-bit ops against the NumPy reference's.

The ops are those of the committed generated/ (`gemmgen check` keeps it
current; PyTorch has one registry of op names per process, so the tests and
examples/torch_fused_moe.py share one package); each library is built once
and cached by content (the emulator's cache). PyTorch is an optional
extra (gemmgen[torch]): without it every test here skips.
"""

from __future__ import annotations

import functools
import importlib
import os
import sys
from pathlib import Path

import numpy as np
import pytest

from gemmgen import ir
from gemmgen.backends.cuda import torch_ops
from gemmgen.build import render_spec
from gemmgen.cases import Case, standard_cases
from gemmgen.harness.abi import emulated_abi
from gemmgen.harness.cuda_emu import device_env
from gemmgen.harness.verify_cuda import emulated_arch
from gemmgen.reference import compare, reference

torch = pytest.importorskip("torch", reason="PyTorch is an optional extra: pip install -e '.[torch]'")
ml_dtypes = pytest.importorskip("ml_dtypes")

REPO = Path(__file__).resolve().parents[2]
SENTINEL = -4242.0  # poisoned existing_out: no computed row holds it

# Storage dtypes: NumPy name -> (torch dtype, the same-size integer view of both).
_VIEWS = {
    "bfloat16": ("bfloat16", "uint16"),
    "float8_e4m3fn": ("float8_e4m3fn", "uint8"),
    "float8_e5m2": ("float8_e5m2", "uint8"),
}


@functools.cache
def rendered(stem: str):
    return render_spec(REPO / "specs" / f"{stem}.gemm")


def op_module(stem: str, name: str):
    """The op's module, its emulated library loaded for CPU tensors."""
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    module = importlib.import_module(f"generated.{stem}.torch.{name}")
    if "cpu" not in module._ENTRIES:
        module.load(emulated_abi(REPO / "generated" / stem / "cuda", name), device="cpu")
    # The emulated device: read by each library at its first launch.
    os.environ.update(device_env(emulated_arch(rendered(stem).spec)))
    return module


def op(stem: str, name: str):
    op_module(stem, name)
    return getattr(getattr(torch.ops, f"gemmgen_{stem}"), name)


def kernel(stem: str, name: str) -> ir.Kernel:
    return rendered(stem).spec.kernel(name).for_backend(ir.Backend.CUDA)


def to_torch(x):
    if isinstance(x, np.generic):  # a 0-d array input (NVFP4's global scale)
        x = np.asarray(x)
    if not isinstance(x, np.ndarray):
        return x
    if x.dtype.name in _VIEWS:
        dtype, view = _VIEWS[x.dtype.name]
        return torch.from_numpy(x.view(view).copy()).view(getattr(torch, dtype))
    return torch.from_numpy(x.copy())


def to_numpy(t):
    for name, (dtype, view) in _VIEWS.items():
        if t.dtype == getattr(torch, dtype):
            return t.detach().view(getattr(torch, view)).numpy().view(getattr(ml_dtypes, name))
    return t.detach().numpy()


def poison_outputs(module, monkeypatch):
    """Every output the op allocates filled with NaN (0xAB bytes for integers)."""
    allocate = module._outputs

    def poisoned(lhs, d):
        outs = allocate(lhs, d)
        for o in outs if isinstance(outs, tuple) else (outs,):
            if o.dtype.is_floating_point:
                o.fill_(float("nan"))
            else:
                o.view(torch.uint8).fill_(0xAB)
        return outs

    monkeypatch.setattr(module, "_outputs", poisoned)


def call_args(k: ir.Kernel, inputs: dict, module) -> list:
    """The op's positional arguments, from the reference's inputs."""
    args = []
    for name in module._check.__code__.co_varnames[:module._check.__code__.co_argcount]:
        value = inputs.get(name)
        if name == "group_offset":
            value = 0 if value is None else int(value)
        args.append(to_torch(value))
    return args


def check(stem: str, name: str, case: Case, *, seed: int, monkeypatch) -> None:
    """The op on the emulated CUDA kernel against the NumPy reference."""
    k = kernel(stem, name)
    module = op_module(stem, name)
    poison_outputs(module, monkeypatch)
    inputs = case.inputs(k, seed)
    if inputs.get("existing_out") is not None:
        x = inputs["existing_out"]
        inputs["existing_out"] = np.full(x.shape, SENTINEL, x.dtype)
    got = op(stem, name)(*call_args(k, inputs, module))
    got = tuple(to_numpy(o) for o in got) if isinstance(got, tuple) else to_numpy(got)
    expected = reference(k, **inputs)
    result = compare(got, expected, k, k=case.k, inputs=inputs)
    assert result.passed, f"{name} {case.describe()} (torch op, emulated CUDA):\n{result.detail}"


def moe_ops() -> list[str]:
    return [k.name for k in torch_ops.kernels(rendered("moe").spec)]


# ---------------------------------------------------------------------------
# The fast cases: one of each kernel kind.

SHARDED = Case("sharded", m=150, n=128, k=64, group_sizes=(40, 0, 75, 0, 5), group_offset=1,
               g_local=3, existing_out=True)


def test_grouped_op_matches_the_reference(monkeypatch):
    """gmm_bf16: zero-size groups, a group_offset, rows past
    sum(group_sizes), poisoned existing_out and outputs."""
    check("moe", "gmm_bf16", SHARDED, seed=31, monkeypatch=monkeypatch)


def test_tgmm_op_matches_the_reference(monkeypatch):
    """The ragged-K backward kernel, without existing_out (g from the offset)."""
    check("moe", "moe_bf16_grad_rhs",
          Case("tgmm", m=50, n=128, k=128, group_sizes=(20, 0, 30), group_offset=1, g_local=2),
          seed=4, monkeypatch=monkeypatch)


def test_bad_arguments_name_the_argument_before_any_launch():
    fn = op("moe", "gmm_bf16")
    lhs = torch.ones(8, 64, dtype=torch.bfloat16)
    rhs = torch.ones(2, 128, 64, dtype=torch.bfloat16)
    sizes = torch.tensor([4, 4], dtype=torch.int32)
    with pytest.raises(ValueError, match=r"gmm_bf16: rhs must be torch.bfloat16, got torch.float32"):
        fn(lhs, rhs.float(), sizes)
    with pytest.raises(ValueError, match=r"gmm_bf16: group_sizes must have 1 dims"):
        fn(lhs, rhs, sizes[None])
    with pytest.raises(ValueError, match=r"gmm_bf16: existing_out must have shape \[8, 128\]"):
        fn(lhs, rhs, sizes, 0, torch.zeros(8, 64))
    with pytest.raises(ValueError, match=r"gmm_bf16: rhs must have shape \[2, 128, 64\]"):
        fn(lhs, torch.ones(2, 128, 32, dtype=torch.bfloat16), sizes)
    # The launcher's own rules, from the C ABI (gmm_bf16_validate).
    with pytest.raises(ValueError, match=r"gmm_bf16: k must be a multiple of 8"):
        fn(lhs[:, :60].contiguous(), rhs[:, :, :60].contiguous(), sizes)
    with pytest.raises(ValueError, match=r"gmm_bf16: lhs must be contiguous"):
        fn(torch.ones(64, 8, dtype=torch.bfloat16).t(), rhs, sizes)
    with pytest.raises(ValueError, match=r"gmm_bf16: group_offset does not fit in int32"):
        fn(lhs, rhs, sizes, 2**31)


def test_load_refuses_a_library_without_the_entry():
    op_module("moe", "gmm_bf16")
    module = importlib.import_module("generated.moe.torch.moe_bf16_grouped_gemm")
    other = emulated_abi(REPO / "generated" / "moe" / "cuda", "gmm_bf16")
    with pytest.raises(ValueError, match=r"has no gg_moe_bf16_grouped_gemm_launch"):
        module.load(other, device="cpu")


def test_opcheck_grouped():
    fn = op("moe", "gmm_bf16")
    rng = np.random.default_rng(5)
    lhs = torch.from_numpy(rng.standard_normal((40, 64), np.float32)).bfloat16()
    rhs = torch.from_numpy(rng.standard_normal((3, 128, 64), np.float32)).bfloat16()
    sizes = torch.tensor([10, 0, 25], dtype=torch.int32)
    torch.library.opcheck(fn, (lhs, rhs, sizes))
    torch.library.opcheck(fn, (lhs, rhs, sizes, 1, torch.randn(40, 128)))


def test_compile_fullgraph_with_a_dynamic_m():
    """A grouped and a dense op under torch.compile(fullgraph=True,
    dynamic=True): traced once (the fake implementations), then run for
    three M without recompiling, matching the eager op."""
    from torch._dynamo.testing import CompileCounterWithBackend

    grouped = op("moe", "gmm_bf16")
    dense = op("dense", "dense_gemm_bf16")
    rng = np.random.default_rng(9)
    rhs = torch.from_numpy(rng.standard_normal((2, 128, 64), np.float32)).bfloat16()
    w = torch.from_numpy(rng.standard_normal((128, 64), np.float32)).bfloat16()

    def layer(x, sizes):
        return dense(grouped(x, rhs, sizes).bfloat16()[:, :64].contiguous(), w)

    counter = CompileCounterWithBackend("aot_eager")
    compiled = torch.compile(layer, backend=counter, fullgraph=True, dynamic=True)
    for m in (5, 19, 40):
        x = torch.from_numpy(rng.standard_normal((m, 64), np.float32)).bfloat16()
        sizes = torch.tensor([m // 2, m - m // 2], dtype=torch.int32)
        torch.testing.assert_close(compiled(x, sizes), layer(x, sizes), rtol=0, atol=0)
    assert counter.frame_count == 1, f"recompiled: {counter.frame_count} frames"


# ---------------------------------------------------------------------------
# Every op of specs/moe.gemm, on the cases `gemmgen verify` runs, and edges.


@pytest.mark.slow
@pytest.mark.parametrize("name", moe_ops())
def test_every_moe_op_matches_the_reference(name, monkeypatch):
    k = kernel("moe", name)
    for i, case in enumerate(standard_cases(k)[:3]):
        check("moe", name, case, seed=100 + i, monkeypatch=monkeypatch)


EDGES = {
    "m=1": Case("m1", m=1, n=128, k=64, group_sizes=(0, 1, 0)),
    "all groups empty": Case("empty", m=20, n=128, k=64, group_sizes=(0, 0, 0)),
    "m=0": Case("m0", m=0, n=128, k=64, group_sizes=(0, 0)),
    "offset past the groups": Case("far", m=20, n=128, k=64, group_sizes=(10, 10), group_offset=5,
                                   g_local=2, existing_out=True),
    "negative offset": Case("negative", m=40, n=128, k=64, group_sizes=(10, 20, 10),
                            group_offset=-1, g_local=3, existing_out=True),
    "no existing_out": Case("zeros", m=70, n=256, k=128, group_sizes=(30, 0, 40), group_offset=1,
                            g_local=2),
}


@pytest.mark.slow
@pytest.mark.parametrize("edge", EDGES)
def test_grouped_edges(edge, monkeypatch):
    check("moe", "gmm_bf16", EDGES[edge], seed=7, monkeypatch=monkeypatch)


@pytest.mark.slow
def test_tgmm_with_existing_out(monkeypatch):
    check("moe", "moe_bf16_grad_rhs",
          Case("tgmm", m=50, n=128, k=128, group_sizes=(20, 0, 30), group_offset=1, g_local=2,
               existing_out=True), seed=4, monkeypatch=monkeypatch)


_FP8 = ("float8_e4m3fn", "float8_e5m2")


STEMS = ("moe", "dense", "gb10", "b200")  # every spec with CUDA kernels; all run on the emulator


def every_op() -> list[tuple[str, str]]:
    """(stem, op) for every kernel and dispatcher op of every spec."""
    return [(stem, name) for stem in STEMS
            for name in (*(k.name for k in torch_ops.kernels(rendered(stem).spec)),
                         *(d.name for d in torch_ops.dispatch_ops(rendered(stem).spec)))]


# One op of each kind in the fast tier, with libraries the fast tier builds
# anyway where one exists (the grouped op has its own tests below): tgmm,
# the tile GEMM, the quantizer, a block-scaled FP8 grouped GEMM, a
# dispatcher (m on its tile-GEMM arm); the GEMV and the masked layout build
# one library each.
FAST_OPCHECK = {
    ("moe", "moe_bf16_grad_rhs"): None,
    ("dense", "dense_gemm_bf16"): None,
    ("dense", "per_token_group_quant_fp8_out_scale_f32"): None,
    ("moe", "moe_w8a8_grouped_gemm"): None,
    ("dense", "dense_mm_bf16"): Case("dispatch", m=37, n=128, k=256),
    ("dense", "dense_gemv_bf16"): None,
    ("moe", "moe_fp8_masked_gemm"): None,
}


def opcheck(stem: str, name: str, case: Case | None = None) -> None:
    """opcheck on the op (a kernel's, or a dispatcher's: then the library of
    the arm the case picks, and the first arm's arguments) on a standard
    case. Its
    schema test compares inputs before and after with torch.allclose, which
    PyTorch does not implement for FP8 on the CPU: for FP8 operands that test
    is replaced by the same check on the bits (no input mutated, no output
    aliasing an input), and opcheck runs the others (fake tensor, autograd
    registration, AOT dispatch, dynamic)."""
    spec = rendered(stem).spec
    dispatch = next((d for d in torch_ops.dispatch_ops(spec) if d.name == name), None)
    first = dispatch.kernels[0] if dispatch else name
    k = kernel(stem, first)
    case = case or standard_cases(k)[0]
    if dispatch:  # the library of the arm the case's m picks
        if str(REPO) not in sys.path:
            sys.path.insert(0, str(REPO))
        module = importlib.import_module(f"generated.{stem}.torch.{name}")
        op_module(stem, module._arm(case.m).NAME)
    args = tuple(call_args(k, case.inputs(k, 3), op_module(stem, first) if not dispatch
                           else importlib.import_module(f"generated.{stem}.torch.{first}")))
    fn = getattr(getattr(torch.ops, f"gemmgen_{stem}"), name)
    fp8 = [a for a in args if isinstance(a, torch.Tensor) and str(a.dtype).split(".")[-1] in _FP8]
    if not fp8:
        torch.library.opcheck(fn, args)
        return
    tests = ("test_faketensor", "test_autograd_registration", "test_aot_dispatch_dynamic")
    torch.library.opcheck(fn, args, test_utils=tests)
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    before = [a.clone() for a in tensors]
    outs = fn(*args)
    for a, b in zip(tensors, before):
        assert torch.equal(a.view(torch.uint8) if a.element_size() == 1 else a,
                           b.view(torch.uint8) if b.element_size() == 1 else b), "mutated an input"
    for o in outs if isinstance(outs, tuple) else (outs,):
        assert all(o.untyped_storage().data_ptr() != a.untyped_storage().data_ptr()
                   for a in tensors), "an output aliases an input"


@pytest.mark.parametrize("stem, name", list(FAST_OPCHECK))
def test_opcheck_one_op_of_each_kind(stem, name):
    opcheck(stem, name, FAST_OPCHECK[stem, name])


@pytest.mark.slow
@pytest.mark.parametrize("stem, name", [o for o in every_op() if o not in FAST_OPCHECK])
def test_opcheck_every_op(stem, name):
    """Every op of every spec with CUDA kernels; gb10's (sm_120a / sm_121a)
    run on the emulator playing an sm_120a, the block-scaled MMA included."""
    opcheck(stem, name)


# ---------------------------------------------------------------------------
# Autograd of the 16-bit ops: against gradients computed in NumPy (float64)
# from the definitions, not against the op itself.


def _bf16(rng, shape) -> np.ndarray:
    """Random values that bfloat16 holds exactly, as float64."""
    return rng.standard_normal(shape).astype(ml_dtypes.bfloat16).astype(np.float64)


def _leaf(x: np.ndarray):
    return torch.from_numpy(x.astype(np.float32)).bfloat16().requires_grad_(True)


def _close(got, want: np.ndarray, what: str) -> None:
    got = got.detach().float().numpy().astype(np.float64)
    # bf16 gradients: one rounding of an f32 accumulation, relative to the row's scale.
    scale = np.abs(want).max() if want.size else 1.0
    np.testing.assert_allclose(got, want, rtol=1e-2, atol=1e-2 * scale, err_msg=what)


def test_grouped_gradients_match_the_numpy_reference():
    """gmm_bf16 on a shard (group_offset 1 of 3 local groups, zero-size
    groups, rows no group owns, existing_out): d lhs through gmm_bf16 with
    the weight transposed, d rhs through the tgmm op moe_bf16_grad_rhs."""
    fn = op("moe", "gmm_bf16")
    op_module("moe", "moe_bf16_grad_rhs")
    rng = np.random.default_rng(21)
    sizes, offset, g, m, n, k = (12, 0, 20, 9, 4), 1, 3, 50, 128, 64
    lhs, rhs = _bf16(rng, (m, k)), _bf16(rng, (g, n, k))
    existing, w = rng.standard_normal((m, n)), _bf16(rng, (m, n))
    t_lhs, t_rhs = _leaf(lhs), _leaf(rhs)
    t_existing = torch.from_numpy(existing.astype(np.float32)).requires_grad_(True)
    out = fn(t_lhs, t_rhs, torch.tensor(sizes, dtype=torch.int32), offset, t_existing)
    (out * torch.from_numpy(w.astype(np.float32))).sum().backward()

    d_lhs, d_rhs, d_existing = np.zeros_like(lhs), np.zeros_like(rhs), w.copy()
    starts = np.concatenate([[0], np.cumsum(sizes)])
    for i in range(offset, min(offset + g, len(sizes))):
        rows = slice(starts[i], starts[i + 1])
        d_lhs[rows] = w[rows] @ rhs[i - offset]
        d_rhs[i - offset] = w[rows].T @ lhs[rows]
        d_existing[rows] = 0
    _close(t_lhs.grad, d_lhs, "d lhs")
    _close(t_rhs.grad, d_rhs, "d rhs")
    _close(t_existing.grad, d_existing, "d existing_out")


def test_dense_gradients_match_the_numpy_reference():
    """dense_gemm_bf16 (rhs [n, k]), m = 37: d lhs and d rhs through the op
    itself on the transposed operands (the contraction over m zero-padded to
    whole 16-byte rows)."""
    fn = op("dense", "dense_gemm_bf16")
    rng = np.random.default_rng(22)
    m, n, k = 37, 128, 64
    lhs, rhs, w = _bf16(rng, (m, k)), _bf16(rng, (n, k)), _bf16(rng, (m, n))
    t_lhs, t_rhs = _leaf(lhs), _leaf(rhs)
    out = fn(t_lhs, t_rhs)
    (out.float() * torch.from_numpy(w.astype(np.float32))).sum().backward()
    _close(t_lhs.grad, w @ rhs, "d lhs")
    _close(t_rhs.grad, w.T @ lhs, "d rhs")


DISPATCH_ARMS = {1: "dense_gemv_bf16", 5: "dense_gemv_batched_bf16", 37: "dense_gemm_bf16"}


@pytest.mark.parametrize("stem, m", [
    ("dense", 1),
    pytest.param("dense", 5, marks=pytest.mark.slow),
    pytest.param("dense", 37, marks=pytest.mark.slow),
    pytest.param("gb10", 1, marks=pytest.mark.slow),  # the same arms for sm_120a
    pytest.param("gb10", 5, marks=pytest.mark.slow),
])
def test_dispatcher_gradients_match_the_numpy_reference(stem, m):
    """dense_mm_bf16 (specs/dense.gemm; gb10_dense_mm_bf16 of specs/gb10.gemm;
    rhs [n, k]): d lhs through the dispatcher on d out and the weight
    transposed (the arm of the forward's m: the GEMV for m = 1, the batched
    GEMV for m <= 8), d rhs through it on the transposed operands (m = n:
    the tile GEMM's arm); then opcheck with inputs that require grad (its
    autograd registration test)."""
    prefix = "gb10_" if stem == "gb10" else ""
    name = f"{prefix}dense_mm_bf16"
    module = importlib.import_module(f"generated.{stem}.torch.{name}")
    arm, gemm = prefix + DISPATCH_ARMS[m], f"{prefix}dense_gemm_bf16"
    for kernel_name in {arm, gemm}:
        op_module(stem, kernel_name)
    assert module._arm(m).NAME == arm and module._arm(256).NAME == gemm
    fn = getattr(getattr(torch.ops, f"gemmgen_{stem}"), name)
    rng = np.random.default_rng(24 + m)
    n, k = 256, 128
    lhs, rhs, w = _bf16(rng, (m, k)), _bf16(rng, (n, k)), _bf16(rng, (m, n))
    t_lhs, t_rhs = _leaf(lhs), _leaf(rhs)
    (fn(t_lhs, t_rhs).float() * torch.from_numpy(w.astype(np.float32))).sum().backward()
    _close(t_lhs.grad, w @ rhs, "d lhs")
    _close(t_rhs.grad, w.T @ lhs, "d rhs")
    torch.library.opcheck(fn, (_leaf(lhs), _leaf(rhs)))


def test_opcheck_with_gradients():
    """opcheck's autograd registration test needs inputs that require grad."""
    fn = op("moe", "gmm_bf16")
    op_module("moe", "moe_bf16_grad_rhs")
    rng = np.random.default_rng(6)
    lhs, rhs = _leaf(_bf16(rng, (24, 64))), _leaf(_bf16(rng, (2, 128, 64)))
    existing = torch.randn(24, 128, requires_grad=True)
    torch.library.opcheck(fn, (lhs, rhs, torch.tensor([10, 14], dtype=torch.int32), 0, existing))


@pytest.mark.slow
@pytest.mark.parametrize("stem, name", [("moe", "moe_bf16_grouped_gemm"),
                                        ("dense", "dense_gemm_bf16_kn")])
def test_more_gradients(stem, name):
    """The bf16-output grouped op and the [k, n] dense op."""
    fn = op(stem, name)
    rng = np.random.default_rng(23)
    if stem == "moe":
        op_module("moe", "moe_bf16_grad_rhs")
        sizes, m, n, k = (7, 0, 20), 30, 128, 64
        lhs, rhs, w = _bf16(rng, (m, k)), _bf16(rng, (3, n, k)), _bf16(rng, (m, n))
        t_lhs, t_rhs = _leaf(lhs), _leaf(rhs)
        out = fn(t_lhs, t_rhs, torch.tensor(sizes, dtype=torch.int32))
        d_lhs, d_rhs = np.zeros_like(lhs), np.zeros_like(rhs)
        starts = np.concatenate([[0], np.cumsum(sizes)])
        for i in range(3):
            rows = slice(starts[i], starts[i + 1])
            d_lhs[rows] = w[rows] @ rhs[i]
            d_rhs[i] = w[rows].T @ lhs[rows]
    else:
        m, n, k = 21, 128, 64
        lhs, rhs, w = _bf16(rng, (m, k)), _bf16(rng, (k, n)), _bf16(rng, (m, n))
        t_lhs, t_rhs = _leaf(lhs), _leaf(rhs)
        out = fn(t_lhs, t_rhs)
        d_lhs, d_rhs = w @ rhs.T, lhs.T @ w
    (out.float() * torch.from_numpy(w.astype(np.float32))).sum().backward()
    _close(t_lhs.grad, d_lhs, "d lhs")
    _close(t_rhs.grad, d_rhs, "d rhs")


@pytest.mark.slow
@pytest.mark.parametrize("m", [1, 5, 37])
def test_dispatcher_op_picks_its_arm(m, monkeypatch):
    """dense_mm_bf16 (specs/dense.gemm): GEMV for m = 1, batched GEMV for
    m <= 8, the tile GEMM above; each arm's result against the reference."""
    arms = {1: "dense_gemv_bf16", 5: "dense_gemv_batched_bf16", 37: "dense_gemm_bf16"}
    for name in set(arms.values()):
        poison_outputs(op_module("dense", name), monkeypatch)
    module = importlib.import_module("generated.dense.torch.dense_mm_bf16")
    assert module._arm(m).NAME == arms[m]
    k = kernel("dense", arms[m])
    case = Case("dispatch", m=m, n=128, k=256)
    inputs = case.inputs(k, 8)
    got = to_numpy(torch.ops.gemmgen_dense.dense_mm_bf16(to_torch(inputs["lhs"]),
                                                         to_torch(inputs["rhs"])))
    result = compare(got, reference(k, **inputs), k, k=case.k, inputs=inputs)
    assert result.passed, result.detail


# ---------------------------------------------------------------------------
# sm_100a (docs/cuda-sm100.md): an op on an emulated B200, in a process of
# its own (each library reads the device at its first launch, and this
# process's libraries play emulated_arch's device).

SM100_CALL = """\
import pickle
import sys

import torch

from generated.moe.torch import moe_bf16_grouped_gemm as module

module.load(sys.argv[1], device="cpu")
allocate = module._outputs


def poisoned(lhs, d):  # the output NaN before the launch
    return allocate(lhs, d).fill_(float("nan"))


module._outputs = poisoned
with open(sys.argv[2], "rb") as f:
    inputs = pickle.load(f)
args = [torch.from_numpy(inputs["lhs"]).view(torch.bfloat16),
        torch.from_numpy(inputs["rhs"]).view(torch.bfloat16),
        torch.from_numpy(inputs["group_sizes"]), inputs["group_offset"],
        torch.from_numpy(inputs["existing_out"]).view(torch.bfloat16)]
try:
    out = torch.ops.gemmgen_moe.moe_bf16_grouped_gemm(*args)
except RuntimeError as e:  # the launcher's refusal, for the parent to read
    print("refused:", e)
    sys.exit(0)
with open(sys.argv[3], "wb") as f:
    pickle.dump(out.view(torch.uint16).numpy(), f)
print("ok")
"""


def test_op_takes_the_sm100_path_on_an_emulated_b200(tmp_path):
    """torch.ops.gemmgen_moe.moe_bf16_grouped_gemm on an emulated sm_100a
    device of 2 SMs: a shard with zero-size groups and existing_out (the
    sentinel), against the reference. On an sm_100a device whose opt-in
    shared memory is below the sm_100a tile's but above the mma.sync
    path's, the launcher refuses: the path was the sm_100a one."""
    import pickle
    import subprocess

    name = "moe_bf16_grouped_gemm"
    library = emulated_abi(REPO / "generated" / "moe" / "cuda", name)
    k = kernel("moe", name)
    case = Case("sharded", m=150, n=136, k=72, group_sizes=(40, 0, 75, 0, 5), group_offset=1,
                g_local=3, existing_out=True)
    inputs = case.inputs(k, 43)
    inputs["existing_out"] = np.full(inputs["existing_out"].shape, SENTINEL,
                                     inputs["existing_out"].dtype)
    views = {a: (v.view(np.uint16) if isinstance(v, np.ndarray) and v.dtype.name == "bfloat16"
                 else v) for a, v in inputs.items()}
    (tmp_path / "inputs.pkl").write_bytes(pickle.dumps(views))

    def call(env: dict[str, str]) -> str:
        env = {**os.environ, "PYTHONPATH": str(REPO), **env}
        proc = subprocess.run([sys.executable, "-c", SM100_CALL, str(library),
                               str(tmp_path / "inputs.pkl"), str(tmp_path / "out.pkl")],
                              capture_output=True, text=True, cwd=REPO, env=env, check=False)
        assert proc.returncode == 0, proc.stderr[-3000:]
        return proc.stdout.strip()

    assert call(device_env("sm_100a", sm_count=2)) == "ok"
    got = pickle.loads((tmp_path / "out.pkl").read_bytes()).view(ml_dtypes.bfloat16)
    result = compare(got, reference(k, **inputs), k, k=case.k, inputs=inputs)
    assert result.passed, f"{name} {case.describe()} (torch op, emulated sm_100a):\n{result.detail}"
    launcher = importlib.import_module(f"generated.moe.cuda.{name}")
    dims = launcher.validate(**inputs)
    sm100 = launcher.launches(dims, 100, 2)
    assert sm100[-1].entry == f"{name}_sm100" and sm100[-1].smem > 200000
    assert max(s.smem for s in launcher.launches(dims, 0, 0)) <= 200000
    refused = call({**device_env("sm_100a", sm_count=2), "GG_EMU_SMEM_OPTIN": "200000"})
    assert refused == f"refused: {name}: launch_{name}() returned cudaErrorInvalidValue", refused


B200_CALL = """\
import pickle
import sys

import torch

from generated.b200.torch import b200_w4a8_moe_grouped_gemm as module

module.load(sys.argv[1], device="cpu")
with open(sys.argv[2], "rb") as f:
    inputs = pickle.load(f)
args = [torch.from_numpy(inputs["lhs"]).view(torch.float8_e4m3fn), torch.from_numpy(inputs["rhs"]),
        torch.from_numpy(inputs["group_sizes"]), torch.from_numpy(inputs["lhs_scale"]),
        torch.from_numpy(inputs["rhs_scale"])]
out = torch.ops.gemmgen_b200.b200_w4a8_moe_grouped_gemm(*args)
with open(sys.argv[3], "wb") as f:
    pickle.dump(out.view(torch.uint16).numpy(), f)
print("ok")
"""


@pytest.mark.slow  # the family's fast sm_100a case is test_op_takes_the_sm100_path_on_an_emulated_b200
@pytest.mark.parametrize("case", [
    Case("groups", m=140, n=136, k=192, group_sizes=(0, 128, 12)),
    # m >= 512: the LUT's 2-CTA entry, block-scaled on a CTA pair (a cluster
    # launch through the C ABI's launcher).
    Case("prefill", m=530, n=136, k=192, group_sizes=(300, 0, 230)),
], ids=lambda c: c.name)
def test_b200_block_scaled_op_on_an_emulated_b200(tmp_path, case):
    """torch.ops.gemmgen_b200.b200_w4a8_moe_grouped_gemm (specs/b200.gemm:
    e4m3 x packed e2m1 on the block-scaled tcgen05.mma) on an emulated
    sm_100a device of 2 SMs, with a zero-size group, against the reference;
    at a prefill m on the 2-CTA tile."""
    import pickle
    import subprocess

    name = "b200_w4a8_moe_grouped_gemm"
    library = emulated_abi(REPO / "generated" / "b200" / "cuda", name)
    k = kernel("b200", name)
    inputs = case.inputs(k, 47)
    views = {a: (v.view(np.uint8) if isinstance(v, np.ndarray) and v.dtype.itemsize == 1 else v)
             for a, v in inputs.items()}
    (tmp_path / "inputs.pkl").write_bytes(pickle.dumps(views))
    env = {**os.environ, "PYTHONPATH": str(REPO), **device_env("sm_100a", sm_count=2)}
    proc = subprocess.run([sys.executable, "-c", B200_CALL, str(library),
                           str(tmp_path / "inputs.pkl"), str(tmp_path / "out.pkl")],
                          capture_output=True, text=True, cwd=REPO, env=env, check=False)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-3000:]
    got = pickle.loads((tmp_path / "out.pkl").read_bytes()).view(ml_dtypes.bfloat16)
    result = compare(got, reference(k, **inputs), k, k=case.k, inputs=inputs)
    assert result.passed, f"{name} {case.describe()} (torch op, emulated sm_100a):\n{result.detail}"
