"""Rust launchers of the CUDA kernels: a cargo crate per spec.

With `launchers cpp cupy rust` in the spec's `target cuda` block, the CUDA
backend also renders `generated/<stem>/rust/`, a crate with no dependencies:

  Cargo.toml           package gemmgen-<stem>, feature `cuda-driver`
  src/lib.rs           one module per kernel and dispatcher
  src/common.rs        the Backend trait, Array, KernelArg, Launch, Error,
                       CUDA's launch limits and the plan's integer helpers
  src/cuda_driver.rs   Backend over the CUDA driver API (feature
                       `cuda-driver`; the crate's only `unsafe` code)
  src/<kernel>.rs      Args, Dims, pick_tile, validate, workspace_bytes,
                       launches and launch, printed from the kernel's
                       LaunchPlan (the one its C++ and CuPy launchers print),
                       the paths of the bodies other than mma.sync and
                       their tensor maps included
  src/<dispatch>.rs    pick(m) and launch, handing the call to the arm's module

Every expression is the plan's `Expr` printed as Rust (`Expr.rs`, over
i64); the text is laid out as rustfmt lays it out (the tests check it with
`rustfmt --check`), by the helpers of text.py. kernel.py prints a kernel's
module, `RustDispatch` below a dispatcher's.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePosixPath

from gemmgen import ir
from gemmgen.backends.cuda.dispatch import DispatchPlan
from gemmgen.backends.cuda.launch import DEFAULT_SMEM, LIMITS, MAX_CLUSTER_BLOCKS, LaunchPlan
from gemmgen.backends.cuda.rust.kernel import RustKernel
from gemmgen.backends.cuda.rust.text import (
    WIDTH,
    field_doc,
    field_type,
    rs_const,
    rs_doc,
    rs_list,
    rs_use,
)
from gemmgen.render import render_template
from gemmgen.runtime import CRATE, CRATE_BUILD_PRODUCTS

__all__ = ["RustDispatch", "RustKernel", "crate_name", "render_crate"]


def crate_name(stem: str) -> str:
    """The package name: `gemmgen-<stem>` (lib `gemmgen_<stem>`)."""
    return "gemmgen-" + stem.replace("_", "-")


@dataclass(frozen=True)
class RustDispatch:
    plan: DispatchPlan

    @property
    def name(self) -> str:
        return self.plan.name

    @property
    def arms_const(self) -> str:
        items = [f'"{a.kernel}"' for a in self.plan.arms]
        return rs_const(f"pub const ARMS: [&str; {len(items)}] = ", items)

    @property
    def fields(self) -> tuple[str, ...]:
        out: list[str] = []
        for a in (*self.plan.arrays, *self.plan.scalars):
            out += [rs_doc(field_doc(a), 4), f"    pub {a.name}: {field_type(a)},"]
        return tuple(out)

    @property
    def field_names(self) -> tuple[str, ...]:
        return tuple(a.name for a in (*self.plan.arrays, *self.plan.scalars))

    def as_head(self, arm: str) -> str:
        """The head of as_<arm>, up to its "{": one line when it fits, else
        rustfmt's layout (the parameter on a line of its own)."""
        name, ret = f"{self.name}_as_{arm}", f"{arm}::Args"
        one = f"pub fn {name}(a: &Args) -> {ret} {{"
        if len(one) <= WIDTH:
            return one
        return f"pub fn {name}(\n    a: &Args,\n) -> {ret} {{"

    def convert(self, arm: str) -> str:
        """The body of as_<arm>: the same fields in the arm's Args."""
        items = [f"{f}: a.{f}" for f in self.field_names]
        return rs_list(f"{arm}::Args {{ ", items, " }", 4).replace("{ \n", "{\n").replace(
            "\n     }", "\n    }")

    @property
    def m_read(self) -> str:
        b = self.plan.m_binding
        return f"a.{b.arg}.shape[{b.axis}]" + (f" * {b.mul}" if b.mul != 1 else "")

    @property
    def pick_body(self) -> tuple[str, ...]:
        out: list[str] = []
        for a in self.plan.arms:
            if a.cond:
                out += [f"    // {a.kernel}, {a.where}", f"    if {a.cond} {{",
                        f"        return {a.index};", "    }"]
            else:
                out += [f"    // {a.kernel}, {a.where}", f"    {a.index}"]
        return tuple(out)

    @property
    def uses(self) -> str:
        return rs_use("crate", sorted({a.kernel for a in self.plan.arms}))


def lib_modules(kernels: list[RustKernel], dispatches: list[RustDispatch]) -> list[str]:
    return sorted([k.name for k in kernels] + [d.name for d in dispatches])


def render_crate(spec: ir.Spec, header: str, kernels: list[LaunchPlan],
                 dispatches: list[DispatchPlan]) -> dict[PurePosixPath, str]:
    """The crate's files under `rust/`."""
    base = PurePosixPath(CRATE)
    clusters = any(p.has_clusters for p in kernels)
    ks = [RustKernel(p, clusters) for p in kernels]
    ds = [RustDispatch(d) for d in dispatches]
    stem = PurePosixPath(spec.path).stem
    ctx = {"header": header, "spec_path": spec.path, "crate": crate_name(stem),
           "lib": crate_name(stem).replace("-", "_"), "modules": lib_modules(ks, ds),
           "limits": LIMITS, "default_smem": DEFAULT_SMEM, "rs_doc": rs_doc,
           "clusters": clusters, "max_cluster_blocks": MAX_CLUSTER_BLOCKS}
    files = {
        base / "Cargo.toml": render_template("rust/Cargo.toml.j2", **ctx),
        base / "rustfmt.toml": render_template("rust/rustfmt.toml.j2", **ctx),
        base / ".gitignore": render_template("rust/gitignore.j2", ignored=CRATE_BUILD_PRODUCTS,
                                             **ctx),
        base / "src" / "lib.rs": render_template("rust/lib.rs.j2", **ctx),
        base / "src" / "common.rs": render_template("rust/common.rs.j2", **ctx),
        base / "src" / "cuda_driver.rs": render_template("rust/cuda_driver.rs.j2", **ctx),
    }
    for k in ks:
        files[base / "src" / f"{k.name}.rs"] = render_template("rust/launcher.rs.j2", k=k, **ctx)
    for d in ds:
        files[base / "src" / f"{d.name}.rs"] = render_template("rust/dispatch.rs.j2", d=d, **ctx)
    return files
