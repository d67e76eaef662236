"""Pure: a JFR chunk's metadata event — its classes and their fields — and ``Types``, which turns a class into the
ops ``Cursor.read`` follows and binds the fields the converter wants (the format: ``bridge.jfr.reader``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final

from bridge.jfr.cursor import PRIMITIVE_KINDS, STRUCT, VARINT, Cursor, JfrError, Op

METADATA_EVENT: Final = 0  # the type id of the metadata event
MAX_NESTING: Final = 16  # inline struct depth (the JDK's types nest 2 deep)


@dataclass(frozen=True, slots=True)
class Field:
    name: str
    type_id: int
    constant_pool: bool
    array: bool


@dataclass(slots=True)
class Klass:
    id: int
    name: str
    fields: list[Field] = field(default_factory=list)


# --------------------------------------------------------------------------------------------- metadata


@dataclass(slots=True)
class _Element:
    name: str
    attrs: dict[str, str]
    children: list[_Element]


def _element(cur: Cursor, strings: list[str], depth: int) -> _Element:
    if depth > MAX_NESTING:
        raise cur.fail("metadata elements nest too deeply")

    def text() -> str:
        index = cur.varint()
        if index >= len(strings):
            raise cur.fail(f"metadata string index {index} is outside its table of {len(strings)}")
        return strings[index]

    name = text()
    attrs = {}
    for _ in range(cur.count("metadata attribute")):
        key = text()
        attrs[key] = text()
    children = [_element(cur, strings, depth + 1) for _ in range(cur.count("metadata element"))]
    return _Element(name, attrs, children)


def _int_attr(element: _Element, key: str, where: str) -> int:
    raw = element.attrs.get(key, "")
    try:
        return int(raw)
    except ValueError:
        raise JfrError(f"{where}: {element.name} attribute {key}={raw[:40]!r} is not a number") from None


def read_metadata(buf: bytes, pos: int, end: int) -> dict[int, Klass]:
    """The metadata event at ``pos`` → classes by type id."""
    cur = Cursor(buf, pos, end, "metadata event")
    size = cur.varint()
    if size < 2 or pos + size > end:
        raise cur.fail(f"size {size} does not fit its chunk")
    cur.end = pos + size
    if cur.varint() != METADATA_EVENT:
        raise cur.fail("the header's metadata offset does not point at a metadata event")
    cur.varint(), cur.varint(), cur.varint()  # start, duration, metadata id
    strings: list[str] = []
    for _ in range(cur.count("metadata string")):
        value = cur.string()
        strings.append(value if isinstance(value, str) else "")
    root = _element(cur, strings, 0)
    classes: dict[int, Klass] = {}
    for part in root.children:
        if part.name != "metadata":
            continue
        for element in part.children:
            if element.name != "class":
                continue
            where = f"metadata class {element.attrs.get('name', '?')[:80]!r}"
            klass = Klass(_int_attr(element, "id", where), element.attrs.get("name", ""))
            for child in element.children:
                if child.name != "field":
                    continue
                dimension = child.attrs.get("dimension", "")
                if dimension not in ("", "0", "1"):
                    raise JfrError(f"{where}: field dimension {dimension[:20]!r} (only arrays of one dimension exist)")
                klass.fields.append(
                    Field(
                        child.attrs.get("name", ""),
                        _int_attr(child, "class", where),
                        child.attrs.get("constantPool") == "true",
                        dimension == "1",
                    )
                )
            classes[klass.id] = klass
    return classes


class Types:
    """A chunk's classes, and the ops that read each one."""

    def __init__(self, classes: dict[int, Klass]) -> None:
        self.classes = classes
        self.by_name = {k.name: k for k in classes.values()}
        self._ops: dict[int, tuple[Op, ...]] = {}

    def name_of(self, type_id: int) -> str:
        klass = self.classes.get(type_id)
        return klass.name if klass is not None else f"#{type_id}"

    def field_op(self, f: Field, depth: int = 0) -> Op:
        if f.constant_pool:
            return (VARINT, f.array, None, True)
        klass = self.classes.get(f.type_id)
        if klass is None:
            raise JfrError(f"metadata: field {f.name!r} has type id {f.type_id}, which the metadata does not define")
        kind = PRIMITIVE_KINDS.get(klass.name)
        if kind is not None:
            return (kind, f.array, None, True)
        sub = self.ops(f.type_id, depth + 1)
        return (STRUCT, f.array, sub, any(op[1] or op[3] for op in sub))

    def ops(self, type_id: int, depth: int = 0) -> tuple[Op, ...]:
        """How to read one value of a class (its fields in order)."""
        got = self._ops.get(type_id)
        if got is not None:
            return got
        if depth > MAX_NESTING:
            raise JfrError(f"metadata: type {self.name_of(type_id)!r} nests inline types too deeply (a cycle?)")
        klass = self.classes[type_id]
        kind = PRIMITIVE_KINDS.get(klass.name)
        got = ((kind, False, None, True),) if kind is not None else tuple(self.field_op(f, depth) for f in klass.fields)
        self._ops[type_id] = got
        return got

    def bind(self, klass: Klass, wanted: Sequence[tuple[str, str, bool]]) -> list[int]:
        """Where each wanted (field name, type name, constant pool) sits among the class's fields, -1 when absent or
        of another type — a field is read only when it is what the reader expects (jfr-parser binds fields the same
        way: ``parser/types/*.go`` ``NewBind*``)."""
        out = []
        for name, type_name, cp in wanted:
            index = -1
            for i, f in enumerate(klass.fields):
                if f.name == name and not f.array and f.constant_pool == cp and self.name_of(f.type_id) == type_name:
                    index = i
                    break
            out.append(index)
        return out
