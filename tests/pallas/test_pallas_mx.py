"""MX / NV block scales in Pallas (MXFP8, MXFP4, NVFP4, W4A8): one scale per
K block of 16 or 32 elements of each row, on both operands, several blocks
per K tile, applied to the operands in VMEM; e8m0 and ue4m3 scale bytes,
row-major and in CUTLASS's 128 x 4 atom layout; dense, grouped and masked;
rhs [n, k] and [k, n]. Each kernel runs in TPU interpret mode against the
reference on fresh random inputs, with partial m, n and k tiles, k not a
multiple of the K tile nor of the scale block, m = 1, sharded groups with
existing_out, and is lowered for TPU. Every e8m0 byte and every ue4m3 byte
is checked in each operand, and three planted bugs (the atom read as
row-major, an NVFP4 scale applied twice, a scale read for the wrong K
block) must fail the comparison with the reference.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from pallas_helpers import (
    Generated,
    build,
    check,
    import_path,
    kernel_block,
    load_spec,
    lower_for_tpu,
    random_inputs,
    run,
    spec_text,
)

from gemmgen import reference as ref
from gemmgen.backends.pallas.cores import matmul_core
from gemmgen.ir import Backend, DType
from gemmgen.reference.blockscale import atoms_to_rows, rows_to_atoms

MX8 = ("lhs_scale per_token_group k=32 e8m0", "rhs_scale block n=1 k=32 e8m0")
NV4 = ("lhs_scale per_token_group k=16 ue4m3", "rhs_scale block n=1 k=16 ue4m3")
ATOM = " layout=atom128x4"
GLOBAL = " global=f32"

# name: spec fields. Between them: each format, both scale layouts on each
# operand, rhs [n, k] and [k, n] (packed along k and along n), dense,
# grouped and masked, K tiles of 128 (4 blocks of 32), 256 and 512, a tile
# LUT, silu_mul, bias and alpha.
KERNELS = {
    "mxfp8": ("op dense", "lhs e4m3 [m, k]", "rhs e4m3 [n, k]", "out bf16", *MX8,
              "tile m=128 n=128 k=256"),
    "mxfp8_kn_atom": ("op dense", "lhs e5m2 [m, k]", "rhs e4m3 [k, n]", "out f32",
                      MX8[0] + ATOM, MX8[1], "tile m=64 n=128 k=128"),
    "mxfp4_atom": ("op dense", "lhs fp4 packed [m, k]", "rhs fp4 packed [n, k]", "out f32",
                   MX8[0] + ATOM, MX8[1] + ATOM, "epilogue alpha=0.75",
                   "tile m=128 n=128 k=512"),
    "nvfp4_atom": ("op dense", "lhs fp4 packed [m, k]", "rhs fp4 packed [n, k]", "out bf16",
                   NV4[0] + ATOM, NV4[1] + ATOM, "tile m=128 n=128 k=256"),
    "nvfp4_kn": ("op dense", "lhs fp4 packed [m, k]", "rhs fp4 packed [k, n]", "out bf16",
                 *NV4, "bias f32 [n]", "tile m=128 n=256 k=256"),
    "w4a8": ("op dense", "lhs e4m3 [m, k]", "rhs fp4 packed [n, k]", "out bf16", *MX8,
             "tile m=128 n=128 k=512"),
    "gmm_mxfp8_kn": ("op grouped", "lhs e4m3 [m, k]", "rhs e4m3 [g, k, n]", "out bf16", *MX8,
                     "tile m=64 n=128 k=256", "tile_rule m<=32 -> m=32 n=128 k=128"),
    "gmm_w4a8_atom": ("op grouped", "lhs e4m3 [m, k]", "rhs fp4 packed [g, n, k]", "out bf16",
                      MX8[0], MX8[1] + ATOM, "epilogue silu_mul", "tile m=128 n=128 k=256"),
    "gmm_nvfp4_kn": ("op grouped", "lhs fp4 packed [m, k]", "rhs fp4 packed [g, k, n]",
                     "out f32", *NV4, "tile m=128 n=256 k=256"),
    "masked_nvfp4_atom": ("op grouped", "lhs fp4 packed [g, m, k]", "rhs fp4 packed [g, n, k]",
                          "out bf16", NV4[0], NV4[1] + ATOM, "tile m=64 n=128 k=256"),
    # NVFP4 with its per-tensor (per-group) f32 global scales.
    "nvfp4_global": ("op dense", "lhs fp4 packed [m, k]", "rhs fp4 packed [n, k]", "out bf16",
                     NV4[0] + ATOM + GLOBAL, NV4[1] + ATOM + GLOBAL, "bias f32 [n]",
                     "epilogue gelu alpha=0.5", "tile m=128 n=128 k=256"),
    "gmm_nvfp4_global": ("op grouped", "lhs fp4 packed [m, k]", "rhs fp4 packed [g, n, k]",
                         "out bf16", NV4[0] + GLOBAL, NV4[1] + ATOM + GLOBAL,
                         "epilogue silu_mul", "tile m=128 n=128 k=256"),
    "masked_nvfp4_global": ("op grouped", "lhs fp4 packed [g, m, k]",
                            "rhs fp4 packed [g, n, k]", "out f32", NV4[0],
                            NV4[1] + GLOBAL, "tile m=64 n=128 k=256"),
}
SPEC = spec_text(*[kernel_block(name, *fields) for name, fields in KERNELS.items()])
GROUPED = [name for name, fields in KERNELS.items()
           if "op grouped" in fields and "[g, m, k]" not in " ".join(fields)]

# Partial m and n tiles; k a multiple of no K tile, and 720 = 22.5 blocks of
# 32 and 45 of 16: the last scale block is partial too.
M, N, K = 200, 384, 720


@pytest.fixture(scope="module")
def generated(tmp_path_factory) -> Generated:
    return build(SPEC, tmp_path_factory.mktemp("pallas_mx"))


def _inputs(kernel, *, m=M, n=N, k=K, seed=0, **kw):
    if kernel.out_n_divisor == 2 and n % 256:  # silu_mul: n/2 in whole 128-lane blocks
        n += 256 - n % 256
    extra = {"num_groups": 5, **kw} if kernel.grouped and not kernel.masked else {}
    return random_inputs(kernel, m=m, n=n, k=k, seed=seed, **extra)


@pytest.mark.parametrize("name", list(KERNELS))
def test_matches_reference(generated, name):
    kernel = generated.kernel(name)
    check(kernel, generated.fn(name), _inputs(kernel, seed=len(name)), k=K)


@pytest.mark.parametrize("name", list(KERNELS))
def test_lowers_for_tpu(generated, name):
    kernel = generated.kernel(name)
    for m, n, k in [(M, N, K), (8, 512, 1024)]:
        lower_for_tpu(generated.fn(name), _inputs(kernel, m=m, n=n, k=k))


@pytest.mark.parametrize("name", ["mxfp8"] + [
    pytest.param(n, marks=pytest.mark.slow) for n in KERNELS if n != "mxfp8"])
def test_one_row_and_short_k(generated, name):
    """m = 1 with k = 96: one partial K tile of 3 (or 6) blocks."""
    kernel = generated.kernel(name)
    check(kernel, generated.fn(name), _inputs(kernel, m=1, n=256, k=96, seed=3), k=96)


@pytest.mark.parametrize("name", GROUPED[:1] + [
    pytest.param(n, marks=pytest.mark.slow) for n in GROUPED[1:]])
def test_grouped_sharded_with_existing_out(generated, name):
    """Groups [2, 5) of 6 (some zero-sized), existing_out kept elsewhere."""
    kernel = generated.kernel(name)
    sizes = np.array([40, 0, 70, 0, 55, 20], np.int32)
    inputs = _inputs(kernel, m=300, n=256, k=K, seed=5, group_sizes=sizes, group_offset=2,
                     g_local=3, with_existing_out=True)
    check(kernel, generated.fn(name), inputs, k=K)


def test_grouped_zero_sized_groups(generated):
    name = "gmm_nvfp4_kn"
    kernel = generated.kernel(name)
    sizes = np.array([0, 64, 0, 0, 100], np.int32)
    check(kernel, generated.fn(name), _inputs(kernel, group_sizes=sizes, seed=6), k=K)


# ---------------------------------------------------------------------------
# Every scale byte in each operand. Operands are made positive so no sum
# cancels: each output is then a sum of positive terms whose scale bytes are
# known, and a wrong decoding of any byte shows.


def _positive(inputs: dict) -> dict:
    out = dict(inputs)
    for side in ("lhs", "rhs"):
        x = inputs[side]
        if x.dtype == np.uint8:  # fp4 pairs: clear both sign bits
            out[side] = x & np.uint8(0x77)
        else:
            out[side] = np.abs(x)
    return out


def _check_exact_bytes(gen: Generated, name: str, inputs: dict, k: int):
    kernel = gen.kernel(name)
    expected = ref.reference(kernel, **inputs)
    with np.errstate(invalid="ignore"):
        subnormal = (expected != 0) & (np.abs(expected) < 2.0**-126)
    assert not subnormal.any(), "test design: an expected output is an f32 subnormal"
    actual = run(gen.fn(name), inputs)
    result = ref.compare(actual, expected, kernel, k=k, inputs=inputs)
    assert result.passed, f"{name}: {result.detail}"
    return np.asarray(actual, np.float32)


def _sweep(count: int, blocks: int, top: int) -> np.ndarray:
    """[count, blocks] bytes: row i holds byte i in every block but block
    i % blocks, which holds i + 1 (up to `top`): every byte, in every block
    position, next to its neighbour."""
    rows = np.repeat(np.arange(count)[:, None], blocks, axis=1)
    i = np.arange(count)
    rows[i, i % blocks] = np.minimum(i + 1, top)
    return rows.astype(np.uint8)


@pytest.mark.parametrize("side", ["lhs", "rhs"])
def test_every_e8m0_byte(generated, side):
    """Bytes 0..255 of an e8m0 scale with 8 blocks per K tile (MXFP8): row
    (or column) i of the output scales by about 2**(i - 127); 255 is NaN."""
    name = "mxfp8"
    kernel = generated.kernel(name)
    inputs = _positive(_inputs(kernel, m=256, n=256, k=256, seed=11))
    sweep = _sweep(256, 8, 254)
    sweep[255] = 255
    other = "rhs" if side == "lhs" else "lhs"
    inputs[f"{side}_scale"] = sweep
    inputs[f"{other}_scale"] = np.full_like(inputs[f"{other}_scale"], 127)
    out = _check_exact_bytes(generated, name, inputs, 256)
    nan_line = out[255] if side == "lhs" else out[:, 255]
    assert np.isnan(nan_line).all()
    rest = out[:255] if side == "lhs" else out[:, :255]
    assert not np.isnan(rest).any() and (rest[np.isfinite(rest)] > 0).all()


@pytest.mark.parametrize("side", ["lhs", "rhs"])
def test_every_ue4m3_byte(generated, side):
    """Bytes 0x00..0x7F of a ue4m3 scale in the atom layout (NVFP4): 0x00
    zeroes its block, the subnormals 0x01..0x07 and 448 (0x7E) scale
    exactly, 0x7F is NaN."""
    name = "nvfp4_atom"
    kernel = generated.kernel(name)
    inputs = _positive(_inputs(kernel, m=128, n=128, k=256, seed=12))
    sweep = _sweep(128, 16, 0x7E)
    sweep[0] = 0  # a row of zero scales: exactly zero
    sweep[0x7F] = 0x7F
    other = "rhs" if side == "lhs" else "lhs"
    inputs[f"{side}_scale"] = rows_to_atoms(sweep, fill=0xFF)  # padding: no ue4m3 byte
    rows = atoms_to_rows(inputs[f"{other}_scale"], 128, 16)
    inputs[f"{other}_scale"] = rows_to_atoms(np.full_like(rows, 0x38), fill=0x7F)  # 1.0
    out = _check_exact_bytes(generated, name, inputs, 256)
    line = (lambda i: out[i]) if side == "lhs" else (lambda i: out[:, i])
    assert (line(0) == 0).all() and np.isnan(line(0x7F)).all()
    assert np.isfinite(out[1:0x7F] if side == "lhs" else out[:, 1:0x7F]).all()


# ---------------------------------------------------------------------------
# Planted bugs: the generated module with one line changed must fail.


def _planted(gen: Generated, tmp_path: Path, name: str, old: str, new: str, count: int = 1):
    path = tmp_path / f"{name}_planted.py"
    text = (Path(gen.modules[name].__file__)).read_text()
    assert text.count(old) == count, f"{old!r} occurs {text.count(old)} times"
    path.write_text(text.replace(old, new))
    return getattr(import_path(path), name)


def _fails(gen: Generated, fn, name: str, inputs: dict, k: int) -> bool:
    kernel = gen.kernel(name)
    expected = ref.reference(kernel, **inputs)
    return not ref.compare(run(fn, inputs), expected, kernel, k=k, inputs=inputs).passed


def test_planted_atom_read_as_rows(generated, tmp_path):
    """The 128 x 4 atom read as if it were row-major [rows, k blocks]."""
    name = "nvfp4_atom"
    fn = _planted(generated, tmp_path, name,
                  "s = jnp.transpose(s, (*range(n), n, n + 3, n + 2, n + 1, n + 4))", "s = s")
    assert _fails(generated, fn, name, _inputs(generated.kernel(name), seed=21), K)


def test_planted_nvfp4_scale_applied_twice(generated, tmp_path):
    """The lhs block scale multiplied into both halves of packed k twice."""
    name = "nvfp4_atom"
    old = "lhs_{0} = (lhs_{0}.astype(jnp.float32) * scale)"
    fn = _planted(generated, tmp_path, name, old.format("even"),
                  old.format("even").replace("* scale", "* scale * scale"))
    assert _fails(generated, fn, name, _inputs(generated.kernel(name), seed=22), K)


@pytest.mark.parametrize("name,old,new", [
    ("nvfp4_global", "y = y * global_scale_ref[0]", "y = y"),  # never
    ("nvfp4_global", "y = y * global_scale_ref[0]",
     "y = y * global_scale_ref[0] * global_scale_ref[0]"),  # twice
    ("gmm_nvfp4_global", "gate = gate * global_scale_ref[group]",
     "gate = gate * global_scale_ref[0]"),  # the first group's for every group
], ids=["never", "twice", "wrong_group"])
def test_planted_global_scale(generated, tmp_path, name, old, new):
    """NVFP4's global scale applied never, twice, or from the wrong group."""
    fn = _planted(generated, tmp_path, name, old, new)
    assert _fails(generated, fn, name, _inputs(generated.kernel(name), seed=24), K)


def test_planted_scale_of_the_wrong_k_block(generated, tmp_path):
    """Each K block of lhs takes the e8m0 scale of the block before it."""
    name = "mxfp8"
    old = "lhs_scale, lhs_exponent = _e8m0_blocks(lhs_scale,"
    fn = _planted(generated, tmp_path, name, old,
                  old.replace("(lhs_scale,", "(jnp.roll(lhs_scale, 1, axis=-1),"))
    assert _fails(generated, fn, name, _inputs(generated.kernel(name), seed=23), K)


# ---------------------------------------------------------------------------
# Plan decisions and positioned diagnostics.


def test_plan_decisions():
    spec = load_spec(SPEC)

    def core(name):
        return matmul_core(spec.kernel(name).for_backend(Backend.PALLAS_TPU))

    c = core("mxfp8")
    assert c.lhs_in_tile and c.rhs_in_tile and c.mxu is DType.BF16 and c.k_align == 128
    c = core("w4a8")  # packed rhs along k: 256-lane K blocks
    assert c.k_align == 256 and c.mxu is DType.BF16 and c.exponent_input("rhs")
    c = core("nvfp4_atom")
    assert c.lhs_scale_atoms and c.rhs_scale_atoms and not c.exponent_input("lhs")
    # Packed lhs x rhs packed along n: the rhs rows widen to int32 for the
    # strided loads, the only ones Mosaic compiles.
    c = core("nvfp4_kn")
    assert c.rows_scratch and "jnp.int32)]" in c.scratch_shapes and not core("mxfp8").rows_scratch
    # e8m0 per-row scales whose K tiles divide the block keep one scale per tile.
    one = load_spec(spec_text(kernel_block(
        "one", "op dense", "lhs e4m3 [m, k]", "rhs e4m3 [n, k]", "out bf16",
        "lhs_scale per_token_group k=256 e8m0", "rhs_scale block n=1 k=256 e8m0",
        "tile m=128 n=128 k=256")))
    c = matmul_core(one.kernel("one").for_backend(Backend.PALLAS_TPU))
    assert not c.lhs_in_tile and not c.rhs_in_tile and not c.k_align_scales
    assert c.k_align == 128  # whole lane tiles only
    # int8 x ue4m3 needs 12 significant bits: the MXU takes f32.
    wide = load_spec(spec_text(kernel_block(
        "wide", "op dense", "lhs int8 [m, k]", "rhs int8 [n, k]", "out f32",
        "rhs_scale block n=1 k=16 ue4m3")))
    assert matmul_core(wide.kernel("wide").for_backend(Backend.PALLAS_TPU)).mxu is DType.F32


@pytest.mark.parametrize("fields,line,message", [
    (("lhs_scale per_token_group k=256 e8m0", "tile m=128 n=128 k=128",
      "tile_rule m<=64 -> m=64 n=128 k=512"), 11,  # at the tile that must hold them
     ("pallas_tpu applies the lhs_scale blocks of k=256 inside each K tile here, as another "
      "tile of the LUT holds several, so tile k=128 must hold whole blocks too")),
    (("lhs_scale per_token_group k=32 f32 layout=atom128x4",), 10,
     ("pallas_tpu applies lhs_scale layout=atom128x4 (per block inside a K tile) in e8m0 or "
      "ue4m3 bytes, not f32")),
])
def test_diagnostics(fields, line, message):
    text = spec_text(kernel_block("bad", "op dense", "lhs e4m3 [m, k]", "rhs e4m3 [n, k]",
                                  "out bf16", *fields))
    with pytest.raises(Exception) as e:
        load_spec(text)
    assert f"test.gemm:{line}:" in str(e.value) and message in str(e.value), str(e.value)


def test_k_tile_rows_of_kn_scales_are_whole_sublane_tiles():
    text = spec_text(kernel_block(
        "bad", "op dense", "lhs bf16 [m, k]", "rhs e4m3 [k, n]", "out bf16",
        "rhs_scale block n=1 k=4 e8m0", "tile m=128 n=128 k=128"))
    with pytest.raises(Exception) as e:
        load_spec(text)
    assert "along the sublanes of rhs [k, n], in blocks of 4 rows" in str(e.value)
