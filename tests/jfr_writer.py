"""A small JFR writer for the tests: valid chunks with the JDK's type layout (``jfr metadata`` of JDK 17), one
checkpoint and ``jdk.ExecutionSample`` events — and the knobs to break them (a reference to a constant that no pool
defines, a pool of a million entries, an event longer than its chunk). Written from the format (the JDK's
``jdk.jfr.internal`` ``ChunkHeader``/``MetadataWriter``/``EventWriter``); it shares no code with the bridge's reader."""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass, field

PRIMS = {20: "int", 21: "long", 22: "short", 23: "float", 24: "boolean", 25: "java.lang.String", 26: "byte"}
SYMBOL, CLASS, METHOD, FRAME, STACK, PACKAGE, LOADER, FRAME_TYPE, STATE, THREAD = range(30, 40)
EXECUTION_SAMPLE = 100
# class id → (name, [(field, type id, constant pool, array)])
CLASSES: dict[int, tuple[str, list[tuple[str, int, bool, bool]]]] = {
    **{i: (n, []) for i, n in PRIMS.items()},
    SYMBOL: ("jdk.types.Symbol", [("string", 25, False, False)]),
    CLASS: (
        "java.lang.Class",
        [("classLoader", LOADER, True, False), ("name", SYMBOL, True, False), ("package", PACKAGE, True, False)]
        + [("modifiers", 20, False, False)],
    ),
    METHOD: (
        "jdk.types.Method",
        [("type", CLASS, True, False), ("name", SYMBOL, True, False), ("descriptor", SYMBOL, True, False)]
        + [("modifiers", 20, False, False), ("hidden", 24, False, False)],
    ),
    FRAME: (
        "jdk.types.StackFrame",
        [("method", METHOD, True, False), ("lineNumber", 20, False, False), ("bytecodeIndex", 20, False, False)]
        + [("type", FRAME_TYPE, True, False)],
    ),
    STACK: ("jdk.types.StackTrace", [("truncated", 24, False, False), ("frames", FRAME, False, True)]),
    PACKAGE: ("jdk.types.Package", [("name", SYMBOL, True, False)]),
    LOADER: ("jdk.types.ClassLoader", [("type", CLASS, True, False), ("name", SYMBOL, True, False)]),
    FRAME_TYPE: ("jdk.types.FrameType", [("description", 25, False, False)]),
    STATE: ("jdk.types.ThreadState", [("name", 25, False, False)]),
    THREAD: ("java.lang.Thread", [("osName", 25, False, False), ("javaName", 25, False, False)]),
    EXECUTION_SAMPLE: (
        "jdk.ExecutionSample",
        [("startTime", 21, False, False), ("sampledThread", THREAD, True, False), ("stackTrace", STACK, True, False)]
        + [("state", STATE, True, False)],
    ),
}


def varint(n: int) -> bytes:
    n &= (1 << 64) - 1
    out = bytearray()
    for _ in range(8):
        if n < 0x80:
            out.append(n)
            return bytes(out)
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n & 0xFF)
    return bytes(out)


def text(s: str) -> bytes:
    raw = s.encode()
    return b"\x03" + varint(len(raw)) + raw


def _event(type_id: int, body: bytes) -> bytes:
    payload = varint(type_id) + body
    size = len(payload) + 1
    while len(varint(size)) + len(payload) != size:
        size += 1
    return varint(size) + payload


def metadata_event() -> bytes:
    strings: list[str] = []

    def idx(s: str) -> bytes:
        if s not in strings:
            strings.append(s)
        return varint(strings.index(s))

    def element(name: str, attrs: dict[str, str], children: Sequence[bytes]) -> bytes:
        out = idx(name) + varint(len(attrs))
        for k, v in attrs.items():
            out += idx(k) + idx(v)
        return out + varint(len(children)) + b"".join(children)

    classes = []
    for cid, (name, fields) in CLASSES.items():
        kids = []
        for fname, ftype, cp, array in fields:
            attrs = {"name": fname, "class": str(ftype)}
            if cp:
                attrs["constantPool"] = "true"
            if array:
                attrs["dimension"] = "1"
            kids.append(element("field", attrs, []))
        classes.append(element("class", {"id": str(cid), "name": name}, kids))
    root = element("root", {}, [element("metadata", {}, classes), element("region", {}, [])])
    body = varint(0) + varint(0) + varint(1) + varint(len(strings)) + b"".join(text(s) for s in strings) + root
    return _event(0, body)


@dataclass
class Recording:
    """One chunk's content: symbols and the JDK's pools, stacks as lists of method ids, samples as (stack, state)."""

    symbols: dict[int, str] = field(
        default_factory=lambda: {1: "demo/Main", 2: "hot", 3: "main", 4: "java/lang/Thread", 5: "run"}
    )
    classes: dict[int, int] = field(default_factory=lambda: {1: 1, 2: 4})  # class id → name symbol
    methods: dict[int, tuple[int, int]] = field(default_factory=lambda: {1: (1, 2), 2: (1, 3), 3: (2, 5)})
    stacks: dict[int, list[int]] = field(default_factory=lambda: {1: [1, 2, 3], 2: [2, 3]})  # leaf first
    states: dict[int, str] = field(default_factory=lambda: {5: "STATE_RUNNABLE", 225: "STATE_SLEEPING"})
    samples: list[tuple[int, int]] = field(default_factory=lambda: [(1, 5), (1, 5), (2, 5), (1, 225)])
    extra_symbols: int = 0  # pad the symbol pool with this many more entries (all the same one)
    start_ns: int = 1_700_000_000_000_000_000

    def checkpoint(self) -> bytes:
        pools = []
        symbols = b"".join(varint(i) + text(s) for i, s in self.symbols.items())
        symbols += b"\xe8\x07\x01" * self.extra_symbols  # symbol 1000, the empty string, again and again
        pools.append(varint(SYMBOL) + varint(len(self.symbols) + self.extra_symbols) + symbols)
        pools.append(
            varint(CLASS)
            + varint(len(self.classes))
            + b"".join(varint(i) + varint(0) + varint(s) + varint(0) + varint(1) for i, s in self.classes.items())
        )
        pools.append(
            varint(METHOD)
            + varint(len(self.methods))
            + b"".join(
                varint(i) + varint(c) + varint(n) + varint(0) + varint(1) + b"\x00"
                for i, (c, n) in self.methods.items()
            )
        )
        frames = {
            i: b"\x00" + varint(len(ms)) + b"".join(varint(m) + varint(7) + varint(0) + varint(0) for m in ms)
            for i, ms in self.stacks.items()
        }
        pools.append(varint(STACK) + varint(len(frames)) + b"".join(varint(i) + f for i, f in frames.items()))
        pools.append(
            varint(STATE) + varint(len(self.states)) + b"".join(varint(i) + text(s) for i, s in self.states.items())
        )
        body = varint(0) + varint(0) + varint(0) + b"\x01" + varint(len(pools)) + b"".join(pools)
        return _event(1, body)

    def events(self) -> bytes:
        return b"".join(
            _event(EXECUTION_SAMPLE, varint(1000 + n) + varint(0) + varint(stack) + varint(state))
            for n, (stack, state) in enumerate(self.samples)
        )

    def chunk(self) -> bytes:
        meta = metadata_event()
        events = self.events()
        cp = self.checkpoint()
        meta_at = 68 + len(events)
        cp_at = meta_at + len(meta)
        size = cp_at + len(cp)
        header = struct.pack(">4sHHqqqqqqqi", b"FLR\x00", 2, 1, size, cp_at, meta_at, self.start_ns, 10**9, 0, 10**9, 1)
        return header + events + meta + cp


# ------------------------------------------------------------------------------------- changing a real recording


def _read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    value = 0
    for i in range(9):
        b = buf[pos + i]
        if i == 8:
            return value | b << 56, pos + 9
        value |= (b & 0x7F) << (7 * i)
        if b < 0x80:
            return value, pos + i + 1
    raise AssertionError("unreachable")


def _padded_varint(n: int, width: int) -> bytes:
    """``n`` as a varint of exactly ``width`` bytes (continuation bits on the high zero groups), as recorders write
    an event's size before they know it."""
    out = bytearray()
    for i in range(width):
        out.append((n & 0x7F) | (0x80 if i < width - 1 else 0))
        n >>= 7
    assert n == 0, "does not fit"
    return bytes(out)


def class_ids(chunk: bytes) -> dict[str, int]:
    """A single-chunk recording's type name → class id, from its metadata event (a string table, then a tree of
    elements, each a name, attribute pairs and children, every string an index into that table)."""
    pos = struct.unpack_from(">q", chunk, 24)[0]
    _, pos = _read_varint(chunk, pos)  # size
    for _ in range(4):  # type 0, start, duration, metadata id
        _, pos = _read_varint(chunk, pos)
    count, pos = _read_varint(chunk, pos)
    strings: list[str] = []
    for _ in range(count):
        encoding = chunk[pos]
        pos += 1
        length = 0
        if encoding in (3, 4, 5):  # UTF-8 bytes, UTF-16 chars (one varint each), Latin-1 bytes
            length, pos = _read_varint(chunk, pos)
        if encoding == 4:
            chars = []
            for _ in range(length):
                char, pos = _read_varint(chunk, pos)
                chars.append(chr(char))
            strings.append("".join(chars))
            continue
        assert encoding in (0, 1, 3, 5), f"string encoding {encoding} in metadata"
        strings.append(chunk[pos : pos + length].decode("utf-8" if encoding == 3 else "latin-1"))
        pos += length
    found: dict[str, int] = {}

    def element(pos: int) -> int:
        name, pos = _read_varint(chunk, pos)
        n_attrs, pos = _read_varint(chunk, pos)
        attrs = {}
        for _ in range(n_attrs):
            k, pos = _read_varint(chunk, pos)
            v, pos = _read_varint(chunk, pos)
            attrs[strings[k]] = strings[v]
        if strings[name] == "class":
            found[attrs["name"]] = int(attrs["id"])
        n_children, pos = _read_varint(chunk, pos)
        for _ in range(n_children):
            pos = element(pos)
        return pos

    element(pos)
    return found


def with_empty_pool(chunk: bytes, type_name: str) -> bytes:
    """A single-chunk recording whose last checkpoint declares one more constant pool, first: ``type_name`` with no
    element (as async-profiler writes a pool it has nothing for, e.g. ``jdk.types.Package``). Nothing else changes:
    the event's size, the chunk's size and the metadata's offset (when after the checkpoint) follow the insertion."""
    magic, _, _, size, cp_at, meta_at = struct.unpack_from(">4sHHqqq", chunk)
    assert magic == b"FLR\x00" and size == len(chunk), "one chunk expected"
    type_id = class_ids(chunk)[type_name]
    event_size, pos = _read_varint(chunk, cp_at)
    width = pos - cp_at
    kind, pos = _read_varint(chunk, pos)
    assert kind == 1, "the header's constant-pool offset must point at a checkpoint event"
    for _ in range(3):  # start, duration, delta to the previous checkpoint
        _, pos = _read_varint(chunk, pos)
    pos += 1  # the checkpoint's type/flush byte
    pools, after = _read_varint(chunk, pos)
    empty = varint(type_id) + varint(0)
    body = chunk[cp_at + width : pos] + varint(pools + 1) + empty + chunk[after : cp_at + event_size]
    event = _padded_varint(width + len(body), width) + body
    grown = len(event) - event_size
    out = bytearray(chunk[:cp_at] + event + chunk[cp_at + event_size :])
    struct.pack_into(">q", out, 8, size + grown)
    if meta_at > cp_at:
        struct.pack_into(">q", out, 24, meta_at + grown)
    return bytes(out)
