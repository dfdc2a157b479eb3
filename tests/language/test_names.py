"""Kernel and dispatch names: the reserved set is complete (a render guard),
every reserved name is rejected, ordinary names are accepted, and clashing
names are found with both positions.

The guard renders every kind of kernel and dispatcher, collects the
identifiers the generated code defines or refers to, drops those made from
the spec's own names, and requires `name_problem` to reject every other one:
a helper a template adds cannot become a usable kernel name unnoticed. When
it fails, add the names it prints to `gemmgen.reserved.GENERATED` (or, for a
symbol made from a kernel's name, to `gemmgen.names.DERIVED_SUFFIXES`).
"""

from __future__ import annotations

import ast
import builtins
import functools
import keyword
import re
import symtable
from dataclasses import replace
from pathlib import Path

import pytest

from gemmgen import backends, ir, names, reserved
from gemmgen.cli import main
from gemmgen.diagnostics import SpecError
from gemmgen.ir import Loc
from gemmgen.names import args_struct, collisions, derived_from, name_problem
from gemmgen.parse import parse
from gemmgen.validate import validate

ROOT = Path(__file__).resolve().parents[2]
RUNTIME = ROOT / "gemmgen" / "runtime" / "cuda"

# Every kind of kernel on each backend that emits it, beyond the committed specs:
# LUTs (CUDA entry per tile), grouped (fill/worklist, Pallas vjp), tgmm,
# quantize, GEMV and batched GEMV, scales, packed weights and a dispatcher.
KINDS = """
target pallas_tpu {
  tpu v5e
}

target cuda {
  archs sm_80 sm_90a
}

kernel kinds_dense_lut {
  op dense
  lhs bf16 [m, k]
  rhs bf16 [n, k]
  out bf16
  bias f32 [n]
  epilogue silu alpha=0.5
  tile m=128 n=128 k=128
  tile_rule m<=64 -> m=64 n=128 k=128
  backends pallas_tpu cuda
}

kernel kinds_gmm_lut {
  op grouped
  lhs bf16 [m, k]
  rhs bf16 [g, n, k]
  out bf16
  epilogue silu_mul
  tile m=128 n=128 k=128
  tile_rule m<=64 -> m=64 n=128 k=128
  backends pallas_tpu cuda
}

kernel kinds_gmm_w8a16 {
  op grouped
  lhs bf16 [m, k]
  rhs int8 [g, n, k]
  out bf16
  rhs_scale kblock k=128 f32
  bias f32 [g, 1, n]
  backends pallas_tpu
}

kernel kinds_w4a16 {
  op dense
  lhs bf16 [m, k]
  rhs int4 packed [n, k]
  out bf16
  rhs_scale block n=1 k=32 bf16
  tile m=64 n=128 k=32
  backends pallas_tpu cuda
}

kernel kinds_tgmm {
  op tgmm
  lhs bf16 [m, k]
  rhs bf16 [m, n]
  out f32
  backends pallas_tpu cuda
}

kernel kinds_quant {
  op quantize
  lhs bf16 [m, k]
  out e4m3
  out_scale per_token_group k=128 e8m0
  backends pallas_tpu cuda
}

kernel kinds_gemv {
  op dense
  lhs bf16 [m, k]
  rhs bf16 [n, k]
  out bf16
  algorithm gemv
  backends cuda
}

kernel kinds_gemv_batched {
  op dense
  lhs bf16 [m, k]
  rhs bf16 [n, k]
  out bf16
  algorithm gemv_batched
  max_m 8
  backends cuda
}

kernel kinds_tile {
  op dense
  lhs bf16 [m, k]
  rhs bf16 [n, k]
  out bf16
  tile m=128 n=128 k=32
  backends cuda
}

dispatch kinds_mm {
  when m == 1 -> kinds_gemv
  when m <= 8 -> kinds_gemv_batched
  else kinds_tile
}
"""

SPECS = sorted((ROOT / "specs").glob("*.gemm")) + sorted((ROOT / "tests" / "specs").glob("*.gemm"))


def _one_backend(spec: ir.Spec, backend: ir.Backend) -> ir.Spec:
    """The spec's kernels that `backend` can emit, for that backend only, and
    the dispatchers all of whose arms are among them."""
    kernels = []
    for k in spec.kernels:
        if backend in k.backends:
            k = replace(k, backends=(backend,))
            if not backends.diagnose(k, spec):
                kernels.append(k)
    ok = {k.name for k in kernels}
    dispatches = tuple(d for d in spec.dispatches if backend is ir.Backend.CUDA
                       and all(r.kernel in ok for r in d.rules))
    return replace(spec, kernels=tuple(kernels), dispatches=dispatches)


@functools.cache
def _rendered() -> list[tuple[ir.Spec, dict]]:
    texts = [(p.read_text(), p.relative_to(ROOT).as_posix()) for p in SPECS]
    out = []
    for text, path in texts + [(KINDS, "tests/kinds.gemm")]:
        spec = validate(parse(text, path))
        for backend in ir.Backend:
            one = _one_backend(spec, backend)
            if one.kernels:
                out.append((one, backends.render(one)))
    return out


# -- identifiers of generated code ------------------------------------------


def python_identifiers(text: str) -> set[str]:
    """Names a generated module binds at module level, the globals and
    builtins its functions refer to, and the packages it imports."""
    out: set[str] = set()

    def walk(table: symtable.SymbolTable, top: bool) -> None:
        for s in table.get_symbols():
            if top or s.is_global() or s.is_declared_global():
                out.add(s.get_name())
        for child in table.get_children():
            walk(child, False)

    walk(symtable.symtable(text, "<generated>", "exec"), True)
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Import):
            out.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            out.add(node.module.split(".")[0])
    return out


_IDENT = re.compile(r"[A-Za-z_]\w*")
_TOKEN = re.compile(r"\d[\w.']*|[A-Za-z_]\w*|->|::|\S")


def _cxx_code(text: str) -> tuple[str, set[str]]:
    """C++ source without comments, string and character literals and
    preprocessor lines; and the macros it defines."""
    text = re.sub(r"//[^\n]*|/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r'"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', '""', text)
    macros, lines = set(), []
    for line in text.splitlines():
        if m := re.match(r"\s*#\s*define\s+([A-Za-z_]\w*)", line):
            macros.add(m.group(1))
        lines.append("" if line.lstrip().startswith("#") else line)
    return "\n".join(lines), macros


def cxx_identifiers(text: str) -> set[str]:
    """Macros, names at file scope (inside `extern "C"` and unnamed
    namespaces too; of a named namespace, only its name) outside parentheses,
    and every identifier of a host launcher `launch_<name>(...) {...}`, whose
    body calls the kernel entry points by their bare names."""
    code, out = _cxx_code(text)
    tokens = _TOKEN.findall(code)
    braces: list[bool] = []  # per open brace: is it file scope inside?
    parens = 0
    for i, tok in enumerate(tokens):
        if tok == "{":
            before = tokens[max(0, i - 2):i]
            braces.append(before[-1:] == ["namespace"] or before == ["extern", '""'])
        elif tok == "}":
            braces.pop()
        elif tok in "()" and all(braces):
            parens += 1 if tok == "(" else -1
        elif (_IDENT.fullmatch(tok) and all(braces) and parens == 0
              and tokens[i - 1] not in (".", "->", "::")):
            out.add(tok)
    for m in re.finditer(r"\blaunch_\w+\s*\([^)]*\)\s*\{", code):
        depth, j = 1, m.end()
        while depth:
            depth += {"{": 1, "}": -1}.get(code[j], 0)
            j += 1
        out.update(_IDENT.findall(code[m.start():j]))
    return out


def rust_identifiers(text: str) -> set[str]:
    """The names of a generated Rust module that a kernel or dispatcher name
    (a module of the crate) could clash with: the crate root's modules, the
    first segment of every `use` path (`std`, `crate`), the C symbols of an
    `extern "C"` block, and in a module that imports other modules of the
    crate by name (a dispatcher importing its arms) every item it defines or
    imports at module level."""
    code = re.sub(r"//[^\n]*", " ", text)
    code = re.sub(r'"(?:\\.|[^"\\])*"', '""', code)
    out = set(re.findall(r"^(?:pub )?mod (\w+);", code, flags=re.M))
    uses = re.findall(r"^use ([^;]*);", code, flags=re.M | re.S)
    out.update(u.split("::")[0].strip() for u in uses)
    for block in re.findall(r'extern ""\s*\{(.*?)\n\}', code, flags=re.S):
        out.update(re.findall(r"\bfn (\w+)", block))
    imports_modules = any(u.startswith("crate::{") or (u.startswith("crate::")
                          and not u.startswith("crate::common")) for u in uses)
    if imports_modules:
        for u in uses:
            out.update(_IDENT.findall(u.split("::", 1)[-1]))
        out.update(re.findall(r"^(?:pub )?(?:fn|const|struct|enum|type|trait|static) (\w+)",
                              code, flags=re.M))
    return out - {"self"}


@functools.cache
def generated_identifiers() -> dict[str, set[str]]:
    """identifier -> the files that define or use it, for every rendered
    file, less the identifiers made from the spec's own kernel and dispatch
    names."""
    found: dict[str, set[str]] = {}
    for spec, files in _rendered():
        own = {k.name for k in spec.kernels} | {d.name for d in spec.dispatches}
        for path, text in files.items():
            if path.suffix == ".toml" or path.name == ".gitignore":
                continue  # the Rust crate's manifest, rustfmt settings, git ignores: no code
            ids = (python_identifiers(text) if path.suffix == ".py"
                   else rust_identifiers(text) if path.suffix == ".rs" else cxx_identifiers(text))
            for ident in ids:
                if derived_from(ident, own) is None:
                    found.setdefault(ident, set()).add(f"{spec.path}: {path}")
    for header in sorted(RUNTIME.glob("*.cuh")) + sorted(RUNTIME.glob("*.h")):
        for ident in cxx_identifiers(header.read_text()):
            found.setdefault(ident, set()).add(header.relative_to(ROOT).as_posix())
    return found


# -- the guard ----------------------------------------------------------------


def test_every_identifier_of_generated_code_is_a_rejected_name():
    found = generated_identifiers()
    usable = sorted(i for i in found if name_problem(i) is None)
    assert not usable, (
        "generated code defines or uses names a kernel could have; add them to "
        "gemmgen.reserved.GENERATED:\n" + "\n".join(
            f"  {i}  ({sorted(found[i])[0]})" for i in usable))


def test_the_guard_sees_every_kind_and_the_names_the_issue_lists():
    kinds = {(b, k.op, k.algorithm, bool(k.tile_rules)) for spec, _ in _rendered()
             for k in spec.kernels for b in k.backends}
    for op in ir.Op:
        assert any(kind[1] is op and kind[0] is ir.Backend.PALLAS_TPU for kind in kinds), op
        assert any(kind[1] is op and kind[0] is ir.Backend.CUDA for kind in kinds), op
    for algorithm in ir.Algorithm:
        assert any(kind[2] is algorithm for kind in kinds), algorithm
    assert {(b, op) for b, op, _, lut in kinds if lut} >= {
        (ir.Backend.CUDA, ir.Op.DENSE), (ir.Backend.CUDA, ir.Op.GROUPED),
        (ir.Backend.PALLAS_TPU, ir.Op.DENSE)}
    assert any(spec.dispatches for spec, _ in _rendered())
    found = generated_identifiers()
    for ident in ("validate", "launches", "tile_for", "Launch", "pick_tile", "output_shapes",
                  "workspace_ints", "min", "len", "getattr", "np", "jax", "functools",
                  "dataclass", "cupy", "a", "k", "stream", "gemv", "quantize"):
        assert ident in found, ident


def test_derived_symbols_are_the_ones_the_backends_print():
    (spec, files), = [(s, f) for s, f in _rendered()
                      if s.path == "tests/kinds.gemm" and s.dispatches]
    h = files[next(p for p in files if p.name == "kinds_dense_lut.h")]
    for sym in ("KindsDenseLutArgs", "kinds_dense_lut_validate", "kinds_dense_lut_pick_tile",
                "launch_kinds_dense_lut"):
        assert re.search(rf"\b{sym}\b", h), sym
        assert derived_from(sym, {"kinds_dense_lut"}) == "kinds_dense_lut"
    cu = files[next(p for p in files if p.name == "kinds_dense_lut.cu")]
    assert "kinds_dense_lut_t0" in cu and derived_from("kinds_dense_lut_t1", {"kinds_dense_lut"})
    assert args_struct("gmm_bf16") == "GmmBf16Args"


# -- the reserved set ---------------------------------------------------------


@pytest.mark.parametrize("category", ["PYTHON_KEYWORDS", "PYTHON_BUILTINS", "CXX_KEYWORDS",
                                      "RUST_KEYWORDS", "C_LIBRARY", "POSIX", "CUDA", "GENERATED"])
def test_every_reserved_name_is_rejected(category):
    words = getattr(reserved, category)
    assert words
    accepted = sorted(w for w in words if name_problem(w) is None)
    assert not accepted


def test_the_running_python_is_covered():
    assert set(keyword.kwlist) | set(keyword.softkwlist) <= reserved.PYTHON_KEYWORDS
    public = {n for n in dir(builtins) if not n.startswith("_")}
    assert public <= reserved.PYTHON_BUILTINS | reserved.PYTHON_KEYWORDS
    assert all(name_problem(n) for n in dir(builtins))


def test_reserved_sets_hold_identifiers_only():
    for w in names.RESERVED:
        assert w.isidentifier() and w.isascii(), w


@pytest.mark.parametrize("name", [
    "validate", "launches", "tile_for", "Launch", "pick_tile", "output_shapes",
    "workspace_ints", "min", "len", "getattr", "max", "print", "np", "jax", "functools",
    "dataclass", "memcpy", "printf", "malloc", "exit", "sqrt", "abs", "threadIdx",
    "blockIdx", "atomicAdd", "cudaMalloc", "CUresult", "cuLaunchKernel", "dim3", "half",
    "float2", "nv_bfloat16", "CUDA_VERSION", "read", "a", "k", "m", "stream", "gg", "GG_EMU",
    "aux", "Con", "int8_t", "uint64_t", "PRId64", "sinf", "expl"])
def test_reserved_names_are_rejected(name):
    assert name_problem(name) is not None


def test_ordinary_names_are_accepted():
    ordinary = ["gmm_bf16", "moe_w8a8_gateup_silu", "dense_mm_bf16", "custom_gemm", "cube",
                "token_gemm", "gemm", "t", "q", "gemm_a", "dense_b"]
    for path in SPECS:
        spec = validate(parse(path.read_text(), path.name))
        ordinary += [k.name for k in spec.kernels] + [d.name for d in spec.dispatches]
    for name in ordinary:
        assert name_problem(name) is None, name


def test_messages_say_why():
    assert name_problem("validate") == "'validate' is a name the generated code defines or uses"
    assert name_problem("exit") == "'exit' is a Python builtin and a C standard library name"
    assert name_problem("min") == "'min' is a Python builtin and a CUDA name"
    assert name_problem("cudaFoo") == "'cudaFoo' starts with 'cuda', as CUDA's names do"
    assert name_problem("cuFoo") == \
        "'cuFoo' starts with 'cu' and a capital letter, as CUDA's names do"
    assert "device name on Windows" in name_problem("nul")


# -- collisions -----------------------------------------------------------------


def _loc(line: int, path: str = "specs/x.gemm") -> Loc:
    return Loc(path, line, 8)


def test_one_cxx_struct_is_a_collision_with_both_positions():
    diags = collisions([("gmm_x1", _loc(3)), ("gmmX1", _loc(9), "kernel"),
                        ("Gmm_x1", _loc(15), "dispatch")])
    assert [(str(d.loc), d.message) for d in diags] == [
        ("specs/x.gemm:9:8", "kernel name 'gmmX1' clashes with 'gmm_x1' at specs/x.gemm:3:8: "
                             "both become C++ 'GmmX1Args'"),
        ("specs/x.gemm:15:8", "dispatch name 'Gmm_x1' clashes with 'gmm_x1' at "
                              "specs/x.gemm:3:8: both become C++ 'GmmX1Args'")]


def test_case_and_derived_symbols_collide():
    (d,) = collisions([("gemmx", _loc(1)), ("gemmX", _loc(2))])
    assert "differ only in case" in d.message and "'gemmx' at specs/x.gemm:1:8" in d.message
    assert collisions([("gemmx", _loc(1)), ("gemmX", _loc(2, "specs/y.gemm"))],
                      case=False, across_files=True) == []
    (d,) = collisions([("gemm_t0", _loc(1)), ("gemm", _loc(2))])
    assert str(d.loc) == "specs/x.gemm:2:8"
    assert d.message.endswith("the code generated for 'gemm' defines 'gemm_t0'")
    (d,) = collisions([("mm", _loc(1)), ("gemv", _loc(2)), ("mm_as_gemv", _loc(3))])
    assert d.message.endswith("the code generated for 'mm' defines 'mm_as_gemv'")
    (d,) = collisions([("gemm", _loc(1)), ("launch_gemm", _loc(2))])
    assert "defines 'launch_gemm'" in d.message
    assert collisions([("gmm_bf16", _loc(1)), ("gmm_bf16_kn", _loc(2)),
                       ("gemm_tile", _loc(3)), ("gemm", _loc(4))]) == []


def test_same_name_across_files_only_when_asked():
    entries = [("gmm", _loc(5, "specs/a.gemm"), "kernel"),
               ("gmm", _loc(7, "specs/b.gemm"), "kernel")]
    (d,) = collisions(entries, case=False, across_files=True)
    assert str(d.loc) == "specs/b.gemm:7:8"
    assert d.message.startswith("kernel name 'gmm' is also used at specs/a.gemm:5:8")


def test_validate_reports_collisions_within_a_spec():
    text = ("target cuda {\n  archs sm_90a\n}\n\ndefaults {\n  op dense\n  lhs bf16 [m, k]\n"
            "  rhs bf16 [n, k]\n  out bf16\n  backends cuda\n}\n\n"
            "kernel gmm_x1 {\n}\nkernel gmmX1 {\n}\nkernel gemm {\n}\nkernel Gemm {\n}\n")
    with pytest.raises(SpecError) as e:
        validate(parse(text, "specs/x.gemm"))
    assert [f"{d.loc}: {d.message}" for d in e.value.diagnostics] == [
        "specs/x.gemm:15:8: kernel name 'gmmX1' clashes with 'gmm_x1' at specs/x.gemm:13:8: "
        "both become C++ 'GmmX1Args'",
        "specs/x.gemm:19:8: kernel name 'Gemm' clashes with 'gemm' at specs/x.gemm:17:8: "
        "both become C++ 'GemmArgs'"]


# -- across the specs of a project ----------------------------------------------

SPEC = """target cuda {
  archs sm_90a
}

defaults {
  op dense
  lhs bf16 [m, k]
  rhs bf16 [n, k]
  out bf16
  backends cuda
}
"""


def _project(tmp_path, monkeypatch, **specs: str):
    (tmp_path / "specs").mkdir()
    for stem, kernels in specs.items():
        (tmp_path / "specs" / f"{stem}.gemm").write_text(SPEC + kernels)
    monkeypatch.chdir(tmp_path)


def test_building_one_spec_checks_its_siblings(tmp_path, monkeypatch, capsys):
    _project(tmp_path, monkeypatch, a="kernel gemm_x1 {\n}\n", b="kernel gemmX1 {\n}\n")
    assert main(["build", "specs/b.gemm"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("specs/b.gemm:12:8: error: kernel name 'gemmX1' clashes with 'gemm_x1' "
                          "at specs/a.gemm:12:8: both become C++ 'GemmX1Args'")
    assert main(["build", "specs/a.gemm"]) == 2
    assert capsys.readouterr().err.startswith("specs/a.gemm:12:8: error: kernel name 'gemm_x1'")
    assert main(["check"]) == 2
    assert "both become C++ 'GemmX1Args'" in capsys.readouterr().err
    assert not (tmp_path / "generated").exists()


def test_a_broken_sibling_does_not_block_another_spec(tmp_path, monkeypatch, capsys):
    _project(tmp_path, monkeypatch, a="kernel gemm_a {\n}\n",
             b="kernel gemm_a {\n  out bf61\n}\n", c="kernel gemm_c {\n  oops\n")
    assert main(["build", "specs/a.gemm"]) == 0
    assert (tmp_path / "generated" / "a" / "cuda" / "gemm_a.cu").is_file()
    assert main(["build", "specs/b.gemm"]) == 2
    assert "unknown dtype 'bf61'" in capsys.readouterr().err


def test_case_is_not_a_clash_across_specs(tmp_path, monkeypatch):
    _project(tmp_path, monkeypatch, a="kernel moe_fp8 {\n}\n", b="kernel moe_FP8 {\n}\n")
    assert main(["build", "specs/a.gemm", "specs/b.gemm"]) == 0


def test_the_same_spec_twice_is_not_a_clash_with_itself(tmp_path, monkeypatch, capsys):
    _project(tmp_path, monkeypatch, a="kernel gemm_a {\n}\n")
    assert main(["build", "specs/a.gemm", "./specs/a.gemm"]) == 2
    err = capsys.readouterr().err
    assert "renders into" in err and "also used" not in err
