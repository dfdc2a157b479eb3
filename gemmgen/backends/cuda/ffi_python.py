"""The Python text of a JAX entry point (generated/<stem>/jax/<kernel>.py),
laid out as ruff format does: `EntryPointText`, the part of `ffi.FfiPlan`
that templates/jax/entry.py.j2 prints (the FFI calls of the forward kernel
and of its backward pass's kernels, the TPU branch, the checks and the
public functions). Pure: no I/O.
"""

from __future__ import annotations

import re

from gemmgen import ir
from gemmgen.backends.cuda.common import py_call, py_collection
from gemmgen.backends.cuda.layout import py_times4

__all__ = ["EntryPointText"]


class EntryPointText:
    """Mixed into `ffi.FfiPlan`, whose fields these properties read."""

    __slots__ = ()

    @property
    def py_const(self) -> str:
        """The entry point's name of this target's constants: TARGET, TARGET_GRAD_LHS."""
        return "TARGET" + (f"_{self.role.upper()}" if self.role else "")

    @property
    def py_symbol_const(self) -> str:
        return "SYMBOL" + (f"_{self.role.upper()}" if self.role else "")

    @property
    def py_cuda_name(self) -> str:
        """The entry point's function that makes this FFI call: _cuda, _cuda_grad_lhs."""
        return "_cuda" + (f"_{self.role}" if self.role else "")

    @property
    def py_grad_rhs_formula(self) -> str:
        """What the d rhs kernel computes per local group, for the docstring."""
        nk = self.kernel.rhs_operand.layout is ir.Layout.NK
        d = "d_out" if self.bwd_plain else "d_prod"
        return f"{d}[rows]ᵀ · lhs[rows]" if nk else f"lhs[rows]ᵀ · {d}[rows]"

    @property
    def cuda_vjp(self) -> bool:
        """Whether `<name>_vjp`'s backward pass runs the CUDA kernels of `backward`."""
        return bool(self.backward)

    # -- Python text (laid out as ruff format does) --------------------------

    @property
    def pallas_names(self) -> tuple[str, ...]:
        return tuple(n for n, _ in self.pallas_args)

    @property
    def pallas_params(self) -> tuple[str, ...]:
        return tuple(f"{n}=None" if optional else n for n, optional in self.pallas_args)

    def py_def(self, name: str, params: tuple[str, ...] | list[str]) -> str:
        return py_call(f"def {name}(", list(params), "):", 0)

    @property
    def _py_values(self) -> tuple[str, ...]:
        """The Python expressions of the FFI call's shapes."""
        return (*(o.shape_py for o in self.outs), *self.workspace_ints)

    @property
    def py_helpers(self) -> tuple[str, ...]:
        """The launch plan's integer helpers that the shapes use."""
        text = " ".join(self._py_values) + " ".join(d[2] for d in self.derived)
        helpers = {
            "gg_cdiv": "def gg_cdiv(a: int, b: int) -> int:\n    return -(-a // b)",
            "gg_div": "def gg_div(a: int, b: int) -> int:\n    return a // b",
            "gg_min": "def gg_min(a: int, b: int) -> int:\n    return min(a, b)",
        }
        return tuple(body for name, body in helpers.items() if f"{name}(" in text)

    @property
    def py_all_helpers(self) -> tuple[str, ...]:
        """The helpers of this call and of the backward pass's calls."""
        found = [h for p in (self, *self.backward) for h in p.py_helpers]
        return tuple(dict.fromkeys(found))

    @property
    def py_targets(self) -> str:
        """register()'s targets: the forward's, then the backward kernels'."""
        items = ["TARGET: SYMBOL", *(f"{b.py_const}: {b.py_symbol_const}" for b in self.backward)]
        return py_collection("targets = {", items, "}", 4)

    @property
    def bwd_role(self) -> dict[str, EntryPointText]:
        return {b.role: b for b in self.backward}

    @property
    def bwd_plain(self) -> bool:
        """No bias, alpha or activation: d out itself is the product's gradient."""
        k = self.kernel
        return (k.bias.mode is ir.BiasMode.NONE and k.epilogue.alpha is None
                and k.epilogue.activation is ir.Activation.NONE)

    @property
    def py_bwd_note(self) -> str:
        """The module docstring's line on the XLA part of a backward pass
        with an epilogue, wrapped at 80 columns."""
        import textwrap

        k = self.kernel
        text = "d_prod, the gradient of the product, is d_out"
        if k.epilogue.activation is not ir.Activation.NONE:
            text += " through the activation's derivative at the pre-activation"
        if k.epilogue.alpha is not None:
            text += ", times alpha"
        text += ", by XLA operations"
        if k.bias.mode is ir.BiasMode.GROUP:
            text += "; so is the bias's gradient: d_pre summed over each group's rows"
        elif k.bias.mode is ir.BiasMode.N:
            text += "; so is the bias's gradient: d_pre summed over the rows"
        text += "."
        return textwrap.fill(text, 80)

    @property
    def py_cuda_bwd(self) -> tuple[str, ...]:
        """The body of `_cuda_bwd` after d existing_out: the pre-activation's
        gradient (through the activation at the pre-activation that
        <name>_grad_pre recomputes), the bias's, then the product's by the
        d lhs and d rhs kernels, as the Pallas module's backward pass."""
        k = self.kernel
        nk = k.rhs_operand.layout is ir.Layout.NK
        rest = ["group_sizes", "group_offset", "None"]
        roles = self.bwd_role
        lines = []
        if self.bwd_plain:
            lines += ["    # (2) d lhs = d out @ rhs per group, d rhs per group by tgmm. Neither",
                      "    #     kernel reads a row outside the local groups, and d lhs is zero there.",
                      "    d_prod = d_out.astype(lhs.dtype)"]
        else:
            d_out = "jnp.where(owned, d_out.astype(jnp.float32), 0.0)"
            if "grad_pre" in roles:
                pre = roles["grad_pre"]
                args = ["None" if n == "existing_out" else n for n in pre.pallas_names]
                lines += [
                    "    # (2) Back through the activation, at the pre-activation (f32: alpha *",
                    "    #     product + bias on the local groups' rows) that the forward's",
                    f"    #     kernel without its activation recomputes ({pre.name}).",
                    py_call(f"pre = {pre.py_cuda_name}(", args, ")", 4),
                    "    _, activation_vjp = jax.vjp(_pallas._activation, pre)",
                    f"    (d_pre,) = activation_vjp({d_out})",
                    "    d_pre = jnp.where(owned, d_pre, 0.0)"]
            else:
                lines += ["    # (2) No activation: the pre-activation's gradient is d out on the",
                          "    #     local groups' rows (no recomputation).",
                          f"    d_pre = {d_out}"]
            if k.bias.mode is ir.BiasMode.N:
                lines += ["    # The bias's: d_pre summed over the rows (a deterministic reduction).",
                          "    d_bias = jnp.sum(d_pre, axis=0).astype(bias.dtype)"]
            elif k.bias.mode is ir.BiasMode.GROUP:
                lines += ["    # The bias's: d_pre summed over each local group's rows.",
                          "    d_bias = _group_sums(d_pre, starts, ends)[:, None, :].astype(bias.dtype)"]
            alpha = "_pallas.ALPHA * " if k.epilogue.alpha is not None else ""
            lines += ["    # (3) The product's: d lhs = d_prod @ rhs per group, d rhs per group by",
                      "    #     tgmm. d_prod is zero outside the local groups (neither kernel reads",
                      "    #     those rows; d lhs is zero there).",
                      f"    d_prod = ({alpha}d_pre).astype(lhs.dtype)"]
        operands = ["d_prod", "lhs"] if nk else ["lhs", "d_prod"]
        grad_lhs, grad_rhs = roles["grad_lhs"], roles["grad_rhs"]
        lines += [py_call(f"d_lhs = {grad_lhs.py_cuda_name}(", ["d_prod", "rhs", *rest], ")", 4),
                  py_call(f"d_rhs = {grad_rhs.py_cuda_name}(", [*operands, *rest, "g=g"], ")", 4),
                  f"    return {self.vjp_grads}"]
        return tuple(lines)

    @property
    def py_tpu_def(self) -> str:
        """The Pallas kernel, compiled for the TPU."""
        if self.local_groups:
            head = "def _on_tpu(*args, g):"
            call = "return _pallas._launch(*args, g=g, interpret=False)"
        else:
            head = "def _on_tpu(*args):"
            call = f"return _pallas.{self.name}(*args, interpret=False)"
        return f'{head}\n    """The Pallas kernel, on a TPU."""\n    {call}'

    @property
    def py_cuda_head(self) -> str:
        params = list(self.pallas_names) + (["*", "g"] if self.local_groups else [])
        return self.py_def(self.py_cuda_name, params)

    @property
    def py_cuda_body(self) -> tuple[str, ...]:
        """The dims the shapes use, the absent operands, the FFI call."""
        values = self._py_values
        used: set[str] = set()
        for name, _, py in reversed(self.derived):
            if any(name in v for v in values):
                used.add(name)
                values = (*values, py)
        lines = []
        for d in self.dims:
            if any(_uses(v, d.name) for v in values) and not (self.local_groups and d.py == d.name):
                lines.append(f"    {d.name} = {d.py}")
        lines += [f"    {name} = {py}" for name, _, py in self.derived if name in used]
        if self.workspace_ints:
            lines.append(py_times4("workspace_bytes", list(self.workspace_ints), 4))
        for a in self.args:
            if a.offset:
                lines += ["    if group_offset is None:",
                          "        group_offset = jnp.zeros((), jnp.int32)"]
            elif a.optional:
                lines += [f"    has_{a.name} = {a.name} is not None",
                          f"    if {a.name} is None:",
                          f"        {a.name} = jnp.zeros((0,), {a.jnp})"]
        # Inside jax.shard_map (check_vma=True) the FFI call's operands share
        # one type and its results say it: the mesh axes any operand varies over.
        lines.append(py_collection("operands = [", [a.name for a in self.args], "]", 4))
        lines.append("    axes = _pallas._varying_axes(*operands)")
        lines.append("    operands = _pallas._vary(operands, axes)")
        lines.append("    result_types = (")
        for o in self.outs:
            shape = "(workspace_bytes,)" if o.name == "workspace" else o.shape_py
            lines.append(f"        _result({shape}, {o.jnp}, axes),  # {o.name}")
        lines.append("    )")
        call = py_call(f"results = jax.ffi.ffi_call({self.py_const}, result_types)(",
                       ["*operands"]
                       + [f"has_{a.name}=has_{a.name}" for a in self.optional_args], ")", 4,)
        lines += call.split("\n")
        outputs = [f"results[{i}]" for i in range(len(self.launch.outputs))]
        lines.append("    return " + ", ".join(outputs))
        return tuple(lines)

    @property
    def py_launch_decorator(self) -> str:
        if self.local_groups:
            return '@functools.partial(jax.jit, static_argnames=("g",))'
        return "@jax.jit"

    @property
    def py_launch_head(self) -> str:
        params = list(self.pallas_names) + (["*", "g"] if self.local_groups else [])
        return self.py_def("_launch", params)

    @property
    def py_validate(self) -> str:
        """The Pallas module's checks, before either kernel is traced."""
        items = [f"{n}={n}" for n in self.pallas_names]
        if self.local_groups:
            # tgmm's checks take g (the wrapper's, from group_offset) instead of the offset.
            items = [i for i in items if i != "group_offset=group_offset"]
            return py_call("g = _pallas._validate(", [*items, "g=g"], ")", 4)
        return py_call("_pallas._validate(", items, ")", 4)

    @property
    def py_dispatch(self) -> str:
        if self.local_groups:
            tpu, default = "functools.partial(_on_tpu, g=g)", "functools.partial(_cuda, g=g)"
        else:
            tpu, default = "_on_tpu", "_cuda"
        items = [*self.pallas_names, f"tpu={tpu}", f"default={default}"]
        return py_call("return lax.platform_dependent(", items, ")", 4)

    @property
    def py_public_head(self) -> str:
        return self.py_def(self.name, self.pallas_params)

    @property
    def py_int32_lines(self) -> tuple[str, ...]:
        """group_sizes and group_offset as int32 arrays, as the Pallas function makes them."""
        names = self.pallas_names
        lines = []
        if "group_sizes" in names:
            lines.append('    group_sizes = _pallas._int32_array("group_sizes", group_sizes, ndim=1)')
        if "group_offset" in names:
            if self.local_groups:
                lines.append("    offset = group_offset")
            lines += ["    if group_offset is not None:",
                      ('        group_offset = _pallas._int32_array("group_offset", group_offset, '
                      "ndim=0)")]
        return tuple(lines)

    @property
    def py_public_body(self) -> tuple[str, ...]:
        lines = list(self.py_int32_lines)
        args = ", ".join(self.pallas_names)
        if self.local_groups:
            lines.append("    # Without existing_out, g = len(group_sizes) - group_offset is an output")
            lines.append("    # shape: fixed here, from the caller's (concrete) offset.")
            lines.append("    g = None if existing_out is not None else "
                         "_pallas._local_groups(group_sizes.shape[0], offset)")
            lines.append(py_call("return _launch(", [*self.pallas_names, "g=g"], ")", 4))
        else:
            lines.append(py_call("return _launch(", list(self.pallas_names), ")", 4))
        del args
        return tuple(lines)


def _uses(text: str, name: str) -> bool:
    """Whether the Python expression `text` names `name`."""
    return name in re.findall(r"[A-Za-z_]\w*", text)
