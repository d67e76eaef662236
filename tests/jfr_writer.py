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
