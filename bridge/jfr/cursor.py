"""Pure: the byte level of a JFR chunk, for ``bridge.jfr.reader`` — LEB128 varints (with the optional C loop of
``_fastjfr.c``), the string encodings, and the ops that read one field of a class; the reader's errors. The format
itself is described in ``bridge.jfr.reader``."""

from __future__ import annotations

import importlib
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Final

_native: ModuleType | None
try:  # the optional C loop (bridge/jfr/_fastjfr.c, built by setup.py when a C compiler is there)
    _native = importlib.import_module("bridge.jfr._fastjfr")
except ImportError:
    _native = None
NATIVE: Final = _native is not None

# kinds of field encodings
VARINT, RAW1, RAW4, RAW8, STRING, STRUCT = range(6)
PRIMITIVE_KINDS: Final[Mapping[str, int]] = {
    "int": VARINT,
    "long": VARINT,
    "short": VARINT,
    "char": VARINT,
    "byte": RAW1,
    "boolean": RAW1,
    "float": RAW4,
    "double": RAW8,
    "java.lang.String": STRING,
}


class JfrError(ValueError):
    """Malformed JFR; ``str()`` says what and where."""


class JfrTooLarge(JfrError):
    """What the file asks the reader to keep would pass the request's decompression budget."""


@dataclass(frozen=True, slots=True)
class PooledString:
    """A string field that refers into the ``java.lang.String`` pool (encoding 2): resolved by ``Chunk.text``."""

    ref: int


# An op reads one field: (kind, array, nested ops for STRUCT or None, whether one element takes any bytes).
Op = tuple[int, bool, "tuple[Op, ...] | None", bool]


class Cursor:
    """Reads ``buf`` from ``pos`` up to ``end`` (exclusive); ``where`` names the structure for error messages."""

    __slots__ = ("buf", "pos", "end", "where")

    def __init__(self, buf: bytes, pos: int, end: int, where: str) -> None:
        self.buf = buf
        self.pos = pos
        self.end = end
        self.where = where

    def fail(self, what: str) -> JfrError:
        return JfrError(f"{self.where}: {what} at byte {self.pos}")

    def varint(self) -> int:
        buf, pos, end = self.buf, self.pos, self.end
        if pos >= end:
            raise self.fail("truncated (a number runs past the end)")
        b = buf[pos]
        pos += 1
        if b < 0x80:
            self.pos = pos
            return b
        value = b & 0x7F
        shift = 7
        while True:
            if pos >= end:
                raise self.fail("truncated (a number runs past the end)")
            b = buf[pos]
            pos += 1
            if shift == 56:
                value |= b << 56
                break
            value |= (b & 0x7F) << shift
            if b < 0x80:
                break
            shift += 7
        self.pos = pos
        return value

    def varints(self, count: int) -> list[int]:
        """``count`` varints in a row (the hot loop: stack frames, the fields of simple events): in C when
        ``bridge.jfr._fastjfr`` is built, else ``varints_python``."""
        if _native is None:
            return self.varints_python(count)
        try:
            out, self.pos = _native.varints(self.buf, self.pos, self.end, count)
        except ValueError:
            raise self.fail("truncated (a number runs past the end)") from None
        return out  # type: ignore[no-any-return]

    def varints_python(self, count: int) -> list[int]:
        buf, pos, end = self.buf, self.pos, self.end
        out: list[int] = []
        append = out.append
        for _ in range(count):
            if pos >= end:
                self.pos = pos
                raise self.fail("truncated (a number runs past the end)")
            b = buf[pos]
            pos += 1
            if b < 0x80:
                append(b)
                continue
            value = b & 0x7F
            shift = 7
            while True:
                if pos >= end:
                    self.pos = pos
                    raise self.fail("truncated (a number runs past the end)")
                b = buf[pos]
                pos += 1
                if shift == 56:
                    value |= b << 56
                    break
                value |= (b & 0x7F) << shift
                if b < 0x80:
                    break
                shift += 7
            append(value)
        self.pos = pos
        return out

    def signed(self) -> int:
        value = self.varint()
        return value - (1 << 64) if value >= 1 << 63 else value

    def raw(self, n: int) -> bytes:
        pos = self.pos
        if n > self.end - pos:
            raise self.fail(f"truncated ({n} bytes announced, {self.end - pos} left)")
        self.pos = pos + n
        return self.buf[pos : pos + n]

    def byte(self) -> int:
        pos = self.pos
        if pos >= self.end:
            raise self.fail("truncated (1 byte announced, 0 left)")
        self.pos = pos + 1
        return self.buf[pos]

    def count(self, what: str) -> int:
        """A count of things each at least one byte long: never more than the bytes left."""
        n = self.varint()
        if n > self.end - self.pos:
            raise self.fail(f"{what} count {n} is more than the {self.end - self.pos} bytes left")
        return n

    def string(self) -> str | PooledString | None:
        tag = self.raw(1)[0]
        if tag == 0:
            return None
        if tag == 1:
            return ""
        if tag == 2:
            return PooledString(self.varint())
        if tag == 3 or tag == 5:
            data = self.raw(self.count("string length"))
            return data.decode("utf-8", "replace") if tag == 3 else data.decode("latin-1")
        if tag == 4:
            units = [self.varint() & 0xFFFF for _ in range(self.count("string length"))]
            return struct.pack(f">{len(units)}H", *units).decode("utf-16-be", "replace")
        raise self.fail(f"unknown string encoding {tag}")

    def read(self, ops: tuple[Op, ...]) -> list[Any]:
        """One value per op: ints for numbers, str/None/PooledString for strings, lists for structs and arrays;
        floats and raw bytes are skipped (None)."""
        out: list[Any] = []
        for kind, array, sub, consumes in ops:
            if not array:
                out.append(self._one(kind, sub))
            elif consumes:
                out.append([self._one(kind, sub) for _ in range(self.count("array element"))])
            else:  # elements of no bytes at all: nothing to read however many the count says
                self.varint()
                out.append([])
        return out

    def _one(self, kind: int, sub: tuple[Op, ...] | None) -> Any:
        if kind == VARINT:
            return self.varint()
        if kind == STRING:
            return self.string()
        if kind == STRUCT:
            return self.read(sub or ())
        if kind == RAW1:
            return self.byte()
        self.raw(4 if kind == RAW4 else 8)
        return None
