"""The tiles `gemmgen tune` tries: every legal tile of a kernel at a shape on
a device, ranked by a cost model, pruned to a few plus the kernel's own.

Legal means what `gemmgen build` would accept as the kernel's only tile:
the validator's scale-block rule (`validate.rules.tiles_fit_scale_blocks`,
which asks `ir.Scale.tile_k_problem`) and the backend's own `diagnose`
(Pallas: 8 x 128 blocks, 4-bit packing, in-tile scales, the generation's
VMEM; CUDA: shared memory and the bodies' tile checks). Nothing here
restates those rules; it only proposes tiles and asks them.

No JAX, no NumPy: `--dry-run` works with the generator alone.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from gemmgen import ir
from gemmgen.devices import Device
from gemmgen.tune.shapes import Shape, group_sizes, masked_counts

# The extents proposed per dim (then filtered by the checks). Pallas: rows
# a multiple of 32 (every dtype's sublane packing but packed 4-bit lhs,
# filtered below), lanes a multiple of 128; the largest are where a TPU
# reaches its peak (docs/pallas.md, "Tiles for a TPU").
PALLAS_M = (32, 64, 128, 256, 512, 1024)
PALLAS_N = (128, 256, 512, 1024, 2048)
PALLAS_K = (128, 256, 512, 1024, 2048)
# CUDA: CTA tiles of the mma.sync / wgmma / tcgen05 bodies.
CUDA_M = (64, 128, 256)
CUDA_N = (64, 128, 256)
CUDA_K = (32, 64, 128)

# A Pallas grid step costs about 0.35 us on a TPU v5e whatever its tile
# (docs/pallas.md, "Tiles for a TPU"; scripts/tpu_tiles.py measured it).
STEP_S = 0.35e-6
# Candidates kept per kernel and shape by default (besides the baselines).
DEFAULT_MAX_CANDIDATES = 10


@dataclass(frozen=True, slots=True)
class Candidate:
    """A tile for one kernel at one shape, with the cost model's numbers."""

    tile: ir.Tile
    vmem_bytes: int  # Pallas: VMEM per grid step; CUDA: shared memory per block (0: unknown)
    steps: int  # grid steps (Pallas) or CTA tiles (CUDA) at the shape
    predicted_s: float
    why: str = ""  # "LUT" (the kernel's current tile), "tuned" (the previous block's)

    @property
    def label(self) -> str:
        return tile_text(self.tile)


def tile_text(tile: ir.Tile) -> str:
    """A tile as a rule's right-hand side writes it: `m=128 n=1536 k=1024`."""
    return f"m={tile.m} n={tile.n} k={tile.k}"


def with_tile(kernel: ir.Kernel, backend: ir.Backend, tile: ir.Tile) -> ir.Kernel:
    """The kernel as `backend` runs it with `tile` as its only tile: one
    backend, no LUT rules (CUDA: warp tile and threads derived from it)."""
    k = replace(kernel, tile=tile, tile_rules=(), backend_tiles=(), backends=(backend,),
                view=None, tile_at=None)
    if backend is ir.Backend.CUDA:
        k = replace(k, warp_tile=None, threads=None)
    return k


def spec_for(spec: ir.Spec, device: Device) -> ir.Spec:
    """The spec with its TPU target set to the device's generation (the VMEM
    budget the candidates are checked against and rendered for)."""
    if device.tpu is None:
        return spec
    targets = tuple(replace(t, tpu=device.tpu) if t.backend is ir.Backend.PALLAS_TPU else t
                    for t in spec.targets)
    if spec.target(ir.Backend.PALLAS_TPU) is None:
        targets += (ir.Target(ir.Backend.PALLAS_TPU, tpu=device.tpu),)
    return replace(spec, targets=targets)


class _Reader:
    """The part of `validate.reader.FieldReader` the tile rule uses: errors
    are collected, positions are not needed."""

    def __init__(self) -> None:
        self.errors: list[str] = []

    def err(self, loc: ir.Loc, msg: str, width: int = 1) -> None:
        self.errors.append(msg)

    def field_loc(self, name: str) -> ir.Loc:
        return ir.NO_LOC


def problems(kernel: ir.Kernel, spec: ir.Spec, backend: ir.Backend) -> list[str]:
    """Why `kernel` (built by `with_tile`) cannot be built for `backend`:
    the validator's tile rule, then the backend's diagnostics."""
    from gemmgen.validate.rules import tiles_fit_scale_blocks

    reader = _Reader()
    tiles_fit_scale_blocks(reader, kernel)  # type: ignore[arg-type]
    if reader.errors:
        return reader.errors
    if backend is ir.Backend.PALLAS_TPU:
        from gemmgen.backends import pallas

        found = pallas.diagnose(kernel, spec)
    else:
        from gemmgen.backends import cuda

        found = cuda.diagnose_kernel(kernel, spec)
    return [d.message for d in found]


def _sublane_rows(kernel: ir.Kernel) -> int:
    """Rows of the lhs's native VMEM tile: 8 of 32-bit data, 16 of 16-bit, 32
    of 8-bit, 64 of packed 4-bit (two per byte)."""
    bits = kernel.lhs.dtype.bits
    return 8 * 32 // max(bits, 4) if bits < 8 else 8 * 32 // bits


# The largest value a tile's m, n or k may take in a spec (gemmgen/validate).
TILE_MAX = 4096


def _clamped(values: tuple[int, ...], dim: int) -> list[int]:
    """The values below `dim`, then the dim rounded up to the smallest value
    (a tile that is the whole dim), then the next value above that (in case
    the whole dim is not a legal tile): larger tiles are the same block,
    clamped to the dim by the generated code."""
    whole = _cdiv(dim, values[0]) * values[0]
    above = [v for v in values if v > whole][:1]
    # A spec's tile dims are at most TILE_MAX (the language's bound): a dim
    # past it has no whole-dim tile.
    return [v for v in [v for v in values if v < dim] + [whole] + above if v <= TILE_MAX]


def _rows(kernel: ir.Kernel, shape: Shape) -> int:
    """The m extent a tile spans: rows of lhs, each group's capacity when masked."""
    return shape.m


def legal_tiles(kernel: ir.Kernel, spec: ir.Spec, shape: Shape, backend: ir.Backend,
                device: Device) -> list[ir.Tile]:
    """Every proposed tile the checks accept for `kernel` at `shape`."""
    spec = spec_for(spec, device)
    if backend is ir.Backend.PALLAS_TPU:
        rows = _sublane_rows(kernel)
        ms = [v for v in _clamped(PALLAS_M, _rows(kernel, shape)) if v % max(rows, 32) == 0]
        ns, ks = _clamped(PALLAS_N, shape.n), _clamped(PALLAS_K, shape.k)
    else:
        ms, ns, ks = (_clamped(CUDA_M, shape.m), _clamped(CUDA_N, shape.n),
                      _clamped(CUDA_K, shape.k))
    out, seen = [], set()
    for tm in ms:
        for tn in ns:
            for tk in ks:
                # Tiles that clamp to the same block are one candidate: the
                # first legal one, the smallest.
                block = (min(tm, _rows(kernel, shape)), min(tn, shape.n), min(tk, shape.k))
                if block in seen:
                    continue
                tile = ir.Tile(tm, tn, tk)
                if not problems(with_tile(kernel, backend, tile), spec, backend):
                    out.append(tile)
                    seen.add(block)
    return out


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def work_items(kernel: ir.Kernel, shape: Shape, tm: int) -> int:
    """m tiles the grid visits: dense cdiv(m, tm); grouped, the work list of
    the generated `_group_metadata` (each non-empty group's tiles from its
    first row's to its last row's, so a tile two groups share counts twice:
    each group's rows are padded to tm); masked, the same with group i at
    row i * capacity and its valid rows only."""
    if not shape.g or kernel.op is not ir.Op.GROUPED:
        return _cdiv(shape.m, tm)
    if kernel.masked:
        starts = [i * shape.m for i in range(shape.g)]
        sizes = masked_counts(shape)
    else:
        sizes = group_sizes(shape)
        starts = [sum(sizes[:i]) for i in range(shape.g)]
    return sum((s + c - 1) // tm - s // tm + 1 for s, c in zip(starts, sizes) if c > 0)


def mxu_rate(kernel: ir.Kernel, device: Device) -> float:
    """FLOP/s the MXU (tensor cores) multiplies this kernel's operands at:
    8-bit where both operands are 8-bit integers (FP8 too where the device
    multiplies FP8), f32 at a sixth of the 16-bit rate (Precision.HIGHEST:
    six bf16 passes), the 16-bit rate otherwise."""
    a, b = kernel.lhs.dtype, kernel.rhs_operand.dtype
    ints = all(d in (ir.DType.INT8, ir.DType.INT4) for d in (a, b)) and device.int8
    fp8 = all(d in (ir.DType.E4M3, ir.DType.E5M2) for d in (a, b)) and device.fp8
    if ints or fp8:
        return device.rate(8) * 1e12
    if ir.DType.F32 in (a, b):
        return device.rate(16) * 1e12 / 6
    return device.rate(16) * 1e12


def _bytes(dtype: ir.DType, count: int) -> int:
    return count * dtype.bits // 8


def predict(kernel: ir.Kernel, shape: Shape, tile: ir.Tile, device: Device) -> tuple[int, float]:
    """(grid steps, predicted seconds) of `kernel` at `shape` with `tile`.

    On a TPU (the grid's steps run one after another): steps x STEP_S, plus
    the MXU time of the padded work (every visited m tile is tm rows, every
    n and k block whole), plus the HBM time of lhs read once per n tile, rhs
    once per m tile and the output written once. On a GPU (CTAs run side by
    side, one wave per SM count; `steps` counts CTAs): the waves times one
    CTA's tile at its SM's share of the rate, plus the same HBM time. The
    model ranks tiles; it is not a roofline."""
    tm, tn, tk = min(tile.m, _rows(kernel, shape)), min(tile.n, shape.n), min(tile.k, shape.k)
    work = work_items(kernel, shape, tm)
    n_tiles, k_tiles = _cdiv(shape.n, tn), _cdiv(shape.k, tk)
    rows = shape.m * shape.g if kernel.masked else shape.m
    out_n = shape.n // 2 if kernel.epilogue.activation is ir.Activation.SILU_MUL else shape.n
    moved = (_bytes(kernel.lhs.dtype, rows * shape.k) * n_tiles
             + _bytes(kernel.rhs_operand.dtype, shape.k * shape.n) * work
             + _bytes(kernel.out, rows * out_n))
    hbm_s = moved / (device.tbps * 1e12)
    cta_flops = 2 * tm * tn * (k_tiles * tk)
    if device.tpu is None:
        ctas = work * n_tiles
        sms = device.sms or 1
        return ctas, _cdiv(ctas, sms) * cta_flops / (mxu_rate(kernel, device) / sms) + hbm_s
    steps = work * n_tiles * k_tiles
    return steps, steps * STEP_S + work * n_tiles * cta_flops / mxu_rate(kernel, device) + hbm_s


def candidates(kernel: ir.Kernel, spec: ir.Spec, shape: Shape, backend: ir.Backend,
               device: Device, *, max_candidates: int = DEFAULT_MAX_CANDIDATES,
               baselines: dict[str, ir.Tile] | None = None) -> list[Candidate]:
    """The best `max_candidates` legal tiles by predicted time, then each
    baseline tile (`{"LUT": the kernel's current tile for the shape, "tuned":
    the previous block's}`) not already among them, when legal: a baseline
    is always measured, so a tuned tile is never worse than what it replaces."""
    from gemmgen.backends.pallas.vmem import vmem_bytes

    def make(tile: ir.Tile, why: str = "") -> Candidate:
        steps, seconds = predict(kernel, shape, tile, device)
        vmem = vmem_bytes(kernel, tile) if backend is ir.Backend.PALLAS_TPU else \
            _smem_bytes(kernel, sp, tile)
        return Candidate(tile, vmem, steps, seconds, why)

    sp = spec_for(spec, device)
    legal = legal_tiles(kernel, spec, shape, backend, device)
    ranked = sorted((make(t) for t in legal),
                    key=lambda c: (c.predicted_s, -c.tile.m, -c.tile.n, -c.tile.k))
    kept = ranked[:max_candidates]
    for why, tile in (baselines or {}).items():
        tile = ir.Tile(tile.m, tile.n, tile.k)
        found = next((i for i, c in enumerate(kept) if c.tile == tile), None)
        if found is not None:
            kept[found] = replace(kept[found], why=kept[found].why or why)
        elif not problems(with_tile(kernel, backend, tile), sp, backend):
            kept.append(make(tile, why))
    return kept


def _smem_bytes(kernel: ir.Kernel, spec: ir.Spec, tile: ir.Tile) -> int:
    """Shared memory per block of the CUDA launch plan with `tile` (its
    largest step: the figure the backend's shared-memory check compares)."""
    from gemmgen.backends import cuda

    return cuda.plan(with_tile(kernel, ir.Backend.CUDA, tile), spec).max_smem
