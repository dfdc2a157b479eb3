"""The emulator's direct cache (gemmgen/harness/cuda_emu/direct.py): a
library found from its sources and included files without preprocessing,
and never a stale one when an included file changes or a new one could
shadow it."""

from __future__ import annotations

import numpy as np
import pytest

from gemmgen.harness import cuda_emu
from gemmgen.harness.cuda_emu import EmuModule, build

KERNEL = """\
#include "gg_runtime.cuh"
#include "value.cuh"
extern "C" __global__ void put(float* x) { x[threadIdx.x] = VALUE; }
"""


def _folder(root, name, value):
    folder = root / name
    folder.mkdir()
    (folder / "value.cuh").write_text(f"#define VALUE {value}.0f\n")
    return folder


def _run(folder) -> np.ndarray:
    module = EmuModule(KERNEL, "put.cu", include_dirs=[folder], memcheck=False)
    (out,) = module.launch("put", 1, 32, 0, [np.empty(32, np.float32)], [0])
    return out


@pytest.fixture
def fresh(tmp_path, monkeypatch):
    monkeypatch.setenv("GEMMGEN_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(cuda_emu, "_LIBRARIES", {})
    calls = []
    real = build._preprocess

    def counted(*args, **kwargs):
        calls.append(args[1])
        return real(*args, **kwargs)

    monkeypatch.setattr(build, "_preprocess", counted)
    return tmp_path, calls


def test_another_folder_with_the_same_files_skips_preprocessing(fresh, monkeypatch):
    root, calls = fresh
    np.testing.assert_array_equal(_run(_folder(root, "a", 3)), 3)
    assert len(calls) == 1
    monkeypatch.setattr(cuda_emu, "_LIBRARIES", {})  # a new process
    np.testing.assert_array_equal(_run(_folder(root, "b", 3)), 3)
    assert len(calls) == 1, "the direct cache did not find the library"


def test_a_changed_header_is_rebuilt(fresh, monkeypatch):
    root, calls = fresh
    folder = _folder(root, "a", 3)
    np.testing.assert_array_equal(_run(folder), 3)
    monkeypatch.setattr(cuda_emu, "_LIBRARIES", {})
    (folder / "value.cuh").write_text("#define VALUE 5.0f\n")
    np.testing.assert_array_equal(_run(folder), 5)
    assert len(calls) == 2


def test_a_changed_runtime_header_is_rebuilt(fresh, monkeypatch, tmp_path):
    # A file the preprocessor read outside the include folders (here the
    # runtime's own copy, swapped for an edited one) is checked too.
    root, calls = fresh
    folder = _folder(root, "a", 3)
    np.testing.assert_array_equal(_run(folder), 3)
    monkeypatch.setattr(cuda_emu, "_LIBRARIES", {})
    monkeypatch.setattr(build.direct, "_HASHES", {})
    seen = {}
    real = build.direct._file_hash

    def changed(path):
        seen[path.name] = True
        return "0" * 64 if path.name == "gg_runtime.cuh" else real(path)

    monkeypatch.setattr(build.direct, "_file_hash", changed)
    _run(folder)
    assert seen.get("gg_runtime.cuh") and len(calls) == 2


def test_a_new_file_in_an_include_folder_changes_the_key(fresh, monkeypatch):
    # A header added to a folder earlier on the path could shadow one found
    # later: the folder's file names are part of the key.
    root, calls = fresh
    folder = _folder(root, "a", 3)
    _run(folder)
    monkeypatch.setattr(cuda_emu, "_LIBRARIES", {})
    (folder / "other.cuh").write_text("// new\n")
    _run(folder)
    assert len(calls) == 2


def test_read_depfile_keeps_escaped_spaces(tmp_path):
    dep = tmp_path / "d"
    dep.write_text("out.o: /a/b.cu /x/with\\ space.h \\\n /c/d.h\n")
    assert [str(p) for p in build.direct.read_depfile(dep)] == ["/a/b.cu", "/x/with space.h", "/c/d.h"]
