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

import struct
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from bridge.compression import Budget, BudgetSpent
from bridge.jfr.cursor import RAW1, VARINT, Cursor, JfrError, JfrTooLarge, Op, PooledString
from bridge.jfr.metadata import Klass, Types, read_metadata

MAGIC: Final = b"FLR\x00"
HEADER_SIZE: Final = 68
COMPRESSED_INTS: Final = 1  # feature flag bit
CHECKPOINT_EVENT: Final = 1
ENTRY_COST: Final = 96  # bytes charged per kept constant-pool entry (a dict slot, a tuple or str header)
REF_COST: Final = 8  # per element of a kept tuple

_HEADER = struct.Struct(">4sHHqqqqqqqi")


@dataclass(frozen=True, slots=True)
class ChunkHeader:
    offset: int  # of the chunk in the file
    size: int
    start_nanos: int
    duration_nanos: int
    start_ticks: int
    ticks_per_second: int


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


PoolReader = Callable[[Cursor, dict[int, Any]], None]


def _pool_reader(types: Types, klass: Klass, pools: Pools) -> tuple[PoolReader, int]:
    """What reads one entry of ``klass``'s pool (after its id) and stores what is kept, and what keeping an entry
    costs the budget before its strings and references (0 for a pool that is read past)."""
    ops = types.ops(klass.id)
    name = klass.name
    if name == "java.lang.String":

        def read_string(cur: Cursor, into: dict[int, Any]) -> None:
            ref = cur.varint()
            value = cur.string()
            text = value if isinstance(value, str) else ""
            if text:
                pools.charge(len(text))
            into[ref] = text

        return read_string, ENTRY_COST
    if name == "jdk.types.StackTrace":
        return _stack_reader(types, klass, pools), ENTRY_COST
    kept = KEPT_POOLS.get(name)
    if kept is None:

        def skip(cur: Cursor, into: dict[int, Any]) -> None:
            cur.varint()
            cur.read(ops)

        return skip, 0
    where = types.bind(klass, kept)
    # a method's and a class's fields are numbers then a boolean: read as runs of varints and single bytes, not
    # by the general walk over the ops
    flat = all(op[0] in (VARINT, RAW1) and not op[1] for op in ops)
    runs: list[list[int]] = []  # [kind, how many in a row]
    for op in ops:
        if runs and runs[-1][0] == op[0] == VARINT:
            runs[-1][1] += 1
        else:
            runs.append([op[0], 1])

    def read_flat(cur: Cursor) -> list[Any]:
        out: list[Any] = []
        for kind, n in runs:
            if kind == VARINT:
                out += cur.varints(n)
            else:
                out.append(cur.byte())
        return out

    def read_kept(cur: Cursor, into: dict[int, Any]) -> None:
        ref = cur.varint()
        values = read_flat(cur) if flat else cur.read(ops)
        value: Any
        if len(where) == 1:  # a symbol's or thread state's string, a class's name symbol
            value = values[where[0]] if where[0] >= 0 else (0 if kept[0][2] else "")
            if isinstance(value, str) and value:
                pools.charge(len(value))
        else:
            value = tuple(values[i] if i >= 0 else 0 for i in where)
        into[ref] = value

    return read_kept, ENTRY_COST


def _stack_reader(types: Types, klass: Klass, pools: Pools) -> PoolReader:
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
        pools.charge(REF_COST * len(value))
        into[ref] = value

    return read_stack


def read_constant_pools(buf: bytes, start: int, end: int, offset: int, types: Types, budget: Budget) -> Pools:
    """Every checkpoint of the chain that starts ``offset`` bytes into the chunk at ``start``."""
    pools = Pools(budget)
    readers: dict[int, tuple[PoolReader, int]] = {}  # type id → (reader, entry cost)
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
            got = readers.get(type_id)
            if got is None:
                klass = types.classes.get(type_id)
                if klass is None:
                    raise cur.fail(f"constant pool of type id {type_id}, which the metadata does not define")
                got = readers[type_id] = _pool_reader(types, klass, pools)
            reader, entry_cost = got
            into = pools.get(types.name_of(type_id))
            entries = cur.count("constant pool entry")
            pools.charge(entries * entry_cost)  # what keeping them costs, before any is read; strings add their length
            for _ in range(entries):
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
