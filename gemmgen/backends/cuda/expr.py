"""Launch-plan expressions as data.

Shapes, checks, grids, workspace sizes and scalar arguments of a CUDA launch
plan are `Expr` trees over the dim names (`cdiv(var("n"), 128)`), which
print themselves as C++ (`Expr.cpp`), Python (`Expr.py`) and Rust
(`Expr.rs`, over i64) and evaluate directly (`Expr.eval`, what `gemmgen
explain` uses). Every launcher defines the helpers the printed text calls:
`gg_cdiv`, `gg_div`, `gg_min`, `gg_i32`, `gg_i64`. A kind may still hand a plan expression as text in that language
(`parse_expr`, a small parser, never `eval`); the plan holds the tree.
"""

from __future__ import annotations

import enum
import functools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

__all__ = [
    "COMPARISONS", "ZERO", "Bin", "Call", "Expr", "Fn", "Lang", "Lit", "Op", "Var", "all_of",
    "any_of", "cdiv", "div", "expr", "exprs", "min_", "parse_expr", "var",
]


class Lang(enum.Enum):
    """The languages an expression prints in."""

    PY = "py"
    CPP = "cpp"
    RS = "rs"


class Fn(enum.Enum):
    """The helpers an expression may call; every launcher defines them."""

    CDIV = "gg_cdiv"
    DIV = "gg_div"
    MIN = "gg_min"
    I32 = "gg_i32"
    I64 = "gg_i64"


class Op(enum.Enum):
    ADD = "+"
    SUB = "-"
    MUL = "*"
    MOD = "%"
    EQ = "=="
    NE = "!="
    LT = "<"
    LE = "<="
    GT = ">"
    GE = ">="
    AND = "and"
    OR = "or"


_ARITH = {Op.ADD: 4, Op.SUB: 4, Op.MUL: 5, Op.MOD: 5}
COMPARISONS = (Op.EQ, Op.NE, Op.LT, Op.LE, Op.GT, Op.GE)
_ATOM = 9


class Expr:
    """An integer (or, for a comparison, boolean) expression over named dims."""

    __slots__ = ()

    @property
    def prec(self) -> int:
        return _ATOM

    def render(self, lang: Lang) -> str:
        raise NotImplementedError

    @property
    def cpp(self) -> str:
        return self.render(Lang.CPP)

    @property
    def py(self) -> str:
        return self.render(Lang.PY)

    @property
    def rs(self) -> str:
        """Rust over i64 (a comparison, `and`, `or`: a bool)."""
        return self.render(Lang.RS)

    def __str__(self) -> str:
        return self.py

    def eval(self, env: Mapping[str, int]) -> int:
        raise NotImplementedError

    def names(self) -> frozenset[str]:
        raise NotImplementedError

    # Arithmetic and comparisons build trees (ints are literals).
    def __add__(self, other: Expr | int) -> Expr:
        return Bin(Op.ADD, self, expr(other))

    def __sub__(self, other: Expr | int) -> Expr:
        return Bin(Op.SUB, self, expr(other))

    def __mul__(self, other: Expr | int) -> Expr:
        return Bin(Op.MUL, self, expr(other))

    def __mod__(self, other: Expr | int) -> Expr:
        return Bin(Op.MOD, self, expr(other))

    def eq(self, other: Expr | int) -> Expr:
        return Bin(Op.EQ, self, expr(other))

    def ne(self, other: Expr | int) -> Expr:
        return Bin(Op.NE, self, expr(other))

    def lt(self, other: Expr | int) -> Expr:
        return Bin(Op.LT, self, expr(other))

    def le(self, other: Expr | int) -> Expr:
        return Bin(Op.LE, self, expr(other))

    def gt(self, other: Expr | int) -> Expr:
        return Bin(Op.GT, self, expr(other))

    def ge(self, other: Expr | int) -> Expr:
        return Bin(Op.GE, self, expr(other))


@dataclass(frozen=True, slots=True)
class Lit(Expr):
    value: int

    def render(self, lang: Lang) -> str:
        return str(self.value)

    @property
    def prec(self) -> int:
        return _ATOM if self.value >= 0 else 6  # -1: a unary minus

    def eval(self, env: Mapping[str, int]) -> int:
        return self.value

    def names(self) -> frozenset[str]:
        return frozenset()


@dataclass(frozen=True, slots=True)
class Var(Expr):
    name: str

    def render(self, lang: Lang) -> str:
        return self.name

    def eval(self, env: Mapping[str, int]) -> int:
        if self.name not in env:
            raise KeyError(f"expression needs '{self.name}' (have {', '.join(sorted(env))})")
        return env[self.name]

    def names(self) -> frozenset[str]:
        return frozenset((self.name,))


@dataclass(frozen=True, slots=True)
class Call(Expr):
    fn: Fn
    args: tuple[Expr, ...]

    def render(self, lang: Lang) -> str:
        return f"{self.fn.value}({', '.join(a.render(lang) for a in self.args)})"

    def eval(self, env: Mapping[str, int]) -> int:
        v = [a.eval(env) for a in self.args]
        match self.fn:
            case Fn.CDIV:
                return -(-v[0] // v[1])
            case Fn.DIV:
                return v[0] // v[1]
            case Fn.MIN:
                return min(v)
            case Fn.I32 | Fn.I64:
                return v[0]
        raise AssertionError(self.fn)

    def names(self) -> frozenset[str]:
        return frozenset().union(*(a.names() for a in self.args))


@dataclass(frozen=True, slots=True)
class Bin(Expr):
    """`left op right`: arithmetic, a comparison, or `and` / `or`."""

    op: Op
    left: Expr
    right: Expr

    @property
    def prec(self) -> int:
        if self.op in _ARITH:
            return _ARITH[self.op]
        return 3 if self.op in COMPARISONS else (2 if self.op is Op.AND else 1)

    def render(self, lang: Lang) -> str:
        p = self.prec
        if self.op in _ARITH:  # left-associative: a right operand of equal rank needs ( )
            lhs, rhs = _paren(self.left, p, lang), _paren(self.right, p + 1, lang)
        elif self.op in COMPARISONS:  # never chained (Python would chain a < b < c)
            lhs, rhs = _paren(self.left, p + 1, lang), _paren(self.right, p + 1, lang)
        else:  # and / or: the other one inside gets ( ) (g++ -Wparentheses)
            lhs, rhs = (f"({c.render(lang)})" if c.prec in (1, 2) and c.prec != p
                        else c.render(lang) for c in (self.left, self.right))
        word = self.op.value
        if lang is not Lang.PY:  # C++ and Rust spell and / or alike
            word = {Op.AND: "&&", Op.OR: "||"}.get(self.op, word)
        return f"{lhs} {word} {rhs}"

    def eval(self, env: Mapping[str, int]) -> int:
        a = self.left.eval(env)
        if self.op is Op.AND:
            return int(bool(a) and bool(self.right.eval(env)))
        if self.op is Op.OR:
            return int(bool(a) or bool(self.right.eval(env)))
        b = self.right.eval(env)
        match self.op:
            case Op.ADD:
                return a + b
            case Op.SUB:
                return a - b
            case Op.MUL:
                return a * b
            case Op.MOD:
                return a % b
            case Op.EQ:
                return int(a == b)
            case Op.NE:
                return int(a != b)
            case Op.LT:
                return int(a < b)
            case Op.LE:
                return int(a <= b)
            case Op.GT:
                return int(a > b)
            case Op.GE:
                return int(a >= b)
        raise AssertionError(self.op)

    def names(self) -> frozenset[str]:
        return self.left.names() | self.right.names()


def _paren(e: Expr, need: int, lang: Lang) -> str:
    text = e.render(lang)
    return f"({text})" if e.prec < need else text


def expr(x: Expr | int | str) -> Expr:
    """An expression from a tree, an int, or text in the launch-plan language."""
    if isinstance(x, Expr):
        return x
    if isinstance(x, bool):
        raise TypeError("a bool is not an expression")
    if isinstance(x, int):
        return Lit(x)
    return parse_expr(x)


def var(name: str) -> Var:
    return Var(name)


def cdiv(a: Expr | int, b: Expr | int) -> Expr:
    return Call(Fn.CDIV, (expr(a), expr(b)))


def div(a: Expr | int, b: Expr | int) -> Expr:
    return Call(Fn.DIV, (expr(a), expr(b)))


def min_(a: Expr | int, b: Expr | int) -> Expr:
    return Call(Fn.MIN, (expr(a), expr(b)))


_NEGATED = {Op.EQ: Op.NE, Op.NE: Op.EQ, Op.LT: Op.GE, Op.GE: Op.LT, Op.LE: Op.GT, Op.GT: Op.LE}


def negate(e: Expr) -> Expr:
    """`not e`, with the negation pushed into the comparisons (De Morgan):
    `m >= 0 and k % 8 == 0` -> `m < 0 or k % 8 != 0`. An integer is true
    when nonzero, so its negation is `e == 0`."""
    if isinstance(e, Bin):
        if e.op in _NEGATED:
            return Bin(_NEGATED[e.op], e.left, e.right)
        if e.op is Op.AND:
            return Bin(Op.OR, negate(e.left), negate(e.right))
        if e.op is Op.OR:
            return Bin(Op.AND, negate(e.left), negate(e.right))
    return Bin(Op.EQ, e, Lit(0))


def all_of(*terms: Expr) -> Expr:
    """`a and b and ...` (left-nested)."""
    out = terms[0]
    for t in terms[1:]:
        out = Bin(Op.AND, out, t)
    return out


def any_of(*terms: Expr) -> Expr:
    out = terms[0]
    for t in terms[1:]:
        out = Bin(Op.OR, out, t)
    return out


_TOKEN = re.compile(r"\s*(?:(\d+)|([A-Za-z_]\w*)|(==|!=|<=|>=|[-+*%<>(),]))")


@functools.cache  # trees are frozen: one per distinct text
def parse_expr(text: str) -> Expr:
    """The tree of `text`: identifiers, integer literals, `+ - * %`,
    comparisons, `and` / `or`, parentheses and calls of the `Fn` helpers.
    A precedence-climbing parser; anything else raises ValueError."""
    tokens: list[str] = []
    pos = 0
    text = text.strip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            raise ValueError(f"cannot read {text[pos:]!r} in expression {text!r}")
        tokens.append(m.group(m.lastindex or 0))
        pos = m.end()
    fns = {f.value: f for f in Fn}
    ops = {o.value: o for o in Op}
    i = 0

    def peek() -> str | None:
        return tokens[i] if i < len(tokens) else None

    def take(want: str | None = None) -> str:
        nonlocal i
        if i >= len(tokens) or (want is not None and tokens[i] != want):
            raise ValueError(f"expected {want or 'more'} in expression {text!r}")
        i += 1
        return tokens[i - 1]

    def atom() -> Expr:
        tok = take()
        if tok == "(":
            e = binary(1)
            take(")")
            return e
        if tok == "-":
            return Lit(-int(take()))
        if tok.isdigit():
            return Lit(int(tok))
        if not (tok[0].isalpha() or tok[0] == "_"):
            raise ValueError(f"unexpected {tok!r} in expression {text!r}")
        if peek() == "(":
            if tok not in fns:
                raise ValueError(f"unknown function {tok!r} in expression {text!r}")
            take("(")
            args = [binary(1)]
            while peek() == ",":
                take(",")
                args.append(binary(1))
            take(")")
            return Call(fns[tok], tuple(args))
        return Var(tok)

    def binary(level: int) -> Expr:
        left = atom()
        while (tok := peek()) in ops:
            op = ops[tok]
            p = Bin(op, left, left).prec
            if p < level:
                break
            take()
            left = Bin(op, left, binary(p + 1))
        return left

    result = binary(1)
    if i != len(tokens):
        raise ValueError(f"unexpected {tokens[i]!r} in expression {text!r}")
    return result


ZERO = Lit(0)


def exprs(values: Sequence[Expr | int | str]) -> tuple[Expr, ...]:
    return tuple(expr(v) for v in values)

