"""The Rust launchers (`launchers cpp cupy rust` in a spec's cuda target:
`generated/<stem>/rust/`, gemmgen/backends/cuda/rust/, docs/rust.md).

Over the crates of specs/dense.gemm and specs/moe.gemm, rendered in memory
and copied into one cargo workspace per test session (one target dir, so
each crate compiles once):

- every generated .rs passes `rustfmt --check` with the crate's
  rustfmt.toml, and `unsafe` appears in cuda_driver.rs only (lib.rs denies
  it elsewhere);
- the crates compile with `-D warnings` (RUSTFLAGS, the command-line form of
  `#![deny(warnings)]`), and `cargo clippy -- -D warnings` is clean with the
  feature `cuda-driver` on, where clippy is installed;
- tests/rust_plan_cases.py prints Rust tests from the Python launchers of
  every kernel and dispatcher (their launches for several shapes, each
  dispatcher's arm at every threshold, the messages of refused calls);
  `cargo test` runs them against a recording backend;
- the Rust launchers of dense, grouped and FP8 block-scaled kernels run on
  the CPU emulator through a C ABI (a cdylib whose Backend calls back into
  a C++ host program, which launches with the emulator's cudaLaunchKernel
  and encodes tensor maps with its cuTensorMapEncodeTiled), on sm_89 and
  on sm_90a (the Hopper path), and the output matches gemmgen/reference;
- the crate's `cuda-driver` backend runs against a CPU stand-in of libcuda
  (tests/rust_driver_standin.c, gcc against cuda.h) that forwards onto the
  emulator: output, the driver calls it logs, planted driver bugs;
- the spec language's `launchers` field: positioned errors for bad values.

The tests skip, saying why, only where no Rust toolchain (cargo and rustc)
is installed; .ci/run installs one.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from rust_plan_cases import has_clusters, plan_tests, rust_str

from gemmgen import backends, ir
from gemmgen.backends import cuda as cuda_backend
from gemmgen.backends.cuda.launch import DEFAULT_SMEM
from gemmgen.build import render_spec
from gemmgen.cases import Case
from gemmgen.diagnostics import SpecError
from gemmgen.harness.runner import load_generated_module
from gemmgen.harness.verify_cuda import _np_dtype, bound_dims
from gemmgen.parse import parse
from gemmgen.reference import compare, reference
from gemmgen.validate import validate

REPO = Path(__file__).resolve().parents[2]
STEMS = ("dense", "moe", "gb10", "b200", "kinds")
CARGO_HOME_BIN = Path.home() / ".cargo" / "bin"


def tool(name: str) -> str | None:
    found = shutil.which(name)
    if found is None and (CARGO_HOME_BIN / name).is_file():
        found = str(CARGO_HOME_BIN / name)
    return found


CARGO, RUSTC, RUSTFMT = tool("cargo"), tool("rustc"), tool("rustfmt")
needs_rust = pytest.mark.skipif(
    CARGO is None or RUSTC is None,
    reason="no Rust toolchain (cargo and rustc not on PATH nor in ~/.cargo/bin); "
           ".ci/run installs one")


# Every CUDA kind with a tile LUT where it has one, static dims, an epilogue
# that halves n, and a dispatcher: the crate of a spec beside specs/.
KINDS = """\
target cuda {
  archs sm_89 sm_90a
  launchers cpp cupy rust
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
  backends cuda
}

kernel kinds_gmm_lut {
  op grouped
  lhs bf16 [m, k]
  rhs bf16 [g, n, k]
  out bf16
  epilogue silu_mul
  tile m=128 n=128 k=128
  tile_rule m<=64 -> m=64 n=128 k=128
  backends cuda
}

kernel kinds_static {
  op dense
  lhs e4m3 [m, k]
  rhs e4m3 [n, k]
  out bf16
  dims n=384 k=256
  tile m=64 n=128 k=64
  backends cuda
}

kernel kinds_tgmm {
  op tgmm
  lhs bf16 [m, k]
  rhs bf16 [m, n]
  out f32
  backends cuda
}

kernel kinds_quant {
  op quantize
  lhs bf16 [m, k]
  out e4m3
  out_scale per_token_group k=128 e8m0
  backends cuda
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
  max_m 4
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
  when m <= 4 -> kinds_gemv_batched
  else kinds_tile
}
"""


@dataclass(frozen=True)
class Rendered:
    spec: ir.Spec
    files: dict


@functools.cache
def rendered(stem: str):
    if stem == "kinds":
        spec = validate(parse(KINDS, "specs/kinds.gemm"), stem="kinds")
        return Rendered(spec, backends.render(spec))
    return render_spec(REPO / "specs" / f"{stem}.gemm")


def crate_files(stem: str) -> dict[str, str]:
    return {str(p.relative_to("rust")): t for p, t in rendered(stem).files.items()
            if p.parts[0] == "rust"}


def lib_name(stem: str) -> str:
    return f"gemmgen_{stem}"


def python_launchers(stem: str) -> tuple[dict, dict]:
    """The generated Python launchers of the spec's kernels and dispatchers."""
    folder = Path(tempfile.mkdtemp(prefix=f"gemmgen-rs-py-{stem}-"))
    for rel, text in rendered(stem).files.items():
        if rel.parts[0] == "cuda":
            (folder / rel.name).write_text(text)
    spec = rendered(stem).spec
    kernels = {k.name: load_generated_module(folder / f"{k.name}.py", f"rs_{stem}_{k.name}")
               for k in spec.kernels_for(ir.Backend.CUDA)}
    dispatches = {d.name: load_generated_module(folder / f"{d.name}.py", f"rs_{stem}_{d.name}")
                  for d in spec.dispatches if (folder / f"{d.name}.py").is_file()}
    return kernels, dispatches


# ---------------------------------------------------------------------------
# The cargo workspace of a test session


# The kernels the emulator runs through their Rust launchers: (stem, kernel,
# case, the emulated arch, slow). On sm_89 the mma.sync path; on sm_90a
# (compute capability 9.0, 132 SMs) the Hopper path: tensor maps encoded by
# the emulator's cuTensorMapEncodeTiled, the persistent grid, the
# shared-memory attribute.
HARNESS_KERNELS = {
    "dense": ("dense", "dense_gemm_bf16", Case("ragged", m=70, n=256, k=80), "sm_89", False),
    "dense_sm90": ("dense", "dense_gemm_bf16", Case("ragged", m=70, n=160, k=80), "sm_90a",
                   False),
    "grouped_sm90": ("moe", "moe_bf16_grouped_gemm",
                     Case("sharded", m=150, n=128, k=64, group_sizes=(40, 0, 75, 20, 5),
                          group_offset=1, g_local=3, existing_out=True), "sm_90a", False),
    "fp8_blockscaled_sm90": ("dense", "fp8_gemm_blockscaled_lhs_scale_f32_rhs_scale_f32",
                             Case("ragged", m=40, n=128, k=256), "sm_90a", True),
    # sm_100a (compute capability 10.0, 148 SMs): the tcgen05 body, its
    # worklist and 3D rhs map, the FP32 promotion of block scales.
    "grouped_sm100": ("moe", "moe_bf16_grouped_gemm",
                      Case("sharded", m=150, n=128, k=72, group_sizes=(40, 0, 75, 20, 5),
                           group_offset=1, g_local=3, existing_out=True), "sm_100a", False),
    "fp8_blockscaled_sm100": ("moe", "moe_w8a8_grouped_gemm",
                              Case("ragged", m=140, n=256, k=272, group_sizes=(100, 0, 40)),
                              "sm_100a", True),
    # specs/b200.gemm: the block-scaled tcgen05.mma (W4A8: e4m3 x packed e2m1, e8m0 scales).
    "w4a8_sm100": ("b200", "b200_w4a8_moe_grouped_gemm",
                   Case("groups", m=140, n=136, k=192, group_sizes=(0, 128, 12)), "sm_100a", False),
    # The 2-CTA tile (FP8 experts, m >= 512: the LUT's pair entry, launched
    # by the harness's launch_cluster, cudaLaunchKernelExC with the cluster
    # attribute) and the same kernel's 1-CTA decode entry.
    "pair_sm100": ("b200", "b200_fp8_moe_grouped_gemm",
                   Case("prefill", m=530, n=136, k=208, group_sizes=(300, 0, 230)), "sm_100a", True),
    "pair_decode_sm100": ("b200", "b200_fp8_moe_grouped_gemm",
                          Case("decode", m=1, n=136, k=208, group_sizes=(0, 1)), "sm_100a", True),
    # Two pairs a cluster sharing A by TMA multicast (m >= 2048, n >= 512:
    # clusters of 4 x 1 x 1; 5 n tiles, so the last unit of each row tile
    # has an idle pair).
    "multicast_sm100": ("b200", "b200_fp8_moe_grouped_gemm",
                        Case("prefill_multicast", m=2100, n=520, k=208, group_sizes=(900, 0, 1200)),
                        "sm_100a", True),
    # The block-scaled 2-CTA tile (W4A8 experts at m >= 512: each CTA unpacks
    # its half of B and gathers its scale atoms, tcgen05.cp.cta_group::2).
    "pair_bs_sm100": ("b200", "b200_w4a8_moe_grouped_gemm",
                      Case("prefill", m=530, n=136, k=192, group_sizes=(300, 0, 230)), "sm_100a",
                      True),
    # The weight-only tile (320 threads, raw-byte weight maps, kblock scales
    # promoted per scale block).
    "weight_only_sm100": ("moe", "moe_w4a16_grouped_gemm",
                          Case("ragged", m=140, n=136, k=512, group_sizes=(100, 0, 40)),
                          "sm_100a", True),
    # The 2-CTA tile of DeepSeek's FP8 scales promoted in software and of
    # the weight-only tile (m >= 512: their pair entries, cluster launches).
    "pair_promoted_sm100": ("b200", "b200_fp8_blockscaled_moe_grouped_gemm",
                            Case("prefill", m=530, n=136, k=208, group_sizes=(300, 0, 230)),
                            "sm_100a", True),
    "pair_weight_only_sm100": ("b200", "b200_w4a16_moe_grouped_gemm",
                               Case("prefill", m=530, n=136, k=224, group_sizes=(300, 0, 230)),
                               "sm_100a", True),
}
# The entry suffix of the body each emulated arch takes for these kernels.
BODY_SUFFIX = {"sm_89": "", "sm_90a": "_sm90", "sm_100a": "_sm100"}


class Workspace:
    """The crates, their generated plan tests and the emulator harness, in
    one cargo workspace with one target dir."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.target = root / "target"
        self.times: dict[str, float] = {}
        ready = root / "plan_cases.json"
        if ready.is_file():  # another pytest-xdist worker wrote it
            self.plan_cases: dict[str, int] = json.loads(ready.read_text())
            return
        self.plan_cases = {}
        members = []
        for stem in STEMS:
            crate = root / stem
            for rel, text in crate_files(stem).items():
                (crate / rel).parent.mkdir(parents=True, exist_ok=True)
                (crate / rel).write_text(text)
            kernels, dispatches = python_launchers(stem)
            text, count = plan_tests(rendered(stem).spec, lib_name(stem), kernels, dispatches)
            (crate / "tests").mkdir()
            (crate / "tests" / "plan.rs").write_text(text)
            self.plan_cases[stem] = count
            members.append(stem)
        harness = root / "harness"
        (harness / "src").mkdir(parents=True)
        (harness / "Cargo.toml").write_text(harness_cargo())
        (harness / "src" / "lib.rs").write_text(harness_rust())
        members.append("harness")
        engine = root / "engine"  # docs/rust.md's worked example, compiled as written
        (engine / "src").mkdir(parents=True)
        (engine / "Cargo.toml").write_text(
            '[package]\nname = "engine"\nversion = "0.1.0"\nedition = "2021"\npublish = false\n\n'
            '[dependencies]\ngemmgen-dense = { path = "../dense" }\n'
            'gemmgen-gb10 = { path = "../gb10" }\n')
        (engine / "src" / "lib.rs").write_text(doc_example() + engine_test() + gb10_engine())
        members.append("engine")
        (root / "Cargo.toml").write_text(
            "[workspace]\nresolver = \"2\"\nmembers = [" + ", ".join(f'"{m}"' for m in members)
            + "]\n")
        ready.write_text(json.dumps(self.plan_cases))

    @contextlib.contextmanager
    def locked(self):
        """The workspace to this test alone: pytest-xdist workers share it
        (one build), and a test may plant a bug in it for a while."""
        with open(self.root.parent / "gemmgen-rust.lock", "w") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                yield self
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)

    def cargo(self, *args: str, timeout: float = 600, cwd: Path | None = None,
              target: Path | None = None) -> subprocess.CompletedProcess:
        # One target dir and one RUSTFLAGS for every command, so nothing
        # compiles twice; no debug info and no incremental state (one build).
        env = dict(os.environ, CARGO_TARGET_DIR=str(target or self.target), RUSTFLAGS="-D warnings",
                   CARGO_NET_OFFLINE="true", CARGO_TERM_COLOR="never",
                   CARGO_PROFILE_DEV_DEBUG="0", CARGO_INCREMENTAL="0")
        env["PATH"] = f"{Path(CARGO).parent}{os.pathsep}{env.get('PATH', '')}"
        start = time.monotonic()
        proc = subprocess.run([CARGO, args[0], "--offline", *args[1:]], cwd=cwd or self.root, env=env,
                              capture_output=True, text=True, timeout=timeout, check=False)
        self.times[" ".join(args)] = time.monotonic() - start
        return proc

    @functools.cached_property
    def built(self) -> subprocess.CompletedProcess:
        """`cargo build --workspace --all-targets` (the crates, their plan
        tests, the harness cdylib), -D warnings."""
        return self.cargo("build", "--workspace", "--all-targets")

    @property
    def harness_library(self) -> Path:
        return self.target / "debug" / "libgemmgen_rust_harness.so"


def doc_example(defines: str = "pub fn fp8_fp8_gemm_n128") -> str:
    """The Rust block of docs/rust.md that defines fp8_fp8_gemm_n128 (or
    what `defines` names)."""
    text = (REPO / "docs" / "rust.md").read_text()
    blocks = re.findall(r"```rust\n(.*?)```", text, flags=re.DOTALL)
    (block,) = [b for b in blocks if defines in b]
    return block


# The worked example launches what the Python plan says (one launch, on an
# sm_89 device: the mma.sync path; the recording backend below is the
# engine's stand-in for its binding).
ENGINE_TEST = """
#[cfg(test)]
mod tests {
    use gemmgen_dense::common::{Backend, CuTensorMap, Device, KernelArg, TiledMap};

    #[derive(Default)]
    struct Recorder(Vec<(&'static str, [u32; 3], [u32; 3], u32, Vec<KernelArg>)>);

    impl Backend for Recorder {
        type Kernel = &'static str;
        type Stream = ();
        type Error = String;
        fn device(&mut self) -> Result<Device, String> {
            Ok(Device { sm: @SM@, num_sms: @NUM_SMS@ })
        }
        fn encode_tensor_map(&mut self, _: &TiledMap) -> Result<CuTensorMap, String> {
            Err("no tensor map on the mma.sync path".to_string())
        }
        fn kernel(&mut self, entry: &'static str) -> Result<&'static str, String> {
            Ok(entry)
        }
        fn max_dynamic_smem(&mut self) -> Result<u32, String> {
            Ok(101376)
        }
        fn set_max_dynamic_smem(&mut self, _: &&'static str, _: u32) -> Result<(), String> {
            Err("not needed below 48 KiB".to_string())
        }
        fn launch(&mut self, k: &&'static str, grid: [u32; 3], block: [u32; 3], smem: u32,
                  _: (), args: &[KernelArg]) -> Result<(), String> {
            self.0.push((k, grid, block, smem, args.to_vec()));
            Ok(())
        }
    }

    #[test]
    fn worked_example() {
        let mut gpu = Recorder::default();
        super::fp8_fp8_gemm_n128(&mut gpu, 0x1000, 0x2000, 0x3000, (@M@, @N@, @K@), ()).unwrap();
        assert_eq!(gpu.0, vec![@EXPECTED@]);
        let bad = super::fp8_fp8_gemm_n128(&mut gpu, 0x1000, 0x2000, 0x3000, (8, 128, 100), ());
        assert_eq!(bad.unwrap_err().to_string(), @REFUSAL@);
    }
}
"""


def engine_test() -> str:
    """ENGINE_TEST with the Python launcher's launches and refusal."""
    module = python_launchers("dense")[0]["fp8_fp8_gemm_tile_64x128x64"]
    m, n, k = 70, 256, 128
    pointers = {"lhs": 0x1000, "rhs": 0x2000, "out": 0x3000}
    launches = []
    sm, num_sms = 89, 128
    for step in module.launches({"m": m, "k": k, "n": n, "n_out": n}, sm, num_sms):
        args = ", ".join(f"KernelArg::Ptr({pointers[a]:#x})" if isinstance(a, str)
                         else f"KernelArg::{'I32' if isinstance(a, np.int32) else 'I64'}({int(a)})"
                         for a in step.args)
        launches.append(f'("{step.entry}", {list(map(int, step.grid))}, '
                        f"{list(map(int, step.block))}, {step.smem}, vec![{args}])")
    try:
        module.validate(lhs=np.zeros((8, 100), np.uint8), rhs=np.zeros((128, 100), np.uint8),
                        out=np.zeros((8, 128), np.uint16))
        raise AssertionError("k = 100 accepted")
    except ValueError as e:
        refusal = '"' + str(e).replace('"', '\\"') + '"'
    return (ENGINE_TEST.replace("@SM@", str(sm)).replace("@NUM_SMS@", str(num_sms))
            .replace("@M@", str(m)).replace("@N@", str(n)).replace("@K@", str(k))
            .replace("@EXPECTED@", ", ".join(launches)).replace("@REFUSAL@", refusal))


# The GB10 worked example (docs/rust.md), in a module of its own (its `use`
# lines name gemmgen_gb10's common types): on a GB10 (12.1, 48 SMs) it makes
# the launches of the arm the Python dispatcher picks, raising the
# shared-memory attribute where the arm needs more than 48 KiB; a 9.0 device
# is refused with the Python launcher's message.
GB10_ENGINE_TEST = """
    #[cfg(test)]
    mod tests {
        use gemmgen_gb10::common::{Backend, CuTensorMap, Device, KernelArg, TiledMap};

        type Launched = (&'static str, [u32; 3], [u32; 3], u32, Vec<KernelArg>);

        struct Recorder {
            sm: i64,
            attrs: Vec<(&'static str, u32)>,
            launches: Vec<Launched>,
        }

        impl Backend for Recorder {
            type Kernel = &'static str;
            type Stream = ();
            type Error = String;
            fn device(&mut self) -> Result<Device, String> {
                Ok(Device { sm: self.sm, num_sms: 48 })
            }
            fn encode_tensor_map(&mut self, _: &TiledMap) -> Result<CuTensorMap, String> {
                Err("no tensor map on sm_12x".to_string())
            }
            fn kernel(&mut self, entry: &'static str) -> Result<&'static str, String> {
                Ok(entry)
            }
            fn max_dynamic_smem(&mut self) -> Result<u32, String> {
                Ok(101376)
            }
            fn set_max_dynamic_smem(&mut self, k: &&'static str, bytes: u32) -> Result<(), String> {
                self.attrs.push((k, bytes));
                Ok(())
            }
            fn launch(&mut self, k: &&'static str, grid: [u32; 3], block: [u32; 3], smem: u32,
                      _: (), args: &[KernelArg]) -> Result<(), String> {
                self.launches.push((k, grid, block, smem, args.to_vec()));
                Ok(())
            }
        }

        #[test]
        fn gb10_worked_example() {
@CASES@
        }
    }
"""


def gb10_engine() -> str:
    """docs/rust.md's GB10 example in `mod gb10`, with GB10_ENGINE_TEST's
    expectations from the Python dispatcher and its arms' launchers."""
    kernels, dispatches = python_launchers("gb10")
    mm = dispatches["gb10_dense_mm_bf16"]
    n, k = 384, 256
    pointers = {"lhs": 0x1000, "rhs": 0x2000, "out": 0x3000}
    cases = []
    for m in (1, 5, 8, 9, 64, 300):
        arm = kernels[mm.pick(m)]
        steps = arm.launches({"m": m, "k": k, "n": n, "n_out": n})
        launches, attrs = [], []
        for step in steps:
            args = ", ".join(f"KernelArg::Ptr({pointers[a]:#x})" if isinstance(a, str)
                             else f"KernelArg::{'I32' if isinstance(a, np.int32) else 'I64'}({int(a)})"
                             for a in step.args)
            launches.append(f'("{step.entry}", {list(map(int, step.grid))}, '
                            f"{list(map(int, step.block))}, {step.smem}, vec![{args}])")
            if step.smem > DEFAULT_SMEM:
                attrs.append(f'("{step.entry}", {step.smem})')
        call = f"super::dense_mm_bf16(&mut gpu, 0x1000, 0x2000, 0x3000, ({m}, {n}, {k}), ())"
        cases += ["let mut gpu = Recorder { sm: 121, attrs: vec![], launches: vec![] };",
                  f"{call}.unwrap();",
                  f"assert_eq!(gpu.attrs, vec![{', '.join(attrs)}]);",
                  f"assert_eq!(gpu.launches, vec![{', '.join(launches)}]);"]
    refusal = kernels[mm.pick(5)].arch_error(90)
    assert refusal
    cases += ["let mut h100 = Recorder { sm: 90, attrs: vec![], launches: vec![] };",
              f"let refused = super::dense_mm_bf16(&mut h100, 0x1000, 0x2000, 0x3000, (5, {n}, {k}), ());",
              f"assert_eq!(refused.unwrap_err().to_string(), {rust_str(refusal)});",
              "assert!(h100.launches.is_empty());"]
    body = "\n".join(" " * 12 + line for line in cases)
    return ("\n#[allow(clippy::all)]\npub mod gb10 {\n" + doc_example("pub fn dense_mm_bf16")
            + GB10_ENGINE_TEST.replace("@CASES@", body) + "}\n")


@pytest.fixture(scope="session")
def shared_workspace(tmp_path_factory) -> Workspace:
    """One workspace per test session: under pytest-xdist, in the folder all
    workers share, written by the first."""
    if CARGO is None or RUSTC is None:
        pytest.skip("no Rust toolchain")
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent
    root = base / "gemmgen-rust"
    with open(base / "gemmgen-rust.lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        root.mkdir(exist_ok=True)
        return Workspace(root)


@pytest.fixture
def workspace(shared_workspace):
    with shared_workspace.locked() as ws:
        yield ws


def built(ws: Workspace) -> None:
    proc = ws.built
    assert proc.returncode == 0, f"cargo build failed:\n{proc.stderr}"


# ---------------------------------------------------------------------------
# Form: formatted, warning-free, clippy clean, unsafe only at the FFI


@needs_rust
@pytest.mark.skipif(RUSTFMT is None, reason="rustfmt not installed")
def test_generated_rust_is_rustfmt_formatted(workspace):
    for stem in STEMS:
        crate = workspace.root / stem
        sources = sorted(str(p) for p in (crate / "src").glob("*.rs"))
        proc = subprocess.run([RUSTFMT, "--check", "--config-path", str(crate / "rustfmt.toml"),
                               *sources], capture_output=True, text=True, check=False)
        assert proc.returncode == 0, f"{stem}: rustfmt --check:\n{proc.stdout}{proc.stderr}"


UNSAFE = re.compile(r"\bunsafe\s*(\{|fn\b|impl\b|extern\b|trait\b)")


def test_unsafe_code_only_at_the_ffi_boundary():
    for stem in STEMS:
        files = crate_files(stem)
        assert "#![deny(unsafe_code)]" in files["src/lib.rs"]
        assert "#[allow(unsafe_code)] // the FFI boundary" in files["src/lib.rs"]
        unsafe = sorted(p for p, t in files.items() if UNSAFE.search(t))
        assert unsafe == ["src/cuda_driver.rs"], unsafe


def test_every_cuda_kernel_and_dispatcher_has_a_module():
    for stem in STEMS:
        spec = rendered(stem).spec
        files = crate_files(stem)
        names = [k.name for k in spec.kernels_for(ir.Backend.CUDA)] + [
            d.name for d in spec.dispatches]
        for name in names:
            assert f"src/{name}.rs" in files, name
            assert f"pub mod {name};" in files["src/lib.rs"], name


@needs_rust
def test_crates_compile_without_warnings(workspace):
    built(workspace)
    assert "warning" not in workspace.built.stderr, workspace.built.stderr


@needs_rust
@pytest.mark.skipif(tool("cargo-clippy") is None, reason="clippy not installed")
def test_crates_are_clippy_clean_with_the_driver_backend(workspace):
    built(workspace)
    packages = [x for s in STEMS for x in ("-p", f"gemmgen-{s}")]
    features = ",".join(f"gemmgen-{s}/cuda-driver" for s in STEMS)
    proc = workspace.cargo("clippy", *packages, "--lib", "--features", features,
                           "--", "-D", "warnings")
    assert proc.returncode == 0, proc.stderr
    assert "warning" not in proc.stderr, proc.stderr


# ---------------------------------------------------------------------------
# The launches: the Python plan's, byte for byte


@needs_rust
def test_the_worked_example_of_the_docs_launches_the_plan(workspace):
    """Both worked examples of docs/rust.md: the FP8 GEMM (dense crate) and
    the GB10 dispatcher (gb10 crate)."""
    built(workspace)
    proc = workspace.cargo("test", "-p", "engine", "--lib")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "test result: ok. 2 passed" in proc.stdout, proc.stdout
    assert "gb10::tests::gb10_worked_example ... ok" in proc.stdout, proc.stdout


@needs_rust
@pytest.mark.parametrize("stem", [pytest.param(s, marks=pytest.mark.slow) if s == "b200" else s
                                  for s in STEMS])  # b200: the kinds of the others, on sm_100a
def test_rust_launches_are_the_python_plans(workspace, stem):
    built(workspace)
    assert workspace.plan_cases[stem] >= 40
    proc = workspace.cargo("test", "-p", f"gemmgen-{stem}", "--test", "plan")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    spec = rendered(stem).spec
    tests = len(spec.kernels_for(ir.Backend.CUDA)) + len(spec.dispatches)
    assert f"test result: ok. {tests} passed" in proc.stdout, proc.stdout


def test_plan_tests_would_catch_a_changed_launch():
    """The printed expectations are the Python launcher's: a plan whose
    grid the Rust got wrong would disagree (checked here on the text: the
    expected grid of the first dense_gemm_bf16 case is the Python one)."""
    kernels, dispatches = python_launchers("dense")
    text, _ = plan_tests(rendered("dense").spec, "gemmgen_dense", kernels, dispatches)
    steps = kernels["dense_gemm_bf16"].launches({"m": 1, "k": 256, "n": 128, "n_out": 128})
    (step,) = steps
    grid = ", ".join(str(g) for g in step.grid)
    assert f'Call::launch("dense_gemm_bf16", [{grid}], [{step.block[0]}, 1, 1], {step.smem}' in text
    # Every dispatcher threshold: dense_mm_bf16's arms at m = 1 and m <= 8.
    for m, arm in ((0, 1), (1, 0), (2, 1), (8, 1), (9, 2)):
        assert f"assert_eq!(dense_mm_bf16::pick({m}), {arm});" in text
        assert dispatches["dense_mm_bf16"].pick_index(m) == arm


# ---------------------------------------------------------------------------
# The Rust launcher on the CPU emulator, through a C ABI


def harness_cargo() -> str:
    return "\n".join([
        "[package]", 'name = "gemmgen-rust-harness"', 'version = "0.1.0"', 'edition = "2021"',
        "publish = false", "", "[lib]", 'crate-type = ["cdylib"]', 'path = "src/lib.rs"', "",
        "[dependencies]",
        *(f'gemmgen-{s} = {{ path = "../{s}" }}' for s in STEMS), ""])


def harness_plans():
    return {name: cuda_backend.plan(rendered(stem).spec.kernel(name), rendered(stem).spec)
            for stem, name, *_ in HARNESS_KERNELS.values()}


def harness_kernels() -> dict[str, str]:
    """Each harness kernel once: name -> stem."""
    return {name: stem for stem, name, *_ in HARNESS_KERNELS.values()}


def launch_arms(backend: str, kernels: dict[str, str]) -> str:
    """The match arms of `gg_rust_launch`: kernel name -> its Rust launch()
    on Args built from flat pointer / shape / scalar tables (the plan's
    order)."""
    arms = []
    for name, stem in kernels.items():
        plan = cuda_backend.plan(rendered(stem).spec.kernel(name), rendered(stem).spec)
        lib = lib_name(stem)
        fields, shape_i, array_i, scalar_i = [], 0, 0, 0
        for a in plan.args:
            if a.is_scalar:
                fields.append(f"{a.name}: *scalars.add({scalar_i})")
                scalar_i += 1
                continue
            dims = [f"*shapes.add({shape_i + j})" for j in range(len(a.shape))]
            shape_i += len(a.shape)
            array = f"{lib}::common::Array::new(*ptrs.add({array_i}), [{', '.join(dims)}])"
            if a.optional:
                array = f"(*ptrs.add({array_i}) != 0).then(|| {array})"
            array_i += 1
            fields.append(f"{a.name}: {array}")
        if plan.has_workspace:
            fields.append(f"workspace: {lib}::common::Workspace {{ ptr: workspace, bytes: workspace_bytes }}")
        args = f"{lib}::{name}::Args {{ " + ", ".join(fields) + " }"
        arms.append(f'        "{name}" => {lib}::{name}::launch(&mut {backend}, &{args}, stream)'
                    ".map_err(|e| e.to_string()),")
    return "\n".join(arms)


def harness_rust() -> str:
    """A cdylib with `gg_rust_launch`: builds a kernel's Args and calls its
    Rust launch() with a Backend whose calls go back to the C++ host
    program."""
    impls = "\n".join(f"emu_backend!({lib_name(stem)}{', cluster' if has_clusters(rendered(stem).spec) else ''});"
                      for stem in STEMS)
    return (HARNESS_RS.replace("@ARMS@", launch_arms("backend", harness_kernels()))
            .replace("@IMPLS@", impls))


HARNESS_RS = r"""// The C ABI of tests/launchers/test_rust_launchers.py's emulator runs.
#![allow(clippy::all)]
use std::ffi::{CStr, CString};
use std::os::raw::{c_char, c_void};

#[repr(C)]
pub struct Host {
    kernel: extern "C" fn(*const c_char) -> *const c_void,
    max_smem: extern "C" fn() -> u32,
    set_smem: extern "C" fn(*const c_void, u32) -> i32,
    launch: extern "C" fn(*const c_void, *const u32, *const u32, u32, *mut c_void, *mut *mut c_void) -> i32,
    device: extern "C" fn(*mut i64, *mut i64) -> i32,
    // The emulator's cuTensorMapEncodeTiled, the driver's signature.
    encode: extern "C" fn(*mut c_void, i32, u32, *mut c_void, *const u64, *const u64, *const u32,
                          *const u32, i32, i32, i32, i32) -> i32,
    // The runtime's cudaLaunchKernelExC with the cluster-dimension attribute.
    launch_cluster: extern "C" fn(*const c_void, *const u32, *const u32, *const u32, u32, *mut c_void,
                                  *mut *mut c_void) -> i32,
}

struct Emu<'a> {
    host: &'a Host,
}

// Each generated crate has its own common::Backend: one impl per crate; a
// crate with a cluster launch (the 2-CTA tile) also has launch_cluster.
macro_rules! emu_backend {
    ($lib:ident, cluster) => {
        emu_backend!($lib, {
            fn launch_cluster(&mut self, kernel: &*const c_void, grid: [u32; 3], block: [u32; 3],
                              cluster: [u32; 3], smem: u32, stream: *mut c_void,
                              args: &[$lib::common::KernelArg]) -> Result<(), String> {
                let mut params: Vec<*mut c_void> =
                    args.iter().map(|a| a.value_ptr() as *mut c_void).collect();
                match (self.host.launch_cluster)(*kernel, grid.as_ptr(), block.as_ptr(), cluster.as_ptr(),
                                                 smem, stream, params.as_mut_ptr()) {
                    0 => Ok(()),
                    e => Err(format!("cudaLaunchKernelExC returned {e}")),
                }
            }
        });
    };
    ($lib:ident) => {
        emu_backend!($lib, {});
    };
    ($lib:ident, { $($extra:item)* }) => {
        impl $lib::common::Backend for Emu<'_> {
            type Kernel = *const c_void;
            type Stream = *mut c_void;
            type Error = String;

            fn device(&mut self) -> Result<$lib::common::Device, String> {
                let (mut sm, mut num_sms) = (0i64, 0i64);
                match (self.host.device)(&mut sm, &mut num_sms) {
                    0 => Ok($lib::common::Device { sm, num_sms }),
                    e => Err(format!("cudaDeviceGetAttribute returned {e}")),
                }
            }

            fn encode_tensor_map(&mut self, t: &$lib::common::TiledMap)
                                 -> Result<$lib::common::CuTensorMap, String> {
                let mut map = $lib::common::CuTensorMap::ZERO;
                let code = (self.host.encode)((&mut map as *mut $lib::common::CuTensorMap).cast(),
                    t.dtype as i32, t.rank, t.address as *mut c_void, t.dims.as_ptr(),
                    t.strides.as_ptr(), t.box_dims.as_ptr(), t.element_strides.as_ptr(),
                    t.interleave as i32, t.swizzle as i32, t.l2_promotion as i32, t.oob_fill as i32);
                match code {
                    0 => Ok(map),
                    e => Err(format!("cuTensorMapEncodeTiled returned CUresult {e}")),
                }
            }

            fn kernel(&mut self, entry: &'static str) -> Result<*const c_void, String> {
                let name = CString::new(entry).unwrap();
                let f = (self.host.kernel)(name.as_ptr());
                if f.is_null() { Err(format!("no kernel {entry}")) } else { Ok(f) }
            }

            fn max_dynamic_smem(&mut self) -> Result<u32, String> {
                Ok((self.host.max_smem)())
            }

            fn set_max_dynamic_smem(&mut self, kernel: &*const c_void, bytes: u32) -> Result<(), String> {
                match (self.host.set_smem)(*kernel, bytes) {
                    0 => Ok(()),
                    e => Err(format!("cudaFuncSetAttribute returned {e}")),
                }
            }

            fn launch(&mut self, kernel: &*const c_void, grid: [u32; 3], block: [u32; 3], smem: u32,
                      stream: *mut c_void, args: &[$lib::common::KernelArg]) -> Result<(), String> {
                let mut params: Vec<*mut c_void> =
                    args.iter().map(|a| a.value_ptr() as *mut c_void).collect();
                match (self.host.launch)(*kernel, grid.as_ptr(), block.as_ptr(), smem, stream,
                                         params.as_mut_ptr()) {
                    0 => Ok(()),
                    e => Err(format!("cudaLaunchKernel returned {e}")),
                }
            }

            $($extra)*
        }
    };
}

@IMPLS@

/// Launches kernel `kernel` with the Rust launcher; 0, or 1 with the
/// error's message in `message`.
#[no_mangle]
pub unsafe extern "C" fn gg_rust_launch(host: *const Host, kernel: *const c_char, ptrs: *const u64,
                                        shapes: *const i64, scalars: *const i64, workspace: u64,
                                        workspace_bytes: u64, stream: *mut c_void,
                                        message: *mut c_char, message_len: usize) -> i32 {
    let mut backend = Emu { host: &*host };
    let _ = (scalars, workspace, workspace_bytes);
    let result = match CStr::from_ptr(kernel).to_str().unwrap() {
@ARMS@
        other => Err(format!("no launcher {other}")),
    };
    match result {
        Ok(()) => 0,
        Err(e) => {
            let text = e.to_string();
            let n = text.len().min(message_len - 1);
            std::ptr::copy_nonoverlapping(text.as_ptr(), message as *mut u8, n);
            *message.add(n) = 0;
            1
        }
    }
}
"""


def harness_caller(plan) -> str:
    """The C++ host program: device buffers from the emulator's host I/O,
    the Rust cdylib loaded with dlopen, the callbacks over the emulated
    CUDA runtime."""
    entries = "\n".join(f'extern "C" void {e}(void);' for e in plan.entries)
    lookup = "\n".join(f'  if (std::strcmp(name, "{e}") == 0) return reinterpret_cast<const void*>(&{e});'
                       for e in plan.entries)
    reverse = "\n".join(f'  if (fn == reinterpret_cast<const void*>(&{e})) return "{e}";'
                        for e in plan.entries)
    ptrs = ", ".join(f'device_array("{a.name}")' for a in plan.arrays)
    shapes = ", ".join(f'dim("shape.{a.name}.{i}")' for a in plan.arrays for i in range(len(a.shape)))
    scalars = ", ".join(f'dim("dim.{s.name}")' for s in plan.scalars) or "0"
    outputs = "\n".join(f'    output("{a.name}", reinterpret_cast<void*>(ptrs[{i}]));'
                        for i, a in enumerate(plan.arrays) if a.is_output)
    return f"""// C++ host program of a Rust launcher run (tests/launchers/test_rust_launchers.py).
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

extern "C" int gg_emu_host_input(const char* name, const void** data, size_t* bytes);
extern "C" void gg_emu_host_output(const char* name, const void* data, size_t bytes);
extern "C" CUresult gg_emu_cuTensorMapEncodeTiled(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*,
                                                  const cuuint64_t*, const cuuint64_t*, const cuuint32_t*,
                                                  const cuuint32_t*, CUtensorMapInterleave, CUtensorMapSwizzle,
                                                  CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
{entries}

namespace {{

struct Host {{
  const void* (*kernel)(const char*);
  unsigned (*max_smem)();
  int (*set_smem)(const void*, unsigned);
  int (*launch)(const void*, const unsigned*, const unsigned*, unsigned, void*, void**);
  int (*device)(long long*, long long*);
  decltype(&gg_emu_cuTensorMapEncodeTiled) encode;
  int (*launch_cluster)(const void*, const unsigned*, const unsigned*, const unsigned*, unsigned, void*, void**);
}};

// What the driver stand-in (tests/launchers/test_rust_launchers.py's STANDIN_C) runs
// its calls on.
struct StandinEmu {{
  const void* (*kernel)(const char*);
  int (*launch)(const void*, const unsigned*, const unsigned*, unsigned, void*, void**);
  int (*set_smem)(const void*, unsigned);
  int (*attribute)(int, int*);
  decltype(&gg_emu_cuTensorMapEncodeTiled) encode;
  int (*launch_cluster)(const void*, const unsigned*, const unsigned*, const unsigned*, unsigned, void*, void**);
}};

const void* kernel(const char* name) {{
{lookup}
  return nullptr;
}}

const char* entry_name(const void* fn) {{
{reverse}
  return "?";
}}

unsigned max_smem() {{
  int device = 0, value = 0;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&value, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
  return static_cast<unsigned>(value);
}}

int set_smem(const void* fn, unsigned bytes) {{
  return static_cast<int>(
      cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
}}

std::string launched;  // the entries launched, one a line

int launch(const void* fn, const unsigned* g, const unsigned* b, unsigned smem, void* stream, void** args) {{
  launched += entry_name(fn);
  launched += "\\n";
  return static_cast<int>(cudaLaunchKernel(fn, dim3(g[0], g[1], g[2]), dim3(b[0], b[1], b[2]), args, smem,
                                           static_cast<cudaStream_t>(stream)));
}}

// A cluster launch on the emulator: the runtime's cudaLaunchKernelExC with the
// cluster-dimension attribute.
int launch_cluster(const void* fn, const unsigned* g, const unsigned* b, const unsigned* c, unsigned smem,
                   void* stream, void** args) {{
  launched += entry_name(fn);
  launched += "\\n";
  cudaLaunchAttribute attribute[1] = {{}};
  attribute[0].id = cudaLaunchAttributeClusterDimension;
  attribute[0].val.clusterDim.x = c[0];
  attribute[0].val.clusterDim.y = c[1];
  attribute[0].val.clusterDim.z = c[2];
  cudaLaunchConfig_t config = {{dim3(g[0], g[1], g[2]), dim3(b[0], b[1], b[2]), smem,
                                static_cast<cudaStream_t>(stream), attribute, 1}};
  return static_cast<int>(cudaLaunchKernelExC(&config, fn, args));
}}

int device(long long* sm, long long* num_sms) {{
  int major = 0, minor = 0, sms = 0;
  cudaError_t err = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0);
  if (err == cudaSuccess) err = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0);
  if (err == cudaSuccess) err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  *sm = major * 10 + minor;
  *num_sms = sms;
  return static_cast<int>(err);
}}

// The driver's device attributes the stand-in forwards have the runtime's
// numbers (cudaDeviceAttr mirrors CUdevice_attribute).
int attribute(int attrib, int* value) {{
  return static_cast<int>(cudaDeviceGetAttribute(value, static_cast<cudaDeviceAttr>(attrib), 0));
}}

std::vector<void*> allocations;

std::uint64_t device_array(const char* name) {{
  const void* host = nullptr;
  size_t bytes = 0;
  if (!gg_emu_host_input(name, &host, &bytes)) return 0;
  void* p = nullptr;
  if (cudaMalloc(&p, bytes) != cudaSuccess) return 0;
  allocations.push_back(p);
  if (host != nullptr) cudaMemcpy(p, host, bytes, cudaMemcpyHostToDevice);
  return reinterpret_cast<std::uint64_t>(p);
}}

long long dim(const char* name) {{
  const void* host = nullptr;
  size_t bytes = 0;
  long long v = 0;
  if (gg_emu_host_input(name, &host, &bytes) && host != nullptr && bytes == sizeof v) std::memcpy(&v, host, sizeof v);
  return v;
}}

void output(const char* name, const void* device) {{
  const void* host = nullptr;
  size_t bytes = 0;
  gg_emu_host_input(name, &host, &bytes);
  std::vector<unsigned char> copy(bytes);
  if (cudaMemcpy(copy.data(), device, bytes, cudaMemcpyDeviceToHost) == cudaSuccess)
    gg_emu_host_output(name, copy.data(), bytes);
}}

}}  // namespace

extern "C" int gg_emu_host_main(void) {{
  const void* path = nullptr;
  size_t path_bytes = 0;
  gg_emu_host_input("rust.library", &path, &path_bytes);
  std::vector<char> library(static_cast<const char*>(path), static_cast<const char*>(path) + path_bytes);
  library.push_back(0);
  const void* standin = nullptr;
  size_t standin_bytes = 0;
  if (gg_emu_host_input("standin.library", &standin, &standin_bytes)) {{
    // The Rust library uses the crate's CudaDriver: its libcuda is the
    // stand-in, loaded first and bound to the emulator.
    std::vector<char> so(static_cast<const char*>(standin), static_cast<const char*>(standin) + standin_bytes);
    so.push_back(0);
    void* s = dlopen(so.data(), RTLD_NOW | RTLD_GLOBAL);
    if (s == nullptr) return 1004;
    auto bind = reinterpret_cast<void (*)(const StandinEmu*)>(dlsym(s, "gg_standin_bind"));
    if (bind == nullptr) return 1005;
    static const StandinEmu emu{{kernel, launch, set_smem, attribute, gg_emu_cuTensorMapEncodeTiled,
                                 launch_cluster}};
    bind(&emu);
  }}
  void* handle = dlopen(library.data(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {{
    const char* why = dlerror();
    gg_emu_host_output("message", why, std::strlen(why));
    return 1002;
  }}
  using Launch = int (*)(const Host*, const char*, const std::uint64_t*, const long long*, const long long*,
                         std::uint64_t, std::uint64_t, void*, char*, size_t);
  auto rust_launch = reinterpret_cast<Launch>(dlsym(handle, "gg_rust_launch"));
  if (rust_launch == nullptr) return 1003;
  const Host host{{kernel, max_smem, set_smem, launch, device, gg_emu_cuTensorMapEncodeTiled, launch_cluster}};
  const std::uint64_t ptrs[] = {{{ptrs}}};
  const long long shapes[] = {{{shapes}}};
  const long long scalars[] = {{{scalars}}};
  void* workspace = nullptr;
  const std::uint64_t workspace_bytes = 1 << 20;
  if (cudaMalloc(&workspace, workspace_bytes) != cudaSuccess) return 1000;
  allocations.push_back(workspace);
  cudaStream_t stream = nullptr;
  if (cudaStreamCreate(&stream) != cudaSuccess) return 1001;
  char message[1024] = {{0}};
  const int status = rust_launch(&host, "{plan.name}", ptrs, shapes, scalars,
                                 reinterpret_cast<std::uint64_t>(workspace), workspace_bytes, stream, message,
                                 sizeof message);
  const cudaError_t sync = cudaStreamSynchronize(stream);
  if (status != 0) gg_emu_host_output("message", message, std::strlen(message));
  gg_emu_host_output("launched", launched.data(), launched.size());
  if (standin != nullptr) {{
    auto log = reinterpret_cast<const char* (*)()>(dlsym(RTLD_DEFAULT, "gg_standin_log"));
    if (log != nullptr) gg_emu_host_output("driver.log", log(), std::strlen(log()));
  }}
  if (status == 0 && sync == cudaSuccess) {{
{outputs}
  }}
  cudaStreamDestroy(stream);
  for (void* p : allocations) cudaFree(p);
  return status != 0 ? 1 : static_cast<int>(sync);
}}
"""


def run_rust_on_emulator(ws: Workspace, stem: str, name: str, inputs: dict, arch: str,
                         library: Path | None = None, standin: Path | None = None,
                         log: list | None = None, num_sms: int | None = None):
    """Runs kernel `name`'s Rust launcher (in `library`, default the
    harness cdylib; with `standin`, a library over the crate's CudaDriver
    whose libcuda is that stand-in) on an emulated `arch` device; its
    outputs. `log` gets the stand-in's record of the driver calls."""
    from gemmgen.harness.cuda_emu import EmuModule

    plan = harness_plans()[name]
    folder = ws.root / f"emu-{stem}"
    folder.mkdir(exist_ok=True)
    for rel, text in rendered(stem).files.items():
        if rel.parts[0] == "cuda" and rel.suffix in (".cu", ".h"):
            (folder / rel.name).write_text(text)
    source = (folder / f"{name}.cu").read_text()
    module = EmuModule(source, str(folder / f"{name}.cu"), include_dirs=[folder],
                       extra_sources=[(harness_caller(plan), str(folder / f"{name}_rust_caller.cc"))])
    dims = bound_dims(plan, inputs)
    host: dict[str, object] = {"rust.library": str(library or ws.harness_library).encode()}
    if standin is not None:
        host["standin.library"] = str(standin).encode()
    for a in plan.arrays:
        shape = tuple(s.eval(dims) for s in a.shape)
        if a.is_output:
            host[a.name] = int(np.prod(shape, dtype=np.int64)) * _np_dtype(a.nptype).itemsize
        elif inputs.get(a.name) is not None:
            host[a.name] = np.ascontiguousarray(inputs[a.name])
        if a.is_output or inputs.get(a.name) is not None:
            for i, v in enumerate(shape):
                host[f"shape.{a.name}.{i}"] = np.int64(v)
    for s in plan.scalars:
        host[f"dim.{s.name}"] = np.int64(dims[s.name])
    result = module.run_host(host, arch=arch, sm_count=num_sms)
    if log is not None:
        log.append(result.outputs.get("launched", b"").decode().split())
        log.append(result.outputs.get("driver.log", b"").decode())
    if result.status != 0:
        raise AssertionError(f"{name}: status {result.status}: "
                             f"{result.outputs.get('message', b'').decode()}\n{result.log}")
    outs = []
    for a in plan.outputs:
        shape = tuple(s.eval(dims) for s in a.shape)
        outs.append(np.frombuffer(result.outputs[a.name], dtype=_np_dtype(a.nptype)).reshape(shape))
    return outs[0] if len(outs) == 1 else tuple(outs)


def expected_entries(stem: str, name: str, inputs: dict, arch: str) -> list[str]:
    """The entries the Python launcher launches for `inputs` on the emulated
    `arch` device (its compute capability and SM count)."""
    from gemmgen.archs import parse_arch, sm_count

    plan = harness_plans()[name]
    module = python_launchers(stem)[0][name]
    env = plan.env(bound_dims(plan, inputs))
    dims = {n: env[n] for n in plan.names}
    sm = parse_arch(arch)[0]
    steps = module.launches(dims, sm, sm_count(arch)) if plan.has_paths else module.launches(dims)
    return [s.entry for s in steps]


@needs_rust
@pytest.mark.parametrize("kind", [pytest.param(k, marks=pytest.mark.slow) if v[4] else k
                                  for k, v in HARNESS_KERNELS.items()])
def test_rust_launcher_runs_on_the_emulator(workspace, kind):
    built(workspace)
    stem, name, case, arch, _ = HARNESS_KERNELS[kind]
    spec = rendered(stem).spec
    k = spec.kernel(name)
    inputs = case.inputs(k, 17)
    log: list = []
    got = run_rust_on_emulator(workspace, stem, name, inputs, arch, log=log)
    result = compare(got, reference(k, **inputs), k, k=case.k, inputs=inputs)
    assert result.passed, f"{name} {case.describe()}:\n{result.detail}"
    # The path the device picks: the Python launcher's entries on this device.
    assert log[0] == expected_entries(stem, name, inputs, arch), log[0]
    assert re.fullmatch(name + r"(_t\d+)?" + BODY_SUFFIX[arch], log[0][-1]), log[0]


# ---------------------------------------------------------------------------
# The crate's CudaDriver against a CPU stand-in of libcuda


DRIVER_KERNEL = ("dense", "dense_gemm_bf16", Case("ragged", m=70, n=160, k=80))
STANDIN_SOURCE = Path(__file__).resolve().parents[1] / "rust_driver_standin.c"


def driver_rust(stem: str, name: str) -> str:
    """A cdylib with `gg_rust_launch` over the crate's CudaDriver: the
    engine's side, loading the module with cuModuleLoadData."""
    return (DRIVER_RS.replace("@ARMS@", launch_arms("gpu", {name: stem}))
            .replace("gemmgen_dense::", f"{lib_name(stem)}::"))


DRIVER_RS = r"""// The C ABI of tests/launchers/test_rust_launchers.py's driver stand-in runs.
#![allow(clippy::all)]
use std::ffi::CStr;
use std::os::raw::{c_char, c_void};

use gemmgen_dense::cuda_driver::{CudaDriver, Stream};

#[link(name = "cuda")]
extern "C" {
    fn cuModuleLoadData(module: *mut *mut c_void, image: *const c_void) -> i32;
}

#[no_mangle]
pub unsafe extern "C" fn gg_rust_launch(_host: *const c_void, kernel: *const c_char, ptrs: *const u64,
                                        shapes: *const i64, scalars: *const i64, workspace: u64,
                                        workspace_bytes: u64, stream: *mut c_void,
                                        message: *mut c_char, message_len: usize) -> i32 {
    let _ = (scalars, workspace, workspace_bytes);
    let mut module = std::ptr::null_mut();
    let code = cuModuleLoadData(&mut module, b"the kernels' cubin\0".as_ptr().cast());
    let result = if code != 0 {
        Err(format!("cuModuleLoadData returned {code}"))
    } else {
        let mut gpu = CudaDriver::from_module(module);
        let stream = Stream::from_raw(stream);
        match CStr::from_ptr(kernel).to_str().unwrap() {
@ARMS@
            other => Err(format!("no launcher {other}")),
        }
    };
    match result {
        Ok(()) => 0,
        Err(e) => {
            let n = e.len().min(message_len - 1);
            std::ptr::copy_nonoverlapping(e.as_ptr(), message as *mut u8, n);
            *message.add(n) = 0;
            1
        }
    }
}
"""


class DriverCrate:
    """A cargo workspace of its own (the feature `cuda-driver` would
    otherwise be on in every crate of the shared one): a copy of the dense
    crate, a cdylib over its CudaDriver, and the stand-in libcuda.so it
    links, built with gcc against CUDA's cuda.h."""

    def __init__(self, ws: Workspace, kernel: tuple = DRIVER_KERNEL, files: dict | None = None,
                 folder: str = "driver") -> None:
        """`kernel` (stem, name, case) is the one it launches; `files` the
        crate's (default: its spec's)."""
        self.ws = ws
        self.kernel = kernel
        self.root = ws.root / folder
        self.target = self.root / "target"
        self.standin = self.root / "standin" / "libcuda.so"
        if (self.root / "Cargo.toml").is_file():
            return
        stem, name, _ = kernel
        for rel, text in (files or crate_files(stem)).items():
            (self.root / stem / rel).parent.mkdir(parents=True, exist_ok=True)
            (self.root / stem / rel).write_text(text)
        crate = self.root / "engine"
        (crate / "src").mkdir(parents=True)
        (crate / "Cargo.toml").write_text(
            '[package]\nname = "gemmgen-rust-driver"\nversion = "0.1.0"\nedition = "2021"\n'
            'publish = false\n\n[lib]\ncrate-type = ["cdylib"]\n\n[dependencies]\n'
            f'gemmgen-{stem} = {{ path = "../{stem}", features = ["cuda-driver"] }}\n')
        folder = self.standin.parent
        (crate / "build.rs").write_text(
            "fn main() {\n"
            f'    println!("cargo:rustc-link-search=native={folder}");\n'
            f'    println!("cargo:rustc-link-arg=-Wl,-rpath,{folder}");\n'
            f'    println!("cargo:rerun-if-changed={self.standin}");\n'
            "}\n")
        (crate / "src" / "lib.rs").write_text(driver_rust(stem, name))
        (self.root / "Cargo.toml").write_text(
            '[workspace]\nresolver = "2"\nmembers = ["engine"]\n')

    def build_standin(self) -> None:
        from gemmgen.harness.toolchain import cuda_include_dir

        self.standin.parent.mkdir(exist_ok=True)
        proc = subprocess.run(
            ["gcc", "-shared", "-fPIC", "-O1", "-Wall", "-Wextra", "-Werror",
             "-Wl,-soname,libcuda.so", f"-I{cuda_include_dir()}", "-o", str(self.standin),
             str(STANDIN_SOURCE)], capture_output=True, text=True, check=False)
        assert proc.returncode == 0, f"the stand-in does not compile:\n{proc.stderr}"

    def build(self) -> None:
        if not self.standin.is_file():
            self.build_standin()
        proc = self.ws.cargo("build", "-p", "gemmgen-rust-driver", cwd=self.root,
                             target=self.target)
        assert proc.returncode == 0, f"cargo build failed:\n{proc.stderr}"

    @property
    def library(self) -> Path:
        return self.target / "debug" / "libgemmgen_rust_driver.so"

    def run(self, inputs: dict, arch: str, num_sms: int | None = None
            ) -> tuple[object, list[str], str]:
        """The outputs, the entries launched and the stand-in's log."""
        stem, name, _ = self.kernel
        log: list = []
        try:
            got = run_rust_on_emulator(self.ws, stem, name, inputs, arch, library=self.library,
                                       standin=self.standin, log=log, num_sms=num_sms)
        except AssertionError as e:
            raise DriverRunError(str(e), log[1] if len(log) > 1 else "") from None
        return got, log[0], log[1]


class DriverRunError(AssertionError):
    def __init__(self, message: str, log: str) -> None:
        super().__init__(message)
        self.log = log


@pytest.fixture
def driver(workspace) -> DriverCrate:
    if shutil.which("gcc") is None:
        pytest.skip("no gcc")
    d = DriverCrate(workspace)
    d.build()
    return d


def expected_driver_calls(inputs: dict, arch: str) -> list[str]:
    """The stand-in's log lines of a call's maps, attribute calls and
    launches, from the Python launcher: its launches on the device and its
    TensorMapArg values (every map encoded before the first launch, as the
    Rust `run` does)."""
    from gemmgen.archs import parse_arch, sm_count

    stem, name, _ = DRIVER_KERNEL
    plan = harness_plans()[name]
    module = python_launchers(stem)[0][name]
    env = plan.env(bound_dims(plan, inputs))
    steps = module.launches({n: env[n] for n in plan.names}, parse_arch(arch)[0], sm_count(arch))
    interleave, l2, oob = module.TENSOR_MAP_MODES

    def join(values) -> str:
        return ",".join(str(int(v)) for v in values)

    out = []
    for s in steps:
        for a in s.args:
            if isinstance(a, module.TensorMapArg):
                out.append(f"cuTensorMapEncodeTiled dtype={a.dtype} rank={len(a.dims)} "
                           f"dims={join(a.dims)} strides={join(a.strides)} box={join(a.box)} "
                           f"elementStrides={join([1] * len(a.dims))} interleave={interleave} "
                           f"swizzle={a.swizzle} l2={l2} oob={oob} aligned64=1 -> 0")
    for s in steps:
        out.append(f"cuModuleGetFunction {s.entry}")
        if s.smem > DEFAULT_SMEM:
            out.append(f"cuFuncSetAttribute {s.entry} 8 {s.smem}")
        out.append(f"cuLaunchKernel {s.entry} grid={join(s.grid)} block={join(s.block)} "
                   f"smem={s.smem} -> 0")
    return out


def driver_calls(log: str) -> list[str]:
    """The log without the device queries and the module load."""
    return [x for x in log.splitlines()
            if not x.startswith(("cuCtxGetDevice", "cuDeviceGetAttribute", "cuModuleLoadData"))]


@needs_rust
def test_cuda_driver_backend_runs_the_hopper_path_on_the_standin(driver):
    stem, name, case = DRIVER_KERNEL
    spec = rendered(stem).spec
    k = spec.kernel(name)
    inputs = case.inputs(k, 23)
    got, launched, log = driver.run(inputs, "sm_90a")
    result = compare(got, reference(k, **inputs), k, k=case.k, inputs=inputs)
    assert result.passed, f"{name} {case.describe()}:\n{result.detail}"
    assert launched == [f"{name}_sm90"], launched
    assert driver_calls(log) == expected_driver_calls(inputs, "sm_90a"), log
    # The device: compute capability, SM count, opt-in shared memory.
    queried = {int(x.split()[1]) for x in log.splitlines() if x.startswith("cuDeviceGetAttribute")}
    assert queried == {75, 76, 16, 97}, log
    # An sm_80 device is older than the spec's archs: refused, nothing launched.
    module = python_launchers(stem)[0][name]
    with pytest.raises(DriverRunError) as refused:
        driver.run(inputs, "sm_80")
    assert module.arch_error(80) in str(refused.value)
    assert "cuLaunchKernel" not in refused.value.log and "cuTensorMap" not in refused.value.log


@needs_rust
def test_cuda_driver_backend_runs_the_sm100_path_on_the_standin(driver):
    """On compute capability 10.0 (148 SMs) the crate takes the sm_100a
    body: the tensor maps, shared-memory attribute and persistent grid the
    Python launcher states, and the output of the tcgen05 kernel."""
    stem, name, case = DRIVER_KERNEL
    k = rendered(stem).spec.kernel(name)
    inputs = case.inputs(k, 29)
    got, launched, log = driver.run(inputs, "sm_100a")
    result = compare(got, reference(k, **inputs), k, k=case.k, inputs=inputs)
    assert result.passed, f"{name} {case.describe()}:\n{result.detail}"
    assert launched == [f"{name}_sm100"], launched
    calls = driver_calls(log)
    assert calls == expected_driver_calls(inputs, "sm_100a"), log
    # 70 x 160 in 128 x 128 tiles: 2 blocks of 192 threads, the maps' 128-byte
    # swizzle (3) and boxes of 64 K columns by 128 rows.
    assert calls[-1].startswith(f"cuLaunchKernel {name}_sm100 grid=2,1,1 block=192,1,1 "), calls
    assert sum("swizzle=3" in c and "box=64,128" in c for c in calls) == 2, calls


MAP_LHS = "tensor_map(a.lhs.ptr, 9, &[k, m], &[k * 2], &[64, 128], 3),"
MAP_RHS = "tensor_map(a.rhs.ptr, 9, &[k, n], &[k * 2], &[64, 128], 3),"
MAP_INDENT = "\n" + " " * 20

# Bugs planted in the driver crate's copy, each caught on the stand-in (the
# driver's refusal) or the emulator (a wrong result, a kernel error).
DRIVER_PLANTS = {
    "no_smem_attribute": (
        "common", "            backend.set_max_dynamic_smem(&k, l.smem).map_err(Error::Backend)?;\n",
        "", "backend: cuLaunchKernel returned CUresult 1"),
    "interleave_and_swizzle_swapped": (
        "cuda_driver", "                interleave,\n                swizzle,\n",
        "                swizzle,\n                interleave,\n",
        "backend: cuTensorMapEncodeTiled returned CUresult 1"),
    "dims_and_strides_swapped": (
        "cuda_driver", "                map.dims.as_ptr(),\n                map.strides.as_ptr(),\n",
        "                map.strides.as_ptr(),\n                map.dims.as_ptr(),\n",
        "backend: cuTensorMapEncodeTiled returned CUresult 1"),
    "map_box_not_the_kernels": (
        "dense_gemm_bf16", "tensor_map(a.lhs.ptr, 9, &[k, m], &[k * 2], &[64, 128], 3)",
        "tensor_map(a.lhs.ptr, 9, &[k, m], &[k * 2], &[64, 64], 3)", None),
    "lhs_and_rhs_maps_swapped": ("dense_gemm_bf16", MAP_LHS + MAP_INDENT + MAP_RHS,
                                 MAP_RHS + MAP_INDENT + MAP_LHS, None),
}


@needs_rust
@pytest.mark.slow
@pytest.mark.parametrize("plant", DRIVER_PLANTS)
def test_planted_driver_bugs_are_caught(driver, plant):
    from gemmgen.harness.cuda_emu import EmuError

    module_name, old, new, message = DRIVER_PLANTS[plant]
    stem, name, case = DRIVER_KERNEL
    k = rendered(stem).spec.kernel(name)
    inputs = case.inputs(k, 23)
    try:
        with planted(driver.ws, f"driver/{stem}", module_name, old, new):
            driver.build()
            try:
                got, _, _ = driver.run(inputs, "sm_90a")
            except DriverRunError as e:
                caught = str(e)
                assert message is None or message in caught, caught
                if "cuTensorMapEncodeTiled" in caught:  # refused before any launch
                    assert "cuLaunchKernel" not in e.log, e.log
            except EmuError as e:  # the emulator stops the kernel
                assert message is None, f"expected {message!r}, the emulator stopped: {e}"
            else:
                assert message is None, f"expected the refusal {message!r}"
                result = compare(got, reference(k, **inputs), k, k=case.k, inputs=inputs)
                assert not result.passed, f"{plant}: the output is still right"
    finally:
        driver.build()


# ---------------------------------------------------------------------------
# The spec language


SPEC = """\
target cuda {{
  archs sm_90a
  {field}
}}

kernel kern_a {{
  op dense
  lhs bf16 [m, k]
  rhs bf16 [n, k]
  out bf16
  tile m=128 n=128 k=32
  backends cuda
}}
"""


def spec_errors(field: str) -> list[str]:
    text = SPEC.format(field=field)
    try:
        validate(parse(text, "specs/x.gemm"), stem="x")
    except SpecError as e:
        return [f"{d.loc.line}:{d.loc.col}: {d.message}" for d in e.diagnostics]
    return []


def test_launchers_field_accepts_the_three_families():
    assert spec_errors("launchers cpp cupy rust") == []
    spec = validate(parse(SPEC.format(field="launchers cpp cupy rust"), "specs/x.gemm"), stem="x")
    assert spec.target(ir.Backend.CUDA).launchers == ("cpp", "cupy", "rust")
    spec = validate(parse(SPEC.format(field=""), "specs/x.gemm"), stem="x")
    assert spec.target(ir.Backend.CUDA).launchers == ("cpp", "cupy")
    assert not any(p.parts[0] == "rust" for p in cuda_backend.render(spec))


@pytest.mark.parametrize("field, error", [
    ("launchers cpp cupy rustt", ("3:22: target cuda: unknown launcher 'rustt'; did you mean "
                                  "'rust'? (expected 'cpp', 'cupy' or 'rust')")),
    ("launchers cpp cupy rust rust", "3:27: target cuda: launcher 'rust' listed twice"),
    ("launchers cpp rust", ("3:3: target cuda: launchers must include 'cupy' (the C++ and CuPy "
                            "launchers are always emitted; list them with the optional 'rust')")),
    ("launchers cpp cupy | cpp cupy rust", "3:3: target cuda: 'launchers' cannot be swept with '|'"),
    ("launchers cpp cupy 3", ("3:22: target cuda: unknown launcher '3' (expected 'cpp', 'cupy' "
                              "or 'rust')")),
    ("launcher cpp", ("3:3: target cuda: unknown field 'launcher'; did you mean 'launchers'?; "
                      "expected 'archs' or 'launchers'")),
])
def test_launchers_field_errors_are_positioned(field, error):
    assert error in spec_errors(field)


# ---------------------------------------------------------------------------
# Planted bugs: a changed Rust launcher is caught


def planted(ws: Workspace, stem: str, name: str, old: str, new: str):
    """A context: `old` (once) replaced by `new` in the crate's <name>.rs
    (the test holds the workspace's lock)."""

    @contextlib.contextmanager
    def change():
        path = ws.root / stem / "src" / f"{name}.rs"
        text = path.read_text()
        assert text.count(old) == 1, f"the planted bug's anchor occurs {text.count(old)} times"
        path.write_text(text.replace(old, new))
        try:
            yield
        finally:
            path.write_text(text)

    return change()


@needs_rust
@pytest.mark.slow
def test_a_planted_grid_bug_fails_the_plan_tests(workspace):
    built(workspace)
    # The Hopper path's persistent grid (specs/moe.gemm declares sm_90a only):
    # one block more than the device has SMs.
    with planted(workspace, "moe", "gmm_bf16", "gg_min(num_sms, (gg_cdiv(m, 128) + g) * gg_cdiv(n_out, 128))",
                 "gg_min(num_sms + 1, (gg_cdiv(m, 128) + g) * gg_cdiv(n_out, 128))"):
        proc = workspace.cargo("test", "-p", "gemmgen-moe", "--test", "plan")
    assert proc.returncode != 0
    assert "test gmm_bf16 ... FAILED" in proc.stdout, proc.stdout


@needs_rust
@pytest.mark.slow
def test_a_planted_message_bug_fails_the_plan_tests(workspace):
    built(workspace)
    with planted(workspace, "dense", "dense_gemm_bf16",
                 '"k must be a multiple of 8: rows of 16-byte copies"', '"k must be a multiple of 8"'):
        proc = workspace.cargo("test", "-p", "gemmgen-dense", "--test", "plan")
    assert proc.returncode != 0
    assert "test dense_gemm_bf16 ... FAILED" in proc.stdout, proc.stdout


@needs_rust
@pytest.mark.slow
def test_swapped_arguments_are_caught_on_the_emulator(workspace):
    from gemmgen.harness.cuda_emu import EmuKernelError

    built(workspace)
    stem, name, case, arch, _ = HARNESS_KERNELS["dense"]
    spec = rendered(stem).spec
    k = spec.kernel(name)
    inputs = case.inputs(k, 17)
    try:
        with planted(workspace, stem, name, "gg_i32(m),\n                gg_i32(n),",
                     "gg_i32(n),\n                gg_i32(m),"):
            assert workspace.cargo("build", "-p", "gemmgen-rust-harness").returncode == 0
            try:  # the memory checker stops the kernel; without it, the output is wrong
                got = run_rust_on_emulator(workspace, stem, name, inputs, arch)
            except EmuKernelError:
                pass
            else:
                result = compare(got, reference(k, **inputs), k, k=case.k, inputs=inputs)
                assert not result.passed
    finally:
        assert workspace.cargo("build", "-p", "gemmgen-rust-harness").returncode == 0


# ---------------------------------------------------------------------------
# The cluster launch (tests/launchers/test_cluster_launch.py): the crate of
# specs/b200.gemm rendered from a plan whose sm_100a launch is forced into
# clusters of 2 x 1 x 1, its CudaDriver's cuLaunchKernelEx on the stand-in.

# (m = 140: the LUT's 1-CTA entry, `_t2_sm100`, which the override clusters.)
CLUSTER_KERNEL = ("b200", "b200_w4a8_moe_grouped_gemm",
                  Case("groups", m=140, n=136, k=192, group_sizes=(0, 128, 12)))


def clustered_crate_files() -> dict[str, str]:
    from test_cluster_launch import clustered_plans

    stem = CLUSTER_KERNEL[0]
    with clustered_plans():
        files = backends.render(rendered(stem).spec)
    return {str(p.relative_to("rust")): t for p, t in files.items() if p.parts[0] == "rust"}


@needs_rust
def test_cuda_driver_backend_launches_clusters_on_the_standin(workspace):
    """The crate's Launch has a cluster, its CudaDriver a launch_cluster over
    cuLaunchKernelEx: on an emulated B200 of 3 SMs the worklist launches by
    cuLaunchKernel, the tcgen05 kernel by cuLaunchKernelEx with the cluster
    attribute (id 4) and 2 x 1 x 1 clusters over a grid of 4 (3 rounded
    up), the stand-in's checks passed; the output matches the reference. The
    crates of specs/ have one only where a kernel has the 2-CTA tile
    (specs/b200.gemm)."""
    if shutil.which("gcc") is None:
        pytest.skip("no gcc")
    files = clustered_crate_files()
    assert "fn cuLaunchKernelEx(" in files["src/cuda_driver.rs"]
    assert "cluster: [2, 1, 1]," in files[f"src/{CLUSTER_KERNEL[1]}.rs"]
    for stem in STEMS:
        assert ("cluster" in crate_files(stem)["src/common.rs"]) == (stem == "b200"), stem
    d = DriverCrate(workspace, CLUSTER_KERNEL, files, folder="driver-cluster")
    d.build()
    if RUSTFMT is not None:  # laid out as rustfmt lays it out, clusters and all
        crate = d.root / CLUSTER_KERNEL[0]
        proc = subprocess.run([RUSTFMT, "--check", "--config-path", str(crate / "rustfmt.toml"),
                               *sorted(str(p) for p in (crate / "src").glob("*.rs"))],
                              capture_output=True, text=True, check=False)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    stem, name, case = CLUSTER_KERNEL
    k = rendered(stem).spec.kernel(name)
    inputs = case.inputs(k, 61)
    got, launched, log = d.run(inputs, "sm_100a", num_sms=3)
    result = compare(got, reference(k, **inputs), k, k=case.k, inputs=inputs)
    assert result.passed, f"{name} {case.describe()}:\n{result.detail}"
    assert launched == [f"{name}_fill", f"{name}_worklist", f"{name}_t2_sm100"], launched
    launches = [x for x in driver_calls(log) if x.startswith("cuLaunch")]
    assert launches[-1].startswith(f"cuLaunchKernelEx {name}_t2_sm100 grid=4,1,1 block=192,1,1 "), log
    assert launches[-1].endswith(" attrs=4 cluster=2,1,1 -> 0"), log
    assert all(x.startswith("cuLaunchKernel ") for x in launches[:-1]), log


# The 2-CTA tile of specs/b200.gemm (no override): its FP8 experts at a
# prefill size (the m >= 512 entry, a pair a cluster) and at a large one
# (the m >= 2048, n >= 512 entry, two pairs a cluster sharing A) through the
# crate's CudaDriver on the stand-in.
PAIR_KERNEL = ("b200", "b200_fp8_moe_grouped_gemm",
               Case("prefill", m=530, n=136, k=208, group_sizes=(300, 0, 230)))
PAIR_CASES = {"pair": (PAIR_KERNEL[2], "t1", 2),
              "multicast": (Case("prefill_multicast", m=2100, n=520, k=208,
                                 group_sizes=(900, 0, 1200)), "t0", 4)}


@needs_rust
@pytest.mark.slow
@pytest.mark.parametrize("which", list(PAIR_CASES))
def test_cuda_driver_backend_launches_the_pair_tile_on_the_standin(workspace, which):
    """b200_fp8_moe_grouped_gemm's pair entries on an emulated B200 of 4
    SMs: fill and worklist by cuLaunchKernel, the pair entry by
    cuLaunchKernelEx with the cluster attribute (id 4), clusters of 2 x 1 x 1
    (m >= 512) or 4 x 1 x 1 (m >= 2048, n >= 512) over a grid of whole
    clusters, the stand-in's checks passed (the grid a multiple of the
    cluster, at most 8 blocks a cluster, 10.0); the output matches the
    reference."""
    if shutil.which("gcc") is None:
        pytest.skip("no gcc")
    d = DriverCrate(workspace, PAIR_KERNEL, folder="driver-pair")
    d.build()
    stem, name, _ = PAIR_KERNEL
    case, t, c = PAIR_CASES[which]
    k = rendered(stem).spec.kernel(name)
    inputs = case.inputs(k, 67)
    got, launched, log = d.run(inputs, "sm_100a", num_sms=4)
    result = compare(got, reference(k, **inputs), k, k=case.k, inputs=inputs)
    assert result.passed, f"{name} {case.describe()}:\n{result.detail}"
    assert launched == [f"{name}_fill", f"{name}_worklist", f"{name}_{t}_sm100"], launched
    launches = [x for x in driver_calls(log) if x.startswith("cuLaunch")]
    assert launches[-1].startswith(f"cuLaunchKernelEx {name}_{t}_sm100 grid=4,1,1 block=192,1,1 "), log
    assert launches[-1].endswith(f" attrs=4 cluster={c},1,1 -> 0"), log
    assert all(x.startswith("cuLaunchKernel ") for x in launches[:-1]), log
