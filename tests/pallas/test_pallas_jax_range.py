"""The JAX range of the generated Pallas code: one range, stated by the
`pallas` and `verify` extras of pyproject.toml, recorded in each MANIFEST.json
and checked by each generated module when it is imported (a warning outside
it)."""

from __future__ import annotations

import json
import tomllib
import warnings
from pathlib import Path

import jax
import pytest

from gemmgen.backends.pallas import JAX_BELOW, JAX_MIN, JAX_RANGE, JAX_VERSION
from pallas_helpers import import_path

REPO = Path(__file__).resolve().parents[2]
MODULES = sorted((REPO / "generated").glob("*/pallas/[!_]*.py"))


def test_one_range_everywhere():
    assert JAX_RANGE == ">=0.10.2,<0.11"
    assert JAX_MIN <= tuple(map(int, JAX_VERSION.split("."))) < JAX_BELOW
    assert tuple(jax.__version_info__[:3]) == JAX_MIN  # the tests run the checked JAX
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    assert f"jax{JAX_RANGE}" in extras["pallas"]
    assert f"jax[cpu]{JAX_RANGE}" in extras["verify"]
    for manifest in (REPO / "generated").glob("*/MANIFEST.json"):
        doc = json.loads(manifest.read_text())
        assert (doc["jax"], doc["jax_range"]) == (JAX_VERSION, JAX_RANGE), manifest


def _import_under(monkeypatch, path: Path, version: tuple[int, int, int]):
    monkeypatch.setattr(jax, "__version_info__", version)
    monkeypatch.setattr(jax, "__version__", ".".join(map(str, version)))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        import_path(path)
    return [str(w.message) for w in caught]


@pytest.mark.parametrize("version", [(0, 10, 2), (0, 10, 9)])
def test_no_warning_inside_the_range(monkeypatch, version):
    assert _import_under(monkeypatch, MODULES[0], version) == []


@pytest.mark.parametrize("version", [(0, 10, 1), (0, 11, 0), (1, 0, 0), (0, 9, 7)])
def test_one_warning_outside_the_range(monkeypatch, version):
    got = _import_under(monkeypatch, MODULES[0], version)
    v = ".".join(map(str, version))
    assert len(got) == 1, got
    assert got[0].endswith(
        f"was generated for JAX >=0.10.2,<0.11 (checked with 0.10.2), not JAX {v}: Pallas may "
        "have changed; install a JAX in the range or regenerate with a gemmgen made for this JAX")


def test_every_generated_module_checks_the_range(monkeypatch):
    names = {p.stem for p in MODULES}
    assert {"gmm_bf16", "moe_bf16_grad_rhs", "per_token_group_quant_fp8_out_scale_f32",
            "dense_bf16_out_f32"} <= names  # grouped, tgmm, quantize, dense
    for path in MODULES:
        assert len(_import_under(monkeypatch, path, (0, 11, 0))) == 1, path
