"""Golden cases: one folder per bad spec, holding `spec.gemm` and the exact
`stderr.txt` that `gemmgen build` must print (exit status 2, no traceback,
nothing written). A case about several specs has a `specs/` folder instead of
`spec.gemm`; it builds all of them, or the specs listed in `args.txt`.
`GEMMGEN_UPDATE_GOLDENS=1 pytest tests/language/test_diagnostics_golden.py`
rewrites the expected files on purpose; review the diff before committing.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from gemmgen.cli import main

CASES = Path(__file__).resolve().parents[1] / "cases"
UPDATE = os.environ.get("GEMMGEN_UPDATE_GOLDENS") == "1"


@pytest.mark.parametrize("case", sorted(p.name for p in CASES.iterdir() if p.is_dir()))
def test_bad_spec_golden(case, tmp_path, capsys):
    folder = CASES / case
    work = tmp_path / case
    work.mkdir()
    if (folder / "specs").is_dir():
        shutil.copytree(folder / "specs", work / "specs")
        args_file = folder / "args.txt"
        args = (args_file.read_text().split() if args_file.exists() else
                sorted(f"specs/{p.name}" for p in (folder / "specs").glob("*.gemm")))
    else:
        shutil.copy(folder / "spec.gemm", work / "spec.gemm")
        args = ["spec.gemm"]
    old = os.getcwd()
    os.chdir(work)
    try:
        code = main(["build", *args])
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
