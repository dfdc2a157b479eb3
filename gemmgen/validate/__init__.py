"""Syntax tree -> frozen IR, with every problem reported at its position.

The validator collects all problems of a spec before raising, so one run of
`gemmgen build` shows everything that is wrong. It checks, in order:

1. blocks: known kinds, names `gemmgen.names` accepts, one `defaults`
   block, known targets with known archs / TPU generations;
2. fields of each kernel: known names (with a nearest-word suggestion), the
   values each field admits, required fields present, no duplicates; a
   backend's own tile LUT (`tile pallas_tpu ...`, `tile_rule pallas_tpu
   ...`) for a backend the kernel lists;
3. sweeps: a field with alternatives (`out f32 | bf16`) expands the kernel
   into one variant per combination, named `<base>_<field>_<token>`;
4. kernel semantics: dtypes against the op, scale modes against the operand
   they scale, tiles against scale blocks, packing of sub-byte types,
   silu_mul parity, arch features (FP8 MMA needs sm_89+);
5. the spec as a whole: unique names that do not clash (one C++ symbol,
   or equal but for case: `gemmgen.names.collisions`), dispatch arms naming
   compatible kernels;
6. each listed backend's own diagnostics of each kernel (a feature it
   cannot emit yet is an error, never wrong code), whatever else is wrong
   in the spec, and beside a kernel's own errors where they cannot follow
   from them (`validate.kernel_checks`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import PurePosixPath

from gemmgen import ir
from gemmgen.diagnostics import Diagnostic, SpecError, suggest
from gemmgen.ir import Backend, Loc
from gemmgen.names import collisions, name_problem
from gemmgen.parse import Block, Field, SpecAst
from gemmgen.validate.common import (
    BLOCK_KINDS, DTYPE_ALIASES, DTYPE_WORDS, KERNEL_FIELDS, MAX_VARIANTS, REPEATABLE,
    SWEEPABLE, Collector, identifier_problem,
)
from gemmgen.validate.dispatch import read_dispatch
from gemmgen.validate.fields import KernelReader
from gemmgen.validate.kernel_checks import ReadKernel, backend_checks, field_lines
from gemmgen.validate.sweeps import check_defaults_tiles, expand
from gemmgen.validate.targets import read_target
from gemmgen.validate import tuned as tuned_blocks

__all__ = [
    "BLOCK_KINDS", "DTYPE_ALIASES", "DTYPE_WORDS", "KERNEL_FIELDS", "MAX_VARIANTS",
    "REPEATABLE", "SWEEPABLE", "identifier_problem", "name_problem", "validate",
]


def validate(ast: SpecAst, *, stem: str | None = None,
             diagnose: Callable[[ir.Kernel, ir.Spec], list[Diagnostic]] | None = None) -> ir.Spec:
    """Check a parsed spec and build its IR; raise SpecError with all problems.

    `diagnose(kernel, spec)` is each backend's own check (see
    `gemmgen.backends.diagnose`); it runs on every kernel built, its
    findings collected with the rest (`validate.kernel_checks`).
    """
    c = Collector()
    targets: dict[Backend, ir.Target] = {}
    defaults: tuple[Field, ...] = ()
    kernel_blocks: list[Block] = []
    dispatch_blocks: list[Block] = []
    tuned_list: list[Block] = []
    names: dict[str, tuple[Loc, str]] = {}

    def claim(name: str, loc: Loc, kind: str) -> None:
        if name in names:
            c.err(loc, f"duplicate name '{name}' (first defined at {names[name][0]})", len(name))
        else:
            names[name] = (loc, kind)

    for block in ast.blocks:
        if block.kind == "defaults":
            if block.name is not None:
                c.err(block.name_loc, "a defaults block has no name")
            if defaults:
                c.err(block.loc, "only one defaults block per spec")
            for f in block.fields:
                if f.name not in KERNEL_FIELDS:
                    c.err(f.loc, f"defaults: unknown field '{f.name}'"
                          f"{suggest(f.name, KERNEL_FIELDS)}", len(f.name))
            defaults = tuple(f for f in block.fields if f.name in KERNEL_FIELDS)
            check_defaults_tiles(c, defaults)
            continue
        if block.name is None:
            c.err(block.loc, f"a {block.kind} block needs a name: '{block.kind} NAME {{'",
                  len(block.kind))
            continue
        if block.kind == "target":
            if (t := read_target(c, block)) is not None:
                if t.backend in targets:
                    c.err(block.name_loc, f"target '{block.name}' declared twice")
                targets[t.backend] = t
            continue
        if block.kind == "tuned":
            tuned_list.append(block)  # read once every target is known
            continue
        if problem := name_problem(block.name):
            c.err(block.name_loc, f"{block.kind} name {problem}", len(block.name))
            continue
        (kernel_blocks if block.kind == "kernel" else dispatch_blocks).append(block)

    tuned = [t for b in tuned_list if (t := tuned_blocks.read_tuned(c, b, targets)) is not None]
    tuned_blocks.claim_devices(c, tuned)
    tuned_rules = tuned_blocks.by_kernel(tuned)
    kernels: dict[str, ir.Kernel] = {}  # those whose fields read (rules may have failed)
    failed: set[str] = set()  # those whose fields did not
    read: list[ReadKernel] = []  # every kernel built, for the backends' checks
    block_names: dict[str, Loc] = {}
    for block in kernel_blocks:
        assert block.name is not None
        if block.name in block_names:
            c.err(block.name_loc, f"kernel '{block.name}' is defined twice (first at "
                  f"{block_names[block.name]})", len(block.name))
            continue
        block_names[block.name] = block.name_loc
        n_block = len(c.diags)
        variants, repeated, own_tiles = expand(c, block, defaults)
        block_errors = c.diags[n_block:]  # unknown fields, sweeps: every variant's
        for v in variants:
            name = f"{block.name}_{v.suffix}" if v.suffix else block.name
            if v.suffix and (problem := name_problem(name)):
                c.err(block.name_loc, f"variant name {problem}", len(block.name))
                continue
            claim(name, block.name_loc, "kernel")
            reader = KernelReader(c, name, block.name_loc, v.fields, repeated, targets,
                                  ast.path, own_tiles)
            reader.tuned = tuned_rules.get(name, [])
            n_kernel = len(c.diags)
            k = reader.read()
            if k is None:
                failed.add(name)
                continue
            if v.suffix:
                k = replace(k, variant_of=block.name)
            if name in kernels or name in failed:
                continue
            if reader.fields_read:
                kernels[name] = k
            else:
                failed.add(name)
            read.append(ReadKernel(k, tuple(block_errors + c.diags[n_kernel:]),
                                   field_lines(block.fields + defaults)))
    dispatches = []
    for block in dispatch_blocks:
        assert block.name is not None
        claim(block.name, block.name_loc, "dispatch")
        if (d := read_dispatch(c, block, kernels, frozenset(failed))) is not None:
            dispatches.append(d)
    tuned_blocks.check_kernels(c, tuned, kernels, names)
    c.diags.extend(collisions((name, loc, kind) for name, (loc, kind) in names.items()))
    if not kernel_blocks and not c.diags:
        c.err(Loc(ast.path, 1, 1), "the spec declares no kernel")

    spec = ir.Spec(
        path=ast.path,
        stem=stem or PurePosixPath(ast.path).stem,
        targets=tuple(sorted(targets.values(), key=lambda t: t.backend.value)),
        kernels=tuple(kernels.values()),
        dispatches=tuple(dispatches),
        tuned=tuned_blocks.finish(tuned, kernels),
    )
    if diagnose is not None:  # beside every other problem: kernel_checks
        # A dispatcher's checks (the CUDA backend's, with its else arm's) read
        # its arms as valid kernels: none with an arm that has errors.
        sound = {rk.kernel.name for rk in read if not rk.errors}
        checked = replace(spec, dispatches=tuple(
            d for d in spec.dispatches if all(r.kernel in sound for r in d.rules)))
        c.diags.extend(backend_checks(read, checked, diagnose))
    if c.diags:
        raise SpecError(c.diags)
    return spec
