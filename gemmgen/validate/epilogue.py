"""The `epilogue` field: an activation word, the output scale `alpha=`, and
swiglu_clamped's constants `alpha_gate=`, `limit=` and its layout `pairs=`
(docs/spec.md, "Epilogue"). Each bad value is a positioned diagnostic."""

from __future__ import annotations

import math

from gemmgen.ir import SWIGLU_ALPHA_GATE, SWIGLU_LIMIT, Activation, Epilogue, Pairs
from gemmgen.parse import Atom
from gemmgen.validate.common import F32_MAX, F32_MIN_NORMAL
from gemmgen.validate.reader import FieldReader

# swiglu_clamped's own fields; the other activations take none of them.
SWIGLU_KEYS = ("alpha_gate", "limit", "pairs")


def read_epilogue(r: FieldReader) -> Epilogue | None:
    atoms = r.atoms("epilogue")
    if not atoms:
        return Epilogue()
    floc = r.field_loc("epilogue")
    act = Activation.NONE
    alpha: float | None = None
    seen_act: Atom | None = None
    own: dict[str, Atom] = {}
    for a in atoms:
        if a.kind == "kv" and a.key == "alpha":
            alpha = _f32(r, a, "alpha", "|alpha|", alpha, "scale")
            continue
        if a.kind == "kv" and a.key in SWIGLU_KEYS:
            if a.key in own:
                r.err(a.loc, f"'{a.key}' given twice in epilogue", a.width)
            else:
                own[a.key] = a
            continue
        w = r.word(a, [x.value for x in Activation], "epilogue")
        if w is None:
            continue
        if seen_act is not None and w != "none":
            r.err(a.loc, f"one activation per kernel; {seen_act.describe()} is already "
                  "given", a.width)
            continue
        seen_act = a
        act = Activation(w)
    if act is not Activation.SWIGLU_CLAMPED:
        for a in own.values():
            r.err(a.loc, f"'{a.key}=' belongs to swiglu_clamped, not "
                  f"{act.value}" + (" (silu_mul pairs column j with j + n/2 only)"
                                    if a.key == "pairs" and act is Activation.SILU_MUL
                                    else ""), a.width)
        return Epilogue(act, alpha, floc)
    alpha_gate = SWIGLU_ALPHA_GATE
    if "alpha_gate" in own:
        alpha_gate = _f32(r, own["alpha_gate"], "alpha_gate", "|alpha_gate|", alpha_gate)
    limit = SWIGLU_LIMIT
    if "limit" in own:
        got = _f32(r, own["limit"], "limit", "limit", None)
        v = own["limit"].value
        assert isinstance(v, Atom)
        if got is not None and got <= 0:
            r.err(v.loc, f"limit must be positive (the gate is clamped to at most limit, "
                  f"up to [-limit, limit]), got {got!r}", v.width)
        elif got is not None:
            limit = got
    pairs = Pairs.INTERLEAVED
    if "pairs" in own:
        v = own["pairs"].value
        assert isinstance(v, Atom)
        w = r.word(v, [p.value for p in Pairs], "pairs")
        if w is not None:
            pairs = Pairs(w)
    return Epilogue(act, alpha, floc, alpha_gate, limit, pairs)


def _f32(r: FieldReader, a: Atom, key: str, what: str, default: float | None,
         verb: str = "compute") -> float | None:
    """The number of `key=`, which kernels apply in f32: finite, at most
    F32_MAX in magnitude, and zero or a normal f32 (else `default`)."""
    v = a.value
    assert isinstance(v, Atom)
    if v.kind not in ("int", "float"):
        r.err(v.loc, f"{key} must be a number, not {v.describe()}")
        return default
    x = float(v.value)  # type: ignore[arg-type]
    if not math.isfinite(x) or abs(x) > F32_MAX:
        r.err(v.loc, f"{key} is out of range: kernels {verb} in f32, so "
              f"{what} must be at most {F32_MAX!r}", v.width)
        return default
    if x != 0 and abs(x) < F32_MIN_NORMAL:
        r.err(v.loc, f"{key} underflows: kernels {verb} in f32, so a nonzero "
              f"{what} must be at least {F32_MIN_NORMAL!r} (a normal f32)", v.width)
        return default
    return x
