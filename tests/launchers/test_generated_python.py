"""Generated Python is formatted and lint-clean: `ruff format --check` and
`ruff check` (ruff 0.17.6, pinned in the dev extra) with the repository's
`[tool.ruff]` settings (pyproject.toml; docs/decisions.md, "Generated
Python"). The generator emits this text itself; ruff only checks it.

Every spec that builds is rendered in memory: specs/, tests/specs/, the
specs of tests/cases/ (the golden cases are bad specs, so most render
nothing) and VARIANTS, which sweeps the template branches the committed
specs leave out (4-bit operands in both layouts, e8m0 and float scales of
every mode, MX / NV block scales in both layouts, bias, activations, alpha,
stages 1, static dims). Each entry of PRODUCERS selects the `.py` files one part of the
generator writes; add an entry to check another one.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path, PurePosixPath

import pytest

from gemmgen import backends
from gemmgen.build import InputError, render_spec
from gemmgen.diagnostics import SpecError
from gemmgen.parse import parse
from gemmgen.validate import validate

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "pyproject.toml"

# Which generated files each producer writes (paths relative to generated/<stem>/).
PRODUCERS: dict[str, Callable[[PurePosixPath], bool]] = {
    # templates/pallas/*.j2: one module per kernel and the package __init__.
    "pallas": lambda rel: rel.parts[0] == "pallas" and rel.suffix == ".py",
    # templates/jax/*.j2: the JAX entry points (backends/cuda/ffi.py) and their __init__.
    "jax": lambda rel: rel.parts[0] == "jax" and rel.suffix == ".py",
    # templates/torch/*.j2: the PyTorch ops (backends/cuda/torch_ops.py) and their __init__.
    "torch": lambda rel: rel.parts[0] == "torch" and rel.suffix == ".py",
}


VARIANTS = """\
target pallas_tpu {
  tpu v6e
}

kernel v_dense {
  op dense
  lhs bf16 [m, k] | f32 [m, k]
  rhs bf16 [k, n] | bf16 [n, k]
  out bf16 | f16
  bias f32 [n]
  epilogue relu | gelu | silu alpha=0.5
  tile m=128 n=128 k=128
  tile_rule m<=64 -> m=64 n=128 k=256
  dims n=1024 k=512
  stages 1 | 2
  backends pallas_tpu
}

kernel v_gmm {
  op grouped
  lhs bf16 [m, k] | f32 [m, k]
  rhs bf16 [g, n, k] | bf16 [g, k, n]
  out bf16
  bias f32 [g, 1, n] | bf16 [n]
  epilogue silu_mul alpha=0.5 | gelu | relu alpha=2.0
  backends pallas_tpu
}

kernel v_int4 {
  op dense
  lhs int4 packed [m, k] | int8 [m, k]
  rhs int4 packed [k, n] | int4 packed [n, k]
  out f32
  tile m=128 n=256 k=256
  backends pallas_tpu
}

kernel v_fp4 {
  op dense
  lhs bf16 [m, k]
  rhs fp4 packed [k, n] | fp4 packed [n, k]
  out bf16
  tile m=128 n=256 k=256
  backends pallas_tpu
}

kernel v_scaled {
  op grouped
  lhs e4m3 [m, k]
  rhs e4m3 [g, n, k] | e4m3 [g, k, n]
  out bf16
  lhs_scale per_token_group k=128 e8m0 | per_token f32 | per_tensor e8m0
  rhs_scale block n=128 k=128 e8m0 | per_channel e8m0 | per_tensor f32 | kblock k=128 bf16
  epilogue silu_mul alpha=0.75
  backends pallas_tpu
}

kernel v_mx {
  op dense
  lhs e4m3 [m, k] | fp4 packed [m, k]
  rhs fp4 packed [n, k] | fp4 packed [k, n]
  out bf16
  lhs_scale per_token_group k=32 e8m0 layout=atom128x4
  rhs_scale block n=1 k=32 e8m0
  epilogue alpha=0.5
  tile m=128 n=256 k=256
  backends pallas_tpu
}

kernel v_nv {
  op dense
  lhs fp4 packed [m, k]
  rhs fp4 packed [n, k] | fp4 packed [k, n]
  out bf16
  lhs_scale per_token_group k=16 ue4m3
  rhs_scale block n=1 k=16 ue4m3 layout=atom128x4 | block n=1 k=16 ue4m3
  tile m=128 n=256 k=256
  backends pallas_tpu
}

kernel v_gmm_mx {
  op grouped
  lhs e4m3 [m, k] | e4m3 [g, m, k]
  rhs e4m3 [g, n, k] | e4m3 [g, k, n]
  out bf16
  lhs_scale per_token_group k=32 e8m0
  rhs_scale block n=1 k=32 e8m0 | block n=1 k=16 ue4m3
  epilogue silu_mul
  tile m=128 n=128 k=256
  backends pallas_tpu
}

kernel v_tgmm {
  op tgmm
  lhs bf16 [m, k] | f32 [m, k]
  rhs bf16 [m, n]
  out f32 | bf16
  epilogue alpha=0.5
  dims n=256 k=512
  stages 1 | 2
  backends pallas_tpu
}

kernel v_quant {
  op quantize
  lhs bf16 [m, k] | f32 [m, k]
  out e4m3 | e5m2
  out_scale per_token_group k=128 e8m0 | per_token_group k=64 f32
  dims k=1024
  backends pallas_tpu
}
"""


def _ruff() -> str | None:
    found = Path(sys.executable).with_name("ruff")
    return str(found) if found.exists() else shutil.which("ruff")


def _spec_paths() -> list[Path]:
    paths = sorted((REPO / "specs").glob("*.gemm")) + sorted((REPO / "tests/specs").glob("*.gemm"))
    paths += sorted((REPO / "tests/cases").glob("*/spec.gemm"))
    paths += sorted((REPO / "tests/cases").glob("*/specs/*.gemm"))
    return paths


def _generated() -> dict[str, str]:
    """{"<stem>/<path>": text} of every spec that builds."""
    out = {}
    for path in _spec_paths():
        try:
            rendered = render_spec(path)
        except (SpecError, InputError):
            continue  # a bad spec (the golden cases): nothing to check
        for rel, text in rendered.files.items():
            out[f"{path.parent.name}-{rendered.spec.stem}/{rel}"] = text
    spec = validate(parse(VARIANTS, "specs/variants.gemm"), diagnose=backends.diagnose)
    for rel, text in backends.render(spec).items():
        out[f"variants/{rel}"] = text
    return out


@pytest.fixture(scope="module")
def generated() -> dict[str, str]:
    return _generated()


@pytest.mark.parametrize("producer", sorted(PRODUCERS))
def test_generated_python_is_ruff_clean(producer, generated, tmp_path):
    ruff = _ruff()
    if ruff is None:
        pytest.skip("ruff is not installed (pip install -e '.[dev]')")
    version = subprocess.run([ruff, "--version"], capture_output=True, text=True).stdout
    assert version.split() == ["ruff", "0.17.6"], f"pinned ruff 0.17.6, found {version!r}"
    selected = {name: text for name, text in generated.items()
                if PRODUCERS[producer](PurePosixPath(*PurePosixPath(name).parts[1:]))}
    assert selected, f"no generated .py file of {producer} to check"
    for name, text in selected.items():
        dest = tmp_path / name
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text(text)
    files = sorted(str(tmp_path / name) for name in selected)
    fmt = subprocess.run([ruff, "format", "--config", str(CONFIG), "--no-cache", "--check",
                          "--diff", *files], capture_output=True, text=True, cwd=tmp_path)
    assert fmt.returncode == 0, f"ruff format --check:\n{fmt.stdout}{fmt.stderr}"
    lint = subprocess.run([ruff, "check", "--config", str(CONFIG), "--no-cache",
                           "--output-format", "concise", *files],
                          capture_output=True, text=True, cwd=tmp_path)
    assert lint.returncode == 0, f"ruff check:\n{lint.stdout}{lint.stderr}"


def test_the_check_catches_unformatted_code(tmp_path):
    """The settings are live: an over-long call and an unused import fail."""
    ruff = _ruff()
    if ruff is None:
        pytest.skip("ruff is not installed (pip install -e '.[dev]')")
    bad = tmp_path / "bad.py"
    bad.write_text("import os\n\n\ndef f(a, b):\n    return g(a, b,\n             c)\n")
    fmt = subprocess.run([ruff, "format", "--config", str(CONFIG), "--no-cache", "--check",
                          str(bad)], capture_output=True, text=True)
    lint = subprocess.run([ruff, "check", "--config", str(CONFIG), "--no-cache", str(bad)],
                          capture_output=True, text=True)
    assert fmt.returncode == 1 and lint.returncode == 1
    assert "F401" in lint.stdout  # `os` imported but unused
    long = tmp_path / "long.py"
    line = "x = f(" + ", ".join(f"a{i}" for i in range(20)) + ")"
    assert 88 < len(line) <= 100  # too long for ruff's default, fine at 100
    long.write_text(line + "\n")
    assert subprocess.run([ruff, "format", "--config", str(CONFIG), "--no-cache", "--check",
                           str(long)], capture_output=True).returncode == 0
