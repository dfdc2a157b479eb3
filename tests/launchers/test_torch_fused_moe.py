"""examples/torch_fused_moe.py: a vLLM-style fused MoE forward on the
generated PyTorch ops, on CPU tensors (the emulated CUDA kernels).

The reference is the same layer written directly in float32 PyTorch from
the dequantized expert weights: a loop over the (token, expert) pairs, with
the activations quantized to e4m3 per 128-wide group by PyTorch's own cast
(not by the generated quantizer), silu(gate) * up rounded to bf16 as the
kernel's output is, and no sorting. Expert parallelism runs the example's
fused_moe_ep on two CPU processes with gloo and must match the
single-process layer.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gemmgen.build import render_spec
from gemmgen.harness.abi import emulated_abi, library_name
from gemmgen.harness.cuda_emu import device_env
from gemmgen.harness.verify_cuda import emulated_arch

torch = pytest.importorskip("torch", reason="PyTorch is an optional extra: pip install -e '.[torch]'")

REPO = Path(__file__).resolve().parents[2]
KERNELS = (("moe", "moe_w8a8_gateup_silu"), ("moe", "moe_w8a8_grouped_gemm"),
           ("dense", "per_token_group_quant_fp8_out_scale_f32"))


@pytest.fixture(scope="module")
def libraries(tmp_path_factory) -> Path:
    """A folder with the three kernels' emulated libraries (as `gemmgen
    compile --torch --emulate` names them), the emulated device set."""
    folder = tmp_path_factory.mktemp("torch-libs")
    for stem, name in KERNELS:
        built = emulated_abi(REPO / "generated" / stem / "cuda", name)
        shutil.copyfile(built, folder / library_name(name, emulated=True))
    os.environ.update(device_env(emulated_arch(render_spec(REPO / "specs" / "moe.gemm").spec)))
    return folder


@pytest.fixture(scope="module")
def fm(libraries):
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    from examples import torch_fused_moe

    torch_fused_moe.load(str(libraries), "cpu")
    return torch_fused_moe


def _fp8_round_trip(a: torch.Tensor) -> torch.Tensor:
    """a [m, k] f32 quantized to e4m3 per 128-wide group (amax / 448) and back."""
    m, k = a.shape
    groups = a.reshape(m, k // 128, 128)
    scale = groups.abs().amax(-1, keepdim=True) / 448.0
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    return ((groups / scale).to(torch.float8_e4m3fn).float() * scale).reshape(m, k)


def _dequantize(q: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    return q.float() * scale.repeat_interleave(128, 1).repeat_interleave(128, 2)


def reference(x, params, cfg) -> torch.Tensor:
    w13 = _dequantize(params["w13"], params["w13_scale"])
    w2 = _dequantize(params["w2"], params["w2_scale"])
    probs = torch.softmax((x @ params["router"]).float(), dim=-1)
    weights, ids = torch.topk(probs, cfg.top_k, dim=-1)
    weights = weights / weights.sum(-1, keepdim=True)
    out = torch.zeros(x.shape[0], x.shape[1])
    f = cfg.d_ff
    for t in range(x.shape[0]):
        a = _fp8_round_trip(x[t:t + 1].float())
        for j in range(cfg.top_k):
            e = int(ids[t, j])
            gate, up = a @ w13[e, :f].T, a @ w13[e, f:].T
            h = (torch.nn.functional.silu(gate) * up).bfloat16().float()
            y = (_fp8_round_trip(h) @ w2[e].T).bfloat16().float()
            out[t] += weights[t, j] * y[0]
    return out


def _relative_error(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got.float() - want).norm() / want.norm())


def test_fused_moe_matches_the_reference(fm):
    cfg = fm.Config()
    params = fm.init(cfg, seed=1)
    x = torch.randn(24, cfg.d_model, generator=torch.Generator().manual_seed(2)).bfloat16()
    got = fm.fused_moe(x, params, cfg)
    assert got.shape == (24, cfg.d_model) and got.dtype == torch.bfloat16
    # bf16 output and fp8 steps that may round one element differently: 2 %.
    assert _relative_error(got, reference(x, params, cfg)) < 2e-2


@pytest.mark.slow
def test_expert_parallel_on_gloo_matches_one_process(fm, libraries, tmp_path):
    """Two CPU processes, two experts each: all_gather the tokens, each rank
    its experts through group_offset, all_reduce the partial outputs."""
    cfg = fm.Config()
    world = 2
    env = dict(os.environ, GEMMGEN_TORCH_LIBS=str(libraries), PYTHONPATH=str(REPO))
    procs = [subprocess.Popen([sys.executable, str(REPO / "tests" / "torch_ep_driver.py"),
                               str(rank), str(world), str(tmp_path / "init"),
                               str(tmp_path / f"out{rank}.pt")],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for rank in range(world)]
    for p in procs:
        out, _ = p.communicate(timeout=600)
        assert p.returncode == 0, out[-4000:]
    got = torch.cat([torch.load(tmp_path / f"out{rank}.pt") for rank in range(world)])
    params = fm.init(cfg, seed=1)
    x = torch.randn(24, cfg.d_model, generator=torch.Generator().manual_seed(2)).bfloat16()
    whole = fm.fused_moe(x, params, cfg)
    # The same rows, summed in another order and rounded to bf16 once more.
    torch.testing.assert_close(got, whole, rtol=2e-2, atol=2e-2)
