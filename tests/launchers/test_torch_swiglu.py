"""The PyTorch op of a GPT-OSS gate-up kernel (`epilogue swiglu_clamped`,
interleaved pairs and the halves layout, per-expert bias) on the CPU
emulator, against the float64 reference.

specs/ holds no CUDA swiglu kernel (GPT-OSS's kernels there are Pallas), so
the op comes from a spec of its own, built with `gemmgen build` into a
project in tmp_path and called in a child process: PyTorch has one registry
of op names per process, and this package is not the committed one. The
output is poisoned before the launch (torch.empty's bytes are whatever the
allocator held; the op must write every row it owns), existing_out holds a
sentinel no computed row can have, and one group is empty. The op has no
autograd (PyTorch ops take gradients only without an epilogue, as for
silu_mul), which the test checks too."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from gemmgen import ir
from gemmgen.build import render_spec
from gemmgen.cases import Case
from gemmgen.harness.abi import emulated_abi
from gemmgen.harness.cuda_emu import device_env
from gemmgen.reference import compare, reference

torch = pytest.importorskip("torch", reason="PyTorch is an optional extra: pip install -e '.[torch]'")

REPO = Path(__file__).resolve().parents[2]
SENTINEL = -4242.0

SPEC = """\
target cuda {
  archs sm_89
  launchers cpp cupy
}

defaults {
  op grouped
  lhs bf16 [m, k]
  backends cuda
}

kernel gptoss_gateup {
  rhs bf16 [g, k, n]
  out bf16
  bias bf16 [g, 1, n]
  epilogue swiglu_clamped limit=0.75
  tile m=64 n=128 k=32
}

kernel swiglu_halves {
  rhs bf16 [g, n, k]
  out f32
  bias f32 [g, 1, n]
  epilogue swiglu_clamped pairs=halves alpha_gate=2 limit=1.5
  tile m=64 n=128 k=32
}
"""

CALL = """\
import importlib
import pickle
import sys

import torch

name, library, inputs_path, out_path = sys.argv[1:5]
module = importlib.import_module(f"generated.swig.torch.{name}")
module.load(library, device="cpu")
with open(inputs_path, "rb") as f:
    inputs = pickle.load(f)


def tensor(a):
    t = torch.from_numpy(a)
    return t.view(torch.bfloat16) if a.dtype.name == "uint16" else t


args = {k: tensor(v) if hasattr(v, "dtype") and v.ndim else v for k, v in inputs.items()}
op = getattr(torch.ops.gemmgen_swig, name)
out = op(**args)
lhs = args["lhs"].clone().requires_grad_()
try:
    op(**{**args, "lhs": lhs}).float().sum().backward()
    grad = "grad"
except RuntimeError as e:
    grad = "no grad: " + str(e).splitlines()[0]
with open(out_path, "wb") as f:
    pickle.dump((out.view(torch.uint16) if out.dtype == torch.bfloat16 else out).numpy(), f)
print(grad)
"""


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("swig")
    (root / "specs").mkdir()
    (root / "specs" / "swig.gemm").write_text(SPEC)
    proc = subprocess.run([sys.executable, "-m", "gemmgen", "build", "specs/swig.gemm"],
                          cwd=root, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    return root


@pytest.mark.parametrize("name", ["gptoss_gateup", "swiglu_halves"])
def test_swiglu_op_matches_the_reference(project, name, tmp_path):
    spec = render_spec(project / "specs" / "swig.gemm").spec
    kernel = spec.kernel(name).for_backend(ir.Backend.CUDA)
    case = Case("sharded", m=150, n=136, k=72, group_sizes=(40, 0, 75, 0, 5), group_offset=1,
                g_local=3, existing_out=True)
    inputs = case.inputs(kernel, 7)
    inputs["existing_out"] = np.full(inputs["existing_out"].shape, SENTINEL,
                                     inputs["existing_out"].dtype)
    views = {a: (v.view(np.uint16) if isinstance(v, np.ndarray) and v.dtype.name == "bfloat16"
                 else v) for a, v in inputs.items()}
    (tmp_path / "in.pkl").write_bytes(pickle.dumps(views))
    library = emulated_abi(project / "generated" / "swig" / "cuda", name)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(project), str(REPO)]),
           **device_env("sm_89")}
    proc = subprocess.run([sys.executable, "-c", CALL, name, str(library), str(tmp_path / "in.pkl"),
                           str(tmp_path / "out.pkl")], cwd=project, env=env, capture_output=True,
                          text=True, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.startswith("no grad"), proc.stdout  # forward only, as silu_mul
    got = pickle.loads((tmp_path / "out.pkl").read_bytes())
    if got.dtype == np.uint16:
        import ml_dtypes

        got = got.view(ml_dtypes.bfloat16)
    assert got.shape == (case.m, case.n // 2)
    result = compare(got, reference(kernel, **inputs), kernel, k=case.k, inputs=inputs)
    assert result.passed, f"{name} {case.describe()} (torch op, emulated sm_89):\n{result.detail}"
    # The sentinel survives exactly on the rows of groups outside the shard.
    sentinel = np.asarray(inputs["existing_out"][:40], np.float32)
    assert (np.asarray(got[:40], np.float32) == sentinel).all()
