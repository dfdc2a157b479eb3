"""Scale atoms by bulk copy on the block-scaled sm_100a body (issue 30;
docs/cuda-sm100.md, "The block-scaled path"): a scale in `layout=atom128x4`
is stored as the 512-byte atoms tcgen05.cp reads, so the producer warp's
lane 0 brings each whole atom of a K tile with one `cp.async.bulk`
(gg::bulk_load, SASS UBLKCP) completing on the stage's `full` barrier; the
atoms at the edges (rows past m or n, K blocks past k, silu_mul's two B
halves, B tiles that start inside an atom) and every `layout=rows` scale are
still gathered by the warp's 32 lanes. The generated kernels on the emulator
of an sm_100a device against the NumPy reference (fresh random inputs and
random padding bytes, outputs poisoned; whole and partial atoms, m = 1,
k not a multiple of the K tile, zero-size groups, group_offset with
existing_out, the masked layout), planted bugs (the copies' bytes not
announced on the barrier, the wrong K atom copied), and nvcc for sm_100a
(UBLKCP beside UTCCP and UTCQMMA / UTCOMMA, no spills).

The unmarked cases are one of each kind; the rest are `slow`."""

from __future__ import annotations

import numpy as np
import pytest
from sm100_helpers import SM100, Sm100Spec

from gemmgen.backends import cuda as cuda_backend
from gemmgen.cases import Case
from gemmgen.harness import nvcc
from gemmgen.harness.cuda_emu import EmuKernelError
from gemmgen.harness.verify_cuda import run_launcher
from gemmgen.reference import compare, reference

SPEC = """
target cuda {
  archs sm_100a
}

defaults {
  out bf16
  tile m=128 n=128 k=128
  backends cuda
}

kernel bulk_mx {
  op dense
  lhs e4m3 [m, k]
  rhs e4m3 [n, k]
  lhs_scale per_token_group k=32 e8m0 layout=atom128x4
  rhs_scale block n=1 k=32 e8m0 layout=atom128x4
}

# NVFP4: four atoms of each side a K tile; 64-column tiles, half of which
# start inside an atom (gathered).
kernel bulk_nv4 {
  op grouped
  lhs fp4 packed [m, k]
  rhs fp4 packed [g, n, k]
  out f32
  lhs_scale per_token_group k=16 ue4m3
  rhs_scale block n=1 k=16 ue4m3 layout=atom128x4
  tile m=128 n=64 k=256
}

kernel bulk_masked {
  op grouped
  lhs e4m3 [g, m, k]
  rhs e4m3 [g, k, n]
  lhs_scale per_token_group k=32 e8m0
  rhs_scale block n=1 k=32 e8m0 layout=atom128x4
}
"""

BODY = Sm100Spec("sm100bulk", SPEC)
kernel, launcher, check = BODY.kernel, BODY.launcher, BODY.check


def seed() -> int:
    return int(np.random.default_rng().integers(1 << 30))


CASES = [
    ("bulk_mx", Case("whole_and_edges", 300, 264, 480), 2, True),
    ("bulk_mx", Case("m1", 1, 128, 128), 1, False),
    ("bulk_mx", Case("whole_atoms", 256, 256, 512), 1, False),
    ("bulk_nv4", Case("shard", 260, 200, 544, group_sizes=(60, 200, 0, 100), group_offset=1,
                      g_local=2, existing_out=True), 2, False),
    ("bulk_nv4", Case("zero_size", 300, 256, 1024, group_sizes=(40, 0, 130, 0, 130)), 3, False),
    ("bulk_masked", Case("masked", 150, 272, 288, masked_m=(150, 0, 17, 128)), 2, False),
]


@pytest.mark.parametrize("name,case,num_sms", [
    pytest.param(n, c, s, id=f"{n}-{c.name}", marks=() if fast else pytest.mark.slow)
    for n, c, s, fast in CASES])
def test_bulk_copied_scale_atoms_on_the_emulator(name, case, num_sms):
    check(name, case, num_sms, seed=seed())


PLANTED = {
    # The copies' bytes are not announced on the full barrier: its phase
    # completes before they land (or never), which the emulator reports.
    "bytes_not_announced": (
        [("                            [&](int, const unsigned char*) { tx += 512; });",
          "                            [&](int, const unsigned char*) { tx += 0; });")],
        r"transaction bytes more than announced"),
}

# The next K atom copied in place of each one: the comparison fails.
WRONG_K_ATOM = [("    const int kb0 = 4 * (kt * kSfAtomsK<T> + a);",
                 "    const int kb0 = 4 * (kt * kSfAtomsK<T> + a) + 4;")]
WHOLE = Case("whole", 256, 256, 1024)


def run_planted(edits, inputs, name="bulk_mx"):
    modules, key = BODY.planted(name, edits)
    return run_launcher(launcher(name), "", key, inputs, modules=modules, arch=SM100, num_sms=1)


@pytest.mark.slow
def test_bulk_bytes_not_announced_is_reported():
    edits, report = PLANTED["bytes_not_announced"]
    with pytest.raises(EmuKernelError, match=report):
        run_planted(edits, WHOLE.inputs(kernel("bulk_mx"), seed()))


@pytest.mark.slow
@pytest.mark.parametrize("edits,passes", [(WRONG_K_ATOM, False), ([], True)],
                         ids=["wrong_k_atom", "unplanted"])
def test_the_wrong_k_atom_fails_the_comparison(edits, passes):
    k = kernel("bulk_mx")
    inputs = WHOLE.inputs(k, seed())
    actual = run_planted(edits, inputs)
    assert compare(actual, reference(k, **inputs), k, k=WHOLE.k, inputs=inputs).passed == passes


# The same kernel with every atom gathered (atom_source never bulk).
NO_BULK = [("    if (contiguous && row0 % kBM == 0 && row0 + kBM <= rows && kb0 + 4 <= kblocks) {",
            "    if (false) {")]


@pytest.mark.slow
def test_counters_show_the_gather_replaced_by_bulk_copies():
    """The emulator's counters (memory-checked modules): on whole atoms the
    bulk path issues no scale loads (gg_scales.cuh's mx_scale_word) and
    fewer shared stores, where the gather issues its 16-byte loads per lane;
    both match the reference."""
    k = kernel("bulk_mx")
    inputs = WHOLE.inputs(k, seed())
    loads, stores = {}, {}
    for name, edits in (("bulk", []), ("gather", NO_BULK)):
        modules, key = BODY.planted("bulk_mx", edits)
        counted: list = []
        actual = run_launcher(launcher("bulk_mx"), "", key, inputs, modules=modules, arch=SM100,
                              num_sms=1, counters=counted)
        assert compare(actual, reference(k, **inputs), k, k=WHOLE.k, inputs=inputs).passed, name
        (c,) = counted
        loads[name] = sum(s.requests for s in c.sites
                          if s.op == "ld.global" and "gg_scales.cuh" in s.where)
        stores[name] = c.total("st.shared").requests
    assert loads["bulk"] == 0 < loads["gather"], loads
    assert stores["bulk"] < stores["gather"], stores


needs_nvcc = pytest.mark.skipif(nvcc.find_nvcc() is None, reason="nvcc is not installed")
needs_cuobjdump = pytest.mark.skipif(
    nvcc.find_cuda_tool("cuobjdump") is None, reason="cuobjdump is not installed")


@needs_nvcc
@needs_cuobjdump
@pytest.mark.parametrize("name,mma", [
    ("bulk_mx", "UTCQMMA"), pytest.param("bulk_nv4", "UTCOMMA", marks=pytest.mark.slow),
    pytest.param("bulk_masked", "UTCQMMA", marks=pytest.mark.slow)])
def test_bulk_copies_are_ublkcp_in_the_sass(name, mma):
    lp = cuda_backend.plan(kernel(name), BODY.spec)
    source = (BODY.folder / f"{name}.cu").read_text()
    result = nvcc.compile_check(source, SM100, name_for_errors=f"{name}.cu",
                                include_dirs=(BODY.folder,),
                                extra_flags=("-Werror", "all-warnings"))
    sass = nvcc.sass_summary(result.cubin)
    for v in lp.variants:
        step = v.path("tcgen05").steps[-1]
        usage = result.kernels[step.entry]
        assert usage.spill_stores == usage.spill_loads == usage.stack_frame == 0, usage
        code = sass[step.entry]
        assert code.count("UBLKCP") > 0, step.entry
        assert code.count(mma) > 0 and code.count("UTCCP") > 0, step.entry
