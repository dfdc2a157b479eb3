"""Spec text -> syntax tree (`SpecAst`), with positions on every node.

The grammar (`grammar.lark`) is deliberately generic: blocks of fields, each
field a name and values. What a field may say is decided by
`gemmgen.validate`, which can then give precise, positioned messages with
nearest-word suggestions instead of a parser's "unexpected token".
"""

from __future__ import annotations

import functools
import hashlib
import math
import os
import re
import unicodedata
from dataclasses import dataclass, replace
from importlib import resources

import lark
from lark import Token, Transformer, v_args

from gemmgen.cache import usable_subdir
from gemmgen.diagnostics import Diagnostic, SpecError
from gemmgen.ir import Loc


@dataclass(frozen=True, slots=True)
class Atom:
    """One value token: kind is word, int, float, string, shape, kv, cond or arrow.

    word: value str; int: int; float: float; string: str (without its
    quotes); shape: tuple of Atom (word/int); kv: key + value Atom; cond:
    key ("m", or "m/g" for `m/g<=256`) + cmp + value int; arrow: None.
    """

    kind: str
    value: object
    loc: Loc
    key: str = ""
    cmp: str = ""
    width: int = 1

    def describe(self) -> str:
        match self.kind:
            case "word" | "int" | "float":
                return f"'{self.value}'"
            case "string":
                return f"'\"{self.value}\"'"
            case "kv":
                assert isinstance(self.value, Atom)
                return f"'{self.key}={self.value.value}'"
            case "cond":
                return f"'{self.key} {self.cmp} {self.value}'"
            case "shape":
                assert isinstance(self.value, tuple)
                return "[" + ", ".join(str(a.value) for a in self.value) + "]"
            case _:
                return "'->'"


@dataclass(frozen=True, slots=True)
class Alt:
    atoms: tuple[Atom, ...]
    loc: Loc


@dataclass(frozen=True, slots=True)
class Field:
    name: str
    alts: tuple[Alt, ...]
    loc: Loc  # of the field name

    @property
    def swept(self) -> bool:
        return len(self.alts) > 1


@dataclass(frozen=True, slots=True)
class Block:
    kind: str  # kernel, target, defaults, dispatch
    name: str | None
    name_loc: Loc
    fields: tuple[Field, ...]
    loc: Loc
    end_line: int = 0  # the line of its closing '}'


@dataclass(frozen=True, slots=True)
class SpecAst:
    path: str
    blocks: tuple[Block, ...]


_LARK_OPTIONS = dict(parser="lalr", strict=True, propagate_positions=True,
                     maybe_placeholders=False)


@functools.cache
def _parser() -> lark.Lark:
    """The LALR parser of grammar.lark.

    Building it (with strict mode's terminal-collision checks) takes most of
    a build's time, so the built tables are cached (`gemmgen.cache`), keyed
    by the grammar, the options and the lark version.
    """
    grammar = resources.files("gemmgen").joinpath("grammar.lark").read_text()
    key = hashlib.sha256(repr((grammar, sorted(_LARK_OPTIONS.items()),
                               lark.__version__)).encode()).hexdigest()[:24]
    folder = usable_subdir("lark")
    path = folder / f"spec-grammar-{key}.pickle" if folder else None
    if path is not None and path.is_file():
        try:
            with open(path, "rb") as f:
                return lark.Lark.load(f)
        except Exception:  # noqa: BLE001 - a bad cache entry only costs a rebuild
            pass
    parser = lark.Lark(grammar, **_LARK_OPTIONS)
    if path is not None:
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        try:
            with open(tmp, "wb") as f:
                parser.save(f)
            os.replace(tmp, path)
        except OSError:
            tmp.unlink(missing_ok=True)
    return parser


# After this many syntax errors the parser stops (later ones are often echoes).
MAX_SYNTAX_ERRORS = 50

# Terminal names in lark's messages, in words a spec author knows.
_TERMINALS = {
    "NAME": "a name",
    "INT": "an integer",
    "FLOAT": "a number",
    "_NL": "end of line",
    "LBRACE": "'{'",
    "RBRACE": "'}'",
    "LSQB": "'['",
    "RSQB": "']'",
    "COMMA": "','",
    "EQUAL": "'='",
    "VBAR": "'|'",
    "CMP": "a comparison",
    "SLASH": "'/'",
    "STRING": "a quoted string",
    "KIND": "'kernel', 'target', 'defaults', 'dispatch' or 'tuned'",
    "__ANON_0": "'->'",
    "$END": "end of file",
}


def _words(expected: set[str]) -> str:
    names = sorted({_TERMINALS.get(t, f"'{t}'") for t in expected})
    if len(names) == 1:
        return names[0]
    return ", ".join(names[:-1]) + " or " + names[-1]


def _token_text(tok: Token) -> str:
    if tok.type == "_NL":
        return "end of line"
    if tok.type == "$END":
        return "end of file"
    return f"'{tok.value}'"


# No field takes an integer near this many digits; longer ones are refused in
# the parser (Python will not even convert past 4300 digits).
MAX_INT_DIGITS = 18


class _ToAst(Transformer):
    def __init__(self, path: str):
        super().__init__()
        self.path = path
        self.diags: list[Diagnostic] = []

    def _int(self, tok: Token) -> int:
        digits = tok.lstrip("-")
        if len(digits) > MAX_INT_DIGITS:
            shown = f"{tok[:12]}...({len(digits)} digits)"
            self.diags.append(Diagnostic(self._loc(tok), f"integer {shown} is too large: no "
                                         f"field takes more than {MAX_INT_DIGITS} digits",
                                         width=len(tok)))
            return 0
        return int(tok)

    def _loc(self, meta_or_tok) -> Loc:
        return Loc(self.path, meta_or_tok.line, meta_or_tok.column)

    def start(self, blocks):
        return tuple(blocks)

    @v_args(meta=True)
    def block(self, meta, children):
        kind = children[0]
        if len(children) > 1 and isinstance(children[1], Token):
            name_tok = children[1]
            name, name_loc, fields = str(name_tok), self._loc(name_tok), children[2:]
        else:
            name, name_loc, fields = None, self._loc(kind), children[1:]
        return Block(str(kind), name, name_loc, tuple(fields), self._loc(meta))

    def field(self, children):
        name, *alts = children
        return Field(str(name), tuple(alts), self._loc(name))

    @v_args(meta=True)
    def alt(self, meta, atoms):
        return Alt(tuple(atoms), self._loc(meta))

    def word(self, children):
        (tok,) = children
        return Atom("word", str(tok), self._loc(tok), width=len(tok))

    def int(self, children):
        (tok,) = children
        return Atom("int", self._int(tok), self._loc(tok), width=len(tok))

    def float(self, children):
        (tok,) = children
        value = float(tok)
        mantissa = tok.lower().split("e")[0]
        if math.isinf(value) or (value == 0 and mantissa.strip("-+0.")):
            what = "too large" if math.isinf(value) else "too small: it rounds to 0"
            shown = tok if len(tok) <= 24 else f"{tok[:12]}...({len(tok)} characters)"
            self.diags.append(Diagnostic(self._loc(tok), f"number {shown} is {what} "
                                         "(a double holds magnitudes from about 2.2e-308 to "
                                         "1.8e308)", width=len(tok)))
        return Atom("float", value, self._loc(tok), width=len(tok))

    def string(self, children):
        (tok,) = children
        return Atom("string", str(tok)[1:-1], self._loc(tok), width=len(tok))

    @v_args(meta=True)
    def shape(self, meta, dims):
        return Atom("shape", tuple(dims), self._loc(meta),
                    width=meta.end_pos - meta.start_pos if not meta.empty else 1)

    @v_args(meta=True)
    def kv(self, meta, children):
        key, value = children
        return Atom("kv", value, self._loc(key), key=str(key),
                    width=meta.end_pos - meta.start_pos)

    @v_args(meta=True)
    def cond(self, meta, children):
        *names, cmp, value = children  # [m] or [m, g] for `m/g<=256`
        key = "/".join(str(n) for n in names)
        return Atom("cond", self._int(value), self._loc(names[0]), key=key, cmp=str(cmp),
                    width=meta.end_pos - meta.start_pos)

    @v_args(meta=True)
    def arrow(self, meta, _children):
        return Atom("arrow", None, self._loc(meta), width=2)


def _first_error(text: str, path: str) -> tuple[Diagnostic, bool] | None:
    """Parse `text`; None if it parses, else (the first error, at_end)."""
    try:
        _parser().parse(text)
        return None
    except lark.exceptions.UnexpectedCharacters as e:
        ch = text[e.pos_in_stream] if e.pos_in_stream < len(text) else "?"
        msg = f"unexpected character {describe_char(ch)}"
        if ch == "-":
            msg += " (names use '_', not '-')"
        return Diagnostic(Loc(path, e.line, e.column), msg), False
    except lark.exceptions.UnexpectedToken as e:
        tok = e.token
        if tok.type == "$END":
            lines = text.rstrip("\n").split("\n")
            loc = Loc(path, len(lines), len(lines[-1]) + 1)
            return Diagnostic(loc, "unexpected end of file: a block is missing its '}'"), True
        if tok.type == "RBRACE" and "_NL" in e.expected:
            msg = ("unexpected '}': a field ends at the end of its line; "
                   "put '}' on a line of its own")
        else:
            expected = {t for t in e.expected if not t.startswith("__ANON") or t == "__ANON_0"}
            msg = f"unexpected {_token_text(tok)}, expected {_words(expected)}"
            if tok.type == "LBRACE" and _BLOCK_START.match(text.split("\n")[e.line - 1]):
                msg += " (a new block starts here: is the block before it missing its '}'?)"
        width = 1 if tok.type == "_NL" else max(len(tok.value), 1)
        return Diagnostic(Loc(path, e.line, e.column), msg, width=width), False


def _unclosed_block(source: str, path: str) -> Diagnostic | None:
    """The error for the first '{' of `source` that no '}' closes (comments
    skipped; blocks do not nest, so a block opened inside another one means
    the other was never closed): at that brace, naming its block."""
    opened: list[tuple[int, int, str]] = []
    for row, line in enumerate(source.split("\n"), 1):
        code = line.split("#", 1)[0]
        for col, ch in enumerate(code, 1):
            if ch == "{":
                opened.append((row, col, code[:col - 1].strip()))
            elif ch == "}" and opened:
                opened.pop()
    if not opened:
        return None
    row, col, header = opened[0]
    what = f"block '{header}'" if header else "this block"
    return Diagnostic(Loc(path, row, col), f"{what} is never closed: a '}}' on a line of its "
                      "own must end it before the next block or the end of the file")


def describe_char(ch: str) -> str:
    """`'x'`, or for an invisible character its code point and name."""
    if ch.isprintable() and not ch.isspace() and unicodedata.category(ch) != "Cf":
        return f"'{ch}'"
    name = unicodedata.name(ch, "")
    return f"U+{ord(ch):04X}" + (f" ({name.lower()})" if name else "")


_BLOCK_START = re.compile(r"[\t \f]*(kernel|target|defaults|dispatch|tuned)\b")


def parse(source: str, path: str) -> SpecAst:
    """Parse spec text; raise SpecError with every syntax error found.

    LALR cannot resume reliably after an error, so recovery is by line: the
    broken line is blanked (a broken block header blanks its whole block) and
    the text is parsed again, until it parses or the input ends early. Line
    numbers never move, so every diagnostic points at the original text.
    """
    source = source.removeprefix("\ufeff")  # a BOM is not part of the text
    text = source if source.endswith("\n") else source + "\n"
    try:  # the usual case, a spec that parses: one pass
        tree = _parser().parse(text)
    except lark.exceptions.UnexpectedInput:
        tree = None
    if tree is not None:
        return _to_ast(tree, source, path)
    lines = source.split("\n")
    diags: list[Diagnostic] = []
    seen: set[tuple[int, int, str]] = set()
    # Blocks are independent, so after an error only the text from the
    # block around it on needs parsing again (blank lines keep the numbers).
    restart = 0
    while len(diags) < MAX_SYNTAX_ERRORS:
        found = _first_error("\n" * restart + "\n".join(lines[restart:]) + "\n", path)
        if found is None:
            break
        diag, at_end = found
        if at_end:  # point at the block that is never closed, not at the end
            diag = _unclosed_block(source, path) or diag
        key = (diag.loc.line, diag.loc.col, diag.message)
        repeated = key in seen
        if not repeated:
            seen.add(key)
            diags.append(diag)
        if at_end:
            break
        row = diag.loc.line - 1
        last = row
        before = lines[row][:diag.loc.col - 1]
        if repeated and not lines[row].strip():
            break  # no progress: nothing left to blank
        if (diag.message.startswith("unexpected '}'") and not repeated and before.strip()
                and "{" not in before):
            # `field value }`: keep the brace, so that the block still closes
            lines[row] = " " * (diag.loc.col - 1) + lines[row][diag.loc.col - 1:]
        else:
            if lines[row].count("{") > lines[row].count("}"):  # a broken header: drop its block
                while last + 1 < len(lines) and lines[last].strip() != "}":
                    last += 1
            for i in range(row, last + 1):
                lines[i] = ""
        restart = next((i for i in range(row, restart - 1, -1)
                        if _BLOCK_START.match(lines[i])), restart)
    if diags:
        raise SpecError(diags, {path: source})
    raise AssertionError("the spec failed to parse, but no pass found an error")


def _closing_line(lines: list[str], start: int) -> int:
    """The line (1-based) of the '}' closing the block whose header is on
    line `start`: the first '}' outside strings and comments (blocks do not
    nest, and no value holds a brace)."""
    for row in range(start - 1, len(lines)):
        code = re.sub(r'"[^"\n]*"', '""', lines[row]).split("#", 1)[0]
        if "}" in code:
            return row + 1
    return len(lines)


def _to_ast(tree: lark.Tree, source: str, path: str) -> SpecAst:
    transformer = _ToAst(path)
    lines = source.split("\n")
    blocks = tuple(replace(b, end_line=_closing_line(lines, b.loc.line))
                   for b in transformer.transform(tree))
    ast = SpecAst(path, blocks)
    if transformer.diags:  # numbers out of range
        raise SpecError(transformer.diags, {path: source})
    return ast
