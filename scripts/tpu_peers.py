#!/usr/bin/env python3
"""gemmgen's Pallas kernels side by side with what a TPU user would call instead.

One run on one TPU (written for a v5e) times, case by case (each named after
the model whose shape it is), gemmgen's committed generated modules
(generated/moe/pallas, generated/dense/pallas) next to the peers, each called
through its own public API at its own defaults and, where it takes a tile,
also at gemmgen's tile ("@gemmgen-tile"):

  xla            `jax.lax.ragged_dot` (grouped; quantized weights are
                 dequantized first, in the same jit), `jax.lax.ragged_dot_general`
                 (tgmm), `jnp.dot` (dense)
  megablox       JAX's own `jax.experimental.pallas.ops.tpu.megablox` gmm / tgmm
  tpu-inference  `tpu_inference.kernels.megablox.gmm` (PyPI tpu-inference), at
                 its tuned block-size table / heuristics, quantized weights
                 through its `rhs_scale`; its kernel files are loaded by path
                 (the package's __init__ pulls in vllm)
  tokamax        `tokamax.ragged_dot(..., implementation="mosaic")` (PyPI
                 tokamax), quantized weights as a qwix QArray

Every output, gemmgen's and the peers', is checked against an f32 reference
computed on the chip (per-group `jnp.dot` of the exact bf16 operands, or of
the f32 dequantized weights, at Precision.HIGHEST, f32 accumulation): the error
is max|out - ref| / max|ref| over the rows the case computes; a bf16 output
passes at <= 1e-2, an f32 output at <= 1e-3. A wrong one is reported
"WRONG (err ...)" and excluded from the best peer; a failing one "error: <first
line>"; a peer that is not installed "not installed". No failure stops the
run. Each gemmgen kernel is also checked once against the float64 NumPy
reference on its first standard case, as scripts/tpu_bench.py does.

Timing as scripts/tpu_bench.py: the first call (compile + run) is timed
separately ("compile s"), then the median of 5 samples of 10 back-to-back
calls blocked once.

    python scripts/tpu_peers.py --list
    python scripts/tpu_peers.py --out DIR [--case GLOB ...] [--impl GLOB ...] \\
        [--time-budget SECONDS] [--tiles-from tiles.json]
    python scripts/tpu_peers.py --interpret --case 'mixtral*'   # the whole flow on the CPU

`--interpret` runs every case at tiny shapes of the same structure in Pallas
TPU interpret mode on the CPU, with every peer that can run there; its times
are not measurements. `--tiles-from FILE` (JSON {"kernel": "MxNxK"}) renders
those gemmgen kernels with that tile instead of the committed one (the "@gemmgen-
tile" peers follow). Writes tpu_peers.json (every row) and tpu_peers.md (the
tables) to --out (default $OUT, else the current folder).
"""

from __future__ import annotations

import argparse
import dataclasses
import fnmatch
import functools
import gc
import importlib.metadata
import importlib.util
import inspect
import json
import logging
import os
import sys
import tempfile
import time
import traceback
import types
import typing
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import tpu_bench
import tpu_tiles

from gemmgen import ir
from gemmgen.backends import pallas
from gemmgen.build import render_spec
from gemmgen.harness.runner import load_generated_module

V5E = "TPU v5e"  # the peaks used when the device's kind is not in tpu_bench.PEAKS
ON_CPU = False  # --interpret or --lower: no TPU here
TOLERANCE = {"bfloat16": 1e-2, "float32": 1e-3}  # max|out - ref| / max|ref|
SHARD_ROWS_ALIGN = 512  # an expert-parallel shard's rows, padded for the peers without group_offset
SCALE_BLOCK_K = 512  # rows of k per scale of the K-block formats (specs/moe.gemm peer_*)

# Weight formats: (weight dtype, scale layout, gemmgen kernel). "channel":
# one scale per expert and output column; "kblock": one per SCALE_BLOCK_K
# rows of k and column.
FORMATS = {
    "bf16": ("bfloat16", None, ("gmm_bf16_out", "gmm_bf16_lut", "gmm_bf16_kn_out")),
    "w8-channel": ("int8", "channel", ("peer_w8a16_per_channel_rhs_int8",)),
    "w8-kblock": ("int8", "kblock", ("peer_w8a16_kblock",)),
    "w4-kblock": ("int4", "kblock", ("peer_w4a16_kblock",)),
    "fp8-channel": ("float8_e4m3fn", "channel", ("peer_w8a16_per_channel_rhs_e4m3",)),
}
# The typical |value| of a random weight code, so that scale * code ~ 1/sqrt(k).
_CODE_RMS = {"int8": 73.0, "int4": 4.6, "float8_e4m3fn": 1.0, "bfloat16": 1.0}


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    op: str  # gmm | gateup | tgmm | dense
    m: int  # rows in total (all groups, all shards)
    k: int
    n: int  # gateup: gate + up columns; the output has n / 2
    g: int = 0  # groups (experts) this shard owns
    fmt: str = "bf16"
    total_groups: int = 0  # > g: an expert-parallel shard of this many experts
    offset: int = 0  # the shard's first expert
    decode: bool = False  # report % of HBM bandwidth
    seed: int = 0

    @property
    def groups(self) -> int:
        return self.total_groups or self.g

    def tiny(self) -> Case:
        """The same structure at a size Pallas interpret mode runs in seconds:
        skewed routing, empty experts, a shard, k off the 256 grid where the
        real case is."""
        k = 1024 if FORMATS[self.fmt][1] == "kblock" else (320 if self.k % 256 else 256)
        # A shard's rows are about g / total_groups of m: enough for the
        # peers that need 128 rows (tokamax).
        m = 1024 if self.total_groups else min(self.m, 256)
        n = 512 if self.op == "gateup" else 256
        g = min(self.g, 4) if self.g else 0
        total = 16 if self.total_groups else 0
        return dataclasses.replace(self, m=m, k=k, n=n, g=g, total_groups=total,
                                   offset=8 if total else 0)


def _cases() -> list[Case]:
    """In the order they run (the most telling first, so that --time-budget
    drops the tail)."""
    cases = [
        Case("mixtral-8x7b-up", "gmm", 8192, 4096, 28672, 8),
        Case("qwen3-30b-a3b-up", "gmm", 16384, 2048, 1536, 128),
        Case("gpt-oss-120b-up", "gmm", 8192, 2880, 5760, 32),
        Case("deepseek-v3-ep-shard", "gmm", 8192, 7168, 4096, 32, total_groups=256, offset=96),
        Case("mixtral-8x7b-gateup-silu", "gateup", 8192, 4096, 28672, 8),
        Case("qwen3-30b-a3b-tgmm", "tgmm", 16384, 2048, 1536, 128),
        Case("dense-bf16-8192", "dense", 8192, 8192, 8192),
    ]
    cases += [Case(f"prefill-{f}", "gmm", 8192, 4096, 14336, 8, fmt=f)
              for f in ("w8-channel", "w4-kblock", "fp8-channel")]
    cases += [Case(f"decode-m{m}-{f}", "gmm", m, 4096, 14336, 8, fmt=f, decode=True)
              for m in (64, 128, 256, 512) for f in FORMATS]
    return cases


CASES = _cases()


def routing(m: int, groups: int, seed: int) -> np.ndarray:
    """Group sizes summing to m, skewed as a router's are: a Dirichlet draw,
    an eighth of the experts (at least one) empty, one heavy expert that
    takes about a third of the rows. Fixed seed: every run routes alike."""
    rng = np.random.default_rng(1000 + seed)
    w = rng.dirichlet(np.full(groups, 0.7))
    empty = rng.choice(groups, size=max(1, groups // 8), replace=False)
    w[empty] = 0.0
    heavy = rng.choice(np.setdiff1d(np.arange(groups), empty))
    w[heavy] += 0.5 * w.sum()
    return rng.multinomial(m, w / w.sum()).astype(np.int32)


# ---------------------------------------------------------------------------
# Peers: each loaded once; a missing one is "not installed".


@dataclasses.dataclass
class Peers:
    megablox: types.ModuleType | None = None  # jax...megablox.gmm
    tpu_inference: types.ModuleType | None = None  # its megablox gmm module
    tpu_inference_tiles: types.ModuleType | None = None
    tokamax: types.ModuleType | None = None
    tokamax_tpu: types.ModuleType | None = None  # tokamax's Mosaic TPU ragged dot
    qwix: types.ModuleType | None = None
    missing: dict[str, str] = dataclasses.field(default_factory=dict)
    versions: dict[str, str] = dataclasses.field(default_factory=dict)


def _first_line(e: BaseException) -> str:
    lines = [x for x in str(e).strip().splitlines()
             if x.strip() and not x.startswith(("-----", "For simplicity, JAX"))]
    if not lines:
        return type(e).__name__
    line = lines[0]
    if line.rstrip().endswith("Traceback (most recent call last):"):
        # An error raised inside a callback (interpret mode): its own last line.
        line = f"{line.split('Traceback')[0].strip()} {lines[-1].strip()}"
    return f"{type(e).__name__}: {line}"[:300]


class _Logger(logging.LoggerAdapter):
    """vllm's logger as tpu-inference's kernels use it (`warning_once`)."""

    _seen: typing.ClassVar[set] = set()

    def warning_once(self, msg, *args, **kwargs):
        if msg not in self._seen:
            self._seen.add(msg)
            self.warning(msg, *args, **kwargs)

    def info_once(self, msg, *args, **kwargs):
        pass


def _load_tpu_inference() -> tuple[types.ModuleType, types.ModuleType]:
    """tpu-inference's megablox gmm from the installed files, by path:
    `import tpu_inference` would import vllm (and torch). Its package
    modules are stood in for by empty ones and its logger (vllm's) by the
    standard library's."""
    spec = importlib.util.find_spec("tpu_inference")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("No module named 'tpu_inference'")
    root = Path(next(iter(spec.submodule_search_locations)))
    base = root / "kernels" / "megablox"
    for name, path in (("tpu_inference", root), ("tpu_inference.kernels", root / "kernels"),
                       ("tpu_inference.kernels.megablox", base)):
        if name not in sys.modules:
            pkg = types.ModuleType(name)
            pkg.__path__ = [str(path)]
            sys.modules[name] = pkg
    if "tpu_inference.logger" not in sys.modules:
        log = types.ModuleType("tpu_inference.logger")
        log.init_logger = lambda name: _Logger(logging.getLogger(name), {})
        sys.modules["tpu_inference.logger"] = log
    mods = {}
    for stem in ("common", "tuned_block_sizes", "gmm"):
        name = f"tpu_inference.kernels.megablox.{stem}"
        s = importlib.util.spec_from_file_location(name, base / f"{stem}.py")
        mod = importlib.util.module_from_spec(s)
        sys.modules[name] = mod
        s.loader.exec_module(mod)
        mods[stem] = mod
    return mods["gmm"], mods["tuned_block_sizes"]


def load_peers() -> Peers:
    peers = Peers()
    for dist in ("jax", "jaxlib", "libtpu", "tpu-inference", "tokamax", "qwix", "flax"):
        try:
            peers.versions[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            peers.versions[dist] = "not installed"
    try:
        # The module (the package's `gmm` attribute is ops.gmm, the function).
        peers.megablox = importlib.import_module("jax.experimental.pallas.ops.tpu.megablox.gmm")
    except Exception as e:  # noqa: BLE001 - a peer that fails to load is reported
        peers.missing["megablox"] = _first_line(e)
    try:
        peers.tpu_inference, peers.tpu_inference_tiles = _load_tpu_inference()
    except ModuleNotFoundError as e:
        peers.missing["tpu-inference"] = f"not installed ({e})"
    except Exception as e:  # noqa: BLE001
        peers.missing["tpu-inference"] = f"import failed: {_first_line(e)}"
    try:
        import qwix
        import tokamax  # first: "not installed" names tokamax, not one of its dependencies
        from absl import flags
        from tokamax._src.ops.ragged_dot import pallas_mosaic_tpu

        # tokamax reads its options from absl flags and parses sys.argv the
        # first time it needs one: this script's own options would fail
        # there ("Unknown command line flag"). Its flags keep their defaults.
        if not flags.FLAGS.is_parsed():
            flags.FLAGS.mark_as_parsed()
        # Each first call logs an "autotuning cache miss" (a page of text):
        # expected, tokamax then takes its heuristics, its default.
        logging.getLogger("absl").setLevel(logging.ERROR)
        peers.tokamax, peers.tokamax_tpu, peers.qwix = tokamax, pallas_mosaic_tpu, qwix
    except ModuleNotFoundError as e:
        peers.missing["tokamax"] = f"not installed ({e})"
    except Exception as e:  # noqa: BLE001
        peers.missing["tokamax"] = f"import failed: {_first_line(e)}"
    return peers


# ---------------------------------------------------------------------------
# gemmgen's kernels.


@dataclasses.dataclass
class Ours:
    kernels: dict[str, tuple[str, ir.Kernel, ir.Spec]]  # name -> (spec stem, kernel, spec)
    tiles: dict[str, str]  # --tiles-from
    tmp: Path
    fns: dict = dataclasses.field(default_factory=dict)
    modules: dict = dataclasses.field(default_factory=dict)
    checked: dict = dataclasses.field(default_factory=dict)  # name -> (ok, detail)

    @classmethod
    def load(cls, tiles: dict[str, str], tmp: Path) -> Ours:
        kernels = {}
        for stem in ("dense", "moe"):
            spec = render_spec(ROOT / "specs" / f"{stem}.gemm").spec
            for kernel in spec.kernels_for(ir.Backend.PALLAS_TPU):
                kernels[kernel.name] = (stem, kernel, spec)
        unknown = sorted(set(tiles) - set(kernels))
        if unknown:
            raise SystemExit(f"tpu_peers: --tiles-from names unknown kernels: {', '.join(unknown)}")
        return cls(kernels, tiles, tmp)

    def kernel(self, name: str) -> ir.Kernel:
        _, kernel, spec = self.kernels[name]
        if name in self.tiles:
            return tpu_tiles.with_tile(spec, kernel, tpu_tiles.parse_tile(self.tiles[name]))[1]
        return kernel

    def fn(self, name: str):
        """The kernel's function: the committed module, or the kernel rendered
        at its --tiles-from tile (refused tiles raise with the backend's reason)."""
        if name not in self.fns:
            stem, kernel, spec = self.kernels[name]
            if name in self.tiles:
                spec2, k2 = tpu_tiles.with_tile(spec, kernel, tpu_tiles.parse_tile(self.tiles[name]))
                problems = [d.message for d in pallas.diagnose(k2, spec2)]
                if problems:
                    raise ValueError(f"tile {self.tiles[name]} refused: {'; '.join(problems)}")
                fn = tpu_tiles.module_for(spec2, k2, self.tmp, self.tiles[name])
                module = sys.modules[fn.__module__]
            else:
                path = ROOT / "generated" / stem / "pallas" / f"{name}.py"
                module = load_generated_module(path, f"tpu_peers_{stem}_{name}")
                fn = getattr(module, name)
            self.fns[name], self.modules[name] = fn, module
        return self.fns[name]

    def tile(self, name: str, m: int, n: int, k: int, g: int = 0) -> tuple[int, int, int]:
        """(tm, tn, tk) the kernel runs this shape with; g is the problem's
        groups (len(group_sizes)), which a LUT with rules on g or m/g takes."""
        self.fn(name)
        tile_for = self.modules[name].tile_for
        if "g" in inspect.signature(tile_for).parameters:
            return tuple(tile_for(m, n, k, g))
        return tuple(tile_for(m, n, k))

    def check64(self, name: str) -> tuple[bool, str]:
        """Once per kernel: its first standard case against float64 NumPy."""
        if name not in self.checked:
            try:
                self.checked[name] = tpu_bench.check(self.fn(name), self.kernel(name))
            except Exception as e:  # noqa: BLE001
                self.checked[name] = (False, _first_line(e))
        return self.checked[name]


# ---------------------------------------------------------------------------
# A case's operands, on the device.


def interpret_arg():
    """What `interpret=` every Pallas call gets: False on the TPU."""
    kw = tpu_bench.call_kwargs()
    return kw.get("interpret", False)


def make_data(case: Case, abstract: bool = False) -> dict:
    """The case's operands on the device, with the host's routing facts
    (sizes_np, rows); `abstract`: their shapes and dtypes only
    (jax.ShapeDtypeStruct, for --lower), nothing drawn."""
    import jax

    d = {"rows": (0, case.m)}
    if case.op != "dense":
        sizes = routing(case.m, case.groups, case.seed)
        first = int(sizes[:case.offset].sum())
        d["sizes_np"] = sizes
        d["rows"] = (first, first + int(sizes[case.offset:case.offset + case.g].sum()))
    draw = functools.partial(_arrays, case, d.get("sizes_np"), d["rows"])
    if abstract:
        return {**d, **jax.eval_shape(draw)}
    dev = tpu_bench.device()
    return {**d, **{name: jax.device_put(x, dev) for name, x in draw().items()}}


def _arrays(case: Case, sizes, rows: tuple[int, int]) -> dict:
    """The operands, every layout each implementation takes, drawn from a
    fixed key (a JAX computation only, so that jax.eval_shape can trace it)."""
    import jax
    import jax.numpy as jnp

    ka, kw, ks = jax.random.split(jax.random.key(case.seed), 3)
    d = {"lhs": jax.random.normal(ka, (case.m, case.k), jnp.bfloat16)}
    if case.op == "dense":
        d["rhs_kn"] = _weights(kw, (case.k, case.n))
        d["rhs_nk"] = d["rhs_kn"].T
        return d
    first, end = rows
    d["sizes"] = jnp.asarray(sizes)
    d["sizes_local"] = jnp.asarray(sizes[case.offset:case.offset + case.g])
    d["offset"] = jnp.asarray(case.offset, jnp.int32)
    # The rows of this shard, for the peers that take no group_offset (XLA,
    # tokamax): what an expert-parallel layer hands them, in a buffer of a
    # whole number of 512-row tiles (its capacity; tokamax needs m to be a
    # multiple of its m tile). Rows past the shard's are zero, in no group.
    d["lhs_local"] = d["lhs"][first:end]
    if case.total_groups:
        pad = -(end - first) % SHARD_ROWS_ALIGN
        d["lhs_local"] = jnp.pad(d["lhs_local"], ((0, pad), (0, 0)))
    if case.op == "tgmm":
        d["dout"] = jax.random.normal(kw, (case.m, case.n), jnp.bfloat16)
        d["dout_local"] = d["dout"][first:end]
        return d
    dtype, scales, _ = FORMATS[case.fmt]
    g, k, n = case.g, case.k, case.n
    if dtype == "bfloat16":
        d["rhs_kn"] = _weights(kw, (g, k, n))
        d["rhs_nk"] = jnp.swapaxes(d["rhs_kn"], 1, 2)
        return d
    if dtype == "float8_e4m3fn":
        codes = jax.random.normal(kw, (g, k, n), jnp.float32).astype(jnp.float8_e4m3fn)
    else:
        top = 127 if dtype == "int8" else 7
        codes = jax.random.randint(kw, (g, k, n), -top, top + 1, jnp.int8)
    nb = 1 if scales == "channel" else -(-k // SCALE_BLOCK_K)
    base = 1.0 / (_CODE_RMS[dtype] * np.sqrt(k))
    s3 = base * jax.random.uniform(ks, (g, nb, n), jnp.float32, 0.5, 1.5)
    d["scale3"] = s3  # [g, nb, n]: tokamax's QArray, XLA's dequantize
    d["scale4"] = s3[:, :, None, :]  # [g, nb, 1, n]: megablox rhs_scale
    nk = jnp.swapaxes(codes, 1, 2)  # gemmgen's [g, n, k]
    if dtype == "int4":
        # Two codes a byte along k, element 2i in the low nibble (docs/spec.md).
        lo = (nk[..., 0::2] & 0xF).astype(jnp.uint8)
        hi = (nk[..., 1::2] & 0xF).astype(jnp.uint8)
        d["rhs_nk"] = lo | (hi << 4)
        d["rhs_kn"] = codes.astype(jnp.int4)
    else:
        d["rhs_nk"] = nk
        d["rhs_kn"] = codes
    d["ours_scale"] = s3[:, 0, :] if scales == "channel" else s3[:, :, None, :]
    return d


def _weights(key, shape):
    """bf16 weights of variance 1/k (k = shape[-2]), drawn in one fused
    computation: Mixtral's [8, 4096, 28672] would take 7.5 GB of f32
    temporaries drawn step by step."""
    import jax
    import jax.numpy as jnp

    scale = 1.0 / np.sqrt(shape[-2])
    draw = jax.jit(lambda key: (jax.random.normal(key, shape, jnp.float32) * scale)
                   .astype(jnp.bfloat16))
    return draw(key)


def dequantize(q, scale3, out_dtype):
    """[g, k, n] codes x [g, nb, n] scales (nb blocks of k) -> [g, k, n]."""
    import jax.numpy as jnp

    g, k, n = q.shape
    nb = scale3.shape[1]
    w = q.astype(jnp.float32).reshape(g, nb, k // nb, n) * scale3[:, :, None, :]
    return w.reshape(g, k, n).astype(out_dtype)


def reference(case: Case, d: dict):
    """The f32 reference of the case's computed rows, on the chip: one
    `jnp.dot` per non-empty group on static row slices (independent of
    ragged_dot and of every kernel under test), Precision.HIGHEST, f32
    accumulation; bf16 operands are exact in it, quantized weights are
    dequantized in f32."""
    import jax
    import jax.numpy as jnp

    hi = jax.lax.Precision.HIGHEST
    f32 = jnp.float32
    if case.op == "dense":
        return jax.jit(lambda a, b: jnp.dot(a, b, precision=hi, preferred_element_type=f32))(
            d["lhs"], d["rhs_kn"])
    sizes = d["sizes_np"][case.offset:case.offset + case.g]
    starts = np.concatenate([[0], np.cumsum(sizes)])
    if case.op == "tgmm":
        first = d["rows"][0]

        def tg(x, dy):
            outs = []
            for i in range(case.g):
                s, e = first + starts[i], first + starts[i + 1]
                outs.append(jnp.dot(x[s:e].T, dy[s:e], precision=hi, preferred_element_type=f32)
                            if e > s else jnp.zeros((case.k, case.n), f32))
            return jnp.stack(outs)

        return jax.jit(tg)(d["lhs"], d["dout"])

    def gm(x, w, *scale):
        if scale:
            w = dequantize(w, scale[0], f32)
        parts = [jnp.dot(x[starts[i]:starts[i + 1]], w[i], precision=hi, preferred_element_type=f32)
                 for i in range(case.g) if sizes[i] > 0]
        out = jnp.concatenate(parts) if parts else jnp.zeros((0, case.n), f32)
        if case.op == "gateup":
            half = case.n // 2
            out = jax.nn.silu(out[:, :half]) * out[:, half:]
        return out

    scale = (d["scale3"],) if "scale3" in d else ()
    return jax.jit(gm)(d["lhs_local"], d["rhs_kn"], *scale)


def device_alive() -> bool:
    """Whether the device still runs a trivial computation."""
    import jax
    import jax.numpy as jnp

    try:
        x = jax.device_put(jnp.arange(8, dtype=jnp.float32), tpu_bench.device())
        return float(jax.block_until_ready(x + 1).sum()) == 36.0
    except Exception:  # noqa: BLE001 - any failure means it does not
        return False


def relative_error(got, ref) -> float:
    import jax
    import jax.numpy as jnp

    @jax.jit
    def err(a, b):
        a = a.astype(jnp.float32)
        worst = jnp.max(jnp.abs(a - b), initial=0.0)
        top = jnp.max(jnp.abs(b), initial=0.0)
        bad = ~jnp.all(jnp.isfinite(a))
        return jnp.where(bad, jnp.inf, worst / jnp.maximum(top, 1e-30))

    return float(err(got, ref))


# ---------------------------------------------------------------------------
# Implementations: (name, tile, build) where build() returns the function to
# time and its arguments, or raises. `local`: the call returns only the case's computed rows.


@dataclasses.dataclass
class Impl:
    name: str
    family: str  # gemmgen | xla | megablox | tpu-inference | tokamax
    tile: str
    build: object = None
    local: bool = False  # returns the computed rows only (else all m rows)
    status: str = ""  # preset when it cannot run: "not installed (...)", "error: ..."
    check64: object = None  # gemmgen: () -> (passed, detail) of the float64 check
    risky: str = ""  # why it may fault the device: run after every other row


def _tile_str(tm: int, tn: int, tk: int) -> str:
    return f"{tm}x{tn}x{tk}"


def _clamp(case: Case, tile: tuple[int, int, int]) -> tuple[int, int, int]:
    """gemmgen's (tm, tn, tk) as a megablox-style peer can take it: no
    larger than the problem (rounded up to 128 lanes)."""
    up = lambda x: -(-x // 128) * 128
    return min(tile[0], case.m), min(tile[1], up(case.n)), min(tile[2], up(case.k))


def implementations(case: Case, d: dict, ours: Ours, peers: Peers, broken: bool) -> list[Impl]:
    import jax
    import jax.numpy as jnp

    interp = interpret_arg()
    bf16, f32 = jnp.bfloat16, jnp.float32
    impls: list[Impl] = []
    m, k, n = case.m, case.k, case.n

    def missing(family: str, names: list[str]) -> list[Impl]:
        return [Impl(nm, family, "-", status=peers.missing[family]) for nm in names]

    # --- gemmgen ---------------------------------------------------------
    if case.op == "dense":
        names = ["dense_bf16_out_bf16"]
    elif case.op == "gateup":
        names = ["moe_gateup_silu_bf16"]
    elif case.op == "tgmm":
        names = ["moe_bf16_grad_rhs"]
    else:
        names = list(FORMATS[case.fmt][2])
    our_tile = None
    for name in names:
        try:
            tile = ours.tile(name, m, n, k, case.total_groups or case.g)
        except Exception as e:  # noqa: BLE001
            impls.append(Impl(f"gemmgen:{name}", "gemmgen", "-", status=f"error: {_first_line(e)}"))
            continue
        our_tile = our_tile or tile

        def build(name=name):
            fn = ours.fn(name)
            kw = {"interpret": interp} if interp is not False else {}
            if case.op == "dense":
                args = {"lhs": d["lhs"], "rhs": d["rhs_nk"]}
            elif case.op == "tgmm":
                args = {"lhs": d["lhs"], "rhs": d["dout"], "group_sizes": d["sizes"]}
            else:
                kn = ours.kernel(name).rhs_operand.layout is ir.Layout.KN
                args = {"lhs": d["lhs"], "rhs": d["rhs_kn" if kn else "rhs_nk"],
                        "group_sizes": d["sizes"]}
                if "ours_scale" in d:
                    args["rhs_scale"] = d["ours_scale"]
                if case.total_groups:
                    args["group_offset"] = d["offset"]
            return functools.partial(_by_name, fn, tuple(args), kw), tuple(args.values())

        impls.append(Impl(f"gemmgen:{name}", "gemmgen", _tile_str(*tile), build,
                          check64=functools.partial(ours.check64, name)))
    peer_tiles = [("", None)]
    if our_tile is not None:
        peer_tiles.append(("@gemmgen-tile", _clamp(case, our_tile)))

    # --- XLA ---------------------------------------------------------------
    if case.op == "dense":
        dot = jax.jit(lambda a, b: jnp.dot(a, b))
        impls.append(Impl("xla:dot", "xla", "-", lambda: (dot, (d["lhs"], d["rhs_kn"]))))
    elif case.op == "tgmm":
        dims = jax.lax.RaggedDotDimensionNumbers(
            dot_dimension_numbers=(([0], [0]), ([], [])), lhs_ragged_dimensions=[0],
            rhs_group_dimensions=[])
        tg = jax.jit(lambda x, dy, s: jax.lax.ragged_dot_general(
            x, dy, s, dims, preferred_element_type=f32))
        impls.append(Impl("xla:ragged_dot_general", "xla", "-", local=True, build=functools.partial(
            _bind, tg, (d["lhs_local"], d["dout_local"], d["sizes_local"]))))
    else:
        def xla_gmm(x, w, s, *scale):
            if scale:  # dequantize, then ragged_dot: XLA has no quantized form
                w = dequantize(w, scale[0], bf16)
            out = jax.lax.ragged_dot(x, w, s)
            return _epilogue(case, out)

        xla_scale = (d["scale3"],) if "scale3" in d else ()
        xla_args = (d["lhs_local"], d["rhs_kn"], d["sizes_local"], *xla_scale)
        xg = jax.jit(xla_gmm)
        impls.append(Impl("xla:ragged_dot", "xla", "-", local=True,
                          build=lambda: (xg, xla_args)))
        if broken:
            # The test hook: a peer that answers wrong must be reported WRONG.
            bad = jax.jit(lambda *a: xla_gmm(*a) * 1.5)
            impls.append(Impl("broken:ragged_dot_x1.5", "test-hook", "-", local=True,
                              build=lambda: (bad, xla_args)))

    # --- JAX's megablox ------------------------------------------------------
    # Every array goes in as an argument (a closed-over one would be baked
    # into the executable as a constant); tiles are static.
    offset = d["offset"] if case.total_groups else None
    if case.op in ("gmm", "gateup", "tgmm") and case.fmt == "bf16":
        if peers.megablox is None:
            impls += missing("megablox", ["megablox:gmm"])
        else:
            mb = peers.megablox
            for tag, tile in peer_tiles:
                # megablox tiling is (tm, tk, tn); its default is (128, 128, 128).
                tiling = (128, 128, 128) if tile is None else (tile[0], tile[2], tile[1])
                if case.op == "tgmm":
                    # megablox tgmm takes lhs as [k, m]: the transpose is part
                    # of the call, as in megablox's own gmm backward.
                    def mb_tgmm(x, dy, s, *, tiling):
                        return mb.tgmm(x.T, dy, s, f32, tiling=tiling, interpret=interp)

                    f = jax.jit(functools.partial(mb_tgmm, tiling=tiling))
                    args = (d["lhs"], d["dout"], d["sizes"])
                    name = "megablox:tgmm"
                else:
                    def mb_gmm(x, w, s, offset, *, tiling):
                        return _epilogue(case, mb.gmm(x, w, s, bf16, tiling=tiling,
                                                      group_offset=offset, interpret=interp))

                    f = jax.jit(functools.partial(mb_gmm, tiling=tiling))
                    args = (d["lhs"], d["rhs_kn"], d["sizes"], offset)
                    name = "megablox:gmm"
                impls.append(Impl(name + tag, "megablox",
                                  _tile_str(tiling[0], tiling[2], tiling[1]),
                                  functools.partial(_bind, f, args)))

    # --- tpu-inference's megablox ------------------------------------------------
    if case.op in ("gmm", "gateup"):
        if peers.tpu_inference is None:
            impls += missing("tpu-inference", ["tpu-inference:gmm"])
        else:
            ti = peers.tpu_inference

            def ti_gmm(x, w, s, scale, offset, *, tiling):
                return _epilogue(case, ti.gmm(x, w, s, bf16, rhs_scale=scale, tiling=tiling,
                                              group_offset=offset, interpret=interp))

            args = (d["lhs"], d["rhs_kn"], d["sizes"], d.get("scale4"), offset)
            for tag, tile in peer_tiles:
                tiling = None if tile is None else (tile[0], tile[2], tile[1])
                if tiling is None:  # what its gmm picks: the tuned table, else its heuristic
                    try:
                        tm, tk, tn = peers.tpu_inference_tiles.get_tuned_block_sizes(
                            m, k, n, case.groups, case.g, "bfloat16",
                            FORMATS[case.fmt][0], k)
                        shown = f"auto {_tile_str(tm, tn, tk)}"
                    except Exception:  # noqa: BLE001
                        shown = "auto"
                else:
                    shown = _tile_str(tiling[0], tiling[2], tiling[1])
                f = jax.jit(functools.partial(ti_gmm, tiling=tiling))
                impls.append(Impl("tpu-inference:gmm" + tag, "tpu-inference", shown,
                                  functools.partial(_bind, f, args)))

    # --- tokamax -------------------------------------------------------------------
    if case.op in ("gmm", "gateup", "tgmm"):
        if peers.tokamax is None:
            impls += missing("tokamax", ["tokamax:mosaic"])
        else:
            impls += _tokamax(case, d, peers, peer_tiles, interp)
    return impls


def _bind(f, args):
    """An Impl's build: the function and its arguments."""
    return f, args


def _by_name(fn, names: tuple[str, ...], kw: dict, *arrays):
    """fn called with keywords, as gemmgen's functions document them."""
    return fn(**dict(zip(names, arrays, strict=True)), **kw)


def _epilogue(case: Case, out):
    """The gate-up case's silu(gate) * up, in XLA after a peer's gmm."""
    import jax

    if case.op != "gateup":
        return out
    half = case.n // 2
    return (jax.nn.silu(out[:, :half].astype("float32")) * out[:, half:]).astype(out.dtype)


@functools.cache
def _tokamax_class(tpu, on_cpu: bool):
    """tokamax's Mosaic TPU ragged dot; on the CPU (--interpret, --lower)
    with its device check lifted: it refuses any device but a TPU even when
    told to interpret, and the CPU runs are there to exercise the calls the
    TPU run makes. The kernel itself still runs in Pallas interpret mode, or
    is lowered for a TPU."""
    if not on_cpu:
        return tpu.PallasMosaicTpuRaggedDot
    # Its config is a pydantic model whose `interpret` is typed bool: an
    # InterpretParams there works, and warns on every use.
    warnings.filterwarnings("ignore", message="Pydantic serializer warnings")
    # Its kernel is built on Pallas's emit_pipeline, which asks the device for
    # its TPU generation: on the CPU, answer with the v5e's (the registry JAX
    # keeps for device kinds it does not know).
    from jax._src.pallas.mosaic import tpu_info

    tpu_info.registry.setdefault(
        "cpu", lambda: tpu_info._get_tpu_info_impl(tpu_info.ChipVersion.TPU_V5E, 1))

    class OnTheCpu(tpu.PallasMosaicTpuRaggedDot):
        def supported_on(self, device) -> bool:
            return True

    return OnTheCpu


def _tokamax(case: Case, d: dict, peers: Peers, peer_tiles, interp) -> list[Impl]:
    import jax
    import jax.numpy as jnp

    tk, tpu = peers.tokamax, peers.tokamax_tpu
    impls = []
    quantized = "scale3" in d
    if case.op == "tgmm":
        dims = tpu.DRHS_RAGGED_DOT_DIM_NUMS
        lut, key = tpu.TGMM_TILING_TUNED_LUT, (case.m, case.k, case.n, case.g, False)
    else:
        dims = tpu.DEFAULT_RAGGED_DOT_DIM_NUMS
        lut, key = tpu.GMM_TILING_TUNED_LUT, (d["lhs_local"].shape[0], case.k, case.n, case.g,
                                               quantized)
    for tag, tile in peer_tiles:
        if tile is None:
            got = lut.get(key)
            tile_k = got[0][1] if got else 128
            shown = "auto " + (_tile_str(got[0][0], got[0][2], got[0][1]) if got else "128x128x128")
        else:
            tile_k = tile[2]
            shown = _tile_str(*tile)
        # Interpret mode caught its DMAs reading past k when its K tile does
        # not divide k (gpt-oss: k = 2880): on the chip such a read may fault
        # and take the device with it, so these rows run after every case.
        risky = (f"k = {case.k} is not a multiple of its K tile {tile_k}"
                 if case.op != "tgmm" and case.k % tile_k else "")
        if not ON_CPU and tile is None:
            # The public API at its defaults: the Mosaic TPU implementation, its heuristics.
            impl = "mosaic"
        else:
            # The implementation object (the public API's "mosaic" on a TPU),
            # to give it a config or interpret mode.
            kw = {"interpret": interp} if interp is not False else {}
            if tile is not None:
                kw["config"] = tpu.Config(tile_m=tile[0], tile_k=tile[2], tile_n=tile[1])
            impl = _tokamax_class(tpu, ON_CPU)(**kw)
        if case.op == "tgmm":
            f = jax.jit(lambda x, dy, s, impl=impl: tk.ragged_dot_general(
                x, dy, s, dims, preferred_element_type=jnp.float32, implementation=[impl]))
            build = functools.partial(_bind, f, (d["lhs_local"], d["dout_local"], d["sizes_local"]))
            name = "tokamax:mosaic(drhs)"
        else:
            def call(x, w, s, *scale, impl=impl):
                if scale:
                    w = peers.qwix.QArray(qvalue=w, scale=scale[0])
                return _epilogue(case, tk.ragged_dot(x, w, s, preferred_element_type=jnp.bfloat16,
                                                     implementation=[impl]))

            f = jax.jit(call)
            scale = (d["scale3"],) if quantized else ()
            build = functools.partial(_bind, f, (d["lhs_local"], d["rhs_kn"], d["sizes_local"],
                                                 *scale))
            name = "tokamax:mosaic"
        impls.append(Impl(name + tag, "tokamax", shown, build, local=True, risky=risky))
    return impls


# ---------------------------------------------------------------------------
# Running.


def flops_bytes(case: Case, d: dict) -> tuple[float, float]:
    """FLOPs of the rows this shard computes (2 * rows * n * k) and the bytes
    a decode step must move: the weights (and scales) of the experts it
    touches, the activations and the output."""
    rows = d["rows"][1] - d["rows"][0]
    flops = 2.0 * rows * case.n * case.k
    if case.op == "dense":
        return flops, 2.0 * (case.m * case.k + case.k * case.n + case.m * case.n)
    dtype, scales, _ = FORMATS[case.fmt]
    per_weight = {"bfloat16": 2, "int8": 1, "float8_e4m3fn": 1, "int4": 0.5}[dtype]
    touched = int((d["sizes_np"][case.offset:case.offset + case.g] > 0).sum())
    nb = 0 if scales is None else (1 if scales == "channel" else -(-case.k // SCALE_BLOCK_K))
    weights = touched * case.n * (case.k * per_weight + nb * 4)
    out_n = case.n // 2 if case.op == "gateup" else case.n
    return flops, weights + 2.0 * rows * case.k + 2.0 * rows * out_n


def run_impl(case: Case, impl: Impl, d: dict, ref, peaks) -> dict:
    import jax

    row = {"case": case.name, "impl": impl.name, "family": impl.family, "tile": impl.tile}
    if impl.status:
        row["status"], row["correct"] = impl.status, None
        return row
    try:
        f, args = impl.build()
        fn = functools.partial(f, *args)
        start = time.perf_counter()
        out = jax.block_until_ready(fn())
        row["compile_s"] = time.perf_counter() - start
        if case.op in ("dense", "tgmm"):
            pass  # every row (dense), every group's [k, n] (tgmm)
        elif impl.local:  # the shard's rows, then its padding
            out = out[:d["rows"][1] - d["rows"][0]]
        else:
            out = out[d["rows"][0]:d["rows"][1]]
        tol = TOLERANCE.get(str(out.dtype), 1e-2)
        err = relative_error(out, ref) if out.shape == ref.shape else float("inf")
        del out
        row["err"], row["tolerance"] = err, tol
        row["correct"] = bool(err <= tol)
        seconds = tpu_bench.time_call(fn)
        flops, moved = flops_bytes(case, d)
        row.update(seconds=seconds, ms=seconds * 1e3, tflops=flops / seconds / 1e12,
                   mxu_pct=100 * flops / seconds / 1e12 / peaks[0])
        if case.decode:
            row["hbm_pct"] = 100 * moved / seconds / 1e9 / peaks[2]
        passed, detail = impl.check64() if impl.check64 is not None else (True, "")
        if impl.check64 is not None:
            row["float64_check"] = passed
        if not row["correct"]:
            row["status"] = f"WRONG (err {err:.2e})"
        elif not passed:
            row["correct"] = False
            row["status"] = f"WRONG (float64 check: {detail[:200]})"
        else:
            row["status"] = "ok"
    except Exception as e:  # noqa: BLE001 - report and go on
        row["correct"] = False
        row["status"] = f"error: {_first_line(e)}"
        row["traceback"] = traceback.format_exc()[-3000:]
    return row


def lower_impl(case: Case, impl: Impl) -> dict:
    """--lower: the implementation exported for a TPU from abstract operands
    of the real shape (Mosaic lowering included), on any machine."""
    import jax

    row = {"case": case.name, "impl": impl.name, "family": impl.family, "tile": impl.tile,
           "correct": None}
    if impl.status:
        row["status"] = impl.status
        return row
    try:
        f, args = impl.build()
        start = time.perf_counter()
        jax.export.export(jax.jit(f), platforms=["tpu"])(*args)
        row["lower_s"] = time.perf_counter() - start
        row["status"] = "lowered"
    except Exception as e:  # noqa: BLE001 - report and go on
        row["status"] = f"error: {_first_line(e)}"
        row["traceback"] = traceback.format_exc()[-3000:]
    return row


def summarize(case: Case, rows: list[dict]) -> dict:
    ok = [r for r in rows if r.get("correct") and "seconds" in r]
    ours = [r for r in ok if r["family"] == "gemmgen"]
    peers = [r for r in ok if r["family"] != "gemmgen"]
    s = {"case": case.name}
    if ours:
        best = min(ours, key=lambda r: r["seconds"])
        s.update(gemmgen=best["impl"], gemmgen_ms=best["ms"])
    if peers:
        best = min(peers, key=lambda r: r["seconds"])
        s.update(best_peer=best["impl"], best_peer_ms=best["ms"])
    if ours and peers:
        # > 1: gemmgen is faster than the best correct peer.
        s["speedup_vs_best_peer"] = s["best_peer_ms"] / s["gemmgen_ms"]
    return s


def _f(x, fmt) -> str:
    return "-" if x is None else format(x, fmt)


def tables(kind: str, rows: list[dict], summaries: list[dict], skipped: list[str],
           interpret: bool, versions: dict) -> str:
    lines = [f"# gemmgen vs peers on {kind}", "",
             "Versions: " + ", ".join(f"{k} {v}" for k, v in versions.items()) + ". "
             "Correct: max|out - ref| / max|ref| against an f32 reference on the device, "
             "at most 1e-2 (bf16 output) or 1e-3 (f32). Speed-up above 1: gemmgen is faster.",
             ""]
    if interpret:
        lines += ["(interpret mode on the CPU: tiny shapes; the times are not measurements)", ""]
    lines += ["| case | gemmgen | ms | best correct peer | ms | speed-up (peer ms / gemmgen ms) |",
              "|---|---|---|---|---|---|"]
    for s in summaries:
        lines.append(f"| {s['case']} | {s.get('gemmgen', '-')} | {_f(s.get('gemmgen_ms'), '.3f')} "
                     f"| {s.get('best_peer', '-')} | {_f(s.get('best_peer_ms'), '.3f')} "
                     f"| {_f(s.get('speedup_vs_best_peer'), '.2f')} |")
    head = ("| case | impl | tile (MxNxK) | ms | TFLOP/s | % MXU | % HBM | compile s "
            "| correct (err) |")
    lines += ["", head, "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        err = f" ({r['err']:.1e})" if "err" in r else ""
        lines.append(
            f"| {r['case']} | {r['impl']} | {r['tile']} | {_f(r.get('ms'), '.3f')} "
            f"| {_f(r.get('tflops'), '.1f')} | {_f(r.get('mxu_pct'), '.0f')} "
            f"| {_f(r.get('hbm_pct'), '.0f')} | {_f(r.get('compile_s'), '.1f')} "
            f"| {r['status'].replace('|', '/')}{err if r['status'] == 'ok' else ''} |")
    if skipped:
        lines += ["", f"Not run (time budget, or the device lost): {', '.join(skipped)}"]
    return "\n".join(lines) + "\n"


def select(args) -> list[Case]:
    cases = [c for c in CASES if not args.case or any(fnmatch.fnmatch(c.name, p) for p in args.case)]
    if not cases:
        raise SystemExit(f"tpu_peers: no case matches {args.case}; --list shows them")
    return cases


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--case", action="append", help="only cases matching this glob (repeatable)")
    ap.add_argument("--impl", action="append",
                    help="only implementations matching this glob, e.g. 'gemmgen:*', 'xla:*', "
                         "'*@gemmgen-tile' (repeatable)")
    ap.add_argument("--skip-impl", action="append",
                    help="leave out implementations matching this glob (repeatable)")
    ap.add_argument("--time-budget", type=float, default=None,
                    help="seconds: start no new case past this (the rest are listed as skipped)")
    ap.add_argument("--tiles-from", type=Path,
                    help='JSON {"kernel": "MxNxK"}: time those gemmgen kernels at that tile')
    ap.add_argument("--interpret", action="store_true",
                    help="the whole flow on the CPU: tiny shapes, Pallas interpret mode, every "
                         "peer that runs there; times are not measurements")
    ap.add_argument("--lower", action="store_true",
                    help="on the CPU, lower every implementation for a TPU at the real shapes "
                         "(jax.export, platforms=['tpu']): no run, no timing")
    ap.add_argument("--list", action="store_true", help="list the cases and exit (no JAX work)")
    ap.add_argument("--test-broken-peer", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    cases = select(args)
    if args.list:
        for c in cases:
            shard = f" shard {c.g}/{c.total_groups} from {c.offset}" if c.total_groups else ""
            groups = f" g={c.g}" if c.g else ""
            print(f"{c.name}: {c.op} m={c.m} k={c.k} n={c.n}{groups}{shard} {c.fmt}", flush=True)
        return 0
    tiles = json.loads(args.tiles_from.read_text()) if args.tiles_from else {}
    if args.lower and args.interpret:
        raise SystemExit("tpu_peers: --lower and --interpret are two different CPU runs")
    tpu_bench.INTERPRET = args.interpret
    global ON_CPU
    ON_CPU = args.interpret or args.lower
    if not ON_CPU:
        from gemmgen.harness.verify_pallas import tpu_device

        if tpu_device() is None:
            print("tpu_peers: skipped: JAX sees no TPU on this machine (--interpret runs the "
                  "flow on the CPU)", flush=True)
            return 0
    kind = ("CPU (interpret mode)" if args.interpret else
            "CPU (TPU lowering, jax.export)" if args.lower else tpu_bench.device().device_kind)
    peaks = tpu_bench.PEAKS.get(kind, tpu_bench.PEAKS[V5E])
    peers = load_peers()
    print(f"tpu_peers on {kind}; versions: "
          + ", ".join(f"{k} {v}" for k, v in peers.versions.items()), flush=True)
    for name, why in peers.missing.items():
        print(f"  peer {name}: {why}", flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    run = Run(args, kind, peaks, peers, out)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        run.ours = Ours.load(tiles, Path(tmp))
        deferred = []
        for case in cases:
            if run.lost:
                run.skip(case, run.lost)
            elif args.time_budget is not None and time.perf_counter() - start > args.time_budget:
                run.skip(case, f"time budget of {args.time_budget:.0f} s spent")
            elif run.case(case, risky=False):
                deferred.append(case)
        # The rows that may fault the device, last: see Impl.risky.
        for case in deferred:
            if run.lost:
                run.skip(case, run.lost, rows_only=True)
            elif args.time_budget is not None and time.perf_counter() - start > args.time_budget:
                run.skip(case, f"time budget of {args.time_budget:.0f} s spent", rows_only=True)
            else:
                run.case(case, risky=True)
    run.save()
    print("\n" + run.tables(), flush=True)
    return 0


@dataclasses.dataclass
class Run:
    """One run's state: its rows so far, the cases it skipped, and whether
    the device has stopped answering."""

    args: argparse.Namespace
    kind: str
    peaks: tuple
    peers: Peers
    out: Path
    ours: Ours | None = None
    rows: list = dataclasses.field(default_factory=list)
    skipped: list = dataclasses.field(default_factory=list)
    order: list = dataclasses.field(default_factory=list)  # the cases that ran, in order
    lost: str = ""  # set when the device stops answering

    def skip(self, case: Case, why: str, rows_only: bool = False) -> None:
        name = f"{case.name} (its deferred rows)" if rows_only else case.name
        self.skipped.append(name)
        print(f"{name}: skipped ({why})", flush=True)

    def case(self, case: Case, risky: bool) -> bool:
        """Run the case's implementations (risky: only those that may fault
        the device, else all others). Returns whether it left risky ones."""
        args = self.args
        run = case.tiny() if args.interpret else case
        if not risky:
            self.order.append(case)
        print(f"== {case.name}{' (deferred rows)' if risky else ''}: {run.op} m={run.m} k={run.k} "
              f"n={run.n} g={run.g}{f'/{run.total_groups}' if run.total_groups else ''} "
              f"{run.fmt}", flush=True)
        try:
            d = make_data(run, abstract=args.lower)
            ref = None if args.lower else reference(run, d)
            impls = implementations(run, d, self.ours, self.peers, args.test_broken_peer)
        except Exception as e:  # noqa: BLE001 - the case cannot run: say so, go on
            self.rows.append({"case": case.name, "impl": "(case setup)", "family": "-",
                              "tile": "-", "correct": False, "status": f"error: {_first_line(e)}",
                              "traceback": traceback.format_exc()[-3000:]})
            print(f"  case setup: {self.rows[-1]['status']}", flush=True)
            self.save()
            return False
        chosen = [i for i in impls
                  if (not args.impl or any(fnmatch.fnmatch(i.name, p) for p in args.impl))
                  and not (args.skip_impl and any(fnmatch.fnmatch(i.name, p)
                                                  for p in args.skip_impl))]
        left = any(i.risky for i in chosen) and not risky and not args.lower
        for impl in chosen:
            if not args.lower and bool(impl.risky) != risky:
                continue
            if self.lost:
                self.rows.append({"case": case.name, "impl": impl.name, "family": impl.family,
                                  "tile": impl.tile, "correct": False,
                                  "status": f"not run: {self.lost}"})
                continue
            row = lower_impl(run, impl) if args.lower else run_impl(run, impl, d, ref, self.peaks)
            row.update(m=run.m, k=run.k, n=run.n, groups=run.g, fmt=run.fmt,
                       rows=d["rows"][1] - d["rows"][0])
            if impl.risky:
                row["deferred"] = impl.risky
            self.rows.append(row)
            self.save()  # after every row: a run cut short (or hung) keeps what it measured
            timing = (f"{row['ms']:.3f} ms {row['tflops']:.1f} TFLOP/s "
                      f"{row['mxu_pct']:.0f} % MXU" if "ms" in row else "")
            if "hbm_pct" in row:
                timing += f" {row['hbm_pct']:.0f} % HBM"
            print(f"  {impl.name} [{impl.tile}]: {row['status']} {timing}", flush=True)
            if row["status"].startswith("error") and not args.lower and not device_alive():
                # A kernel that faults can take the chip with it: say
                # which, and stop timing on a device that answers no more.
                self.lost = f"the device stopped answering after {case.name} {impl.name}"
                print(f"  {self.lost}; the remaining implementations are not run", flush=True)
        s = summarize(case, [r for r in self.rows if r["case"] == case.name])
        if "speedup_vs_best_peer" in s:
            print(f"  -> {s['gemmgen']} vs {s['best_peer']}: x{s['speedup_vs_best_peer']:.2f}",
                  flush=True)
        del d, ref, impls, chosen
        gc.collect()
        self.save()
        return left

    def summaries(self) -> list[dict]:
        return [summarize(c, [r for r in self.rows if r["case"] == c.name]) for c in self.order]

    def by_case(self) -> list[dict]:
        """The rows grouped by case, in the order the cases ran (a case's
        deferred rows join it)."""
        place = {c.name: i for i, c in enumerate(self.order)}
        return sorted(self.rows, key=lambda r: place.get(r["case"], len(place)))

    def tables(self) -> str:
        return tables(self.kind, self.by_case(), self.summaries(), self.skipped,
                      self.args.interpret, self.peers.versions)

    def save(self) -> None:
        save(self.out, self.kind, self.args, self.peers, self.by_case(), self.summaries(),
             self.skipped)


def save(out: Path, kind: str, args, peers: Peers, rows, summaries, skipped) -> None:
    """The JSON and the Markdown of the rows so far."""
    (out / "tpu_peers.json").write_text(json.dumps(
        {"device": kind, "interpret": args.interpret, "time": time.time(),
         "versions": peers.versions, "missing_peers": peers.missing,
         "tolerance": TOLERANCE, "rows": rows, "summary": summaries, "skipped": skipped},
        indent=2, default=str))
    (out / "tpu_peers.md").write_text(tables(kind, rows, summaries, skipped, args.interpret,
                                             peers.versions))


if __name__ == "__main__":
    sys.exit(main())
