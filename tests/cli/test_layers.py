"""The import contract of gemmgen's modules (docs/architecture.md, "Layers").

gemmgen's modules form layers, lowest first (LAYERS below). A module may
import from its own layer and the layers below it, never from a layer above;
no two gemmgen modules import each other, directly or through others (at
module level, inside functions or under `if TYPE_CHECKING:`: a
function-level import, or a type a module names, is a dependency all the
same); gemmgen modules are imported by plain import statements (no
`importlib.import_module` by name), and no `except ImportError` may swallow
the failure of a gemmgen import. The generator (parse, validate, backends,
build, the CLI) imports neither JAX nor NumPy. Each module says what it holds
(a docstring) and is at most MAX_MODULE_LINES long.

The checks read the source with `ast`, so they see every import statement,
including those inside functions that only run in some commands.
"""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "gemmgen"

# Lowest first. A pattern `x.*` is every module below package x (not x).
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    # The IR and pure data and functions over it: no I/O, nothing from above.
    ("ir", ("gemmgen", "gemmgen.ir", "gemmgen.ir.*", "gemmgen.archs", "gemmgen.diagnostics",
            "gemmgen.names",
            "gemmgen.reserved", "gemmgen.numerics", "gemmgen.describe", "gemmgen.cache",
            "gemmgen.devices",
            "gemmgen.runtime", "gemmgen.templates")),
    # Spec text -> IR.
    ("parse/validate", ("gemmgen.parse", "gemmgen.validate", "gemmgen.validate.*")),
    # IR -> {path: text}: pure, no toolchain, no harness, no JAX or NumPy.
    ("backends", ("gemmgen.render", "gemmgen.backends", "gemmgen.backends.*")),
    # Specs on disk -> rendered trees -> generated/.
    ("build/output", ("gemmgen.build", "gemmgen.build_cache", "gemmgen.output", "gemmgen.specfile",
                      "gemmgen.project_names", "gemmgen.project")),
    # The NumPy reference and the test cases.
    ("reference", ("gemmgen.reference", "gemmgen.reference.*", "gemmgen.cases",
                   "gemmgen.cases.*")),
    # Running generated kernels: the CUDA emulator, nvcc, CuPy, runners.
    ("harness", ("gemmgen.harness", "gemmgen.harness.*")),
    # `gemmgen verify`, `gemmgen explain` and `gemmgen tune`.
    ("verify", ("gemmgen.verify", "gemmgen.verify_run", "gemmgen.explain", "gemmgen.explain.*",
                "gemmgen.tune", "gemmgen.tune.*")),
    # Arguments -> a command -> messages and an exit status.
    ("commands/cli", ("gemmgen.commands", "gemmgen.cli", "gemmgen.__main__")),
)

# What the generator must not load (numerics and the harness need them).
HEAVY = ("numpy", "jax", "jaxlib", "ml_dtypes", "cupy", "torch")
# What a backend must not import at all: heavy packages and I/O.
BACKEND_BANNED = (*HEAVY, "os", "io", "subprocess", "shutil", "tempfile", "ctypes", "fcntl",
                  "socket", "importlib")
# The module-level imports of these make up the generator.
GENERATOR_ROOTS = ("gemmgen.cli", "gemmgen.commands", "gemmgen.build")
IMPORT_ERRORS = ("ImportError", "ModuleNotFoundError")
BROAD = ("Exception", "BaseException")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES: dict[str, Path] = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}
# The templates are the package gemmgen.templates installed from templates/.
MODULES["gemmgen.templates"] = REPO / "templates" / "__init__.py"


def _layer_of(module: str) -> int | None:
    for i, (_, patterns) in enumerate(LAYERS):
        for pattern in patterns:
            if pattern.endswith(".*"):
                if module.startswith(pattern[:-1]):
                    return i
            elif module == pattern:
                return i
    return None


@dataclass(frozen=True)
class Import:
    source: str  # the importing gemmgen module
    target: str  # a gemmgen module, or a third-party top-level name
    line: int
    in_function: bool
    type_checking: bool  # under `if TYPE_CHECKING:`: no run-time dependency

    @property
    def internal(self) -> bool:
        return self.target == "gemmgen" or self.target.startswith("gemmgen.")

    @property
    def where(self) -> str:
        return f"{MODULES[self.source].relative_to(REPO)}:{self.line}"


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _targets(module: str, node: ast.Import | ast.ImportFrom) -> list[str]:
    """The modules an import statement loads (for `from x import a`: x.a when
    that is a gemmgen module, else x)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:
        package = module if MODULES[module].name == "__init__.py" else module.rpartition(".")[0]
        for _ in range(node.level - 1):
            package = package.rpartition(".")[0]
        base = f"{package}.{base}" if base else package
    out = []
    for alias in node.names:
        sub = f"{base}.{alias.name}"
        out.append(sub if sub in MODULES else base)
    return out


def _walk(module: str, node: ast.AST, in_function: bool, type_checking: bool, out: list[Import]):
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.Import, ast.ImportFrom)):
            for target in _targets(module, child):
                if not (target == "gemmgen" or target.startswith("gemmgen.")):
                    target = target.partition(".")[0]
                out.append(Import(module, target, child.lineno, in_function, type_checking))
        elif isinstance(child, ast.If) and _is_type_checking(child.test):
            for stmt in child.body:
                _walk(module, ast.Module(body=[stmt], type_ignores=[]), in_function, True, out)
            for stmt in child.orelse:
                _walk(module, ast.Module(body=[stmt], type_ignores=[]), in_function, type_checking,
                      out)
        else:
            inner = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef,
                                                      ast.Lambda))
            _walk(module, child, inner, type_checking, out)


TREES: dict[str, ast.Module] = {m: ast.parse(p.read_text(), str(p)) for m, p in MODULES.items()}


def _imports() -> list[Import]:
    out: list[Import] = []
    for module, tree in TREES.items():
        _walk(module, tree, False, False, out)
    return out


IMPORTS = _imports()


def _describe(imp: Import) -> str:
    how = "inside a function" if imp.in_function else "at module level"
    if imp.type_checking:
        how += " under TYPE_CHECKING"
    return f"{imp.where}: {imp.source} imports {imp.target} {how}"


def test_every_module_has_a_layer():
    missing = sorted(m for m in MODULES if _layer_of(m) is None)
    assert not missing, f"modules in no layer of {__name__}.LAYERS (place them): {missing}"


def test_every_gemmgen_import_names_a_module():
    unknown = [_describe(i) for i in IMPORTS if i.internal and i.target not in MODULES]
    assert not unknown, "imports of gemmgen modules that do not exist:\n" + "\n".join(unknown)


def test_no_import_goes_up_a_layer():
    bad = []
    for imp in IMPORTS:
        if not imp.internal or imp.target not in MODULES:
            continue
        src, dst = _layer_of(imp.source), _layer_of(imp.target)
        if src is not None and dst is not None and dst > src:
            bad.append(f"{_describe(imp)}: layer '{LAYERS[src][0]}' imports the higher layer "
                       f"'{LAYERS[dst][0]}'")
    assert not bad, "imports that go up a layer:\n" + "\n".join(bad)


def _cycles(edges: dict[str, dict[str, Import]]) -> list[list[Import]]:
    """One cycle through each strongly connected component of more than one
    module (Tarjan), as the imports that close it."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, {})):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            connect(v)
    cycles = []
    for component in components:
        members = set(component)
        start = component[0]
        # Breadth-first from start back to start inside the component: a shortest cycle.
        parents: dict[str, Import] = {}
        frontier = [start]
        found: Import | None = None
        while frontier and found is None:
            nxt = []
            for v in frontier:
                for w, imp in sorted(edges.get(v, {}).items()):
                    if w == start:
                        found = imp
                        break
                    if w in members and w not in parents:
                        parents[w] = imp
                        nxt.append(w)
                if found:
                    break
            frontier = nxt
        assert found is not None
        path = [found]
        while path[-1].source != start:
            path.append(parents[path[-1].source])
        cycles.append(path[::-1])
    return cycles


def test_no_import_cycles():
    """Imports under `if TYPE_CHECKING:` count: the module needs the other's
    types to be read, and the cycle only hides from the interpreter."""
    edges: dict[str, dict[str, Import]] = {}
    for imp in IMPORTS:
        if imp.internal and imp.target != imp.source:
            edges.setdefault(imp.source, {}).setdefault(imp.target, imp)
    found = _cycles(edges)
    text = "\n\n".join("\n".join("  " + _describe(i) for i in cycle) for cycle in found)
    assert not found, f"import cycles between gemmgen modules:\n{text}"


def _dotted(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return ""


def test_no_module_is_imported_by_name():
    """importlib.import_module / __import__ hide the flow from readers and
    tools; a fixed set of modules is a plain import table."""
    bad = []
    for module, tree in TREES.items():
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            name = _dotted(node.func)
            if name.rpartition(".")[2] not in ("import_module", "__import__"):
                continue
            arg = node.args[0] if node.args else None
            third_party = (isinstance(arg, ast.Constant) and isinstance(arg.value, str)
                           and not arg.value.startswith(("gemmgen", ".")))
            if not third_party:
                bad.append(f"{MODULES[module].relative_to(REPO)}:{node.lineno}: {module} calls "
                           f"{name}({ast.unparse(arg) if arg else ''}): import gemmgen modules by "
                           "an import statement")
    assert not bad, "\n".join(bad)


def _caught(handler: ast.ExceptHandler) -> set[str]:
    if handler.type is None:
        return {"BaseException"}
    types = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return {_dotted(t).rpartition(".")[2] for t in types}


def _statements(body: list[ast.stmt]):
    """The nodes a try body runs itself (not those of functions it defines)."""
    todo: list[ast.AST] = list(body)
    while todo:
        node = todo.pop()
        yield node
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            todo.extend(ast.iter_child_nodes(node))


def _mentions_name_of(handler: ast.ExceptHandler) -> bool:
    """Whether the handler reads `e.name` of the exception it binds as `e`."""
    if handler.name is None:
        return False
    return any(isinstance(n, ast.Attribute) and n.attr == "name" and isinstance(n.value, ast.Name)
               and n.value.id == handler.name for h in handler.body for n in ast.walk(h))


def test_no_import_error_is_swallowed():
    """A gemmgen import is never inside a try that catches ImportError (a
    broken module must fail loudly, not drop a feature); an optional
    third-party import's handler reads `e.name` to say which module is
    missing (and re-raises, or reports, anything else)."""
    bad = []
    for module, tree in TREES.items():
        rel = MODULES[module].relative_to(REPO)
        for node in ast.walk(tree):
            if not isinstance(node, ast.Try):
                continue
            internal = [i for i in _statements(node.body) if isinstance(i, (ast.Import, ast.ImportFrom))
                        and any(t == "gemmgen" or t.startswith("gemmgen.") for t in _targets(module, i))]
            for handler in node.handlers:
                caught = _caught(handler)
                if internal and caught & {*IMPORT_ERRORS, *BROAD}:
                    imp = internal[0]
                    bad.append(f"{rel}:{handler.lineno}: {module} catches "
                               f"{'/'.join(sorted(caught))} around its import of "
                               f"{', '.join(_targets(module, imp))} (line {imp.lineno})")
                elif caught & set(IMPORT_ERRORS) and not _mentions_name_of(handler):
                    bad.append(f"{rel}:{handler.lineno}: {module} catches "
                               f"{'/'.join(sorted(caught))} without checking which module is "
                               "missing (`except ModuleNotFoundError as e:` ... `e.name`)")
    assert not bad, "\n".join(bad)


def _module_level_closure(roots: tuple[str, ...]) -> dict[str, Import | None]:
    """The gemmgen modules importing `roots` loads, each with the import that
    first reached it."""
    reached: dict[str, Import | None] = {r: None for r in roots}
    todo = list(roots)
    while todo:
        module = todo.pop()
        for imp in IMPORTS:
            if (imp.source == module and imp.internal and not imp.in_function
                    and not imp.type_checking and imp.target not in reached):
                reached[imp.target] = imp
                todo.append(imp.target)
    return reached


def test_backends_import_no_toolchain_io_or_numerics():
    bad = [_describe(i) for i in IMPORTS
           if i.source.startswith("gemmgen.backends") and not i.internal
           and i.target in BACKEND_BANNED]
    assert not bad, "backends are pure functions of the IR:\n" + "\n".join(bad)


def test_generator_imports_neither_jax_nor_numpy():
    """Statically: nothing the CLI, the commands or the build import at
    module level imports a heavy package at module level."""
    reached = _module_level_closure(GENERATOR_ROOTS)
    bad = []
    for imp in IMPORTS:
        if (imp.source in reached and not imp.internal and not imp.in_function
                and not imp.type_checking and imp.target in HEAVY):
            chain = []
            m: str | None = imp.source
            while m is not None and reached[m] is not None:
                chain.append(f"{reached[m].where}")
                m = reached[m].source
            bad.append(f"{_describe(imp)} (reached through {' <- '.join(chain) or 'a root'})")
    assert not bad, "the generator loads heavy packages:\n" + "\n".join(bad)


def _heavy_after(code: str, cwd: Path = REPO) -> list[str]:
    """The heavy top-level packages loaded after running `code` in a fresh
    interpreter that imports gemmgen from this repository."""
    probe = (f"import sys\nsys.path.insert(0, {str(REPO)!r})\n{code}\n"
             f"print(sorted({{m.partition('.')[0] for m in sys.modules}} & {set(HEAVY)!r}))")
    r = subprocess.run([sys.executable, "-c", probe], cwd=cwd, capture_output=True, text=True,
                       timeout=120, check=False)
    assert r.returncode == 0, r.stderr
    return ast.literal_eval(r.stdout.strip().splitlines()[-1])


def test_help_imports_neither_jax_nor_numpy():
    assert _heavy_after("import runpy\nsys.argv = ['gemmgen', '--help']\n"
                        "try:\n    runpy.run_module('gemmgen', run_name='__main__')\n"
                        "except SystemExit as e:\n    assert e.code == 0, e.code") == []


def test_build_imports_neither_jax_nor_numpy(tmp_path):
    """`gemmgen build` of every spec, through every backend, into a copy."""
    shutil.copytree(REPO / "specs", tmp_path / "specs")
    code = "from gemmgen.cli import main\nassert main(['build']) == 0"
    assert _heavy_after(code, cwd=tmp_path) == []
    assert (tmp_path / "generated" / "dense" / "MANIFEST.json").is_file()


# A module is read at once: at most this many lines, and a docstring that
# says what it holds (docs/architecture.md; a module that grows past it
# splits by concern, as backends/cuda/gemm/ and harness/cuda_emu/ do).
MAX_MODULE_LINES = 500


def _module_problems(modules: dict[str, Path], root: Path = REPO) -> list[str]:
    out = []
    for _, path in sorted(modules.items()):
        rel = path.relative_to(root).as_posix()
        text = path.read_text()
        if ast.get_docstring(ast.parse(text)) is None:
            out.append(f"{rel}: no docstring saying what the module holds")
        lines = len(text.splitlines())
        if lines > MAX_MODULE_LINES:
            out.append(f"{rel}: {lines} lines, over {MAX_MODULE_LINES}: split it by concern")
    return out


def test_modules_are_short_and_say_what_they_hold():
    problems = _module_problems(MODULES)
    assert not problems, "\n".join(problems)


def test_the_module_check_catches_a_long_or_undocumented_module(tmp_path):
    body = "\n".join(f"X{i} = {i}" for i in range(MAX_MODULE_LINES))
    files = {"gemmgen.long": "gemmgen/long.py", "gemmgen.bare": "gemmgen/bare.py",
             "gemmgen.backends.long": "gemmgen/backends/long.py",
             "gemmgen.fine": "gemmgen/fine.py"}
    texts = {"gemmgen.long": f'"""Long."""\n{body}\n', "gemmgen.bare": "X = 1\n",
             "gemmgen.backends.long": f'"""Long, in a backend."""\n{body}\n',
             "gemmgen.fine": f'"""Just short enough."""\n{body[:body.rindex(chr(10))]}\n'}
    modules = {}
    for module, rel in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(texts[module])
        modules[module] = tmp_path / rel
    too_long = f"{MAX_MODULE_LINES + 1} lines, over {MAX_MODULE_LINES}: split it by concern"
    assert _module_problems(modules, tmp_path) == [
        f"gemmgen/backends/long.py: {too_long}",
        "gemmgen/bare.py: no docstring saying what the module holds",
        f"gemmgen/long.py: {too_long}"]


def test_every_declarable_arch_has_limits():
    """gemmgen.archs is the one table of per-arch limits: it knows every arch
    a spec may declare."""
    from gemmgen import archs, ir

    for arch in ir.CUDA_ARCHS:
        assert archs.shared_memory_limit(arch) > archs.DEFAULT_DYNAMIC_SMEM, arch
        assert archs.parse_arch(arch)[0] == ir.arch_number(arch)


def test_verify_says_which_extra_is_missing(monkeypatch, capsys, tmp_path):
    """Without NumPy, `gemmgen verify` names the extra to install (checked
    before anything imports the harness)."""
    import importlib.util

    from gemmgen import commands
    from gemmgen.cli import main

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "numpy" else real(name, *a))
    assert main(["verify", str(REPO / "specs" / "dense.gemm")]) == commands.EXIT_BAD_INPUT
    assert "verify needs numpy" in capsys.readouterr().err


@pytest.mark.parametrize("source, check, expected", [
    ("try:\n    from gemmgen import verify\nexcept ImportError:\n    pass\n",
     "test_no_import_error_is_swallowed", "catches ImportError around its import of gemmgen.verify"),
    (("def f():\n    try:\n        import jax\n    except Exception:\n        pass\n"
      "    try:\n        import cupy\n    except ImportError:\n        cupy = None\n"),
     "test_no_import_error_is_swallowed", "planted.py:8: .* without checking which module"),
    ("import importlib\nm = importlib.import_module('gemmgen.verify')\n",
     "test_no_module_is_imported_by_name", "planted.py:2: .* calls importlib.import_module"),
    ("import importlib\nm = importlib.import_module(f'gemmgen.{name}')\n",
     "test_no_module_is_imported_by_name", "planted.py:2: .* calls importlib.import_module"),
])
def test_the_checks_catch_what_they_name(source, check, expected, monkeypatch):
    """Each rule above fails on a planted violation (none passes vacuously)."""
    module = "gemmgen.backends.planted"
    monkeypatch.setitem(MODULES, module, PACKAGE / "backends" / "planted.py")
    monkeypatch.setitem(TREES, module, ast.parse(source))
    with pytest.raises(AssertionError, match=expected):
        globals()[check]()


def test_the_cycle_and_layer_checks_catch_a_planted_cycle(monkeypatch):
    planted = [Import("gemmgen.ir", "gemmgen.backends.cuda", 7, True, False),
               Import("gemmgen.backends.cuda", "gemmgen.ir", 30, False, False)]
    monkeypatch.setitem(globals(), "IMPORTS", [*IMPORTS, *planted])
    with pytest.raises(AssertionError, match=r"gemmgen/ir/__init__.py:7: gemmgen.ir imports "
                                             r"gemmgen.backends.cuda inside a function"):
        test_no_import_cycles()
    with pytest.raises(AssertionError, match=r"layer 'ir' imports the higher layer 'backends'"):
        test_no_import_goes_up_a_layer()


def test_the_cycle_check_catches_a_cycle_through_type_checking(monkeypatch):
    """A cycle one of whose imports is under `if TYPE_CHECKING:` (as
    validate.rules once imported validate.fields for a type) is a cycle."""
    source = ("from typing import TYPE_CHECKING\n"
              "if TYPE_CHECKING:\n    from gemmgen.validate.fields import KernelReader\n")
    module = "gemmgen.validate.planted"
    monkeypatch.setitem(MODULES, module, PACKAGE / "validate" / "planted.py")
    planted: list[Import] = []
    _walk(module, ast.parse(source), False, False, planted)
    assert [(i.target, i.type_checking) for i in planted] == [
        ("typing", False), ("gemmgen.validate.fields", True)]
    back = Import("gemmgen.validate.fields", module, 12, False, False)
    monkeypatch.setitem(globals(), "IMPORTS", [*IMPORTS, *planted, back])
    with pytest.raises(AssertionError, match=r"gemmgen/validate/planted.py:3: "
                                             r"gemmgen.validate.planted imports "
                                             r"gemmgen.validate.fields at module level under "
                                             r"TYPE_CHECKING"):
        test_no_import_cycles()
