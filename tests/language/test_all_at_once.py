"""Every problem of a spec in one run (issue 42): the backends' checks beside
the validator's errors, in every kernel and layer, each at the field it
concerns, and none that follows from another error
(gemmgen.validate.kernel_checks; the golden case every_layer_at_once)."""

from __future__ import annotations

import os
import random
import shutil
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gemmgen import backends, ir
from gemmgen.cli import main
from gemmgen.diagnostics import Diagnostic, SpecError
from gemmgen.parse import parse
from gemmgen.validate import validate

TARGETS = "target pallas_tpu {\n  tpu v5e\n}\ntarget cuda {\n  archs sm_90a\n}\n"

# Kernels with problems in one layer or several, each known to report on its
# own; (name, body lines). A spec of any of them reports what each reports
# alone, shifted to where it stands: nothing lost, nothing added.
KERNELS = {
    "field_error": ["op dense", "lhs bf16 [m, k]", "rhs bf16 [n, k]", "out bf16",
                    "epilogue gelu_tanh", "backends pallas_tpu"],
    "rule_error": ["op dense", "lhs int4 packed [m, k]", "rhs bf16 [n, k]", "out bf16",
                   "backends pallas_tpu"],
    "pallas_stages": ["op dense", "lhs bf16 [m, k]", "rhs bf16 [n, k]", "out bf16",
                      "stages 3", "backends pallas_tpu"],
    "w4_k_tile": ["op dense", "lhs bf16 [m, k]", "rhs int4 packed [n, k]", "out bf16",
                  "rhs_scale per_channel", "tile m=128 n=128 k=128", "backends pallas_tpu"],
    "w4_k_tile_and_typo": ["op dense", "lhs bf16 [m, k]", "rhs int4 packed [n, k]",
                           "out bf16", "rhs_scale per_chanel", "tile m=128 n=128 k=128",
                           "backends pallas_tpu"],
    "rule_and_pallas": ["op dense", "lhs int4 packed [m, k]", "rhs bf16 [n, k]", "out bf16",
                        "stages 3", "backends pallas_tpu"],
    "sm90_stages": ["op dense", "lhs bf16 [m, k]", "rhs bf16 [n, k]", "out bf16", "stages 1",
                    "backends cuda"],
    "bad_threads": ["op dense", "lhs bf16 [m, k]", "rhs bf16 [n, k]", "out f32",
                    "tile m=128 n=128 k=32", "warp_tile m=64 n=64", "threads 100",
                    "backends cuda"],
    "unknown_field": ["op dense", "lhs bf16 [m, k]", "rhs bf16 [n, k]", "out bf16",
                      "stagse 3", "algorithm gemv", "backends pallas_tpu"],
    "clean": ["op dense", "lhs bf16 [m, k]", "rhs bf16 [n, k]", "out bf16",
              "backends pallas_tpu cuda"],
}


def block(name: str) -> str:
    return f"kernel {name} {{\n" + "".join(f"  {f}\n" for f in KERNELS[name]) + "}\n"


def problems(text: str) -> list[Diagnostic]:
    try:
        validate(parse(text, "specs/t.gemm"), diagnose=backends.diagnose)
    except SpecError as e:
        return list(e.diagnostics)
    return []


def shown(diags: list[Diagnostic], shift: int = 0) -> list[tuple[int, int, str]]:
    return [(d.loc.line + shift, d.loc.col, d.message) for d in diags]


ALONE = {name: shown(problems(TARGETS + block(name))) for name in KERNELS}


def test_each_kernel_reports_its_own_layers():
    """What the catalogue's kernels report alone, by layer and position
    (the lines count from the kernel's `kernel` line, 7)."""
    def reports(name, *expected):
        got = [(line - 7, msg.split(": ", 1)[1]) for line, _, msg in ALONE[name]]
        assert len(got) == len(expected), got
        for (line, msg), (want_line, start) in zip(got, expected):
            assert line == want_line and msg.startswith(start), (line, msg)

    reports("field_error", (5, "unknown epilogue 'gelu_tanh'"))
    reports("rule_error", (2, "a 4-bit lhs needs a 4-bit rhs"))
    reports("pallas_stages", (5, "stages 3: Mosaic pipelines"))
    reports("w4_k_tile", (6, "tile 128x128x128: k=128 is not a multiple of 256"))
    # A field error beside a backend check of another field: both.
    reports("w4_k_tile_and_typo", (5, "unknown rhs_scale mode 'per_chanel'"),
            (6, "tile 128x128x128: k=128 is not a multiple of 256"))
    reports("rule_and_pallas", (2, "a 4-bit lhs needs a 4-bit rhs"),
            (5, "stages 3: Mosaic pipelines"))
    reports("sm90_stages", (5, "the cuda tile GEMM pipelines with cp.async"))
    # threads 100: its own error, not the CUDA warp check that follows from it.
    reports("bad_threads", (7, "threads must be a multiple of 32, got 100"))
    # An unknown field (stages would default): the algorithm is still checked.
    reports("unknown_field", (5, "unknown field 'stagse'"),
            (6, "pallas_tpu cannot emit algorithm 'gemv'"))
    assert ALONE["clean"] == []


@settings(max_examples=40, deadline=None)
@given(st.lists(st.sampled_from(sorted(KERNELS)), min_size=1, max_size=6, unique=True))
def test_a_spec_reports_every_kernels_problems(names):
    """Any mix of the catalogue in one spec reports exactly the union of
    what each kernel reports alone, in order of position."""
    text, expected = TARGETS, []
    for name in names:
        shift = text.count("\n") - TARGETS.count("\n")  # lines of the blocks before
        expected += [(line + shift, col, msg) for line, col, msg in ALONE[name]]
        text += block(name)
    got = shown(problems(text))
    assert got == sorted(got, key=lambda d: (d[0], d[1], d[2]))  # by position
    assert sorted(got) == sorted(expected)


def test_a_backend_check_that_raises_on_a_kernel_with_errors_is_skipped():
    """The backends' checks are written for valid kernels: on one with
    errors of its own a check that raises is skipped (its errors stand);
    on a valid kernel it is a bug and propagates."""
    def diagnose(kernel: ir.Kernel, spec: ir.Spec) -> list[Diagnostic]:
        raise ZeroDivisionError(kernel.name)

    bad = TARGETS + block("field_error")
    with pytest.raises(SpecError) as e:
        validate(parse(bad, "specs/t.gemm"), diagnose=diagnose)
    assert [d.message for d in e.value.diagnostics] == [m for _, _, m in ALONE["field_error"]]
    with pytest.raises(ZeroDivisionError):
        validate(parse(TARGETS + block("clean"), "specs/t.gemm"), diagnose=diagnose)


def test_a_finding_that_follows_from_a_related_bad_field_is_left_out():
    """`related`: a finding at a sound field that follows from a field with
    an error is not reported; one that does not is."""
    def diagnose(kernel: ir.Kernel, spec: ir.Spec) -> list[Diagnostic]:
        return [Diagnostic(kernel.at("tile"), "from the epilogue",
                           related=(kernel.at("epilogue"),)),
                Diagnostic(kernel.at("tile"), "from the tile alone"),
                Diagnostic(kernel.loc, "about the whole kernel")]

    text = TARGETS + block("field_error").replace("  backends", "  tile m=128 n=128 k=128\n"
                                                  "  backends")
    with pytest.raises(SpecError) as e:
        validate(parse(text, "specs/t.gemm"), diagnose=diagnose)
    assert [d.message.split(": ")[-1] for d in e.value.diagnostics][-2:] == [
        ("unknown epilogue 'gelu_tanh'; did you mean 'gelu'? (expected 'none', 'relu', 'silu', "
         "'gelu', 'silu_mul' or 'swiglu_clamped')"), "from the tile alone"]


SPEC_CASE = Path(__file__).resolve().parents[1] / "cases" / "every_layer_at_once" / "spec.gemm"


@pytest.mark.parametrize("command", [
    ["build"], ["check"], ["list"], ["explain", "--m", "8", "--n", "128", "--k", "128"]])
def test_every_command_reports_every_problem(command, tmp_path, capsys):
    """build, check, list and explain report the same diagnostics of a spec
    with problems in every layer (the golden case's), exit 2 and write
    nothing."""
    (tmp_path / "specs").mkdir()
    shutil.copy(SPEC_CASE, tmp_path / "specs" / "layers.gemm")
    args = [command[0], "specs/layers.gemm"] + (
        ["pallas_only", *command[1:]] if command[0] == "explain" else command[1:])
    old = os.getcwd()
    os.chdir(tmp_path)
    try:
        code = main(args)
    finally:
        os.chdir(old)
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert not (tmp_path / "generated").exists()
    expected = (SPEC_CASE.parent / "stderr.txt").read_text().replace("spec.gemm:",
                                                                     "specs/layers.gemm:")
    assert err == expected


def test_a_swept_fields_findings_are_at_the_variants_alternative():
    """`stages 2 | 3`: the Pallas check of the stages_3 variant points at
    the `3`, a tile alternative's at that alternative."""
    text = TARGETS + block("clean").replace(
        "  backends", "  stages 2 | 3\n  tile m=128 n=128 k=128\n    | m=128 n=100 k=128\n"
        "  backends")
    got = {(line - 7, col, msg.split("'")[1]) for line, col, msg in shown(problems(text))}
    assert got == {(5, 14, "clean_tile_128x100x128_stages_3"),
                   (5, 14, "clean_tile_128x128x128_stages_3"),
                   (7, 7, "clean_tile_128x100x128_stages_2"),
                   (7, 7, "clean_tile_128x100x128_stages_3")}


REPO = Path(__file__).resolve().parents[2]
SPECS = sorted((REPO / "specs").glob("*.gemm")) + sorted((REPO / "tests" / "specs").glob("*.gemm"))
# What a mutation writes over a token or after a line: values that make
# kernels wrong in each layer (unknown words, rules, backend checks).
TOKENS = ["3", "1", "0", "k=32", "k=128", "m=100", "gemv", "int4", "packed", "fp4",
          "silu_mul", "stages", "tile", "cuda", "pallas_tpu", "bogus", "n=4095", "e8m0",
          "[n, k]", "|"]


def mutate(text: str, rng: random.Random) -> str:
    """Up to four edits of the spec's lines: delete one, repeat one, write a
    token over one of its words, or add a token at its end."""
    lines = text.split("\n")
    for _ in range(rng.randint(1, 4)):
        j = rng.randrange(len(lines))
        words = lines[j].split(" ")
        match rng.randrange(4):
            case 0:
                del lines[j]
            case 1:
                lines.insert(j, lines[rng.randrange(len(lines))])
            case 2:
                words[rng.randrange(len(words))] = rng.choice(TOKENS)
                lines[j] = " ".join(words)
            case _:
                lines[j] += " " + rng.choice(TOKENS)
    return "\n".join(lines)


@pytest.mark.parametrize("seed, count", [
    (0, 40), pytest.param(1, 1500, marks=pytest.mark.slow)])
def test_mutated_specs_report_positioned_errors_and_never_raise(seed, count):
    """Fuzz: the project's specs with random edits, backends' checks
    included, give a valid spec or positioned diagnostics in order; never
    another exception (the backends' checks now run on specs with errors)."""
    rng = random.Random(seed)
    for _ in range(count):
        text = mutate(rng.choice(SPECS).read_text(), rng)
        try:
            validate(parse(text, "specs/x.gemm"), diagnose=backends.diagnose)
        except SpecError as e:
            n_lines = text.count("\n") + 1
            assert all(d.loc.path == "specs/x.gemm" and 1 <= d.loc.line <= n_lines
                       for d in e.diagnostics), text
            keys = [(d.loc.line, d.loc.col, d.message) for d in e.diagnostics]
            assert keys == sorted(keys)
