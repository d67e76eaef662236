"""Pure: Pyroscope's ``/pyroscope/render`` and ``/pyroscope/render-diff`` — the request's parameters and the
Flamebearer JSON answer — as grafana/pyroscope serves them (read at 3fe6a457; Perses' profile panel and Profiles
Drilldown's ``ProfileApiClient`` / ``DiffProfileApiClient`` call them).

The request (``pkg/querier/http.go`` ``parseSelectProfilesRequest`` / ``parseQuery``):

- ``query`` (``leftQuery`` / ``rightQuery``): a metric selector whose name is the profile type,
  ``process_cpu:cpu:nanoseconds:cpu:nanoseconds{service_name="x"}`` (or ``{__name__="…", …}``); the other matchers
  are the label selector.
- ``from`` / ``until`` (``leftFrom`` …): Graphite's at-time forms (``pkg/og/util/attime/attime.go``): digits are a
  date ``YYYYMMDD`` when eight of them read as one, else Unix time by length — 13 digits milliseconds, 16
  microseconds, 19 nanoseconds, anything else seconds; otherwise ``now`` plus or minus offsets (``now-1h``,
  ``now-1d2h``, units ``s``, ``min``/``m``, ``h``, ``d``, ``w``, ``mon``/``M``, ``y``; a number with no unit
  counts for nothing). Missing: now. Pyroscope reads any other reference or unit as now or nothing; here it is
  ``invalid_argument`` naming the parameter, since a typo silently showing the last instant is not an answer.
- ``max-nodes`` or ``maxNodes`` (the latter wins); 0 or missing: Pyroscope's default, 8192.
- ``format=dot`` answers a DOT graph (text), anything else the Flamebearer JSON.

The answer (``pkg/model/flamegraph.go`` ``ExportToFlamebearer`` / ``ExportDiffToFlamebearer``,
``pkg/og/structs/flamebearer/flamebearer.go``): ``version`` 1, ``flamebearer`` {``names``, ``levels`` (the flame
graph's levels as they are: 4 values per node, 7 in a diff), ``numTicks`` (total), ``maxSelf``}, ``metadata``
{``format`` ``single`` / ``double``, ``spyName`` "", ``sampleRate``, ``units``, ``name`` (the sample type)},
``timeline``, ``groups`` and ``heatmap`` (null unless asked), and a diff's ``leftTicks`` / ``rightTicks``. Units
follow the sample type: ``cpu`` → ``samples`` with a sample rate of 1e9; ``inuse_objects``, ``alloc_objects``,
``goroutine``, ``samples`` → ``objects``; otherwise the sample unit, with a rate of 100.

The timeline (``pkg/querier/timeline``): ``SelectSeries`` of the same query with a step of
``calc_step(start, end)`` (``CalcPointInterval``: a 1500th of the range, rounded to a friendly interval, at least
15 s), laid out by ``timeline.New``: ``startTime`` is the start snapped down to the step (seconds),
``durationDelta`` the step, ``samples`` one value per step up to the snapped end. The points are Pyroscope v2's
(``pkg/frontend/readpath/queryfrontend/query_select_time_series.go``, ``pkg/model/timeseries/range.go``): the
query reads from one step before ``start``, and a profile at ``t`` counts at the right edge
``start + ceil((t - start) / step) * step`` of its step.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

from bridge._proto import querier_pb2 as qpb
from bridge.errors import InvalidArgument
from bridge.flamegraph import Levels
from bridge.profiletype import NAME_LABEL, ProfileType
from bridge.selector import Matcher, format_selector, parse_selector

DEFAULT_MAX_NODES: Final = 8192  # Pyroscope's querier.max-flamegraph-nodes-default
MAX_MAX_NODES: Final = 1 << 20  # querier.max-flamegraph-nodes-max
MIN_STEP_S: Final = 15  # timeline.DefaultMinInterval
RESOLUTION: Final = 1500  # timeline.DefaultRes
MAX_QUERY_CHARS: Final = 16 * 1024

_DIGITS = re.compile(r"^[0-9]+$")
_NAME = re.compile(r"^\s*([a-zA-Z_:][a-zA-Z0-9_:]*)?\s*(\{.*\})?\s*$", re.DOTALL)
_OFFSET_PART = re.compile(r"([0-9]*)([^0-9]*)")

# CalcPointInterval's rounding table (pkg/querier/timeline/calculator.go): (largest interval, step), in ms
_ROUNDING: Final = (
    (10, 1),
    (15, 10),
    (35, 20),
    (75, 50),
    (150, 100),
    (350, 200),
    (750, 500),
    (1_500, 1_000),
    (3_500, 2_000),
    (7_500, 5_000),
    (12_500, 10_000),
    (17_500, 15_000),
    (25_000, 20_000),
    (45_000, 30_000),
    (90_000, 60_000),
    (210_000, 120_000),
    (450_000, 300_000),
    (750_000, 600_000),
    (1_050_000, 900_000),
    (1_500_000, 1_200_000),
    (2_700_000, 1_800_000),
    (5_400_000, 3_600_000),
    (9_000_000, 7_200_000),
    (16_200_000, 10_800_000),
    (32_400_000, 21_600_000),
    (86_400_000, 43_200_000),
    (172_800_000, 86_400_000),
    (604_800_000, 86_400_000),
    (1_814_400_000, 604_800_000),
)


@dataclass(frozen=True, slots=True)
class RenderQuery:
    """One side of a render request: the profile type, the label selector (``{…}``) and the window in ms."""

    profile_type: ProfileType
    selector: str
    start_ms: int
    end_ms: int
    max_nodes: int


# --------------------------------------------------------------------------------------------- the request


def parse_query(text: str, field: str) -> tuple[ProfileType, str]:
    """``<profile type>{<matchers>}`` → the profile type and the other matchers as a selector."""
    if not text:
        raise InvalidArgument(f'"{field}" is required')
    if len(text) > MAX_QUERY_CHARS:
        raise InvalidArgument(f'"{field}" is {len(text)} characters long, more than {MAX_QUERY_CHARS}')
    match = _NAME.match(text)
    if match is None:
        raise InvalidArgument(f'failed to parse "{field}": {text[:80]!r} is not <profile type>{{<label matchers>}}')
    name, braces = match.group(1), match.group(2)
    try:
        matchers = list(parse_selector(braces or ""))
    except InvalidArgument as exc:
        raise InvalidArgument(f'failed to parse "{field}": {exc.message}') from exc
    named = [m for m in matchers if m.name == NAME_LABEL]
    if name and named:
        raise InvalidArgument(f'failed to parse "{field}": the profile type is given twice (name and __name__)')
    if len(named) > 1:
        raise InvalidArgument(f'failed to parse "{field}": __name__ is given {len(named)} times')
    type_id = name or (named[0].value if named else "")
    if not type_id:
        raise InvalidArgument(f'"{field}" must contain a profile-type selection')
    rest: list[Matcher] = [m for m in matchers if m.name != NAME_LABEL]
    try:
        profile_type = ProfileType.parse(type_id)
    except InvalidArgument as exc:
        raise InvalidArgument(f'failed to parse "{field}": {exc.message}') from exc
    return profile_type, format_selector(rest)


def _unit_seconds(unit: str) -> int | None:
    """attime's ``getUnitMultiplier``: the first matching prefix wins (so ``ms`` is minutes, as there)."""
    for prefix, seconds in (
        ("s", 1),
        ("mon", 30 * 86400),
        ("M", 30 * 86400),
        ("min", 60),
        ("m", 60),
        ("h", 3600),
        ("d", 86400),
        ("w", 7 * 86400),
        ("y", 365 * 86400),
    ):
        if unit.startswith(prefix):
            return seconds
    return None


def parse_at_time(text: str, now_ms: int, field: str) -> int:
    """One of Graphite's at-time forms (attime.Parse) → Unix milliseconds."""
    s = text.strip().replace("_", "").replace(",", "").replace(" ", "")
    if _DIGITS.match(s):
        if len(s) == 8:
            try:
                date = datetime.strptime(s, "%Y%m%d").replace(tzinfo=UTC)
            except ValueError:
                date = None
            if date is not None and date.year > 1900:
                return int(date.timestamp()) * 1000
        if len(s) > 19:
            raise InvalidArgument(f"{field} {text[:40]!r} is too large for a time")
        value = int(s)
        if len(s) == 13:
            return value
        if len(s) == 16:
            return value // 1000
        if len(s) == 19:
            return value // 1_000_000
        return value * 1000
    sign_at = min((i for i in (s.find("+"), s.find("-")) if i >= 0), default=-1)
    reference, offset = (s, "") if sign_at < 0 else (s[:sign_at], s[sign_at:])
    if reference not in ("", "now"):
        raise InvalidArgument(
            f"{field} {text[:40]!r} is neither a Unix time (seconds, or milliseconds in 13 digits) nor now, now-1h …"
        )
    return now_ms + _offset_seconds(offset, text, field) * 1000


def _offset_seconds(offset: str, text: str, field: str) -> int:
    if not offset:
        return 0
    sign = -1 if offset[0] == "-" else 1
    body = offset[1:]
    if not body:
        raise InvalidArgument(f"{field} {text[:40]!r}: an offset needs a number and a unit, e.g. now-1h")
    total = 0
    for number, unit in _OFFSET_PART.findall(body):
        if not number and not unit:
            continue
        seconds = _unit_seconds(unit) if unit else 0  # attime: a number with no unit counts for nothing
        if not number or seconds is None:
            raise InvalidArgument(
                f"{field} {text[:40]!r}: {number + unit!r} is not a number with a unit (s, m, h, d, w, mon, y)"
            )
        total += int(number) * seconds
    return sign * total


def requested_max_nodes(query: Mapping[str, str]) -> int:
    """``max-nodes`` / ``maxNodes`` as sent (the latter wins; values that are not whole numbers are ignored, as
    Go's ``strconv.Atoi`` failures are there); 0 when neither is."""
    chosen = 0
    for key in ("max-nodes", "maxNodes"):
        raw = query.get(key, "").strip()
        if re.fullmatch(r"[+-]?[0-9]{1,18}", raw) and int(raw) != 0:
            chosen = int(raw)
    return chosen


def parse_max_nodes(query: Mapping[str, str]) -> int:
    """The flame graph's node limit: 0 → the default; more than Pyroscope's maximum or negative →
    ``invalid_argument`` (``ValidateMaxNodes``)."""
    chosen = requested_max_nodes(query)
    if chosen == 0:
        return DEFAULT_MAX_NODES
    if chosen > MAX_MAX_NODES:
        raise InvalidArgument(f"max flamegraph nodes limit {chosen} is greater than allowed {MAX_MAX_NODES}")
    if chosen < 0:
        raise InvalidArgument(f"max flamegraph nodes limit must be set (max allowed {MAX_MAX_NODES})")
    return chosen


def parse_render(
    query: Mapping[str, str], now_ms: int, names: tuple[str, str, str] = ("query", "from", "until")
) -> RenderQuery:
    """One side of a render request (``names``: its query, from and until parameters)."""
    q_name, from_name, until_name = names
    profile_type, selector = parse_query(query.get(q_name, ""), q_name)
    start = parse_at_time(query[from_name], now_ms, from_name) if query.get(from_name) else now_ms
    end = parse_at_time(query[until_name], now_ms, until_name) if query.get(until_name) else now_ms
    return RenderQuery(profile_type, selector, start, end, parse_max_nodes(query))


# --------------------------------------------------------------------------------------------- the timeline


def calc_step(start_ms: int, end_ms: int) -> int:
    """``CalcPointInterval`` in whole seconds (every rounded step is)."""
    interval_ms = (end_ms - start_ms) // RESOLUTION
    if interval_ms < MIN_STEP_S * 1000:
        return MIN_STEP_S
    for bound, step_ms in _ROUNDING:
        if interval_ms <= bound:
            return step_ms // 1000
    return 2_592_000 if interval_ms < 3_628_800_000 else 31_536_000  # 30 days, else a year


def point_label(t_ms: int, start_ms: int, step_ms: int) -> int:
    """The right edge of the step a profile at ``t_ms`` counts in (RangeSeries): ``start + ceil((t - start) /
    step) * step``."""
    return start_ms + -((start_ms - t_ms) // step_ms) * step_ms


def timeline(points: Mapping[int, float], start_ms: int, end_ms: int, step_s: int) -> dict[str, Any]:
    """``timeline.New``: ``points`` are labelled timestamps (ms) → values; zeros where there is none."""
    step_ms = step_s * 1000
    snapped_start = (start_ms // step_ms) * step_ms
    snapped_end = (end_ms // step_ms) * step_ms
    out: dict[str, Any] = {"startTime": snapped_start // 1000, "samples": [], "durationDelta": step_s}
    if snapped_start < snapped_end:
        first_s = snapped_start // 1000
        samples = [0] * max(0, (snapped_end // 1000 - first_s) // step_s)
        size = len(samples)
        for ts, value in points.items():
            if snapped_start <= ts < snapped_end:
                index = (ts // 1000 - first_s) // step_s
                if index < size:
                    samples[index] += int(value) if value > 0 else 0
        out["samples"] = samples
    out["watermarks"] = None
    return out


def series_points(
    rows: Iterable[tuple[Sequence[tuple[str, str]], int, int, int]], average: bool
) -> dict[tuple[tuple[str, str], ...], dict[int, float]]:
    """Per-step sums (group key, right edge of the step in ms (``point_label``), sum of totals, number of profiles)
    → each group's points: the sum, or with ``average`` the mean per profile (SelectSeries' aggregations)."""
    sums: dict[tuple[tuple[str, str], ...], dict[int, list[int]]] = {}
    for key, label, total, count in rows:
        slot = sums.setdefault(tuple(key), {}).setdefault(label, [0, 0])
        slot[0] += total
        slot[1] += count
    return {
        key: {ts: (s / n if average else float(s)) for ts, (s, n) in points.items()} for key, points in sums.items()
    }


# --------------------------------------------------------------------------------------------- the answer


def units_of(profile_type: ProfileType) -> tuple[str, int]:
    """(``metadata.units``, ``metadata.sampleRate``) as ``ExportToFlamebearer`` sets them."""
    if profile_type.sample_type in ("inuse_objects", "alloc_objects", "goroutine", "samples"):
        return "objects", 100
    if profile_type.sample_type == "cpu":
        return "samples", 1_000_000_000
    return profile_type.sample_unit, 100


def flamebearer(fg: Levels, profile_type: ProfileType) -> dict[str, Any]:
    """``ExportToFlamebearer`` (timeline, groups and heatmap left null: ``with_timeline`` adds them)."""
    units, rate = units_of(profile_type)
    return {
        "version": 1,
        "flamebearer": {"names": fg.names, "levels": fg.levels, "numTicks": fg.total, "maxSelf": fg.max_self},
        "metadata": {
            "format": "single",
            "spyName": "",
            "sampleRate": rate,
            "units": units,
            "name": profile_type.sample_type,
        },
        "timeline": None,
        "groups": None,
        "heatmap": None,
    }


def diff_flamebearer(fg: qpb.FlameGraphDiff, profile_type: ProfileType) -> dict[str, Any]:
    """``ExportDiffToFlamebearer``: the single form with the diff's levels, format ``double`` and both sides'
    ticks (each omitted when 0, as Go's ``omitempty`` does)."""
    levels = [list(level.values) for level in fg.levels]
    doc = flamebearer(Levels(list(fg.names), levels, fg.total, fg.max_self), profile_type)
    doc["metadata"]["format"] = "double"
    if fg.leftTicks:
        doc["leftTicks"] = fg.leftTicks
    if fg.rightTicks:
        doc["rightTicks"] = fg.rightTicks
    return doc


def with_timeline(
    doc: dict[str, Any],
    series: Mapping[tuple[tuple[str, str], ...], Mapping[int, float]],
    query: RenderQuery,
    step_s: int,
    group_by: Sequence[str],
) -> dict[str, Any]:
    """``Render``'s timeline (of the one series when there is exactly one, else all zeros) and, with ``groupBy``,
    one timeline per value of its first label (``*`` for series without it)."""
    only = next(iter(series.values())) if len(series) == 1 else {}
    doc["timeline"] = timeline(only, query.start_ms, query.end_ms, step_s)
    if group_by:
        groups: dict[str, Any] = {}
        for key, points in series.items():
            name = next((v for k, v in key if k == group_by[0]), "*")
            groups[name] = timeline(points, query.start_ms, query.end_ms, step_s)
        doc["groups"] = dict(sorted(groups.items()))  # Go encodes a map's keys sorted
    return doc
