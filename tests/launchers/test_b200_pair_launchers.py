"""The 2-CTA kernels of specs/b200.gemm (docs/cuda-sm100.md, "The 2-CTA
tile"; issue 30) through every launcher family on an emulated B200
(sm_100a, compute capability 10.0): each 2-CTA kernel's tile LUT (the
bf16 / FP8 experts, the bf16 gate-up, the fp4 and W4A8 GEMMs, DeepSeek's
FP8 experts promoted in software, the weight-only W4A16 experts) gives
m >= 2048 (n >= 512) the multicast entry (`_t0_sm100`: 256-row tiles, two
CTA pairs along n sharing A by TMA multicast in a 4 x 1 x 1 cluster),
m >= 512 the pair entry (`_t1_sm100`: a 2 x 1 x 1 cluster,
tcgen05.mma.cta_group::2) and smaller m the 1-CTA entry (`_t2_sm100`).

One pair kernel, b200_fp8_moe_grouped_gemm (e4m3, per-token and
per-channel scales in the epilogue, zero-size groups, ragged n and k), runs
at a large prefill size (clusters of 4, an odd number of n tiles: an idle
pair), a prefill size (the pair, clusters of 2) and a decode size (m = 1,
the 1-CTA entry, a plain launch) against the NumPy reference on fresh
random inputs with poisoned outputs, through the families below (the C++
and CuPy ones also run b200_fp8_blockscaled_moe_grouped_gemm, DeepSeek's
scales promoted in software, and b200_w4a16_moe_grouped_gemm, the
weight-only tile, on the pair at the prefill and decode sizes):

- the C++ launcher (`cudaLaunchKernelEx` with the cluster attribute, on the
  emulator's runtime);
- the CuPy launcher on the stand-in (`cuLaunchKernelEx` through ctypes, the
  cluster attribute logged and asserted);
- the JAX FFI handler (`gemmgen compile --emulate`'s library);
- the PyTorch op (`torch.ops.gemmgen_b200`, the emulated C ABI library);
- NVRTC 13.5 for sm_100a: UTCQMMA.2CTA / UTCHMMA.2CTA / UTCOMMA.2CTA in the
  pair entries of every 2-CTA kernel (UTMALDG.2D.MULTICAST.2CTA in the
  multicast entries, UTCCP.T.S.2CTA.4 in the block-scaled ones), none in their
  1-CTA entries, no local memory.

A block-scaled pair kernel, b200_nvfp4_moe_grouped_gemm (NVFP4, its global
scales), runs at the prefill sizes through the C++ and CuPy launchers, and
b200_w4a8_moe_grouped_gemm through the Rust harness
(test_rust_launchers.py).

The Rust crate runs it in test_rust_launchers.py (its C ABI harness on the
emulator, and its CudaDriver on tests/rust_driver_standin.c, whose
cuLaunchKernelEx checks the cluster attribute). The plan test is the fast
case; every emulated run is `slow` (the C++, CuPy, Rust, JAX FFI and torch
families keep their fast b200 or sm_100a cases elsewhere)."""

from __future__ import annotations

import functools
import importlib
import os
import pickle
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

from gemmgen.backends import cuda as cuda_backend
from gemmgen.backends.cuda import gemm as tile_gemm
from gemmgen.build import render_spec
from gemmgen.cases import Case
from gemmgen.harness.runner import load_generated_module
from gemmgen.harness.verify_cuda import run_cpp_launcher
from gemmgen.reference import compare, reference

REPO = Path(__file__).resolve().parents[2]
SPEC = REPO / "specs" / "b200.gemm"
NAME = "b200_fp8_moe_grouped_gemm"
# DeepSeek's FP8 scales promoted in software, and W4A16 on the weight-only
# tile (320 threads).
PROMOTED, WEIGHT_ONLY = "b200_fp8_blockscaled_moe_grouped_gemm", "b200_w4a16_moe_grouped_gemm"
PAIR = ("b200_bf16_moe_grouped_gemm", NAME, "b200_bf16_moe_gateup_silu", "b200_mxfp4_gemm",
         "b200_mxfp4_moe_grouped_gemm", "b200_nvfp4_gemm", "b200_nvfp4_moe_grouped_gemm",
         "b200_nvfp4_moe_gateup_silu", "b200_w4a8_moe_grouped_gemm", PROMOTED, WEIGHT_ONLY)
MMA = {"b200_bf16_moe_grouped_gemm": "UTCHMMA", NAME: "UTCQMMA",
       "b200_bf16_moe_gateup_silu": "UTCHMMA", "b200_mxfp4_gemm": "UTCOMMA",
       "b200_mxfp4_moe_grouped_gemm": "UTCOMMA", "b200_nvfp4_gemm": "UTCOMMA",
       "b200_nvfp4_moe_grouped_gemm": "UTCOMMA", "b200_nvfp4_moe_gateup_silu": "UTCOMMA",
       "b200_w4a8_moe_grouped_gemm": "UTCQMMA", PROMOTED: "UTCQMMA",
       WEIGHT_ONLY: "UTCHMMA"}
# The pair's and the 1-CTA entry's n: 128, but 64 for the promoted pair
# (its LUT entry's n: the mma.sync entry beside it spills at 128).
BN = {PROMOTED: (64, 128)}
# The block-scaled pair kernel the C++ and CuPy launchers run.
BS_NAME = "b200_nvfp4_moe_grouped_gemm"
# Large prefill: 2100 rows and 520 columns (the m >= 2048, n >= 512 entry:
# 5 n tiles, so each row tile's last unit has an idle pair). Prefill: 530
# rows (the m >= 512 entry), three experts, one empty; n and k not
# multiples of the tile (k = 208: two K blocks, the second partial).
# Decode: one token.
CASES = {
    "prefill_multicast": Case("prefill_multicast", m=2100, n=520, k=208,
                              group_sizes=(900, 0, 1200)),
    "prefill": Case("prefill", m=530, n=136, k=208, group_sizes=(300, 0, 230)),
    "decode": Case("decode", m=1, n=136, k=208, group_sizes=(0, 1)),
}
# The LUT entry and cluster each case takes (every pair kernel's three
# entries).
ENTRY = {"prefill_multicast": "t0", "prefill": "t1", "decode": "t2"}
CLUSTER = {"prefill_multicast": (4, 1, 1), "prefill": (2, 1, 1), "decode": (1, 1, 1)}
# The weight-only kernel's: int4 rows of whole 16-byte TMA units (k % 32).
WO_K = 224
SMS = 4  # an emulated B200 of 4 SMs: one cluster of 2 pairs, or 2 pairs, each walking many tiles


@functools.cache
def rendered():
    return render_spec(SPEC)


@functools.cache
def folder() -> Path:
    d = Path(tempfile.mkdtemp(prefix="gemmgen-b200-pair-"))
    for rel, text in rendered().files.items():
        if rel.parts[0] == "cuda":
            (d / rel.name).write_text(text)
    return d


_loaded = iter(range(10**6))


def launcher(name: str):
    return load_generated_module(folder() / f"{name}.py", f"test_b200_pair_{name}_{next(_loaded)}")


def kernel(name: str):
    return rendered().spec.kernel(name)


def case_of(name: str, which: str) -> Case:
    """CASES[which] for kernel `name`: the dense GEMMs' without groups, the
    block-scaled ones' k whole blocks of 32."""
    case, k = CASES[which], kernel(name)
    groups = case.group_sizes if k.op.value == "grouped" else None
    return Case(case.name, m=case.m, n=case.n,
                k=256 if k.tcgen05_block_scaled else WO_K if name == WEIGHT_ONLY else case.k,
                group_sizes=groups)


def inputs_of(name: str, which: str, seed: int) -> dict:
    return case_of(name, which).inputs(kernel(name), seed)


def entry(name: str, which: str) -> str:
    return f"{name}_{ENTRY[which]}_sm100"


def cluster(name: str, which: str) -> tuple[int, int, int]:
    return CLUSTER[which]


def seed() -> int:
    return int(np.random.default_rng().integers(1 << 30))


# ---------------------------------------------------------------------------
# The plan (no emulation): the fast case.


def test_the_lut_takes_the_pair_for_prefill_and_one_cta_for_decode():
    """Each multicast kernel's LUT: its m >= 2048, n >= 512 entry is the pair
    tile with two pairs a cluster (a cluster launch of 4 x 1 x 1 over a grid
    of whole clusters), its m >= 512 entry the pair tile (2 x 1 x 1), its
    default the 1-CTA tile (a plain launch); the MXFP8 ones (whose 256-row
    mma.sync entry would spill) none. On
    a B200 (148 SMs) and on the emulated 4-SM device the launchers pick them
    by m and n; on 3 SMs the multicast entry gives way to mma.sync."""
    spec = rendered().spec
    for name in PAIR:
        tiles = tile_gemm.plan(kernel(name), spec).body_tiles("tcgen05")
        mcast, pair, one = tiles
        assert (mcast.pair, mcast.cluster_n, mcast.bm, mcast.bn, mcast.mixed) == (
            True, 2, 256, BN.get(name, (128, 128))[0], name == WEIGHT_ONLY), name
        assert (pair.pair, pair.cluster_n, pair.bm, one.pair, one.bm) == (
            True, 1, 256, False, 128), name
        assert (pair.bn, one.bn) == BN.get(name, (128, 128)), name
        assert pair.mixed == one.mixed == (name == WEIGHT_ONLY), name
        assert pair.promoted == one.promoted == (name in (PROMOTED, WEIGHT_ONLY)), name
        assert pair.block_scaled == one.block_scaled == kernel(name).tcgen05_block_scaled
        text = (folder() / f"{name}.cu").read_text()
        assert text.count("static constexpr bool kCtaPair = true;") == len(tiles) - 1, name
        assert text.count("static constexpr int kClusterN = 2;") == 1, name
        module = launcher(name)
        for which in CASES:
            dims = module.validate(**inputs_of(name, which, 1))
            for sms in (148, SMS):
                step = module.launches(dims, 100, sms)[-1]
                assert step.entry == entry(name, which), (name, which, step)
                assert step.cluster == cluster(name, which), step
                assert step.grid[0] % cluster(name, which)[0] == 0, step
                assert module.launch_error(step) is None
        dims = module.validate(**inputs_of(name, "prefill_multicast", 1))
        assert module.launches(dims, 100, 3)[-1].entry == f"{name}_t0", name
    for k in spec.kernels:
        if k.name not in PAIR and k.op.value != "quantize":
            assert not cuda_backend.plan(k, spec).has_clusters, k.name


def check(name: str, which: str, inputs: dict, got, family: str) -> None:
    k, case = kernel(name), case_of(name, which)
    result = compare(got, reference(k, **inputs), k, k=case.k, inputs=inputs)
    assert result.passed, f"{name} {case.describe()} ({family}, emulated B200):\n{result.detail}"


# ---------------------------------------------------------------------------
# The C++ launcher: cudaLaunchKernelEx with the cluster attribute.


LAUNCHES = ([(NAME, w) for w in CASES] + [(BS_NAME, "prefill")]
            + [(name, w) for name in (PROMOTED, WEIGHT_ONLY) for w in ("prefill", "decode")])


@pytest.mark.slow
@pytest.mark.parametrize("name,which", LAUNCHES)
def test_cpp_launcher(name, which):
    spec = rendered().spec
    inputs = inputs_of(name, which, seed())
    got = run_cpp_launcher(cuda_backend.plan(kernel(name), spec), folder(), inputs,
                           arch="sm_100a", num_sms=SMS)
    check(name, which, inputs, got, "C++ launcher")


# ---------------------------------------------------------------------------
# The CuPy launcher on the stand-in: cuLaunchKernelEx through ctypes.


def _on_standin(cupy, module, x, name):
    if x is None or name not in module.DTYPES:
        return x
    x = np.asarray(x)
    bits = {"float8_e4m3fn": np.uint8, "bfloat16": np.uint16,
            "float8_e8m0fnu": np.uint8}.get(x.dtype.name)
    return cupy.asarray((x.view(bits) if bits else x).reshape(-1)).reshape(x.shape)


@pytest.mark.slow
@pytest.mark.parametrize("name,which", LAUNCHES)
def test_cupy_launcher(name, which):
    import ml_dtypes

    from gemmgen.harness import cupy_standin

    inputs = inputs_of(name, which, seed())
    module = launcher(name)
    with cupy_standin.install(folder(), "sm_100a") as cupy:
        cupy.sms = SMS
        out = getattr(module, name)(**{a: _on_standin(cupy, module, v, a) for a, v in inputs.items()})
        got = out.host().copy().view(ml_dtypes.bfloat16)
    check(name, which, inputs, got, "CuPy launcher")
    last = cupy.launches[-1]
    threads = 320 if name == WEIGHT_ONLY else 192
    assert last["entry"] == entry(name, which) and last["block"] == (threads, 1, 1), cupy.launches
    if which != "decode":
        assert last["cluster"] == cluster(name, which), cupy.launches
        assert last["attribute_ids"] == (cupy_standin.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION,)
        assert last["grid"][0] % cluster(name, which)[0] == 0 and last["grid"][0] <= SMS
    else:
        assert last["cluster"] == (1, 1, 1) and last["attribute_ids"] == ()
    assert all(x["cluster"] == (1, 1, 1) for x in cupy.launches[:-1]), cupy.launches
    assert not cupy.refused


# ---------------------------------------------------------------------------
# The JAX FFI handler and the PyTorch op (through the C++ launcher).

JAX_CALL = """\
import pickle
import sys

import jax.numpy as jnp
import numpy as np

from generated.b200.jax import b200_fp8_moe_grouped_gemm as module

module.register(sys.argv[1], platform="cpu")
with open(sys.argv[2], "rb") as f:
    inputs = pickle.load(f)
args = {a: (jnp.asarray(v) if isinstance(v, np.ndarray) else v) for a, v in inputs.items()}
out = np.asarray(module.b200_fp8_moe_grouped_gemm(**args))
with open(sys.argv[3], "wb") as f:
    pickle.dump(out, f)
print("ok")
"""

TORCH_CALL = """\
import pickle
import sys

import torch

from generated.b200.torch import b200_fp8_moe_grouped_gemm as module

module.load(sys.argv[1], device="cpu")
with open(sys.argv[2], "rb") as f:
    inputs = pickle.load(f)
args = [torch.from_numpy(inputs["lhs"]).view(torch.float8_e4m3fn),
        torch.from_numpy(inputs["rhs"]).view(torch.float8_e4m3fn),
        torch.from_numpy(inputs["group_sizes"]), torch.from_numpy(inputs["lhs_scale"]),
        torch.from_numpy(inputs["rhs_scale"])]
out = torch.ops.gemmgen_b200.b200_fp8_moe_grouped_gemm(*args)
with open(sys.argv[3], "wb") as f:
    pickle.dump(out.view(torch.uint16).numpy(), f)
print("ok")
"""


def _run_script(script: str, library: Path, inputs: dict, tmp_path: Path):
    from gemmgen.harness.cuda_emu import device_env

    (tmp_path / "inputs.pkl").write_bytes(pickle.dumps(inputs))
    env = {**os.environ, "PYTHONPATH": str(REPO), **device_env("sm_100a", sm_count=SMS)}
    proc = subprocess.run([sys.executable, "-c", script, str(library), str(tmp_path / "inputs.pkl"),
                           str(tmp_path / "out.pkl")],
                          capture_output=True, text=True, cwd=REPO, env=env, check=False)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-3000:]
    return pickle.loads((tmp_path / "out.pkl").read_bytes())


@pytest.mark.slow
def test_jax_ffi(tmp_path):
    pytest.importorskip("jax")
    proc = subprocess.run([sys.executable, "-m", "gemmgen", "compile", str(SPEC), "--kernel", NAME,
                           "--emulate", "--out", str(tmp_path / "build")],
                          capture_output=True, text=True, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(REPO)}, check=False)
    assert proc.returncode == 0, proc.stderr
    library = tmp_path / "build" / f"lib{NAME}_ffi_emu.so"
    for which in CASES:
        inputs = inputs_of(NAME, which, seed())
        got = _run_script(JAX_CALL, library, inputs, tmp_path)
        check(NAME, which, inputs, got, "JAX FFI")
    # The JAX entry point's CUDA launcher is the one whose plan was checked.
    module = importlib.import_module(f"generated.b200.cuda.{NAME}")
    for which in ("prefill_multicast", "prefill"):
        dims = module.validate(**inputs_of(NAME, which, 1))
        assert module.launches(dims, 100, SMS)[-1].cluster == CLUSTER[which]


@pytest.mark.slow
def test_torch_op(tmp_path):
    pytest.importorskip("torch")
    import ml_dtypes

    from gemmgen.harness.abi import emulated_abi

    library = emulated_abi(REPO / "generated" / "b200" / "cuda", NAME)
    for which in CASES:
        inputs = inputs_of(NAME, which, seed())
        views = {a: (v.view(np.uint8) if isinstance(v, np.ndarray) and v.dtype.itemsize == 1 else v)
                 for a, v in inputs.items()}
        got = _run_script(TORCH_CALL, library, views, tmp_path).view(ml_dtypes.bfloat16)
        check(NAME, which, inputs, got, "torch op")


# ---------------------------------------------------------------------------
# NVRTC 13.5 for sm_100a: the 2-CTA MMAs in the pair entries.


@pytest.mark.slow
@pytest.mark.parametrize("name", PAIR)
def test_nvrtc_builds_the_pair_entries_on_2cta_mmas(name):
    nv = pytest.importorskip("test_cuda_nvrtc")
    from gemmgen.harness import nvcc

    if nvcc.find_cuda_tool("cuobjdump") is None:
        pytest.skip("cuobjdump is not installed")
    result, _ = nv.nvrtc_build("specs/b200.gemm", name, "sm_100a")
    ops = nv.opcodes(nv.cuobjdump(result.cubin, "--dump-sass"))
    mma = MMA[name]
    # A's multicast: the 2-CTA form, landing on the pair leader's `full`;
    # the weight-only tile's the plain one, on each CTA's own `loaded`.
    form = {"2D", "MULTICAST"} | (set() if name == WEIGHT_ONLY else {"2CTA"})
    for t, multicast in (("t0", 1), ("t1", 0)):
        pair = ops[f"{name}_{t}_sm100"]
        count = sum(n for op, n in pair.items() if nv.base(op) == mma)
        assert count > 0 and sum(n for op, n in pair.items()
                                 if nv.base(op) == mma and "2CTA" in op.split(".")) == count, pair
        assert any(nv.base(op) == "UTCBAR" and {"2CTA", "MULTICAST"} <= set(op.split("."))
                   for op in pair)
        # A's load: multicast to both pairs in the clusters of 4, the pair's own otherwise.
        assert sum(n for op, n in pair.items() if nv.base(op) == "UTMALDG"
                   and form <= set(op.split("."))) == multicast, pair
        if kernel(name).tcgen05_block_scaled:  # the scales' copies: every one 2-CTA
            copies = [op for op in pair if nv.base(op) == "UTCCP"]
            assert copies and all("2CTA" in op.split(".") for op in copies), pair
    one = ops[f"{name}_t2_sm100"]
    assert any(nv.base(op) == mma for op in one) and not any("2CTA" in op.split(".") for op in one)
    for entry_ops in ops.values():
        assert not any(nv.base(op) in ("LDL", "STL") for op in entry_ops), name


# ---------------------------------------------------------------------------
# `gemmgen explain` on a pair kernel: the pair tile and its cluster launch.


def test_explain_states_the_pair_tile_and_its_cluster_launch(monkeypatch):
    from gemmgen.explain import plans

    monkeypatch.setattr(plans, "_ptxas", lambda *args: [])  # no compiler in the fast run
    lines = plans.cuda_lines(rendered().spec, kernel(NAME), 32768, 7168, 2048, 8)
    assert any("tile 256x128x128 (LUT rule m >= 2048 and n >= 512" in x for x in lines), lines
    (path,) = [x for x in lines if x.startswith("  tcgen05 path")]
    assert ("2-CTA tile 256x128x128 over a CTA pair (clusters of 4: 2 pairs along n sharing A "
            "by TMA multicast)") in path
    assert "tcgen05.mma 256x128x32 (cta_group::2)" in path
    (launch,) = [x for x in lines if x.startswith(f"  launch {NAME}_t0_sm100:")]
    assert "grid (148, 1, 1), clusters of 4 x 1 x 1 blocks, 192 threads" in launch
    # A prefill m below 2048: the pair alone.
    lines = plans.cuda_lines(rendered().spec, kernel(NAME), 1024, 7168, 2048, 8)
    assert any("tile 256x128x128 (LUT rule m >= 512" in x for x in lines), lines
    (path,) = [x for x in lines if x.startswith("  tcgen05 path")]
    assert "2-CTA tile 256x128x128 over a CTA pair (clusters of 2)" in path
    (launch,) = [x for x in lines if x.startswith(f"  launch {NAME}_t1_sm100:")]
    assert "grid (148, 1, 1), clusters of 2 x 1 x 1 blocks, 192 threads" in launch
    # A decode m: the 1-CTA entry, a plain launch.
    lines = plans.cuda_lines(rendered().spec, kernel(NAME), 1, 7168, 2048, 8)
    (launch,) = [x for x in lines if x.startswith(f"  launch {NAME}_t2_sm100:")]
    assert "clusters" not in launch
