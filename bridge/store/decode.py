"""Pure ingest decoding: what arrives (OTLP traces, Pyroscope pushes, legacy ``/ingest`` bodies, OTLP profiles) →
rows the store writes. Nothing here touches the database; a malformed body raises ``InvalidArgument`` before a
single row is written, so a bad request stores nothing.

Series labels follow Pyroscope: the pushed labels, plus each sample's string labels except ``span_id`` /
``trace_id`` (legacy ``profile_id`` is read as ``span_id``), plus the profile type as ``__name__``,
``__profile_type__``, ``__type__``, ``__unit__``, ``__period_type__`` and ``__period_unit__``.

``__name__`` and the stored time of what SDKs upload follow Pyroscope's ingest rules, written down with their
sources in ``docs/contracts/pyroscope-ingest.md``: ``pprof_profile_name`` (/ingest pprof), ``folded_profile_type``
(/ingest folded and lines), ``otlp_profile_type`` (OTLP profiles); Push carries its own ``__name__``. The store keeps
every profile at the START of its capture window: ``upload_window`` undoes the end stamp of ``@pyroscope/nodejs``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from opentelemetry.proto.collector.profiles.v1development import profiles_service_pb2 as otlp_profiles_svc

from bridge._proto import profile_pb2, push_pb2
from bridge.compression import Budget
from bridge.errors import InvalidArgument
from bridge.limits import LATEST_NS, RANGE_TEXT, unix_ns_ok
from bridge.pprof import decode_pprof, iter_samples, period_type, sample_types
from bridge.profiletype import NAME_LABEL, ProfileType
from bridge.spans import SERVICE_NAME, pb_any_value_to_str

SPAN_ID_LABEL: Final = "span_id"
TRACE_ID_LABEL: Final = "trace_id"
LEGACY_SPAN_ID_LABEL: Final = "profile_id"
SERVICE_LABEL: Final = "service_name"
# The largest sample value, and the largest total of one profile, the store keeps: 2^53, the largest integer a float64
# (SelectSeries points, the JavaScript numbers Grafana reads flame graphs into) holds exactly. Any sum of stored values
# then needs over 1,024 profiles at this bound before it could pass the int64 a flame graph (and SQLite's SUM) holds.
MAX_SAMPLE_VALUE: Final = 2**53
_HEX16 = re.compile(r"^[0-9a-fA-F]{16}$")
_HEX32 = re.compile(r"^[0-9a-fA-F]{32}$")
_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_.]*$")

Labels = tuple[tuple[str, str], ...]
# (frames root first, value, span id as signed int64 or None, trace id bytes or None)
SampleRow = tuple[tuple[str, ...], int, int | None, bytes | None]


# --------------------------------------------------------------------------------------------- ids


def span_id_to_int(value: str) -> int | None:
    """16 hex → signed 64-bit integer (how the store keeps span ids); malformed or all-zero → None."""
    if not _HEX16.match(value):
        return None
    number = int.from_bytes(bytes.fromhex(value), "big", signed=True)
    return number or None


def span_id_bytes_to_int(raw: bytes) -> int | None:
    if len(raw) != 8:
        return None
    return int.from_bytes(raw, "big", signed=True) or None


def int_to_span_id(number: int) -> str:
    return number.to_bytes(8, "big", signed=True).hex()


def trace_id_to_bytes(value: str) -> bytes | None:
    if not _HEX32.match(value):
        return None
    raw = bytes.fromhex(value)
    return raw if any(raw) else None


# --------------------------------------------------------------------------------------------- profiles


@dataclass(slots=True)
class ProfileRecord:
    """One series' samples of one capture window."""

    labels: Labels  # sorted, profile type labels included
    profile_type: str
    service: str
    time_ns: int
    duration_ns: int
    samples: list[SampleRow] = field(default_factory=list)
    period: int = 0  # what one sample adds (``ProfileType.sample_period``); 0 unknown

    @property
    def total(self) -> int:
        return sum(s[1] for s in self.samples)


def _check_label_name(name: str, where: str) -> None:
    if not _LABEL_NAME.match(name):
        raise InvalidArgument(f"{where}: {name!r} is not a valid label name")


def _check_capture_time(time_ns: int, duration_ns: int) -> None:
    """Capture times the store keeps (bridge.limits): a time, a time plus its duration, and the rollups' bucket
    arithmetic then stay far inside int64."""
    if not (unix_ns_ok(time_ns) and 0 <= duration_ns < LATEST_NS):
        raise InvalidArgument(
            f"profile capture start {time_ns} ns (duration {duration_ns} ns) is not a Unix time in nanoseconds "
            f"{RANGE_TEXT}"
        )


def records_from_samples(
    base: Mapping[str, str],
    ptype: ProfileType,
    time_ns: int,
    duration_ns: int,
    samples: Iterable[tuple[tuple[str, ...], int, Mapping[str, str]]],
    period: int = 0,
) -> list[ProfileRecord]:
    """Group samples (frames, value, labels) into one record per distinct series label set. Samples whose value is 0
    are dropped (Pyroscope does the same). A value beyond ±``MAX_SAMPLE_VALUE``, a record whose total is, or a
    capture time outside 1970–2200 is refused (``InvalidArgument``): stored sums can then not overflow."""
    _check_capture_time(time_ns, duration_ns)
    fixed = dict(base)
    fixed.update(ptype.labels())
    service = fixed.get(SERVICE_LABEL, "")
    by_key: dict[tuple[tuple[str, str], ...], ProfileRecord] = {}
    for frames, value, labels in samples:
        if value == 0 or not frames:
            continue
        if not -MAX_SAMPLE_VALUE <= value <= MAX_SAMPLE_VALUE:
            raise InvalidArgument(
                f"sample value {value} of stack {';'.join(frames[-3:])[:120]!r} is outside ±2^53 "
                f"({MAX_SAMPLE_VALUE}), the largest the store keeps exactly"
            )
        span_hex = labels.get(SPAN_ID_LABEL) or labels.get(LEGACY_SPAN_ID_LABEL) or ""
        trace_hex = labels.get(TRACE_ID_LABEL, "")
        extra = tuple(
            sorted((k, v) for k, v in labels.items() if k not in (SPAN_ID_LABEL, TRACE_ID_LABEL, LEGACY_SPAN_ID_LABEL))
        )
        record = by_key.get(extra)
        if record is None:
            merged = dict(fixed)
            for k, v in extra:
                merged.setdefault(k, v)
            record = by_key[extra] = ProfileRecord(
                labels=tuple(sorted(merged.items())),
                profile_type=ptype.id,
                service=service,
                time_ns=time_ns,
                duration_ns=duration_ns,
                period=period,
            )
        record.samples.append((frames, value, span_id_to_int(span_hex.lower()), trace_id_to_bytes(trace_hex.lower())))
    for record in by_key.values():
        if not -MAX_SAMPLE_VALUE <= record.total <= MAX_SAMPLE_VALUE:
            raise InvalidArgument(
                f"profile of {record.service or 'an unnamed service'} ({record.profile_type}) totals {record.total}, "
                f"beyond ±2^53 ({MAX_SAMPLE_VALUE}), the largest the store keeps exactly"
            )
    return list(by_key.values())


def records_from_pprof(
    profile: profile_pb2.Profile,
    base: Mapping[str, str],
    *,
    now_ns: int,
    name_for: Mapping[str, str] | None = None,
    only_types: set[str] | None = None,
) -> list[ProfileRecord]:
    """A decoded pprof → records, one profile type per sample type. ``base`` must hold ``__name__`` unless
    ``name_for`` maps sample types to names (legacy ingest)."""
    kinds = sample_types(profile)
    p_type, p_unit = period_type(profile)
    time_ns = profile.time_nanos or now_ns
    out: list[ProfileRecord] = []
    for index, (s_type, s_unit) in enumerate(kinds):
        if only_types is not None and s_type not in only_types:
            continue
        name = (name_for or {}).get(s_type) or base.get(NAME_LABEL, "")
        if not name:
            raise InvalidArgument("profile series has no __name__ label (the profile type's name, e.g. process_cpu)")
        name, renamed = default_relabel(name, s_type)
        labels = {**base, **renamed} if renamed else base
        ptype = ProfileType(name, s_type, s_unit, p_type, p_unit)
        samples, period = iter_samples(profile, index), ptype.sample_period(profile.period)
        out.extend(records_from_samples(labels, ptype, time_ns, profile.duration_nanos, samples, period))
    return out


NAME_REPLACED_LABEL: Final = "__name_replaced__"


def default_relabel(name: str, sample_type: str) -> tuple[str, dict[str, str]]:
    """Pyroscope's default ingestion relabeling, which its distributor applies to every series before any tenant rule
    (grafana/pyroscope ``pkg/validation/relabeling.go`` ``defaultRelabelRules``; position ``first`` by default,
    ``pkg/validation/limits.go``; its own ``Test_defaultRelabelRules``): a ``wall`` series whose sample type is
    ``cpu`` — the CPU time Node's wall profiler records — is renamed ``process_cpu`` and keeps its old name in
    ``__name_replaced__``. (Its other rule, stripping ``godeltaprof_`` from scraped Go profiles, never meets a name
    this store builds.) → (the name, the labels it adds)."""
    if name == "wall" and sample_type == "cpu":
        return "process_cpu", {NAME_REPLACED_LABEL: "wall"}
    return name, {}


def records_from_push(req: push_pb2.PushRequest, *, now_ns: int, budget: Budget | None = None) -> list[ProfileRecord]:
    """``push.v1.PushRequest`` (what pyroscope-io and the Go SDK's push path send) → records. Every gzipped sample
    inflates within the request's one ``budget``."""
    out: list[ProfileRecord] = []
    for n, series in enumerate(req.series):
        base: dict[str, str] = {}
        for pair in series.labels:
            _check_label_name(pair.name, f"series #{n}")
            base[pair.name] = pair.value
        if not base.get(NAME_LABEL):
            raise InvalidArgument(f"series #{n} has no __name__ label (e.g. process_cpu)")
        for m, raw in enumerate(series.samples):
            try:
                profile = decode_pprof(raw.raw_profile, budget=budget)
            except InvalidArgument as exc:
                raise InvalidArgument(f"series #{n} sample #{m}: {exc.message}") from exc
            out.extend(records_from_pprof(profile, base, now_ns=now_ns))
    return out


# --------------------------------------------------------------------------------------------- Pyroscope's naming
# How Pyroscope names and stamps what SDKs upload (docs/contracts/pyroscope-ingest.md has the rules with their
# sources). Pure decisions, one per upload shape; the decoders below apply them.

SPY_LABEL: Final = "pyroscope_spy"
UNKNOWN_SPY: Final = "unknown"  # what Pyroscope records when an /ingest upload names no spyName

# pkg/og/storage/tree DefaultSampleTypeMapping: the display names Pyroscope reads a pprof's sample types by, unless
# the upload brings its own sample_type_config (which then replaces this table entirely)
DEFAULT_DISPLAY_NAMES: Final[Mapping[str, str]] = {
    "samples": "cpu",
    "goroutine": "goroutines",
    "contentions": "mutex_count",
    "delay": "mutex_duration",
}


def pprof_profile_name(types: Iterable[str], display_names: Mapping[str, str] | None = None) -> str:
    """``__name__`` of every series of one pprof uploaded to ``/ingest`` (raw or multipart): ``wall`` when any sample
    type is ``wall``; else, sample types in order, by display name, the first that says ``cpu`` → ``process_cpu``,
    ``alloc_``/``inuse_``/``space``/``objects`` → ``memory``, ``mutex_`` → ``mutex``, ``block_`` → ``block``,
    ``goroutines`` → ``goroutines``; else the last sample type's display name (Pyroscope's ``metricName``)."""
    kinds = list(types)
    if "wall" in kinds:
        return "wall"
    names = DEFAULT_DISPLAY_NAMES if display_names is None else display_names
    shown = ""
    for kind in kinds:
        shown = names.get(kind) or kind
        if "cpu" in shown:
            return "process_cpu"
        if "alloc_" in shown or "inuse_" in shown or shown in ("space", "objects"):
            return "memory"
        if "mutex_" in shown:
            return "mutex"
        if "block_" in shown:
            return "block"
        if "goroutines" in shown:
            return "goroutines"
    return shown


# pkg/ingester/pyroscope convertMetadata: folded / lines uploads name their type by the application name's suffix
# (``app.cpu``; no suffix means cpu) → (__name__, sample type, sample unit) before the sample-rate conversion
FOLDED_TYPES: Final[Mapping[str, tuple[str, str, str]]] = {
    "cpu": ("process_cpu", "samples", "count"),
    "itimer": ("process_cpu", "samples", "count"),
    "wall": ("wall", "samples", "count"),
    "inuse_objects": ("memory", "inuse_objects", "count"),
    "inuse_space": ("memory", "inuse_space", "bytes"),
    "alloc_objects": ("memory", "alloc_objects", "count"),
    "alloc_space": ("memory", "alloc_space", "bytes"),
    "goroutines": ("goroutine", "goroutines", "count"),
    "mutex_count": ("mutex", "contentions", "count"),
    "mutex_duration": ("mutex", "delay", "nanoseconds"),
    "block_count": ("block", "contentions", "count"),
    "block_duration": ("block", "delay", "nanoseconds"),
    "alloc_in_new_tlab_objects": ("memory", "alloc_in_new_tlab_objects", "count"),
    "alloc_in_new_tlab_bytes": ("memory", "alloc_in_new_tlab_bytes", "bytes"),
    "alloc_outside_tlab_objects": ("memory", "alloc_outside_tlab_objects", "count"),
    "alloc_outside_tlab_bytes": ("memory", "alloc_outside_tlab_bytes", "bytes"),
    "lock_count": ("block", "contentions", "count"),
    "lock_duration": ("block", "delay", "nanoseconds"),
    "live": ("memory", "live", "count"),
    "exceptions": ("exceptions", "samples", "count"),
    "seconds": ("wall", "samples", "count"),
    "nanoseconds": ("wall", "samples", "count"),
    "microseconds": ("wall", "samples", "count"),
    "milliseconds": ("wall", "samples", "count"),
    "bytes": ("memory", "samples", "bytes"),
}


def folded_profile_type(suffix: str, sample_rate: int) -> tuple[ProfileType, int]:
    """(profile type, factor each count is multiplied by) of a folded / lines upload. With a sample rate, CPU and
    wall counts become nanoseconds (``1e9 // sampleRate`` each) under the period ``cpu:nanoseconds``."""
    name, s_type, s_unit = FOLDED_TYPES[suffix or "cpu"]
    if sample_rate > 0 and name in ("process_cpu", "wall"):
        kind = "wall" if name == "wall" else "cpu"
        return ProfileType(name, kind, "nanoseconds", "cpu", "nanoseconds"), 1_000_000_000 // sample_rate
    return ProfileType(name, s_type, s_unit, "", ""), 1


# OTLP profiles (pkg/ingester/otlp convert.go, v2.x): "samples:count" with period "cpu:nanoseconds" is CPU (values ×
# period → cpu:nanoseconds); a lone "off_cpu"/"events" nanoseconds type without period is off-CPU; the rest is named
# process_cpu ("guess"), keeping its own sample type
OTLP_OFF_CPU: Final = ("off_cpu", "events")


def otlp_profile_type(s_type: str, s_unit: str, p_type: str, p_unit: str, period: int) -> tuple[ProfileType, int]:
    """(profile type, factor each value is multiplied by) of one OTLP profile. Pyroscope decides by
    ``type:unit:period type:period unit`` with the period part left empty when ``period`` is 0, but the stored
    profile keeps its period type either way."""
    decided = (s_type, s_unit) + ((p_type, p_unit) if period else ("", ""))
    if decided == ("samples", "count", "cpu", "nanoseconds"):
        return ProfileType("process_cpu", "cpu", "nanoseconds", p_type, p_unit), period
    if s_type in OTLP_OFF_CPU and s_unit == "nanoseconds" and decided[2:] == ("", ""):
        return ProfileType("off_cpu", s_type, s_unit, p_type, p_unit), 1
    return ProfileType("process_cpu", s_type or "unknown", s_unit or "unknown", p_type, p_unit), 1


# --------------------------------------------------------------------------------------------- capture windows

NANOS: Final = 1_000_000_000
# from/until are whole seconds (rounded down); the pprof stamp is taken a moment after the window closes
STAMP_SLACK_NS: Final = (-250_000_000, 1_250_000_000)
EPOCH_1971_NS: Final = 365 * 86_400 * NANOS  # Pyroscope replaces a pprof time in 1970 (or zero) by the upload's from


def epoch_to_ns(value: int) -> int:
    """An /ingest ``from``/``until`` in seconds, milliseconds, microseconds or nanoseconds (told apart by size, as
    Pyroscope's attime does) → nanoseconds."""
    magnitude = abs(value)
    if magnitude >= 10**17:
        return value
    if magnitude >= 10**14:
        return value * 1_000
    if magnitude >= 10**11:
        return value * 1_000_000
    return value * NANOS


def _near(value: int, anchor: int) -> bool:
    return STAMP_SLACK_NS[0] <= value - anchor <= STAMP_SLACK_NS[1]


def upload_window(
    time_ns: int, duration_ns: int, from_ns: int | None, until_ns: int | None, now_ns: int
) -> tuple[int, int]:
    """The true capture window ``(start, duration)`` of an /ingest pprof upload. SDKs disagree on the pprof stamp:
    pyroscope-io and the Go SDK stamp the window's start, ``@datadog/pprof`` (inside ``@pyroscope/nodejs``) its end;
    ``from``/``until`` say which: a stamp at ``until`` whose ``time − duration`` is ``from`` is an end stamp. Without
    a usable stamp the window is ``[from, until]``; with neither, the upload is stamped on arrival (as Pyroscope
    does)."""
    until_ok = until_ns is not None and from_ns is not None and until_ns >= from_ns
    stamped = time_ns >= EPOCH_1971_NS
    if stamped and from_ns is not None:
        if (
            duration_ns > 0
            and _near(time_ns - duration_ns, from_ns)
            and (not until_ok or _near(time_ns, until_ns or 0))
        ):
            return time_ns - duration_ns, duration_ns
        if _near(time_ns, from_ns):
            return time_ns, duration_ns or ((until_ns or from_ns) - from_ns if until_ok else 0)
    if from_ns is not None:
        return from_ns, (until_ns or from_ns) - from_ns if until_ok else duration_ns
    if stamped:
        return time_ns, duration_ns
    return now_ns, duration_ns


# --------------------------------------------------------------------------------------------- legacy /ingest


@dataclass(frozen=True, slots=True)
class LegacyName:
    """``name=app.cpu{k=v,…}`` of Pyroscope's legacy ``/ingest``."""

    service: str
    suffix: str
    labels: Labels


_KEY = re.compile(r"^(?P<app>[^{}]+)(\{(?P<tags>[^{}]*)\})?$")


def parse_legacy_name(text: str) -> LegacyName:
    match = _KEY.match(text.strip())
    if not match:
        raise InvalidArgument(f"name {text!r} is not app[.type]{{key=value,…}}")
    app = match.group("app").strip()
    suffix = ""
    head, dot, tail = app.rpartition(".")
    if dot and tail in FOLDED_TYPES:
        app, suffix = head, tail
    if not app:
        raise InvalidArgument(f"name {text!r} has an empty application name")
    labels: dict[str, str] = {}
    for item in (match.group("tags") or "").split(","):
        if not item.strip():
            continue
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep:
            raise InvalidArgument(f"name {text!r}: label {item!r} is not key=value")
        _check_label_name(key, f"name {text!r}")
        labels[key] = value.strip()
    return LegacyName(app, suffix, tuple(sorted(labels.items())))


def legacy_base(name: LegacyName, spy: str) -> dict[str, str]:
    base = {SERVICE_LABEL: name.service, **{k: v for k, v in name.labels if not k.startswith("__")}}
    base[SPY_LABEL] = spy or UNKNOWN_SPY
    return base


def records_from_legacy_pprof(
    raw: bytes,
    name: LegacyName,
    *,
    from_s: int | None,
    until_s: int | None,
    now_ns: int,
    only_types: set[str] | None = None,
    display_names: Mapping[str, str] | None = None,
    spy: str = "",
    budget: Budget | None = None,
) -> list[ProfileRecord]:
    """A pprof uploaded to ``/ingest``: named by ``pprof_profile_name`` (every sample type gets the same
    ``__name__``), stored at its true capture window (``upload_window``)."""
    profile = decode_pprof(raw, budget=budget)
    from_ns = epoch_to_ns(from_s) if from_s else None
    until_ns = epoch_to_ns(until_s) if until_s else None
    start, duration = upload_window(profile.time_nanos, profile.duration_nanos, from_ns, until_ns, now_ns)
    _check_capture_time(start, duration)
    profile.time_nanos, profile.duration_nanos = start, duration
    kinds = [s_type for s_type, _ in sample_types(profile)]
    base = legacy_base(name, spy)
    base[NAME_LABEL] = pprof_profile_name(kinds, display_names)
    return records_from_pprof(profile, base, now_ns=now_ns, only_types=only_types)


def records_from_folded(
    text: bytes,
    name: LegacyName,
    *,
    from_s: int | None,
    until_s: int | None,
    sample_rate: int,
    now_ns: int,
    lines: bool = False,
    spy: str = "",
) -> list[ProfileRecord]:
    """Collapsed stacks (``a;b;c 12`` per line), or with ``lines`` one sample per line (``a;b;c``), typed by the
    name's suffix (``folded_profile_type``): with a sample rate, CPU and wall counts are stored in nanoseconds."""
    try:
        body = text.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidArgument(f"folded profile is not UTF-8 text ({exc})") from exc
    if sample_rate < 0:
        raise InvalidArgument(f"sampleRate {sample_rate} must not be negative")
    ptype, scale = folded_profile_type(name.suffix, sample_rate)
    samples: list[tuple[tuple[str, ...], int, Mapping[str, str]]] = []
    for number, line in enumerate(body.splitlines(), 1):
        line = line.strip()
        if not line:
            continue
        stack, sep, count = (line, " ", "1") if lines else line.rpartition(" ")
        if not sep or not stack.strip():
            raise InvalidArgument(f"folded profile line {number} is not 'frame;frame;… count': {line[:80]!r}")
        try:
            value = int(count)
        except ValueError:
            raise InvalidArgument(f"folded profile line {number}: {count[:40]!r} is not a whole number") from None
        if value < 0:
            raise InvalidArgument(f"folded profile line {number}: negative count {value}")
        samples.append((tuple(stack.strip().split(";")), value * scale, {}))
    if not samples:
        raise InvalidArgument("folded profile holds no stacks")
    from_ns = epoch_to_ns(from_s) if from_s else None
    until_ns = epoch_to_ns(until_s) if until_s else None
    time_ns = from_ns if from_ns is not None else now_ns
    duration = until_ns - from_ns if from_ns is not None and until_ns is not None and until_ns > from_ns else 0
    return records_from_samples(legacy_base(name, spy), ptype, time_ns, duration, samples, ptype.sample_period(scale))


class _OtlpDictionary:
    """The lookup tables of an OTLP profiles request (``ProfilesDictionary``), each index checked, stacks and their
    frames memoised."""

    def __init__(self, d: Any) -> None:
        self.d = d
        self.strings: list[str] = list(d.string_table)
        self.location_frames: dict[int, tuple[str, ...]] = {}
        self.stack_frames: dict[int, tuple[str, ...]] = {}

    def string(self, index: int, what: str) -> str:
        if not 0 <= index < len(self.strings):
            raise InvalidArgument(f"OTLP profiles: {what} string index {index} is outside the string table")
        return self.strings[index]

    @staticmethod
    def get(table: Any, index: int, what: str) -> Any:
        if not 0 <= index < len(table):
            raise InvalidArgument(f"OTLP profiles: {what} index {index} is outside the {what} table")
        return table[index]

    def frames_of(self, loc_index: int) -> tuple[str, ...]:
        got = self.location_frames.get(loc_index)
        if got is None:
            loc = self.get(self.d.location_table, loc_index, "location")
            if loc.lines:
                names = []
                for line in loc.lines:
                    fn = self.get(self.d.function_table, line.function_index, "function")
                    names.append(self.string(fn.name_strindex, "function name") or f"<function {line.function_index}>")
                got = tuple(names)
            else:
                got = (f"0x{loc.address:x}",)
            self.location_frames[loc_index] = got
        return got

    def stack_of(self, stack_index: int) -> tuple[str, ...]:
        """The stack's frames, root first."""
        got = self.stack_frames.get(stack_index)
        if got is None:
            stack = self.get(self.d.stack_table, stack_index, "stack")
            leaf_first: list[str] = []
            for loc_index in stack.location_indices:
                leaf_first.extend(self.frames_of(loc_index))
            leaf_first.reverse()
            got = self.stack_frames[stack_index] = tuple(leaf_first)
        return got

    def labels_of(self, sample: Any) -> dict[str, str]:
        """A sample's string attributes as labels, then the ids of the span its non-zero ``link_index`` names."""
        labels: dict[str, str] = {}
        for ai in sample.attribute_indices:
            attr = self.get(self.d.attribute_table, ai, "attribute")
            if attr.value.WhichOneof("value") == "string_value":
                labels[self.string(attr.key_strindex, "attribute key")] = attr.value.string_value
        if sample.link_index:
            link = self.get(self.d.link_table, sample.link_index, "link")
            labels[SPAN_ID_LABEL] = link.span_id.hex() if len(link.span_id) == 8 else ""
            labels[TRACE_ID_LABEL] = link.trace_id.hex() if len(link.trace_id) == 16 else ""
        return labels


def records_from_otlp_profiles(
    req: otlp_profiles_svc.ExportProfilesServiceRequest, *, now_ns: int
) -> list[ProfileRecord]:
    """OTLP profiles (opentelemetry-proto ≥ 1.43: dictionary tables, stack table, link table) → records. A non-zero
    ``link_index`` gives the sample's span and trace ids; string sample attributes become series labels (a
    ``span_id`` / ``trace_id`` attribute is used when the sample has no link)."""
    tables = _OtlpDictionary(req.dictionary)
    string = tables.string
    out: list[ProfileRecord] = []
    for rp in req.resource_profiles:
        resource: dict[str, str] = {}
        for kv in rp.resource.attributes:
            key = SERVICE_LABEL if kv.key == SERVICE_NAME else kv.key
            resource[key] = pb_any_value_to_str(kv.value)
        for sp in rp.scope_profiles:
            for prof in sp.profiles:
                s_type = string(prof.sample_type.type_strindex, "sample type")
                s_unit = string(prof.sample_type.unit_strindex, "sample unit")
                p_type = string(prof.period_type.type_strindex, "period type")
                p_unit = string(prof.period_type.unit_strindex, "period unit")
                ptype, factor = otlp_profile_type(s_type, s_unit, p_type, p_unit, prof.period)
                period, stamp = ptype.sample_period(prof.period), prof.time_unix_nano or now_ns
                samples: list[tuple[tuple[str, ...], int, Mapping[str, str]]] = []
                for sample in prof.samples:
                    value = (sum(sample.values) if sample.values else len(sample.timestamps_unix_nano)) * factor
                    samples.append((tables.stack_of(sample.stack_index), value, tables.labels_of(sample)))
                out.extend(  # records_from_samples checks the capture time (1970–2200)
                    records_from_samples(resource, ptype, stamp, prof.duration_nano, samples, period)
                )
    return out
