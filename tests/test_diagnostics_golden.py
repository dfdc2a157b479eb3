"""Golden cases: one folder per bad spec, holding `spec.gemm` and the exact
`stderr.txt` that `gemmgen build` must print (exit status 2, no traceback,
nothing written). `GEMMGEN_UPDATE_GOLDENS=1 pytest tests/test_diagnostics_golden.py`
rewrites the expected files on purpose; review the diff before committing.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from gemmgen.cli import main

CASES = Path(__file__).parent / "cases"
UPDATE = os.environ.get("GEMMGEN_UPDATE_GOLDENS") == "1"


@pytest.mark.parametrize("case", sorted(p.name for p in CASES.iterdir() if p.is_dir()))
def test_bad_spec_golden(case, tmp_path, capsys):
    src = CASES / case / "spec.gemm"
    work = tmp_path / case
    work.mkdir()
    shutil.copy(src, work / "spec.gemm")
    old = os.getcwd()
    os.chdir(work)
    try:
        code = main(["build", "spec.gemm"])
    finally:
        os.chdir(old)
    err = capsys.readouterr().err
    assert code == 2
    assert "Traceback" not in err
    assert not (work / "generated").exists(), "a failed build wrote files"
    expected = CASES / case / "stderr.txt"
    if UPDATE:
        expected.write_text(err)
    assert err == expected.read_text()
