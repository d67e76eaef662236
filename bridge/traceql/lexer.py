"""Pure: TraceQL text → tokens, as Tempo's lexer reads it (``pkg/traceql/lexer.go`` over Go's ``text/scanner``).

What the Go scanner does and this repeats: blanks are space, tab, CR, LF; ``//`` and ``/* */`` comments are skipped;
identifiers are letters, digits and ``_``; numbers may be ``.5``, ``1.``, ``1e3``; ``"..."`` strings take Go's
escapes and back-quoted strings none. Then Tempo's own rules:

- a number directly followed by duration letters (``ns us µs ms s m h d w y``) is one duration (``1h30m``, ``1.5s``;
  Prometheus' form first, then Go's);
- operators are joined greedily from the next characters (``!>>``, ``&<<``, ``=~``); ``span.``, ``resource.``,
  ``parent.``, ``event.``, ``link.``, ``instrumentation.`` and ``.`` start an attribute name, read up to a blank or
  one of ``{}()=~!<>&|^,`` (so ``.http.status_code`` is one name; ``"quoted parts"`` may hold anything, with ``\\"``
  and ``\\\\`` the only escapes) and closed by ``END_ATTRIBUTE``; ``span:``, ``trace:``, ``event:``, ``link:``,
  ``instrumentation:`` are scope tokens before an intrinsic's name;
- after ``parent.``, a following ``span.`` or ``resource.`` is a scope, not part of the name — and the scanner
  remembers that scope until the next scope token (a quirk Tempo has: ``{ parent.a } && { .resource.b }`` fails).

An error stops the tokens there (the parser then fails): the text, line and column of the first one are kept.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from typing import Final

TOKENS: Final = {
    ",": "COMMA", ".": "DOT", "{": "OPEN_BRACE", "}": "CLOSE_BRACE", "(": "OPEN_PARENS", ")": "CLOSE_PARENS",
    "=": "EQ", "!=": "NEQ", "=~": "RE", "!~": "NRE", ">": "GT", ">=": "GTE", "<": "LT", "<=": "LTE", "+": "ADD",
    "-": "SUB", "/": "DIV", "%": "MOD", "*": "MUL", "^": "POW", "true": "TRUE", "false": "FALSE", "nil": "NIL",
    "ok": "STATUS_OK", "error": "STATUS_ERROR", "unset": "STATUS_UNSET", "unspecified": "KIND_UNSPECIFIED",
    "internal": "KIND_INTERNAL", "server": "KIND_SERVER", "client": "KIND_CLIENT", "producer": "KIND_PRODUCER",
    "consumer": "KIND_CONSUMER", "&&": "AND", "||": "OR", "!": "NOT", "|": "PIPE", ">>": "DESC", "<<": "ANCE",
    "~": "SIBL", "!>": "NOT_CHILD", "!<": "NOT_PARENT", "!>>": "NOT_DESC", "!<<": "NOT_ANCE", "&~": "UNION_SIBL",
    "&>": "UNION_CHILD", "&<": "UNION_PARENT", "&>>": "UNION_DESC", "&<<": "UNION_ANCE", "duration": "IDURATION",
    "childCount": "CHILDCOUNT", "name": "NAME", "status": "STATUS", "statusMessage": "STATUS_MESSAGE",
    "kind": "KIND", "rootName": "ROOTNAME", "rootServiceName": "ROOTSERVICENAME", "rootService": "ROOTSERVICE",
    "traceDuration": "TRACEDURATION", "nestedSetLeft": "NESTEDSETLEFT", "nestedSetRight": "NESTEDSETRIGHT",
    "nestedSetParent": "NESTEDSETPARENT", "id": "ID", "traceID": "TRACE_ID", "spanID": "SPAN_ID",
    "parentID": "PARENT_ID", "timeSinceStart": "TIMESINCESTART", "version": "VERSION", "parent": "PARENT",
    "parent.": "PARENT_DOT", "resource.": "RESOURCE_DOT", "span.": "SPAN_DOT", "trace:": "TRACE_COLON",
    "span:": "SPAN_COLON", "event:": "EVENT_COLON", "link:": "LINK_COLON", "instrumentation:": "INSTRUMENTATION_COLON",
    "event.": "EVENT_DOT", "link.": "LINK_DOT", "instrumentation.": "INSTRUMENTATION_DOT", "count": "COUNT",
    "avg": "AVG", "max": "MAX", "min": "MIN", "sum": "SUM", "by": "BY", "coalesce": "COALESCE", "select": "SELECT",
    "rate": "RATE", "count_over_time": "COUNT_OVER_TIME", "min_over_time": "MIN_OVER_TIME",
    "max_over_time": "MAX_OVER_TIME", "avg_over_time": "AVG_OVER_TIME", "sum_over_time": "SUM_OVER_TIME",
    "quantile_over_time": "QUANTILE_OVER_TIME", "histogram_over_time": "HISTOGRAM_OVER_TIME", "compare": "COMPARE",
    "topk": "TOPK", "bottomk": "BOTTOMK", "with": "WITH",
}  # fmt: skip
TEXT_OF: Final = {kind: text for text, kind in TOKENS.items()}  # how a syntax error names a token
SCOPE_TOKENS: Final = frozenset(
    {"PARENT_DOT", "SPAN_DOT", "RESOURCE_DOT", "SPAN_COLON", "TRACE_COLON", "EVENT_COLON", "LINK_COLON"}
    | {"INSTRUMENTATION_COLON", "EVENT_DOT", "LINK_DOT", "INSTRUMENTATION_DOT"}
)
ATTRIBUTE_STARTS: Final = frozenset({"DOT", "RESOURCE_DOT", "SPAN_DOT", "PARENT_DOT", "EVENT_DOT"} | {"LINK_DOT"})
ATTRIBUTE_STARTS_ALL: Final = ATTRIBUTE_STARTS | {"INSTRUMENTATION_DOT"}
_END_OF_NAME: Final = frozenset("{}()=~!<>&|^,")
_DURATION_RUNES: Final = frozenset("nsumhµdwy")
_BLANKS: Final = frozenset(" \t\r\n")
_PROM_DURATION = re.compile(r"^(?:(\d+)y)?(?:(\d+)w)?(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?(?:(\d+)ms)?$")
_GO_DURATION_PART = re.compile(r"(\d*)(?:\.(\d*))?(ns|us|µs|μs|ms|s|m|h)")
_GO_UNITS: Final = {"ns": 1, "us": 1_000, "µs": 1_000, "μs": 1_000, "ms": 1_000_000, "s": 10**9, "m": 60 * 10**9}
_GO_UNITS_H: Final = {**_GO_UNITS, "h": 3600 * 10**9}
_PROM_UNITS: Final = (365 * 86400 * 10**9, 7 * 86400 * 10**9, 86400 * 10**9, 3600 * 10**9, 60 * 10**9, 10**9, 10**6)
INT64_MAX: Final = 2**63 - 1


@dataclass(frozen=True, slots=True)
class Token:
    kind: str
    value: object
    line: int
    col: int


@dataclass(frozen=True, slots=True)
class LexError:
    message: str
    line: int
    col: int


def is_attribute_rune(c: str) -> bool:
    return c != "" and not c.isspace() and c not in _END_OF_NAME


def parse_duration(text: str) -> int | None:
    """Nanoseconds of a Prometheus duration (``1d``, ``1h30m``), else of a Go one (``1.5s``, ``300ms``); None when
    neither reads it or it overflows int64 (Tempo ``lexer.go`` ``parseDuration``)."""
    m = _PROM_DURATION.match(text)
    if m and text and text != "0":
        whole = sum(int(g) * unit for g, unit in zip(m.groups(), _PROM_UNITS, strict=True) if g)
        return whole if whole <= INT64_MAX else None
    if text in ("0", "+0", "-0"):
        return 0
    sign = 1
    rest = text
    if rest[:1] in "+-" and rest:
        sign = -1 if rest[0] == "-" else 1
        rest = rest[1:]
    total: float = 0.0
    exact = 0
    pos = 0
    while pos < len(rest):
        part = _GO_DURATION_PART.match(rest, pos)
        if part is None or part.end() == pos or not (part.group(1) or part.group(2)):
            return None
        digits, frac, unit = part.group(1), part.group(2) or "", part.group(3)
        scale = _GO_UNITS_H[unit]
        exact += int(digits or "0") * scale
        if frac:
            total += int(frac) * scale / 10 ** len(frac)
        pos = part.end()
    if not rest:
        return None
    ns = exact + int(total)
    return sign * ns if ns <= INT64_MAX else None


class _Scanner:
    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0
        self.line = 1
        self.col = 1
        self.tok_line = 1
        self.tok_col = 1
        self.zeroed = False  # Go's Scanner.Next sets Position.Line to 0 until the next Scan: Tempo reports line 0
        self.errors: list[LexError] = []

    def peek(self, k: int = 0) -> str:
        i = self.pos + k
        return self.text[i] if i < len(self.text) else ""

    def next(self) -> str:
        c = self.peek()
        if c:
            self.pos += 1
            if c == "\n":
                self.line += 1
                self.col = 1
            else:
                self.col += 1
        return c

    def error(self, message: str) -> None:
        self.errors.append(LexError(message, self.where, self.tok_col))

    @property
    def where(self) -> int:
        """The line Tempo's lexer reports: the token's, or 0 once it stepped past the token with ``Next``."""
        return 0 if self.zeroed else self.tok_line

    def skip_blanks(self) -> None:
        while True:
            c = self.peek()
            if c in _BLANKS and c:
                self.next()
            elif c == "/" and self.peek(1) == "/":
                while self.peek() not in ("", "\n"):
                    self.next()
            elif c == "/" and self.peek(1) == "*":
                self.tok_line, self.tok_col = self.line, self.col
                self.next()
                self.next()
                while not (self.peek() == "*" and self.peek(1) == "/"):
                    if self.next() == "":
                        self.error("comment not terminated")
                        return
                self.next()
                self.next()
            else:
                return

    def number(self) -> tuple[str, str]:
        """A Go number literal's text and kind (``Int`` or ``Float``)."""
        start = self.pos
        kind = "Int"
        if self.peek() == "0" and self.peek(1) in ("x", "X", "o", "O", "b", "B") and self.peek(1):
            self.next()
            prefix = self.next().lower()
            while self.peek().isalnum() or self.peek() == "_":
                self.next()
            if prefix == "x" and self.peek() == ".":
                kind = "Float"
                self.next()
                while self.peek().isalnum() or self.peek() == "_":
                    self.next()
            if prefix == "x" and self.text[start : self.pos].lower().rstrip("0123456789abcdef_").endswith("p"):
                kind = "Float"
            return self.text[start : self.pos], kind
        while self.peek().isdigit() and self.peek().isascii() or self.peek() == "_":
            self.next()
        if self.peek() == ".":
            kind = "Float"
            self.next()
            while self.peek().isdigit() and self.peek().isascii() or self.peek() == "_":
                self.next()
        if self.peek() in ("e", "E") and self.peek():
            kind = "Float"
            self.next()
            if self.peek() in ("+", "-") and self.peek():
                self.next()
            if not (self.peek().isdigit() and self.peek().isascii()):
                self.error("exponent has no digits")
            while self.peek().isdigit() and self.peek().isascii() or self.peek() == "_":
                self.next()
        text = self.text[start : self.pos]
        if kind == "Int" and len(text) > 1 and text[0] == "0" and any(d in "89" for d in text):
            self.error(f"invalid digit {next(d for d in text if d in '89')!r} in octal literal")
        return text, kind

    def duration_after(self, number: str) -> int | None:
        """``tryScanDuration``: the number and the duration runes right after it, if together they are one."""
        k = 0
        while True:
            c = self.peek(k)
            if (
                c == ""
                or c.isspace()
                or not (unicodedata.category(c).startswith("N") or c in _DURATION_RUNES or c == ".")
            ):
                break
            k += 1
        if k == 0:
            return None
        ns = parse_duration(number + self.text[self.pos : self.pos + k])
        if ns is None:
            return None
        for _ in range(k):
            self.next()
        self.zeroed = True
        return ns

    def quoted(self, quote: str) -> str | None:
        """A ``"`` or back-quoted string after its opening quote: its value, or None after an error."""
        start = self.pos - 1
        while True:
            c = self.next()
            if c == "" or (c == "\n" and quote == '"'):
                self.error("literal not terminated")
                return None
            if c == quote:
                break
            if c == "\\" and quote == '"':
                self.next()
        raw = self.text[start : self.pos]
        if quote == "`":
            return raw[1:-1].replace("\r", "")
        return _go_unquote(raw[1:-1], self)


_HEX_DIGITS: Final = re.compile(r"[0-9a-fA-F]+")
_SIMPLE_ESCAPES: Final = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v", "\\": "\\"}


def _go_unquote(body: str, scanner: _Scanner) -> str | None:
    """Go's escapes inside a double-quoted string (``strconv.Unquote``)."""
    out: list[str] = []
    raw = bytearray()
    i = 0

    def flush() -> None:
        if raw:
            out.append(raw.decode("utf-8", "replace"))
            raw.clear()

    while i < len(body):
        c = body[i]
        if c != "\\":
            flush()
            out.append(c)
            i += 1
            continue
        e = body[i + 1] if i + 1 < len(body) else ""
        if e in _SIMPLE_ESCAPES or e == '"':
            flush()
            out.append(_SIMPLE_ESCAPES.get(e, '"'))
            i += 2
        elif (
            e in "01234567"
            and e
            and re.fullmatch(r"[0-7]{3}", body[i + 1 : i + 4])
            and int(body[i + 1 : i + 4], 8) < 256
        ):
            raw.append(int(body[i + 1 : i + 4], 8))
            i += 4
        elif e == "x" and re.fullmatch(r"[0-9a-fA-F]{2}", body[i + 2 : i + 4]):
            raw.append(int(body[i + 2 : i + 4], 16))
            i += 4
        elif e in ("u", "U") and _HEX_DIGITS.fullmatch(body[i + 2 : i + (6 if e == "u" else 10)] or "-"):
            n = 4 if e == "u" else 8
            if len(body) < i + 2 + n:
                scanner.error("invalid syntax")
                return None
            code = int(body[i + 2 : i + 2 + n], 16)
            if code > 0x10FFFF or 0xD800 <= code <= 0xDFFF:
                scanner.error("invalid syntax")
                return None
            flush()
            out.append(chr(code))
            i += 2 + n
        else:
            scanner.error("invalid char escape" if e else "invalid syntax")
            return None
    flush()
    return "".join(out)


def tokenize(text: str) -> tuple[list[Token], LexError | None]:
    """All tokens of ``text`` up to ``$end`` (or the first error), and that error."""
    s = _Scanner(text)
    tokens: list[Token] = []
    in_attribute = False
    scope = ""

    def emit(kind: str, value: object = None) -> None:
        tokens.append(Token(kind, value, s.where, s.tok_col))

    while not s.errors:
        if in_attribute:
            if not is_attribute_rune(s.peek()):
                in_attribute = False
                emit("END_ATTRIBUTE")
                continue
            found = _scope_after_parent(s, scope)
            if found:
                scope = found
                emit(found)
                continue
            name = _attribute_name(s)
            if name is None:
                break
            emit("IDENTIFIER", name)
            continue
        s.skip_blanks()
        if s.errors:
            break
        s.tok_line, s.tok_col = s.line, s.col
        s.zeroed = False
        c = s.peek()
        if c == "":
            break
        if c.isdigit() and c.isascii() or (c == "." and s.peek(1).isdigit() and s.peek(1).isascii()):
            _number(s, emit)
            continue
        if c in ('"', "`"):
            s.next()
            value = s.quoted(c)
            if value is None:
                break
            emit("STRING", value)
            continue
        word = _word(s)
        kind, word = _join_operator(s, word)
        if kind in SCOPE_TOKENS:
            scope = kind
        if kind is None:
            kind = TOKENS.get(word)
        if kind is None:
            emit("IDENTIFIER", word)
            continue
        in_attribute = kind in ATTRIBUTE_STARTS_ALL
        emit(kind)
    tokens.append(Token("$end", None, s.line, s.col))
    return tokens, (s.errors[0] if s.errors else None)


def _number(s: _Scanner, emit: object) -> None:
    text, kind = s.number()
    ns = s.duration_after(text)
    assert callable(emit)
    if ns is not None:
        emit("DURATION", ns)
        return
    if kind == "Int":
        if not text.isdigit() or "_" in text:
            s.error(f'strconv.Atoi: parsing "{text}": invalid syntax')
            return
        value = int(text)
        if value > INT64_MAX:
            s.error(f'strconv.Atoi: parsing "{text}": value out of range')
            return
        emit("INTEGER", value)
        return
    try:
        value_f = float.fromhex(text) if text[:2].lower() == "0x" else float(text)
    except ValueError:
        s.error(f'strconv.ParseFloat: parsing "{text}": invalid syntax')
        return
    if "_" in text:
        s.error(f'strconv.ParseFloat: parsing "{text}": invalid syntax')
        return
    emit("FLOAT", value_f)


def _word(s: _Scanner) -> str:
    """An identifier, a character literal or one character (what Go's scanner hands over as ``TokenText``)."""
    c = s.next()
    if c == "_" or c.isalpha():
        start = s.pos - 1
        while s.peek() == "_" or s.peek().isalnum():
            s.next()
        return s.text[start : s.pos]
    if c == "'":
        start = s.pos - 1
        while s.peek() not in ("'", "\n", ""):
            if s.next() == "\\":
                s.next()
        if s.peek() != "'":
            s.error("literal not terminated")
        else:
            s.next()
        return s.text[start : s.pos]
    return c


def _join_operator(s: _Scanner, word: str) -> tuple[str | None, str]:
    """Join the next characters onto ``word`` while the result is still a token (``!`` ``>`` ``>`` → ``!>>``)."""
    kind: str | None = None
    joined = word
    while True:
        longer = joined + s.peek()
        if s.peek() and longer in TOKENS:
            kind = TOKENS[longer]
            joined = longer
            s.next()
            s.zeroed = True
            continue
        return kind, joined


def _scope_after_parent(s: _Scanner, scope: str) -> str:
    """``tryScopeAttribute``: ``span.`` / ``resource.`` right after ``parent.`` is a scope token."""
    if scope != "PARENT_DOT":
        return ""
    k = 0
    text = ""
    while s.peek(k):
        c = s.peek(k)
        if c == ".":
            text += c
            break
        if not is_attribute_rune(c) or len(text) > 9:
            break
        text += c
        k += 1
    kind = TOKENS.get(text, "")
    if kind not in ("SPAN_DOT", "RESOURCE_DOT"):
        return ""
    for _ in range(len(text)):
        s.next()
    s.zeroed = True
    return kind


def _attribute_name(s: _Scanner) -> str | None:
    """``parseAttribute``: up to a blank or an ending rune, quoted parts taken whole."""
    s.zeroed = True  # it steps with Next from its first rune on
    out: list[str] = []
    while True:
        c = s.peek()
        if c == '"':
            s.next()
            while True:
                c = s.peek()
                if c == "":
                    s.error('unexpected EOF, expecting "')
                    return None
                s.next()
                if c == '"':
                    break
                if c == "\\":
                    escaped = s.peek()
                    if escaped not in ('"', "\\") or not escaped:
                        s.error("invalid escape sequence")
                        return None
                    s.next()
                    out.append(escaped)
                else:
                    out.append(c)
        elif is_attribute_rune(c):
            out.append(s.next())
        else:
            return "".join(out)
