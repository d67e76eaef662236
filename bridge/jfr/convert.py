"""Pure: a JFR recording (and the Java SDK's ``labels`` part) → profiles, by the rules Pyroscope applies at ingest.
Pyroscope converts JFR with grafana/jfr-parser (``pprof/parser.go`` ``parse``, ``pprof/pprof.go``
``addStacktrace`` / ``profileBuilderForSampleType``, ``pprof/profile_builder.go``, ``parser/symbols.go``), called
from ``pkg/og/convert/jfr/profile.go``; what follows is read from that source, not assumed.

Events → profiles (``__name__``: sample types, period type; values) — the table in ``docs/java.md``:

- ``jdk.ExecutionSample`` (the JDK's; async-profiler's ``cpu``/``itimer``/``wall``), thread state not
  ``STATE_SLEEPING`` → ``process_cpu``: ``cpu/nanoseconds``, ``cpu/nanoseconds``; 1 × period. When the recording's
  ``event`` setting is ``wall``, also ``wall``: ``wall/nanoseconds``, ``wall/nanoseconds``.
- ``profiler.WallClockSample`` → ``wall`` (and ``process_cpu`` when ``STATE_RUNNABLE`` and the event is ``wall``);
  ``samples`` × period.
- ``jdk.ObjectAllocationInNewTLAB`` → ``memory``: ``alloc_in_new_tlab_objects/count``,
  ``alloc_in_new_tlab_bytes/bytes``, ``space/bytes``; 1 and ``tlabSize``.
- ``jdk.ObjectAllocationOutsideTLAB`` → ``memory``: ``alloc_outside_tlab_objects/count``,
  ``alloc_outside_tlab_bytes/bytes``, ``space/bytes``; 1 and ``allocationSize``.
- ``jdk.ObjectAllocationSample`` → ``memory``: ``alloc_sample_objects/count``, ``alloc_sample_bytes/bytes``,
  ``space/bytes``; 1 and ``weight``.
- ``jdk.JavaMonitorEnter`` → ``mutex``: ``contentions/count``, ``delay/nanoseconds``, ``mutex/count``; 1 and
  ``duration`` (in ticks, as recorded). ``jdk.ThreadPark`` → ``block``, the same with period ``block/count``.
- ``profiler.LiveObject`` → ``memory``: ``live/count``, ``objects/count``; 1. ``profiler.Malloc`` → ``memory``:
  ``malloc_objects/count``, ``malloc_bytes/bytes``, no period; 1 and ``size``.

- **period** = ``1e9 // sampleRate`` (integer; ``sampleRate`` 0 makes every CPU and wall value 0, which is dropped).
- **The "1"** is jfr-parser's ``values[0]``, which a ``profiler.WallClockSample`` overwrites with its ``samples`` and
  nothing resets: later events of the recording count that number instead. Reproduced as is.
- **Frame names**: ``<class>.<method>`` with the class in the JVM's internal form (``java/lang/Thread.run``, inner
  classes ``Outer$Inner``), every symbol first passed through ``mergeJVMGeneratedClasses``: lambda classes
  ``Foo$$Lambda$14/0x…`` / ``Foo$$Lambda.0x…`` → ``Foo$$Lambda_``, ``GeneratedMethodAccessor12`` →
  ``GeneratedMethodAccessor_``, Spring CGLIB proxies, versioned native libraries. Line numbers are not part of a name.
  Thread names are read by jfr-parser but become neither a frame nor a label.
- **Labels**: a sample's ``contextId`` picks a context of the ``labels`` part (``LabelsSnapshot``: context id →
  {string id: string id}, with its string table); a non-zero ``spanId`` becomes ``profile_id`` = 16 hex digits
  (Pyroscope then renames ``profile_id`` to ``span_id``: ``pkg/model/pprofsplit``); a non-zero ``spanName`` whose
  string is not empty becomes ``span_name``. A missing string id reads as "" (Go's map default); a label with an
  empty name or value is dropped here (Pyroscope's series model treats empty as absent).
- **Samples** of the same stack and the same (context, span id, span name) are summed.

Differences, on purpose: stacks are told apart per chunk (jfr-parser keys samples and functions by the constant ids
alone, so in a file of several chunks whose ids differ a later chunk's stack can be added to an earlier one's);
a non-zero reference to a constant that no pool of the chunk defines is refused (jfr-parser drops the frame or
sample silently; no recording of the JDK's or async-profiler's has one).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from bridge._proto import jfr_labels_pb2 as lpb
from bridge.compression import Budget, BudgetSpent
from bridge.jfr.cursor import JfrError, JfrTooLarge
from bridge.jfr.reader import Chunk, read_chunks

SAMPLE_COST: Final = 160  # bytes charged per distinct sample kept (dict slot, key tuple, values list)

# sample kinds (pprof/pprof.go sampleType*): (__name__, sample types, period type)
CPU, WALL, IN_TLAB, OUT_TLAB, LOCK, PARK, LIVE, ALLOC_SAMPLE, MALLOC = range(9)
KINDS: Final[Mapping[int, tuple[str, tuple[tuple[str, str], ...], tuple[str, str]]]] = {
    CPU: ("process_cpu", (("cpu", "nanoseconds"),), ("cpu", "nanoseconds")),
    WALL: ("wall", (("wall", "nanoseconds"),), ("wall", "nanoseconds")),
    IN_TLAB: (
        "memory",
        (("alloc_in_new_tlab_objects", "count"), ("alloc_in_new_tlab_bytes", "bytes")),
        ("space", "bytes"),
    ),
    OUT_TLAB: (
        "memory",
        (("alloc_outside_tlab_objects", "count"), ("alloc_outside_tlab_bytes", "bytes")),
        ("space", "bytes"),
    ),
    LOCK: ("mutex", (("contentions", "count"), ("delay", "nanoseconds")), ("mutex", "count")),
    PARK: ("block", (("contentions", "count"), ("delay", "nanoseconds")), ("block", "count")),
    LIVE: ("memory", (("live", "count"),), ("objects", "count")),
    ALLOC_SAMPLE: ("memory", (("alloc_sample_objects", "count"), ("alloc_sample_bytes", "bytes")), ("space", "bytes")),
    MALLOC: ("memory", (("malloc_objects", "count"), ("malloc_bytes", "bytes")), ("", "")),
}

_STACK = ("stackTrace", "jdk.types.StackTrace", True)
_STATE = ("state", "jdk.types.ThreadState", True)
_CORRELATION = (("contextId", "long", False), ("spanId", "long", False), ("spanName", "long", False))
# the events read and the fields each needs, first the stack, then (for correlated ones) context, span id, span name
WANTED: Final[Mapping[str, tuple[tuple[str, str, bool], ...]]] = {
    "jdk.ExecutionSample": (_STACK, *_CORRELATION, _STATE),
    "profiler.WallClockSample": (_STACK, *_CORRELATION, _STATE, ("samples", "int", False)),
    "jdk.ObjectAllocationInNewTLAB": (_STACK, *_CORRELATION, ("tlabSize", "long", False)),
    "jdk.ObjectAllocationOutsideTLAB": (_STACK, *_CORRELATION, ("allocationSize", "long", False)),
    "jdk.ObjectAllocationSample": (_STACK, ("weight", "long", False)),
    "jdk.JavaMonitorEnter": (_STACK, *_CORRELATION, ("duration", "long", False)),
    "jdk.ThreadPark": (_STACK, ("duration", "long", False)),
    "profiler.LiveObject": (_STACK,),
    "profiler.Malloc": (_STACK, ("size", "long", False)),
    "jdk.ActiveSetting": (("name", "java.lang.String", False), ("value", "java.lang.String", False)),
}

# parser/symbols.go mergeJVMGeneratedClasses (Go's RE2: \d is ASCII, $ is the end of the text); each with a text
# every match contains, so most symbols (no such text) skip the regular expression
_MERGES: Final = (
    (
        "GeneratedMethodAccessor",
        re.compile(r"^(jdk/internal/reflect/GeneratedMethodAccessor)(\d+)\Z", re.ASCII),
        r"\1_",
    ),
    ("$$Lambda", re.compile(r"^(.+\$\$Lambda)(\$?\d*[./](0x)?[\da-f]+|\d+)\Z", re.ASCII), r"\1_"),
    (
        "libzstd-jni-",
        re.compile(r"^(\.?/tmp/)?(libzstd-jni-\d+\.\d+\.\d+-)(\d+)(\.so)( \(deleted\))?\Z", re.ASCII),
        "libzstd-jni-_.so",
    ),
    (
        "amazonCorrettoCryptoProvider",
        re.compile(
            r"^(\.?/tmp/)?(lib)?(amazonCorrettoCryptoProvider)(NativeLibraries\.)?([0-9a-f]{16})"
            r"(/libcrypto|/libamazonCorrettoCryptoProvider)?(\.so)( \(deleted\))?\Z",
            re.ASCII,
        ),
        "libamazonCorrettoCryptoProvider_.so",
    ),
    (
        "libasyncProfiler-",
        re.compile(
            r"^(\.?/tmp/)?(libasyncProfiler)-(linux-arm64|linux-musl-x64|linux-x64|macos)-"
            r"(17b9a1d8156277a98ccc871afa9a8f69215f92)(\.so)( \(deleted\))?\Z",
            re.ASCII,
        ),
        "libasyncProfiler-_.so",
    ),
    ("$$EnhancerBySpringCGLIB$$", re.compile(r"^(.+\$\$EnhancerBySpringCGLIB\$\$)(.*)\Z", re.ASCII), r"\1_"),
)


def merge_generated_names(symbol: str) -> str:
    """A symbol as jfr-parser keeps it: JVM-generated class names with their varying part replaced by ``_``."""
    for needle, pattern, repl in _MERGES:
        if needle in symbol:
            symbol = pattern.sub(repl, symbol)
    return symbol


@dataclass(slots=True)
class Labels:
    """A ``LabelsSnapshot``: context id → its labels (names and values resolved), and the string table."""

    contexts: dict[int, tuple[tuple[str, str], ...]] = field(default_factory=dict)
    strings: dict[int, str] = field(default_factory=dict)


def parse_labels(raw: bytes) -> Labels:
    """The ``labels`` part (plain bytes of a ``LabelsSnapshot``; jfr-parser ``pprof/jfr_labels.proto``)."""
    snapshot = lpb.LabelsSnapshot()
    try:
        snapshot.ParseFromString(raw)
    except Exception as exc:  # protobuf's DecodeError and its upb variants
        raise JfrError(f"the labels part is not a LabelsSnapshot protobuf ({exc})") from None
    strings = dict(snapshot.strings)
    contexts = {
        cid: tuple(
            (k, v) for k, v in ((strings.get(a, ""), strings.get(b, "")) for a, b in ctx.labels.items()) if k and v
        )
        for cid, ctx in snapshot.contexts.items()
    }
    return Labels(contexts, strings)


@dataclass(slots=True)
class JfrProfile:
    """One of jfr-parser's profiles: its ``__name__``, sample types and period type, and its samples as
    (frames root first, one value per sample type, labels)."""

    metric: str
    sample_types: tuple[tuple[str, str], ...]
    period_type: tuple[str, str]
    samples: list[tuple[tuple[str, ...], list[int], dict[str, str]]]


@dataclass(slots=True)
class JfrProfiles:
    profiles: list[JfrProfile]
    jfr_event: str  # the recording's async-profiler ``event`` setting (cpu, itimer, wall, …), "" for the JDK's


class _Names:
    """Frame names of one chunk: a stack reference → its frames root first, cached."""

    def __init__(self, chunk: Chunk) -> None:
        pools = chunk.pools.by_type
        self.where = f"chunk at byte {chunk.header.offset}"
        self.stacks: dict[int, Any] = pools.get("jdk.types.StackTrace", {})
        self.methods: dict[int, Any] = pools.get("jdk.types.Method", {})
        self.classes: dict[int, Any] = pools.get("java.lang.Class", {})
        self.symbols: dict[int, Any] = pools.get("jdk.types.Symbol", {})
        self._symbol_cache: dict[int, str] = {}
        self._frame_cache: dict[int, str | None] = {}
        self._stack_cache: dict[int, tuple[str, ...] | None] = {}

    def _missing(self, what: str, ref: int) -> JfrError:
        return JfrError(f"{self.where}: {what} {ref} is referred to, but no constant pool of the chunk defines it")

    def symbol(self, ref: int) -> str:
        got = self._symbol_cache.get(ref)
        if got is None:
            raw = self.symbols.get(ref)
            if raw is None and ref:
                raise self._missing("symbol", ref)
            got = self._symbol_cache[ref] = merge_generated_names(raw or "")
        return got

    def frame(self, ref: int) -> str | None:
        if ref in self._frame_cache:
            return self._frame_cache[ref]
        name: str | None = None
        method = self.methods.get(ref)
        if method is None:
            if ref:
                raise self._missing("method", ref)
        else:
            klass = self.classes.get(method[0])
            if klass is None:
                if method[0]:
                    raise self._missing("class", method[0])
            else:
                name = self.symbol(klass or 0) + "." + self.symbol(method[1])
        self._frame_cache[ref] = name
        return name

    def stack(self, ref: int) -> tuple[str, ...] | None:
        if ref in self._stack_cache:
            return self._stack_cache[ref]
        frames = self.stacks.get(ref)
        got: tuple[str, ...] | None = None
        if frames is None:
            if ref:
                raise self._missing("stack trace", ref)
        else:
            cache = self._frame_cache
            try:  # the frames of a recording's stacks repeat: most stacks find every name already made
                names = [cache[m] for m in reversed(frames)]
            except KeyError:
                names = [self.frame(m) for m in reversed(frames)]
            got = tuple(filter(None, names))  # a frame's name is never empty: "class.method"
        self._stack_cache[ref] = got
        return got


class _Builders:
    """jfr-parser's ``jfrPprofBuilders``: one sample table per kind, keyed by (chunk, stack, correlation)."""

    def __init__(self, period: int, labels: Labels, budget: Budget) -> None:
        self.period = period
        self.labels = labels
        self.budget = budget
        self.tables: dict[int, dict[tuple[int, int, int, int, int], list[int]]] = {}
        self.stacks: dict[tuple[int, int], tuple[str, ...] | None] = {}

    def add(
        self, kind: int, chunk: int, names: _Names, stack: int, corr: tuple[int, int, int], values: list[int]
    ) -> None:
        key = (chunk, stack, *corr)
        table = self.tables.setdefault(kind, {})
        mul = self.period if kind in (CPU, WALL) else 1
        got = table.get(key)
        if got is None:
            if (chunk, stack) not in self.stacks:
                self.stacks[chunk, stack] = names.stack(stack)
            if self.stacks[chunk, stack] is None:
                return  # jfr-parser: StacktraceNotFound (a null reference)
            try:
                self.budget.spend(SAMPLE_COST + 8 * len(values))
            except BudgetSpent as exc:
                raise JfrTooLarge(f"its samples are {exc}") from None
            table[key] = [v * mul for v in values]
        else:
            for i, v in enumerate(values):
                got[i] += v * mul

    def build(self) -> list[JfrProfile]:
        out = []
        for kind, table in self.tables.items():
            metric, sample_types, period_type = KINDS[kind]
            samples = []
            for (chunk, stack, context, span_id, span_name), values in table.items():
                frames = self.stacks[chunk, stack]
                assert frames is not None
                samples.append((frames, values, self._sample_labels(context, span_id, span_name)))
            out.append(JfrProfile(metric, sample_types, period_type, samples))
        return out

    def _sample_labels(self, context: int, span_id: int, span_name: int) -> dict[str, str]:
        labels = dict(self.labels.contexts.get(context, ()))
        if span_id:
            labels["profile_id"] = f"{span_id:016x}"
        if span_name and (name := self.labels.strings.get(span_name, "")):
            labels["span_name"] = name
        return labels


def convert(data: bytes, *, sample_rate: int, labels: Labels | None = None, budget: Budget) -> JfrProfiles:
    """A whole recording → jfr-parser's profiles (see the module docstring for the rules)."""
    builders = _Builders(1_000_000_000 // sample_rate if sample_rate > 0 else 0, labels or Labels(), budget)
    event = ""
    values = [1, 0]  # jfr-parser's values array, kept across events as it is there
    for index, chunk in enumerate(read_chunks(data, budget)):
        names = _Names(chunk)
        states: dict[int, Any] = chunk.pools.by_type.get("jdk.types.ThreadState", {})
        for name, fields in chunk.events(WANTED):
            if name == "jdk.ActiveSetting":
                if chunk.text(fields[0]) == "event":
                    event = chunk.text(fields[1])
                continue
            stack = fields[0] or 0
            if name == "jdk.ExecutionSample" or name == "profiler.WallClockSample":
                corr = (fields[1] or 0, fields[2] or 0, fields[3] or 0)
                state = states.get(fields[4] or 0)
                if name == "jdk.ExecutionSample":
                    if state is not None and state != "STATE_SLEEPING":
                        builders.add(CPU, index, names, stack, corr, values[:1])
                    if event == "wall":
                        builders.add(WALL, index, names, stack, corr, values[:1])
                else:
                    values[0] = fields[5] or 0
                    if state == "STATE_RUNNABLE" and event == "wall":
                        builders.add(CPU, index, names, stack, corr, values[:1])
                    builders.add(WALL, index, names, stack, corr, values[:1])
                continue
            _add_other(builders, name, fields, index, names, stack, values)
    return JfrProfiles(builders.build(), event)


_OTHER: Final[Mapping[str, tuple[int, bool]]] = {  # event → (kind, has correlation fields)
    "jdk.ObjectAllocationInNewTLAB": (IN_TLAB, True),
    "jdk.ObjectAllocationOutsideTLAB": (OUT_TLAB, True),
    "jdk.ObjectAllocationSample": (ALLOC_SAMPLE, False),
    "jdk.JavaMonitorEnter": (LOCK, True),
    "jdk.ThreadPark": (PARK, False),
    "profiler.LiveObject": (LIVE, False),
    "profiler.Malloc": (MALLOC, False),
}


def _add_other(
    builders: _Builders, name: str, fields: list[Any], index: int, names: _Names, stack: int, values: list[int]
) -> None:
    kind, correlated = _OTHER[name]
    corr = (fields[1] or 0, fields[2] or 0, fields[3] or 0) if correlated else (0, 0, 0)
    if kind == LIVE:
        builders.add(kind, index, names, stack, corr, values[:1])
        return
    values[1] = fields[-1] or 0
    builders.add(kind, index, names, stack, corr, values[:2])


def profile_names(profiles: Iterable[JfrProfile]) -> list[str]:
    """The profile type ids a conversion yields (``name:type:unit:period type:period unit``), for messages."""
    return [":".join((p.metric, s_type, s_unit, *p.period_type)) for p in profiles for s_type, s_unit in p.sample_types]
