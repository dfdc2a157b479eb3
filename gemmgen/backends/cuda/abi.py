"""The C ABI of a CUDA kernel: `gg_<kernel>_launch()`, one extern "C" entry
per kernel over its launcher (`launch_<kernel>()`): the arrays' pointers,
the dims, the scalars, the workspace and its size, the stream, and an error
out-parameter. `<kernel>.h` declares it and `<kernel>.cu` defines it (the
host part of launch_impl.cuh.j2); the XLA FFI handler (ffi.py) and the
PyTorch op (torch_ops.py) both call it, so the launch is written once.
Pure: no I/O (docs/architecture.md).
"""

from __future__ import annotations

from dataclasses import dataclass

from gemmgen.backends.cuda.layout import COLUMNS, cpp_call, pack
from gemmgen.backends.cuda.layout import comment as layout_comment

# clang-format breaks a long declaration after its "(" when that saves this many lines.
BROKEN_SAVES = 4

__all__ = ["CAbi"]


@dataclass(frozen=True, slots=True)
class CAbi:
    """The C ABI of one launch plan (a LaunchPlan: launch.py)."""

    lp: object

    @property
    def symbol(self) -> str:
        """The extern "C" entry of the kernel: `gg_<name>_launch`."""
        return f"gg_{self.lp.name}_launch"

    @property
    def params(self) -> tuple[tuple[str, str], ...]:
        """(C type, name) of the C ABI's parameters, in order: the arrays
        (inputs, then outputs; an absent optional array is null), the dims,
        the scalars, the workspace and its size, the stream, the error."""
        out = [("const void*" if not a.is_output else "void*", a.name) for a in self.lp.arrays]
        out += [("long long", d) for d in self.lp.dims]
        out += [("long long", s.name) for s in self.lp.scalars]
        if self.lp.has_workspace:
            out += [("void*", "workspace"), ("unsigned long long", "workspace_bytes")]
        out += [("void*", "stream"), ("const char**", "error")]
        return tuple(out)

    def _abi_head(self, tail: str) -> str:
        """The head as clang-format lays it out: one line; else the
        parameters aligned after "(", unless a break after "(" saves
        BROKEN_SAVES lines or more (a long name)."""
        head = f'extern "C" int {self.symbol}('
        params = [f"{t} {n}" for t, n in self.params]
        one = head + ", ".join(params) + tail
        if len(one) <= COLUMNS:
            return one
        aligned = pack(head, params, tail, len(head))
        broken = pack("    ", params, tail, 4)
        if aligned is not None and (broken is None or len(aligned) - len(broken) < BROKEN_SAVES):
            return "\n".join(aligned)
        return head + "\n" + "\n".join(broken)

    @property
    def comment(self) -> str:
        return layout_comment(
            f"The C ABI of launch_{self.lp.name}(), the one entry the XLA FFI handler "
            f"({self.lp.name}_ffi.cc) and the PyTorch op (torch/{self.lp.name}.py, through ctypes) "
            "call: the arrays' pointers (an absent optional array is null), the dims, "
            + ("the scalars, " if self.lp.scalars else "")
            + ("the workspace and its size in bytes, " if self.lp.has_workspace else "")
            + "the stream. Returns 0 once the launches are queued (nothing waits for them); 1 "
            "when the call is invalid and nothing was launched, 2 when a launch failed: "
            "*error then says why (a static string).")

    @property
    def decl(self) -> str:
        return self._abi_head(");")

    @property
    def definition(self) -> str:
        return self._abi_head(") {")

    @property
    def body(self) -> tuple[str, ...]:
        """The C ABI's statements, indented: the struct, the int32 checks,
        the workspace, the launcher's checks, the launch."""
        lines = [f"{self.lp.args_struct} a;"]
        for a in self.lp.arrays:
            const = "" if a.is_output else "const "
            lines.append(f"a.{a.name} = static_cast<{const}{a.ctype}*>({a.name});")
        for name in (*self.lp.dims, *(s.name for s in self.lp.scalars)):
            lines += [f"if ({name} < INT32_MIN || {name} > INT32_MAX) {{",
                      f'  *error = "{self.lp.name}: {name} does not fit in int32";',
                      "  return 1;", "}",
                      f"a.{name} = static_cast<int>({name});"]
        if self.lp.has_workspace:
            lines += [f"if (workspace_bytes < {self.lp.name}_workspace_bytes(a)) {{",
                      f'  *error = "{self.lp.name}: the workspace is too small";',
                      "  return 1;", "}",
                      "a.workspace = workspace;"]
        lines += [f"if (const char* problem = {self.lp.name}_validate(a)) {{",
                  "  *error = problem;", "  return 1;", "}"]
        launch = cpp_call(f"launch_{self.lp.name}(", ["a", "static_cast<cudaStream_t>(stream)"],
                          ");", 2, lhs="const cudaError_t err")
        lines = [f"  {line}" for line in lines] + [launch]
        lines += [f"  {line}" for line in ("if (err != cudaSuccess) {",
                                            "  *error = cudaGetErrorName(err);", "  return 2;",
                                            "}", "return 0;")]
        return tuple(lines)

    def call(self, values: list[str]) -> str:
        """`const int status = gg_<name>_launch(values);`, 2 columns in, laid
        out as clang-format does: the layout of fewest lines, the first on a
        tie, of a break after "=" then the arguments aligned after "(", the
        arguments aligned after "(", and a break after "(" (6 columns in)."""
        head = f"  const int status = {self.symbol}("
        one = head + ", ".join(values) + ");"
        if len(one) <= COLUMNS:
            return one
        call = f"      {self.symbol}("
        after_eq = pack(call, values, ");", len(call))
        layouts = [["  const int status =", *after_eq] if after_eq else None,
                   pack(head, values, ");", len(head)),
                   [head, *pack(" " * 6, values, ");", 6)]]
        return "\n".join(min((lay for lay in layouts if lay), key=len))
