"""Pure, sans-I/O reader of JDK Flight Recorder files (bytes in, chunks and events out), as the JDK and
async-profiler (inside Pyroscope's Java agent) write them. It knows only the format; which events become which
profiles is ``bridge.jfr.convert``'s business.

The format, as read here (the JDK's ``jdk.jfr.internal.consumer`` and grafana/jfr-parser ``parser/`` read the same):

- A file is one or more **chunks**, back to back. A chunk opens with a 68-byte header, big-endian: magic ``FLR\\0``,
  major/minor version (2.x), chunk size, offset of the last constant-pool checkpoint, offset of the metadata event,
  start (ns since 1970), duration (ns), start ticks, ticks per second, feature flags (bit 0: integers compressed).
- After the header, **events** to the chunk's end: ``size`` (varint, counting itself), ``type id`` (varint), then the
  type's fields in declaration order. Type 0 is the metadata event, type 1 a checkpoint (constant pools).
- **Integers** are LEB128 varints (``short``, ``char``, ``int``, ``long``: the ninth byte of a long keeps all 8
  bits); ``byte``/``boolean`` one raw byte; ``float``/``double`` 4/8 raw bytes. A **string** starts with an
  encoding byte: 0 null, 1 empty, 2 a reference into the ``java.lang.String`` pool, 3 UTF-8, 4 UTF-16 char array
  (varint code units), 5 Latin-1; 3–5 carry a varint length. A field marked ``constantPool`` holds a varint
  reference into its type's pool (0 is null); ``dimension="1"`` makes it an array (varint count, then elements); a
  field of a non-primitive type without ``constantPool`` is that type's fields inline.
- The **metadata** event: size, type, start, duration, id, a string table, then a tree of elements (name, attributes
  as string-table indexes, children): ``root`` → ``metadata`` → ``class`` (``id``, ``name``) → ``field`` (``name``,
  ``class``, ``constantPool``, ``dimension``).
- **Checkpoints** form a chain from the header's offset: size, type, start, duration, ``delta`` to the previous
  checkpoint (0 ends the chain), a flags byte, a pool count, then per pool a type id, an entry count and entries
  (id, value).

Hostile input: every length, count and offset is checked against the chunk before it is used, the chain may not
loop, type nesting is capped, and what the reader keeps (constant-pool entries, strings) is charged to the request's
decompression ``Budget`` — so memory stays within it however many entries a file claims. Every failure is a
``JfrError`` naming what is wrong and where (the byte offset in the file).
"""

from __future__ import annotations

import importlib
import struct
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Final

from bridge.compression import Budget, BudgetSpent

_native: ModuleType | None
try:  # the optional C loop (bridge/jfr/_fastjfr.c, built by setup.py when a C compiler is there)
    _native = importlib.import_module("bridge.jfr._fastjfr")
except ImportError:
    _native = None
NATIVE: Final = _native is not None

MAGIC: Final = b"FLR\x00"
HEADER_SIZE: Final = 68
COMPRESSED_INTS: Final = 1  # feature flag bit
METADATA_EVENT: Final = 0
CHECKPOINT_EVENT: Final = 1
MAX_NESTING: Final = 16  # inline struct depth (the JDK's types nest 2 deep)
ENTRY_COST: Final = 96  # bytes charged per kept constant-pool entry (a dict slot, a tuple or str header)
REF_COST: Final = 8  # per element of a kept tuple

_HEADER = struct.Struct(">4sHHqqqqqqqi")

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
class ChunkHeader:
    offset: int  # of the chunk in the file
    size: int
    start_nanos: int
    duration_nanos: int
    start_ticks: int
    ticks_per_second: int


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
            return self.raw(1)[0]
        self.raw(4 if kind == RAW4 else 8)
        return None


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


# --------------------------------------------------------------------------------------------- constant pools

# What the reader keeps of each pool (others are read and dropped): type name → (field, type, cp) to keep
KEPT_POOLS: Final[Mapping[str, tuple[tuple[str, str, bool], ...]]] = {
    "jdk.types.Symbol": (("string", "java.lang.String", False),),
    "java.lang.Class": (("name", "jdk.types.Symbol", True),),
    "jdk.types.Method": (("type", "java.lang.Class", True), ("name", "jdk.types.Symbol", True)),
    "jdk.types.ThreadState": (("name", "java.lang.String", False),),
}
STACK_FRAME: Final = "jdk.types.StackFrame"
STACK_FRAME_METHOD: Final = ("method", "jdk.types.Method", True)


class Pools:
    """A chunk's constant pools: type name → {constant id → kept value}."""

    def __init__(self, budget: Budget) -> None:
        self.by_type: dict[str, dict[int, Any]] = {}
        self._budget = budget

    def charge(self, n: int) -> None:
        try:
            self._budget.spend(n)
        except BudgetSpent as exc:
            raise JfrTooLarge(f"its constant pools are {exc}") from None

    def get(self, type_name: str) -> dict[int, Any]:
        return self.by_type.setdefault(type_name, {})


def _pool_reader(types: Types, klass: Klass, pools: Pools) -> Callable[[Cursor, dict[int, Any]], None]:
    """Reads one entry of ``klass``'s pool (after its id) and stores what is kept."""
    ops = types.ops(klass.id)
    name = klass.name
    if name == "java.lang.String":

        def read_string(cur: Cursor, into: dict[int, Any]) -> None:
            ref = cur.varint()
            value = cur.string()
            text = value if isinstance(value, str) else ""
            pools.charge(ENTRY_COST + len(text))
            into[ref] = text

        return read_string
    if name == "jdk.types.StackTrace":
        return _stack_reader(types, klass, pools)
    kept = KEPT_POOLS.get(name)
    if kept is None:

        def skip(cur: Cursor, into: dict[int, Any]) -> None:
            cur.varint()
            cur.read(ops)

        return skip
    where = types.bind(klass, kept)

    def read_kept(cur: Cursor, into: dict[int, Any]) -> None:
        ref = cur.varint()
        values = cur.read(ops)
        value: Any
        if len(where) == 1:  # a symbol's or thread state's string, a class's name symbol
            value = values[where[0]] if where[0] >= 0 else (0 if kept[0][2] else "")
            pools.charge(ENTRY_COST + (len(value) if isinstance(value, str) else 0))
        else:
            value = tuple(values[i] if i >= 0 else 0 for i in where)
            pools.charge(ENTRY_COST)
        into[ref] = value

    return read_kept


def _stack_reader(types: Types, klass: Klass, pools: Pools) -> Callable[[Cursor, dict[int, Any]], None]:
    """A stack trace is kept as the tuple of its frames' method references, leaf first. Frames whose fields are all
    numbers (the JDK's and async-profiler's layout) are read as one run of varints."""
    ops = types.ops(klass.id)
    frames_at = method_at = -1
    for i, f in enumerate(klass.fields):  # frames: an array of inline jdk.types.StackFrame structs
        if f.name == "frames" and f.array and not f.constant_pool and types.name_of(f.type_id) == STACK_FRAME:
            frames_at = i
            method_at = types.bind(types.classes[f.type_id], (STACK_FRAME_METHOD,))[0]
            break
    flat = frames_at >= 0 and all(op[0] == VARINT and not op[1] for op in ops[frames_at][2] or ())
    width = len(ops[frames_at][2] or ()) if flat else 0

    def read_stack(cur: Cursor, into: dict[int, Any]) -> None:
        ref = cur.varint()
        value: tuple[int, ...] = ()
        if flat and width:
            for i, (kind, array, sub, _) in enumerate(ops):
                if i != frames_at:
                    cur.read(((kind, array, sub, True),))
                    continue
                numbers = cur.varints(cur.count("stack frame") * width)
                value = tuple(numbers[method_at::width]) if method_at >= 0 else ()
        else:
            values = cur.read(ops)
            frames = values[frames_at] if frames_at >= 0 and method_at >= 0 else ()
            value = tuple(frame[method_at] for frame in frames)
        pools.charge(ENTRY_COST + REF_COST * len(value))
        into[ref] = value

    return read_stack


def read_constant_pools(buf: bytes, start: int, end: int, offset: int, types: Types, budget: Budget) -> Pools:
    """Every checkpoint of the chain that starts ``offset`` bytes into the chunk at ``start``."""
    pools = Pools(budget)
    readers: dict[int, Callable[[Cursor, dict[int, Any]], None]] = {}
    seen: set[int] = set()
    pos = start + offset
    while True:
        if pos in seen:
            raise JfrError(f"checkpoint chain loops back to byte {pos}")
        seen.add(pos)
        if not start + HEADER_SIZE <= pos < end:
            raise JfrError(f"checkpoint at byte {pos} lies outside its chunk (bytes {start}–{end})")
        cur = Cursor(buf, pos, end, "checkpoint event")
        size = cur.varint()
        if size < 2 or pos + size > end:
            raise cur.fail(f"size {size} does not fit its chunk")
        cur.end = pos + size
        if cur.varint() != CHECKPOINT_EVENT:
            raise cur.fail("the constant pool chain does not point at a checkpoint event")
        cur.varint(), cur.varint()  # start, duration
        delta = cur.signed()
        cur.varint()  # flags (flush, chunk header, statics, thread)
        for _ in range(cur.count("constant pool")):
            type_id = cur.varint()
            reader = readers.get(type_id)
            if reader is None:
                klass = types.classes.get(type_id)
                if klass is None:
                    raise cur.fail(f"constant pool of type id {type_id}, which the metadata does not define")
                reader = readers[type_id] = _pool_reader(types, klass, pools)
            into = pools.get(types.name_of(type_id))
            for _ in range(cur.count("constant pool entry")):
                reader(cur, into)
        if delta == 0:
            return pools
        pos += delta


# --------------------------------------------------------------------------------------------- chunks


def read_header(buf: bytes, pos: int) -> tuple[ChunkHeader, int, int, int]:
    """(header, constant pool offset, metadata offset, features) of the chunk at ``pos``."""
    if len(buf) - pos < HEADER_SIZE:
        raise JfrError(f"truncated chunk at byte {pos}: {len(buf) - pos} bytes, less than a 68-byte chunk header")
    magic, major, minor, size, cp, meta, start_ns, duration_ns, ticks, tps, features = _HEADER.unpack_from(buf, pos)
    if magic != MAGIC:
        raise JfrError(f"not a JFR chunk at byte {pos}: magic {magic!r}, expected {MAGIC!r}")
    if major != 2:
        raise JfrError(f"chunk at byte {pos} has format version {major}.{minor}; JFR 2.x (JDK 11+) is read")
    if size < HEADER_SIZE:
        raise JfrError(f"chunk at byte {pos} has size {size} (an unfinished recording has 0: stop it first)")
    if size > len(buf) - pos:
        raise JfrError(f"truncated chunk at byte {pos}: its header says {size} bytes, the file has {len(buf) - pos}")
    for what, value in (("constant pool", cp), ("metadata", meta)):
        if not HEADER_SIZE <= value < size:
            raise JfrError(f"chunk at byte {pos}: {what} offset {value} lies outside the chunk's {size} bytes")
    if not features & COMPRESSED_INTS:
        raise JfrError(f"chunk at byte {pos} stores integers uncompressed, which no JDK or async-profiler writes")
    return ChunkHeader(pos, size, start_ns, duration_ns, ticks, tps), cp, meta, features


class Chunk:
    """One chunk: its types and kept constant pools, and its events on demand."""

    def __init__(self, buf: bytes, header: ChunkHeader, types: Types, pools: Pools) -> None:
        self.buf = buf
        self.header = header
        self.types = types
        self.pools = pools
        self.strings: dict[int, Any] = pools.by_type.get("java.lang.String", {})
        for name in ("jdk.types.Symbol", "jdk.types.ThreadState"):  # strings kept by reference: resolved now
            pool = pools.by_type.get(name, {})
            for ref, value in pool.items():
                if not isinstance(value, str):
                    pool[ref] = self.text(value)

    def text(self, value: str | PooledString | None) -> str:
        if isinstance(value, PooledString):
            got = self.strings.get(value.ref)
            return got if isinstance(got, str) else ""
        return value or ""

    def events(self, wanted: Mapping[str, Sequence[tuple[str, str, bool]]]) -> Iterator[tuple[str, list[Any]]]:
        """(event type name, its wanted fields' values) for every event of a wanted type, in file order. A wanted
        field the chunk's type lacks, or declares with another type, reads as 0 (None for strings)."""
        plans: dict[int, tuple[str, tuple[Op, ...], list[int], bool]] = {}
        for name, fields in wanted.items():
            klass = self.types.by_name.get(name)
            if klass is None:
                continue
            ops = self.types.ops(klass.id)
            simple = all(op[0] == VARINT and not op[1] for op in ops)
            plans[klass.id] = (name, ops, self.types.bind(klass, fields), simple)
        buf = self.buf
        start = self.header.offset
        end = start + self.header.size
        cur = Cursor(buf, start + HEADER_SIZE, end, "event")
        while cur.pos < end:
            pos = cur.pos
            cur.end = end
            size = cur.varint()
            if size == 0:
                raise cur.fail("size 0 (an event is at least its size and type)")
            if size > end - pos:
                raise JfrError(
                    f"event at byte {pos} is {size} bytes, past the end of its chunk ({end - pos} bytes left)"
                )
            cur.end = pos + size
            plan = plans.get(cur.varint())
            if plan is not None:
                name, ops, where, simple = plan
                values = cur.varints(len(ops)) if simple else cur.read(ops)
                yield name, [values[i] if i >= 0 else None for i in where]
            cur.pos = pos + size


def read_chunks(data: bytes, budget: Budget) -> Iterator[Chunk]:
    """Every chunk of a recording, in order. The first chunk is checked before anything is yielded; each later one
    when it is reached (the caller decodes the whole file before storing anything)."""
    if not data:
        raise JfrError("the recording is empty")
    pos = 0
    while pos < len(data):
        header, cp, meta, _ = read_header(data, pos)
        end = pos + header.size
        types = Types(read_metadata(data, pos + meta, end))
        pools = read_constant_pools(data, pos, end, cp, types, budget)
        yield Chunk(data, header, types, pools)
        pos = end
