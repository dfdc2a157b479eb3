"""The atom128x4 scale layout against CUTLASS: `ir.scale_atom_offset` (and
the reference's `atoms_to_rows` built on it) compared entry by entry with
the byte offset CuTe computes from `Sm1xxBlockScaledConfig`
(cutlass/detail/sm100_blockscaled_layout.hpp of the nvidia-cutlass wheel),
compiled on the host by g++ (tests/cuda_src/cute_sf_atom_oracle.cc), for
16- and 32-element scale vectors, several atoms along rows and K, batches,
and shapes that are not whole atoms."""

from __future__ import annotations

import importlib.util
import subprocess
from pathlib import Path

import numpy as np
import pytest
from cuda_runtime_cases import CUDA_SRC

from gemmgen import ir
from gemmgen.harness.toolchain import cuda_include_dir
from gemmgen.reference.blockscale import atoms_to_rows, padded_shape


def cutlass_include() -> Path | None:
    spec = importlib.util.find_spec("cutlass_library")
    if spec is None or not spec.submodule_search_locations:
        return None
    include = Path(next(iter(spec.submodule_search_locations))) / "source" / "include"
    return include if (include / "cutlass" / "detail" / "sm100_blockscaled_layout.hpp").is_file() else None


needs_cute = pytest.mark.skipif(cutlass_include() is None, reason="nvidia-cutlass (CuTe headers) is not installed")


@pytest.fixture(scope="module")
def cute(tmp_path_factory) -> tuple[dict, dict]:
    cuda = cuda_include_dir()
    exe = tmp_path_factory.mktemp("cute_sf") / "oracle"
    cmd = ["g++", "-std=c++17", "-O1", "-w", f"-I{cutlass_include()}", f"-I{cuda}", f"-I{cuda / 'cccl'}",
           str(CUDA_SRC / "cute_sf_atom_oracle.cc"), "-o", str(exe)]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout
    offsets: dict = {}
    cosize: dict = {}
    for line in out.splitlines():
        kind, *fields = line.split()
        vec, rows, k, batches, *rest = (int(f) for f in fields)
        if kind == "sf":
            r, kk, b, offset = rest
            offsets.setdefault((vec, rows, k, batches), {})[(r, kk // vec, b)] = offset
        else:
            cosize[(vec, rows, k, batches)] = rest[0]
    return offsets, cosize


@needs_cute
def test_atom_offsets_match_cute(cute):
    offsets, cosize = cute
    assert len(offsets) == 7
    for (vec, rows, k, batches), table in offsets.items():
        kblocks = -(-k // vec)
        assert len(table) == rows * kblocks * batches
        per_matrix = padded_shape(rows, kblocks)[0] * padded_shape(rows, kblocks)[1]
        assert cosize[(vec, rows, k, batches)] == per_matrix * batches
        for (r, kb, b), offset in table.items():
            assert b * per_matrix + ir.scale_atom_offset(r, kb, kblocks) == offset, (vec, rows, k, r, kb, b)


@needs_cute
def test_reference_reads_the_bytes_cute_names(cute):
    offsets, _ = cute
    rng = np.random.default_rng(5)
    for (vec, rows, k, batches), table in offsets.items():
        kblocks = -(-k // vec)
        shape = padded_shape(rows, kblocks)
        stored = rng.integers(0, 256, size=(batches, *shape), dtype=np.uint8)
        flat = stored.reshape(-1)
        got = atoms_to_rows(stored, rows, kblocks)
        for (r, kb, b), offset in table.items():
            assert got[b, r, kb] == flat[offset]


def test_row_major_indexing_is_not_the_atom():
    """The planted bug the issue names: the atom read as row-major differs."""
    rows, kblocks = 128, 4
    row_major = [r * kblocks + kb for r in range(rows) for kb in range(kblocks)]
    atom = [ir.scale_atom_offset(r, kb, kblocks) for r in range(rows) for kb in range(kblocks)]
    assert sorted(atom) == list(range(512))  # a permutation of the atom's bytes
    assert sum(a != b for a, b in zip(atom, row_major)) > 500
