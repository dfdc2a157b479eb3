"""Rust integration tests of the generated launchers, printed from the Python
side (tests/launchers/test_rust_launchers.py writes them into a copy of each crate as
`tests/plan.rs`).

For every CUDA kernel of a spec, calls at several shapes (each tile of its
LUT, an empty M, an M of 2^24) on several devices (an H100, a 10.0 one (a
B200: the sm_100a path where the spec declares sm_100a), few SMs, sm_89,
one older than the spec's archs; for a spec that runs on
no 9.0 device, such as specs/gb10.gemm, the newest declared arch's device
takes the H100's place and another declared one the 10.0's): the Rust
launcher must
make, on a recording backend that plays the device, exactly the calls of
the kernel's generated Python launcher (`<kernel>.py`: `launches(dims, sm,
num_sms)`, its TensorMapArg maps, `workspace_ints`, its shared-memory
check, `arch_error`), byte for byte in the arguments; a call the Python
launcher refuses (a check of the plan, a wrong shape, a launch over a limit,
too little shared memory on the device) must be refused with the same
message and nothing launched. For every M dispatcher, every M around each
threshold of its arms: the same arm (the Python dispatcher's pick) and that
arm's launches. Every expected value here comes from the Python plan and
launchers; the Rust only has to agree.
"""

from __future__ import annotations

import inspect
import itertools
import re
from dataclasses import dataclass

import numpy as np

from gemmgen import ir
from gemmgen.archs import SM_COUNT, parse_arch, shared_memory_limit
from gemmgen.backends import cuda as cuda_backend
from gemmgen.backends.cuda import dispatch as cuda_dispatch
from gemmgen.backends.cuda.launch import DEFAULT_SMEM, LaunchPlan
from gemmgen.harness.verify_cuda import _np_dtype

ARRAY_BASE = 0x7F00_0000_0000  # fake device addresses: distinct, 256-byte aligned
ARRAY_STRIDE = 0x1_0000_0000
WORKSPACE = 0x7E00_0000_0000
MS = (0, 1, 5, 8, 9, 70, 300, 1 << 24)
# (n = 640: the n >= 512 entries of specs/b200.gemm, two CTA pairs a
# cluster, 5 n tiles of 128.)
NKS = ((128, 256), (384, 128), (256, 100), (130, 64), (384, 256), (640, 128))
SCALAR_VALUES = {"group_offset": (0, 2)}
FIXED = {"g": 3, "num_groups": 5}
# The devices the recording backend plays, (sm, num_sms): an H100 / H200
# (the Hopper path where a kernel has one), one with few SMs (the persistent
# grid is min(SMs, tiles)), an sm_89 one (the mma.sync path), a B200.
HOPPER = (90, 132)
FEW_SMS = (90, 7)
ADA = (89, 128)
# A B200: the sm_100a path where the spec declares sm_100a (with few SMs
# too), else the mma.sync path; at every shape.
BLACKWELL = (100, 148)
BLACKWELL_FEW_SMS = (100, 7)


@dataclass(frozen=True)
class Devices:
    """The devices a spec's cases run on: `main` (every shape), `other` (the
    shapes again where the launches differ), `few_sms` (a persistent grid)."""

    main: tuple[int, int] = HOPPER
    other: tuple[int, int] = BLACKWELL
    few_sms: tuple[int, int] = FEW_SMS


def devices_for(spec: ir.Spec) -> Devices:
    """An H100 and a 10.0 device where the spec runs on 9.0 (its Hopper
    path); else the newest declared arch's device (a GB10 for sm_121a) and
    another declared arch's, as the emulator plays them (archs.SM_COUNT)."""
    archs = spec.target(ir.Backend.CUDA).cuda_archs
    ccs = sorted({parse_arch(a)[0] for a in archs}, reverse=True)
    if any(cc <= 90 and (suffix == "" or cc == 90) for cc, suffix in map(parse_arch, archs)):
        return Devices()
    main = (ccs[0], SM_COUNT[ccs[0]])
    other = (ccs[1], SM_COUNT[ccs[1]]) if len(ccs) > 1 else BLACKWELL
    return Devices(main, other, (ccs[0], 7))
MAP_BYTE = 0xA0  # the recorder's n-th encoded map is 128 bytes of MAP_BYTE + n


@dataclass(frozen=True)
class Call:
    """One case: the arrays present (name -> shape), the scalars, and what
    the Rust launcher must do."""

    shapes: dict[str, tuple[int, ...]]
    scalars: dict[str, int]
    workspace_bytes: int | None  # None: no workspace
    expected: list[str] | str  # the Rust `Call` values, or the refusal message
    device: tuple[int, int] = HOPPER  # (sm, num_sms) the recorder plays


def addresses(plan) -> dict[str, int]:
    return {a.name: ARRAY_BASE + i * ARRAY_STRIDE for i, a in enumerate(plan.arrays)}


def _arg_hex(arg, present: dict[str, tuple[int, ...]], addr: dict[str, int]) -> str:
    if isinstance(arg, str):
        if arg == "workspace":
            value = WORKSPACE
        else:
            value = addr[arg] if arg in present else 0
        return value.to_bytes(8, "little").hex()
    if isinstance(arg, np.int32):
        return int(arg).to_bytes(4, "little", signed=True).hex()
    assert isinstance(arg, np.int64), type(arg)
    return int(arg).to_bytes(8, "little", signed=True).hex()


def py_launches(module, dims: dict[str, int], device: tuple[int, int]):
    """The Python launcher's launches on `device` (sm, num_sms)."""
    if "sm" in inspect.signature(module.launches).parameters:  # a kernel with device paths
        return module.launches(dims, *device)
    return module.launches(dims)


def _encode_text(module, t, addr: dict[str, int]) -> str:
    """The recorder's text of a cuTensorMapEncodeTiled call: the Python
    launcher's TensorMapArg and TENSOR_MAP_MODES."""
    interleave, l2, oob = module.TENSOR_MAP_MODES
    rank = len(t.dims)
    return (f"{addr[t.array]:#x} {t.dtype} {rank} {list(t.dims)} {list(t.strides)} {list(t.box)} "
            f"{[1] * rank} {interleave} {t.swizzle} {l2} {oob}")


def expected_calls(module, dims: dict[str, int], present, addr, smem_limit: int,
                   device: tuple[int, int] = HOPPER) -> list[str] | str:
    """The recording backend's calls for a call with `dims` on `device`, from
    the Python launcher `module`; or the message it refuses the call with."""
    if why := module.arch_error(device[0]):
        return why
    try:
        steps = py_launches(module, dims, device)
        if any(s.smem > 0 for s in steps):
            module.check_launches(steps, dims, smem_limit)
    except ValueError as e:
        return str(e)
    out = []
    maps = {}  # every map encoded before the first launch, in order
    for s in steps:
        for a in s.args:
            if hasattr(module, "TensorMapArg") and isinstance(a, module.TensorMapArg):
                maps[id(a)] = (MAP_BYTE + len(maps)).to_bytes(1, "little").hex() * 128
                out.append(f"Call::Encode({rust_str(_encode_text(module, a, addr))}.to_string())")
    for s in steps:
        if s.smem > DEFAULT_SMEM:
            out.append(f'Call::Attr("{s.entry}", {s.smem})')
        args = ", ".join(f'"{maps[id(a)] if id(a) in maps else _arg_hex(a, present, addr)}"'
                         for a in s.args)
        grid = ", ".join(str(int(g)) for g in s.grid)
        block = ", ".join(str(int(b)) for b in s.block)
        cluster = tuple(getattr(s, "cluster", (1, 1, 1)))  # only clustered launchers have it
        if cluster != (1, 1, 1):
            dims3 = ", ".join(str(int(c)) for c in cluster)
            out.append(f'Call::cluster("{s.entry}", [{grid}], [{block}], [{dims3}], {s.smem}, '
                       f'&[{args}])')
            continue
        out.append(f'Call::launch("{s.entry}", [{grid}], [{block}], {s.smem}, &[{args}])')
    return out


def _candidates(plan: LaunchPlan):
    """Dims to try, in a fixed order: every M with every (n, k), the
    scalars' values and the optional arrays present or not."""
    optional = [a.name for a in plan.arrays if a.optional]
    scalar_names = [s.name for s in plan.scalars]
    for m, (n, k), scalars, opt in itertools.product(
            MS, NKS, itertools.product(*(SCALAR_VALUES[s] for s in scalar_names)),
            (True, False)):
        dims = {d: v for d, v in {"m": m, "n": n, "k": k, **FIXED}.items() if d in plan.dims}
        dims |= dict(zip(scalar_names, scalars))
        present = {a.name for a in plan.arrays if not a.optional}
        if opt:
            present |= set(optional)
        yield dims, present


def _call_for(plan: LaunchPlan, dims: dict[str, int], present: set[str]):
    """(env, shapes) of a call, with each dim bound by a fallback left to it
    when its array is absent."""
    given = dict(dims)
    for b in plan.bindings:
        if b.fallback is not None and b.arg not in present:
            given.pop(b.dim, None)
    env = plan.env(given)
    shapes = {a.name: tuple(s.eval(env) for s in a.shape) for a in plan.arrays if a.name in present}
    return env, shapes


def valid(plan: LaunchPlan, env) -> bool:
    return all(c.cond.eval(env) for c in plan.checks)


def _np_array(arg, shape):
    dtype = _np_dtype(arg.nptype)
    return np.zeros(shape, dtype=dtype)


def python_refusal(module, plan: LaunchPlan, shapes, scalars) -> str:
    """The message the Python launcher's validate() raises for arrays of
    these shapes."""
    arrays = {a.name: _np_array(a, shapes[a.name]) for a in plan.arrays if a.name in shapes}
    try:
        module.validate(**arrays, **scalars)
    except ValueError as e:
        return str(e)
    raise AssertionError(f"{plan.name}: the Python launcher accepts {shapes} {scalars}")


def kernel_cases(plan: LaunchPlan, module, smem_limit: int,
                 dev: Devices | None = None) -> list[Call]:
    dev = dev or Devices()
    cases: list[Call] = []
    seen_variants: set[int] = set()
    per_m: set[int] = set()
    names = plan.names
    failing = None
    for dims, present in _candidates(plan):
        env, shapes = _call_for(plan, dims, present)
        if not valid(plan, env):
            if failing is None and max(dims.values()) < 1 << 20:
                failing = (shapes, {s.name: env[s.name] for s in plan.scalars})
            continue
        variant = plan.variant_for(env).index
        key_m = dims["m"]
        if key_m in per_m and variant in seen_variants:
            continue
        per_m.add(key_m)
        seen_variants.add(variant)
        py_dims = {n: env[n] for n in names}
        expected = expected_calls(module, py_dims, shapes, addresses(plan), smem_limit, dev.main)
        ws = 4 * plan.variant_for(env).workspace_ints.eval(env) if plan.has_workspace else None
        if ws is not None:
            assert ws == 4 * module.workspace_ints(py_dims)
        scalars = {s.name: env[s.name] for s in plan.scalars}
        cases.append(Call(shapes, scalars, ws, expected, dev.main))
        if plan.has_paths:  # the mma.sync path at the same shape
            mma = expected_calls(module, py_dims, shapes, addresses(plan), smem_limit, dev.other)
            if mma != expected:
                cases.append(Call(shapes, scalars, ws, mma, dev.other))
    assert cases, f"{plan.name}: no valid case"
    assert seen_variants == {v.index for v in plan.variants}, f"{plan.name}: a tile never picked"
    # Other devices: few SMs and an sm_89 one (the mma.sync path) where the
    # spec declares sm_89, for the first call that launches something; and
    # a device older than the spec's archs, refused.
    busy = next(c for c in cases if isinstance(c.expected, list) and c.expected)
    dims = _dims_of(plan, busy)
    devices = [dev.few_sms] if plan.has_paths else []
    if dev.other == BLACKWELL and any(p.body == "tcgen05" for p in plan.paths):
        devices.append(BLACKWELL_FEW_SMS)
    if plan.min_sm <= ADA[0]:
        devices.append(ADA)
    devices.append((plan.min_sm - 1, 16))
    for device in devices:
        expected = expected_calls(module, dims, busy.shapes, addresses(plan), smem_limit, device)
        cases.append(Call(busy.shapes, busy.scalars, busy.workspace_bytes, expected, device))
    # Refusals: a check of the plan, a wrong output shape, too little
    # shared memory on the device.
    if failing is not None:
        shapes, scalars = failing
        cases.append(Call(shapes, scalars, _workspace_for(plan, shapes, scalars),
                          python_refusal(module, plan, shapes, scalars), dev.main))
    first = cases[0]
    out = plan.outputs[0]
    bad = dict(first.shapes)
    bad[out.name] = (*bad[out.name][:-1], bad[out.name][-1] + 1)
    if max(max(s) for s in bad.values() if s) < 1 << 20:
        cases.append(Call(bad, first.scalars, first.workspace_bytes,
                          python_refusal(module, plan, bad, first.scalars), dev.main))
    return cases


def _workspace_for(plan, shapes, scalars) -> int | None:
    if not plan.has_workspace:
        return None
    return 1 << 20


def rust_args(module_name: str, plan, shapes, scalars, workspace_bytes, type_path: str) -> str:
    addr = addresses(plan)
    fields = []
    for a in plan.args:
        if a.is_scalar:
            fields.append(f"{a.name}: {scalars[a.name]}")
            continue
        if a.name in shapes:
            value = f"Array::new({addr[a.name]:#x}, {list(shapes[a.name])})"
            value = f"Some({value})" if a.optional else value
        else:
            assert a.optional
            value = "None"
        fields.append(f"{a.name}: {value}")
    if workspace_bytes is not None:
        fields.append(f"workspace: Workspace {{ ptr: {WORKSPACE:#x}, bytes: {workspace_bytes} }}")
    return f"{type_path} {{ {', '.join(fields)} }}"


def rust_check(call: str, expected: list[str] | str, device: tuple[int, int] = HOPPER,
               indent: str = "    ") -> list[str]:
    dev = f"({device[0]}, {device[1]})"
    if isinstance(expected, str):
        return [f"{indent}refused({dev}, |r| {call}, {rust_str(expected)});"]
    calls = ", ".join(expected)
    return [f"{indent}launched({dev}, |r| {call}, &[{calls}]);"]


def rust_str(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


PRELUDE = """\
// Printed by tests/rust_plan_cases.py from the Python launch plans.
#![allow(clippy::all)]
#[allow(unused_imports)]
use {lib}::common::{{Array, Backend, CuTensorMap, Device, Error, KernelArg, TiledMap, Workspace}};
use {lib}::*;

#[derive(Debug, PartialEq, Eq)]
enum Call {{
    Encode(String),
    Attr(&'static str, u32),
    Launch(&'static str, [u32; 3], [u32; 3], u32, Vec<String>),
{cluster_variant}}}

impl Call {{
    fn launch(entry: &'static str, grid: [u32; 3], block: [u32; 3], smem: u32, args: &[&str]) -> Call {{
        Call::Launch(entry, grid, block, smem, args.iter().map(|s| s.to_string()).collect())
    }}
{cluster_helper}}}

struct Recorder {{
    calls: Vec<Call>,
    smem_limit: u32,
    device: Device,
    maps: u64,
}}

impl Recorder {{
    fn new(device: (i64, i64), smem_limit: u32) -> Recorder {{
        Recorder {{ calls: Vec::new(), smem_limit, device: Device {{ sm: device.0, num_sms: device.1 }}, maps: 0 }}
    }}
}}

impl Backend for Recorder {{
    type Kernel = &'static str;
    type Stream = ();
    type Error = String;
    fn device(&mut self) -> Result<Device, String> {{
        Ok(self.device)
    }}
    fn encode_tensor_map(&mut self, t: &TiledMap) -> Result<CuTensorMap, String> {{
        let r = t.rank as usize;
        self.calls.push(Call::Encode(format!(
            "{{:#x}} {{}} {{}} {{:?}} {{:?}} {{:?}} {{:?}} {{}} {{}} {{}} {{}}", t.address, t.dtype, t.rank, &t.dims[..r],
            &t.strides[..r - 1], &t.box_dims[..r], &t.element_strides[..r], t.interleave, t.swizzle,
            t.l2_promotion, t.oob_fill)));
        let byte = {map_byte} + self.maps;
        self.maps += 1;
        Ok(CuTensorMap([u64::from_le_bytes([byte as u8; 8]); 16]))
    }}
    fn kernel(&mut self, entry: &'static str) -> Result<&'static str, String> {{
        Ok(entry)
    }}
    fn max_dynamic_smem(&mut self) -> Result<u32, String> {{
        Ok(self.smem_limit)
    }}
    fn set_max_dynamic_smem(&mut self, kernel: &&'static str, bytes: u32) -> Result<(), String> {{
        self.calls.push(Call::Attr(kernel, bytes));
        Ok(())
    }}
    fn launch(&mut self, kernel: &&'static str, grid: [u32; 3], block: [u32; 3], smem: u32,
              _stream: (), args: &[KernelArg]) -> Result<(), String> {{
        assert!(!args.iter().any(|a| matches!(a, KernelArg::TensorMap(_))), "a map not encoded");
        let hex = args.iter().map(|a| a.bytes().iter().map(|b| format!("{{b:02x}}")).collect()).collect();
        self.calls.push(Call::Launch(kernel, grid, block, smem, hex));
        Ok(())
    }}
{cluster_impl}}}

const SMEM_LIMIT: u32 = {smem_limit};

fn launched(device: (i64, i64), f: impl Fn(&mut Recorder) -> Result<(), Error<String>>, expected: &[Call]) {{
    let mut r = Recorder::new(device, SMEM_LIMIT);
    if let Err(e) = f(&mut r) {{
        panic!("refused: {{e}}");
    }}
    assert_eq!(r.calls, expected);
}}

fn refused(device: (i64, i64), f: impl Fn(&mut Recorder) -> Result<(), Error<String>>, message: &str) {{
    let mut r = Recorder::new(device, SMEM_LIMIT);
    match f(&mut r) {{
        Ok(()) => panic!("launched {{:?}}, expected the refusal: {{message}}", r.calls),
        Err(e) => assert_eq!(e.to_string(), message),
    }}
    assert!(r.calls.is_empty(), "launched {{:?}} before refusing", r.calls);
}}

// The device of the smaller shared memory refuses what needs more.
#[allow(dead_code)]
fn with_limit(limit: u32, f: impl Fn(&mut Recorder) -> Result<(), Error<String>>) -> (Vec<Call>, Result<(), String>) {{
    let mut r = Recorder::new(({main_sm}, {main_sms}), limit);
    let out = f(&mut r).map_err(|e| e.to_string());
    (r.calls, out)
}}
"""


# What a crate with a cluster launch (Backend::launch_cluster: a kernel on
# the 2-CTA tile) adds to the prelude; crates without one have no such
# method to implement.
CLUSTER_VARIANT = """\
    Cluster(&'static str, [u32; 3], [u32; 3], [u32; 3], u32, Vec<String>),
"""
CLUSTER_HELPER = """\
    fn cluster(entry: &'static str, grid: [u32; 3], block: [u32; 3], cluster: [u32; 3], smem: u32,
               args: &[&str]) -> Call {
        Call::Cluster(entry, grid, block, cluster, smem, args.iter().map(|s| s.to_string()).collect())
    }
"""
CLUSTER_IMPL = """\
    fn launch_cluster(&mut self, kernel: &&'static str, grid: [u32; 3], block: [u32; 3],
                      cluster: [u32; 3], smem: u32, _stream: (), args: &[KernelArg])
                      -> Result<(), String> {
        assert!(!args.iter().any(|a| matches!(a, KernelArg::TensorMap(_))), "a map not encoded");
        let hex = args.iter().map(|a| a.bytes().iter().map(|b| format!("{b:02x}")).collect()).collect();
        self.calls.push(Call::Cluster(kernel, grid, block, cluster, smem, hex));
        Ok(())
    }
"""


def has_clusters(spec: ir.Spec) -> bool:
    """Whether the crate of `spec` has a cluster launch."""
    return any(cuda_backend.plan(k, spec).has_clusters for k in spec.kernels_for(ir.Backend.CUDA))


def smem_limit(spec: ir.Spec) -> int:
    """The device the recording backend claims to be: the declared arch
    with the most shared memory."""
    return max(shared_memory_limit(a) for a in spec.target(ir.Backend.CUDA).cuda_archs)


def plan_tests(spec: ir.Spec, lib: str, modules: dict[str, object],
               dispatch_modules: dict[str, object]) -> tuple[str, int]:
    """The text of tests/plan.rs for the crate `lib` of `spec`, and the
    number of cases. `modules` are the kernels' generated Python launchers
    by name, `dispatch_modules` the dispatchers'."""
    limit = smem_limit(spec)
    dev = devices_for(spec)
    clusters = has_clusters(spec)
    lines = [PRELUDE.format(lib=lib, smem_limit=limit, map_byte=MAP_BYTE, main_sm=dev.main[0],
                            main_sms=dev.main[1],
                            cluster_variant=CLUSTER_VARIANT if clusters else "",
                            cluster_helper=CLUSTER_HELPER if clusters else "",
                            cluster_impl=CLUSTER_IMPL if clusters else "")]
    count = 0
    for k in spec.kernels_for(ir.Backend.CUDA):
        plan = cuda_backend.plan(k, spec)
        module = modules[k.name]
        lines += ["#[test]", f"fn {k.name}() {{"]
        for c in kernel_cases(plan, module, limit, dev):
            args = rust_args(k.name, plan, c.shapes, c.scalars, c.workspace_bytes,
                             f"{k.name}::Args")
            lines += rust_check(f"{k.name}::launch(r, &{args}, ())", c.expected, c.device)
            count += 1
        # Too little shared memory on the device: refused before any launch.
        smem = plan.max_smem
        if smem > 0:
            case = next(c for c in kernel_cases(plan, module, limit, dev)
                        if isinstance(c.expected, list) and c.expected)
            dims = _dims_of(plan, case)
            try:
                steps = py_launches(module, dims, dev.main)
                module.check_launches(steps, dims, 1024)
                message = None
            except ValueError as e:
                message = str(e)
            if message is not None:
                args = rust_args(k.name, plan, case.shapes, case.scalars, case.workspace_bytes,
                                 f"{k.name}::Args")
                lines += [f"    let (calls, out) = with_limit(1024, |r| {k.name}::launch(r, &{args}, ()));",
                          "    assert!(calls.is_empty());",
                          f"    assert_eq!(out, Err({rust_str(message)}.to_string()));"]
                count += 1
        lines += ["}", ""]
    for d in spec.dispatches:
        if not all(ir.Backend.CUDA in spec.kernel(r.kernel).backends for r in d.rules):
            continue
        dp = cuda_dispatch.plan(d, spec)
        dmod = dispatch_modules[d.name]
        lines += ["#[test]", f"fn {d.name}() {{"]
        for m in dispatch_ms(dp):
            idx = dmod.pick_index(m)
            lines.append(f"    assert_eq!({d.name}::pick({m}), {idx});")
            arm = dmod.ARMS[idx]
            arm_plan = cuda_backend.plan(spec.kernel(arm), spec)
            arm_module = modules[arm]
            for nk in NKS:
                dims = {"m": m, "n": nk[0], "k": nk[1]}
                env, shapes = _call_for(arm_plan, dims, {a.name for a in arm_plan.arrays})
                if valid(arm_plan, env):
                    break
            else:
                raise AssertionError(f"{d.name}: no valid shape at m={m}")
            py_dims = {n: env[n] for n in arm_plan.names}
            expected = expected_calls(arm_module, py_dims, shapes, addresses(arm_plan), limit,
                                      dev.main)
            args = rust_args(d.name, arm_plan, shapes, {}, None, f"{d.name}::Args")
            lines += rust_check(f"{d.name}::launch(r, &{args}, ())", expected, dev.main)
            count += 1
        lines += ["}", ""]
    return "\n".join(lines), count


def _dims_of(plan, case: Call) -> dict[str, int]:
    dims = {}
    for b in plan.bindings:
        if b.fallback is None or b.arg in case.shapes:
            dims[b.dim] = case.shapes[b.arg][b.axis] * b.mul
    dims |= case.scalars
    env = plan.env(dims)
    return {n: env[n] for n in plan.names}


def dispatch_ms(dp) -> list[int]:
    """Every M within one of each threshold of the arms' conditions, and 0
    and a large M."""
    values = {0, 1 << 12}
    for a in dp.arms:
        for v in re.findall(r"\d+", a.cond):
            values |= {int(v) - 1, int(v), int(v) + 1}
    return sorted(v for v in values if v >= 0)
