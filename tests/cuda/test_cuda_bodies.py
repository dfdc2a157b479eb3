"""The table of tensor-core bodies (gemmgen/backends/cuda/gemm/bodies.py):
adding a body is one table entry, and every launch printer (C++ header and
launcher, CuPy, Rust) then prints its path, in the table's order, without
naming it.

A planted body, `fake`, reuses the Hopper body's plan with entry points of
its own (`_fake`) and takes compute capability 12.0: the launch plan, the
picking of launches by device, and the rendered launchers must all carry its
path after the table's own (specs/moe.gemm declares sm_90a and sm_100a:
Hopper, then sm_100a, then the planted one).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from gemmgen.backends import cuda as cuda_backend
from gemmgen.backends.cuda.common import all_of, var
from gemmgen.backends.cuda.gemm import bodies, plans, wgmma
from gemmgen.backends.cuda.gemm.body import BodyLaunch, BodyPlan
from gemmgen.backends.cuda.rust import RustKernel
from gemmgen.build import load

REPO = Path(__file__).resolve().parents[2]


def _fake_plan(kernel, spec, tiles, lut, number) -> BodyPlan:
    bp = wgmma.BODY.plan(kernel, spec, tiles, lut, number)
    own = tuple(dataclasses.replace(t, entry=t.entry.replace("_sm90", "_fake")) for t in bp.tiles)
    return dataclasses.replace(bp, body=FAKE, tiles=own, entries=())


def _fake_launch(kernel, bp, t, steps) -> BodyLaunch:
    bl = wgmma.BODY.launch(kernel, bp, t, steps)
    return dataclasses.replace(bl, when=all_of(var("sm").eq(120), var("num_sms").gt(0)),
                               label="fake " + bl.label)


FAKE = dataclasses.replace(wgmma.BODY, name="fake", title="Fake", arch="sm_120a", cc="12.0",
                           what="a planted body", plan=_fake_plan, launch=_fake_launch)


@pytest.fixture
def two_bodies(monkeypatch):
    monkeypatch.setattr(plans, "BODIES", (*bodies.BODIES, FAKE))
    spec, _ = load(REPO / "specs" / "moe.gemm")
    return spec, spec.kernel("gmm_bf16")


def test_the_table_names_each_body_once():
    names = [b.name for b in bodies.BODIES]
    assert len(set(names)) == len(names)
    assert bodies.body("wgmma") is wgmma.BODY


def test_a_table_entry_adds_a_path_to_every_variant(two_bodies):
    spec, kernel = two_bodies
    lp = cuda_backend.plan(kernel, spec)
    bodies_in_order = ["wgmma", "tcgen05", "fake"]
    assert lp.variants and all([p.body for p in v.paths] == bodies_in_order for v in lp.variants)
    assert [p.body for p in lp.paths] == bodies_in_order
    dims = {"m": 300, "n": 256, "k": 512, "g": 4, "num_groups": 4, "group_offset": 0}
    env = lp.env(dims)
    v = lp.variant_for(env)
    entries = {sm: v.steps_for({**env, "sm": sm, "num_sms": 100})[-1].entry
               for sm in (0, 89, 90, 100, 120)}
    assert entries[0] == entries[89] == v.steps[-1].entry
    assert entries[90].endswith("_sm90") and entries[100].endswith("_sm100")
    assert entries[120].endswith("_fake")
    # Each body's entry points are the kernel's, once.
    assert len(set(lp.entries)) == len(lp.entries)
    assert sum(e.endswith("_fake") for e in lp.entries) == len(lp.variants)


def _in_order(text: str, *needles: str) -> bool:
    at = [text.find(n) for n in needles]
    return all(a >= 0 for a in at) and at == sorted(at)


def test_every_launch_printer_prints_both_paths_in_table_order(two_bodies):
    spec, kernel = two_bodies
    files = {p.suffix: text for p, text in cuda_backend.render_kernel(kernel, spec).items()}
    for suffix in (".h", ".cu"):
        assert _in_order(files[suffix], "sm == 90", "sm == 100", "sm == 120"), suffix
    assert _in_order(files[".cu"], "// The Hopper path, ", "// The tcgen05 path, ",
                     "// The Fake path, fake ")
    assert _in_order(files[".py"], "if sm == 90", "if sm == 100", "if sm == 120")
    assert _in_order(files[".py"], "# The Hopper path: ", "# The tcgen05 path: ",
                     "# The Fake path: fake ")
    assert ("on 9.0 the Hopper path (sm_90a), 10.0 the tcgen05 path (sm_100a), 12.0 the Fake "
            "path") in " ".join(files[".py"].split())
    rs = RustKernel(cuda_backend.plan(kernel, spec))
    body = "\n".join(rs.launches_body)
    assert _in_order(body, "// The Hopper path: ", "// The tcgen05 path: ",
                     "// The Fake path: fake ")
    assert "compute capability 12.0 the Fake path (sm_120a: a planted body)" in " ".join(
        rs.launches_doc.replace("///", " ").split())
