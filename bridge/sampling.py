"""Pure: what a per-span number is, and how sure it is.

A sampling profiler does not measure a span's CPU: it counts the samples that landed in it and multiplies by the
period. A span's total of ``n`` samples is a count with Poisson noise, and its 95 % interval is shown beside every
per-span figure (``Tally``): the score interval of the Poisson mean, ``n + z²/2 ± z·√(n + z²/4)`` samples — about
``±1.96·√n`` for large ``n``, but it keeps its 95 % where ``±1.96·√n`` does not: that one covers a 2–30 ms span's
time well under 80 % of the time and gives 0 samples the interval [0, 0] (``tests/resolve/test_sampling_methods.py``
measures both on a simulated py-spy). The count comes from the stored data when the store has it
(``profiles.period``, migration 9: the pprof period, the /ingest ``sampleRate``); else from the SDK's known default
when every value is a whole number of its period; else from the values' greatest common divisor, which can only
undercount (a lower count widens the interval: the error is on the safe side). Values that are not whole samples
(``@pyroscope/nodejs`` measures the CPU time between its wall-clock samples) get no interval: they are measured, not
counted.

What the samples are depends on the SDK, so each one is named by what it really samples (``Sampler``), as read from
its source (docs/numbers.md cites each line):

- **pyroscope-io** (Python, py-spy): ``gil_only=True``, ``oncpu=True``, ``sample_rate=100`` by default
  (grafana/pyroscope-python ``python/pyroscope/__init__.py`` ``configure``); with ``gil_only`` py-spy reads only the
  thread holding the GIL and does not ask the OS whether it runs — "if we're holding the GIL we're by definition
  active" (benfred/py-spy ``src/python_spy.rs`` ``_get_stack_traces``). So: *sampled on-GIL time*, not CPU; a
  thread waiting for a core while it holds the GIL is sampled too. py-spy draws each gap from an exponential
  distribution (``src/timer.rs``), so the count is Poisson.
- **pyroscope-go**: ``runtime/pprof`` at 100 Hz (``runtime/pprof/pprof.go`` ``const hz = 100``), a per-thread
  CPU-time timer raising SIGPROF (``runtime/os_linux.go`` ``setThreadCPUProfiler``: ``CLOCK_THREAD_CPUTIME_ID``, the
  first expiry uniform in one period): *sampled on-CPU time*, every thread, so a span's goroutines can add up to more
  than its wall time. The timer is periodic, so the count varies less than Poisson: the interval is conservative.
- **Java agent** (async-profiler): event ``itimer`` every 10 ms by default (pyroscope-java ``Config.java``
  ``DEFAULT_PROFILER_EVENT``, ``DEFAULT_PROFILING_INTERVAL``), a process CPU-time timer written as JFR execution
  samples, which become ``cpu:nanoseconds`` at ``1e9 / sampleRate`` each (jfr-parser ``pprof/parser.go``,
  ``pprof/pprof.go``): *sampled CPU time (JFR execution samples)*.
- **@pyroscope/nodejs**: a wall-clock sampler every 10 ms whose ``cpu`` value is the CPU time the thread used since
  the last sample, measured (``@datadog/pprof`` ``out/src/profile-serializer.js``: ``context.cpuTime``): *CPU time
  measured at wall-clock samples* — no count; its ``wall`` value is ``count × interval``: *sampled wall time*.

"More than the span lasted" is raised only when the span's wall time could have drawn that many samples with a chance
under 0.135 % (the one-sided tail beyond 3σ; ``Tally.exceeds``: the exact Poisson tail at ``wall / period``). A
single-threaded measure (on-GIL time) cannot really exceed the wall time, so the flag says some samples are not this
span's: py-spy's timer, when it falls behind (its thread got no core), does not skip the samples it owes but takes
them back to back (``src/timer.rs`` returns ``Err(behind)`` without sleeping; ``src/sampler.rs`` samples anyway), all
in whichever span holds the GIL at that moment; and pyroscope-io labels a sample with the thread's span when its
sampler thread receives it (``rust/src/backend.rs`` ``add_tag_rules``), not when it was taken. Totals are kept,
spans' shares are not: that is the demo's "linked CPU > wall time" on a loaded host. A multi-threaded measure (Go,
Java) can exceed it for real, when work ran in parallel. Nothing is ever capped or redistributed.

Two counts are compared with the exact conditional test of two Poisson rates (``bridge.poisson``, used by
``bridge.function_diff`` for compare).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final

from bridge import flamegraph
from bridge._proto import querier_pb2 as qpb
from bridge.poisson import FLAG_P, poisson_tail, score_interval
from bridge.profiletype import BadProfileType, ProfileType
from bridge.units import format_value

# a "period" under 100 µs is no sampling profiler's: values with such a common divisor are measured, not counted
MIN_PERIOD_NS: Final = 100_000

SCOPE_LABEL: Final = "otel.scope.name"  # what the SDKs send as a series label (Pyroscope's pkg/model/labels.go)
SPY_LABEL: Final = "pyroscope_spy"  # what Pyroscope records for /ingest uploads (their spyName)
FACT_LABELS: Final = (SCOPE_LABEL, SPY_LABEL)

# otel.scope.name (pyroscope-go internal/semconv, the Java agent's PyroscopeExporter, @pyroscope/nodejs
# pyroscope-profiler.js, pyroscope-io) and spyName → the SDK
SDK_OF_LABEL: Final[Mapping[str, str]] = {
    "com.grafana.pyroscope/python": "python",
    "com.grafana.pyroscope/go": "go",
    "com.grafana.pyroscope/java": "java",
    "com.grafana.pyroscope/nodejs": "nodejs",
    "pyspy": "python",
    "gospy": "go",
    "javaspy": "java",
    "grafana-agent.java": "java",
    "nodespy": "nodejs",
}


@dataclass(frozen=True, slots=True)
class Sampler:
    """What one SDK's samples of one profile type are."""

    sdk: str  # "pyroscope-io (Python)"; "" when not known
    measure: str  # what the number is: "sampled on-GIL time", "sampled on-CPU time", "CPU"
    why: str  # one sentence: how the SDK samples, and what follows
    counted: bool = True  # values are whole samples (count × period); False: measured (no interval)
    default_period: int = 0  # the SDK's default period in the sample unit; 0: not known
    parallel: bool = True  # several threads can add to one span (so CPU may exceed wall time legitimately)


TEN_MS: Final = 10_000_000
PYTHON_CPU: Final = Sampler(
    "pyroscope-io (Python)",
    "sampled on-GIL time",
    "py-spy samples the thread that holds the GIL (gil_only), counted active whether or not it is on a core, at "
    "random intervals averaging 10 ms: a Poisson count of GIL-held time, which on a busy host includes time spent "
    "waiting for a core, and a sampler that fell behind takes the samples it owes at once",
    default_period=TEN_MS,
    parallel=False,
)
GO_CPU: Final = Sampler(
    "pyroscope-go",
    "sampled on-CPU time",
    "runtime/pprof's SIGPROF on each thread's CPU-time timer at 100 Hz: every goroutine of the span, so it can exceed "
    "the span's wall time when they ran in parallel; periodic, so the interval is conservative",
    default_period=TEN_MS,
)
JAVA_CPU: Final = Sampler(
    "pyroscope-java (async-profiler)",
    "sampled CPU time (JFR execution samples)",
    "async-profiler's itimer (the agent's default event) every 10 ms of process CPU time, written as JFR execution "
    "samples: every thread of the span",
    default_period=TEN_MS,
)
NODE_CPU: Final = Sampler(
    "@pyroscope/nodejs",
    "CPU time measured at wall-clock samples",
    "a wall-clock sample every 10 ms carries the CPU time the thread used since the previous one: measured, not "
    "counted, so there is no sampling interval (only which stack it is charged to is sampled)",
    counted=False,
    parallel=False,
)
NODE_WALL: Final = Sampler(
    "@pyroscope/nodejs",
    "sampled wall time",
    "a wall-clock sample of the JavaScript thread every 10 ms",
    default_period=TEN_MS,
    parallel=False,
)
# (sdk, profile type name, sample type) → its sampler
SAMPLERS: Final[Mapping[tuple[str, str, str], Sampler]] = {
    ("python", "process_cpu", "cpu"): PYTHON_CPU,
    ("go", "process_cpu", "cpu"): GO_CPU,
    ("go", "process_cpu", "samples"): GO_CPU,
    ("java", "process_cpu", "cpu"): JAVA_CPU,
    # Pyroscope stores @pyroscope/nodejs's cpu as process_cpu:cpu:nanoseconds:wall:nanoseconds (its relabel rules)
    ("nodejs", "process_cpu", "cpu"): NODE_CPU,
    ("nodejs", "wall", "cpu"): NODE_CPU,
    ("nodejs", "wall", "wall"): NODE_WALL,
    ("nodejs", "wall", "samples"): NODE_WALL,
}
# a profile type's sample type → what its values are, in words, when the SDK is not known
QUANTITIES: Final[Mapping[str, str]] = {
    "cpu": "CPU",
    "wall": "wall time",
    "samples": "samples",
    "alloc_objects": "allocated objects",
    "alloc_space": "allocated memory",
    "inuse_objects": "objects in use",
    "inuse_space": "memory in use",
    "contentions": "contentions",
    "delay": "lock wait time",
    "goroutine": "goroutines",
    "goroutines": "goroutines",
}
TIME_TYPES: Final = frozenset({"cpu", "wall", "samples"})  # sample types a sampling interval applies to


def quantity_of(profile_type: str) -> str:
    """``process_cpu:cpu:nanoseconds:…`` → ``CPU``; ``memory:alloc_space:bytes:…`` → ``allocated memory``."""
    parts = profile_type.split(":")
    sample_type = parts[1] if len(parts) > 1 else profile_type
    return QUANTITIES.get(sample_type, sample_type or "samples")


def sdks_of(labels: Iterable[str]) -> frozenset[str]:
    """The SDKs named by ``otel.scope.name`` / ``pyroscope_spy`` values (unknown values are left out)."""
    return frozenset(SDK_OF_LABEL[v] for v in labels if v in SDK_OF_LABEL)


def sampler_of(profile_type: str, sdks: Iterable[str]) -> Sampler:
    """The sampler of ``profile_type`` uploaded by ``sdks``: known only when they agree on one SDK."""
    try:
        pt = ProfileType.parse(profile_type)
    except BadProfileType:
        return Sampler("", quantity_of(profile_type), "", counted=False)
    known = {SAMPLERS.get((sdk, pt.name, pt.sample_type)) for sdk in set(sdks)}
    if len(known) == 1 and None not in known:
        found = known.pop()
        assert found is not None
        return found
    what = quantity_of(profile_type)
    counted = pt.sample_type in TIME_TYPES
    return Sampler("", what, f"{what} as the profile's samples add up (the SDK is not known)", counted=counted)


# --------------------------------------------------------------------------------------------- a count of samples


@dataclass(frozen=True, slots=True)
class Tally:
    """A total read as a count of samples, with its 95 % interval: the score interval of the count's Poisson mean
    (``poisson.score_interval``: about ``±1.96·√n`` samples once ``n`` is large), in the value's unit."""

    total: int  # the figure shown, in the profile's sample unit
    samples: int  # n: how many samples make it up
    period: int  # what one sample adds (for a sum of parts of different periods: the largest)
    variance: float  # of the total, in unit²: Σ nᵢ·periodᵢ²
    source: str  # how the count is known

    @property
    def sigma(self) -> float:
        return math.sqrt(self.variance)

    def _count(self) -> tuple[float, float]:
        """(n, period) of the one Poisson count with this total and variance: the tally itself for one period; for
        a sum of different periods, the count whose variance matches (n = total²/variance)."""
        if self.total <= 0 or self.variance <= 0:
            return float(self.samples), float(self.period)
        period = self.variance / self.total
        return self.total / period, period

    @property
    def low(self) -> float:
        n, period = self._count()
        return score_interval(n)[0] * period

    @property
    def high(self) -> float:
        n, period = self._count()
        return score_interval(n)[1] * period

    def exceeds(self, wall_ns: int) -> bool:
        """True when the span's wall time could have drawn this many samples only with a chance under ``FLAG_P``
        (the one-sided tail beyond 3σ): ``P(N ≥ n)`` for ``N ~ Poisson(wall / period)`` (time units only)."""
        n, period = self._count()
        if self.samples <= 0 or period <= 0:
            return False
        return self.total > wall_ns and poisson_tail(round(n), wall_ns / period) < FLAG_P


def tally(total: int, samples: int, period: int, source: str) -> Tally:
    return Tally(total, samples, period, float(samples) * period * period, source)


def add_tallies(parts: Iterable[Tally]) -> Tally | None:
    """The tally of a sum (independent counts: variances add); None for no parts."""
    items = list(parts)
    if not items:
        return None
    sources = sorted({t.source for t in items})
    return Tally(
        sum(t.total for t in items),
        sum(t.samples for t in items),
        max(t.period for t in items),
        sum(t.variance for t in items),
        sources[0] if len(sources) == 1 else "; ".join(sources),
    )


def tree_values(root: flamegraph.Node) -> list[int]:
    """Every node's self value in a call tree: what one sample's multiples must divide."""
    out: list[int] = []
    work = [root]
    while work:
        node = work.pop()
        if node.self > 0:
            out.append(node.self)
        work.extend(node.children.values())
    return out


def node_values(fg: qpb.FlameGraph | None) -> list[int]:
    """Every node's self value in a flame graph (the root's too): what one sample's multiples must divide."""
    out: list[int] = []
    if fg is None:
        return out
    for level in fg.levels:
        values = level.values
        out.extend(values[i] for i in range(2, len(values), 4) if values[i] > 0)
    return out


def _divides(period: int, values: Iterable[int]) -> bool:
    return period > 0 and all(v % period == 0 for v in values)


def tally_of(
    values: list[int], total: int, unit: str, sampler: Sampler, periods: Mapping[int, int] | None = None
) -> Tally | None:
    """How many samples ``total`` is, from the answer's node ``values``, the stored ``periods`` (period → profiles)
    and the SDK's default; None when the values are not whole samples (measured) or cannot be counted."""
    if total <= 0:  # none: still an interval, up to z² = 3.84 samples of the period, when the period is known
        period = max((p for p in (periods or {}) if p > 0), default=sampler.default_period)
        return tally(0, 0, period, "no samples") if sampler.counted else None
    if not sampler.counted:
        return None
    if unit == "count":
        return tally(total, total, 1, "the values are sample counts")
    stored = sorted(p for p in (periods or {}) if p > 0)
    if stored and _divides(math.gcd(*stored), values):
        longest = stored[-1]
        if len(stored) == 1:
            return tally(total, total // longest, longest, f"{format_value(longest, unit)} per sample, as stored")
        return tally(
            total,
            total // longest,
            longest,
            f"mixed periods stored ({', '.join(format_value(p, unit) for p in stored)}): counted at the longest, "
            "so the interval is wide rather than narrow",
        )
    if _divides(sampler.default_period, values):
        period = sampler.default_period
        return tally(
            total, total // period, period, f"{format_value(period, unit)} per sample, {sampler.sdk}'s default"
        )
    common = math.gcd(*values) if values else 0
    if common <= 0 or (unit == "nanoseconds" and common < MIN_PERIOD_NS):
        return None
    return tally(
        total,
        total // common,
        common,
        f"at least this many: {format_value(common, unit)} divides every value (the period is not known)",
    )


# --------------------------------------------------------------------------------------------- the answer's sampling


@dataclass(frozen=True, slots=True)
class Sampling:
    """What a resolution's number is (``sampler``) and how sure it is (``tally``; None: not a count)."""

    sampler: Sampler
    tally: Tally | None
    unit: str

    @property
    def measure(self) -> str:
        return self.sampler.measure

    def exceeds(self, wall_ns: int | None) -> bool:
        """More than the span lasted, beyond sampling noise at 3σ (``Tally.exceeds``; time units, a known wall time)."""
        if wall_ns is None or self.tally is None or self.unit != "nanoseconds":
            return False
        return self.tally.exceeds(wall_ns)

    def why_exceeds(self) -> str:
        if self.sampler.parallel:
            return "more than the span lasted: threads or goroutines of the span ran in parallel"
        return (
            f"more than the span lasted, beyond sampling noise: {self.measure} cannot exceed the span's wall time, "
            "so some samples are not this span's — a sampler that fell behind (a busy host) takes the samples it "
            "owes at once, in whichever span holds the GIL when it runs again"
        )


def sampling_of(
    fg: qpb.FlameGraph | None, profile_type: str, sdks: Iterable[str], periods: Mapping[int, int] | None = None
) -> Sampling:
    """Pure: a flame graph's total as a count of samples of ``profile_type``, uploaded by ``sdks``."""
    sampler = sampler_of(profile_type, sdks)
    try:
        unit = ProfileType.parse(profile_type).sample_unit
    except BadProfileType:
        unit = ""
    total = fg.total if fg is not None and not flamegraph.is_empty(fg) else 0
    return Sampling(sampler, tally_of(node_values(fg), total, unit, sampler, periods), unit)


# --------------------------------------------------------------------------------------------- words


def range_text(t: Tally, unit: str) -> str:
    """``670 ms – 1.03 s``: the 95 % interval."""
    return f"{format_value(t.low, unit)} – {format_value(t.high, unit)}"


def interval_text(t: Tally, unit: str) -> str:
    """``83 samples: 830 ms (95 %: 670 ms – 1.03 s)``."""
    if t.samples <= 0:
        return "0 samples"
    plural = "sample" if t.samples == 1 else "samples"
    return f"{t.samples:,} {plural}: {format_value(t.total, unit)} (95 %: {range_text(t, unit)})"


def figure_text(total: int, t: Tally | None, unit: str) -> str:
    """A figure with its interval and count, for tables: ``830 ms (95 %: 670 ms – 1.03 s; 83 samples)``; the bare
    value when it is not a count (measured) or holds no sample."""
    if t is None or t.samples <= 0:
        return format_value(total, unit)
    plural = "sample" if t.samples == 1 else "samples"
    return f"{format_value(total, unit)} (95 %: {range_text(t, unit)}; {t.samples:,} {plural})"


def sampling_text(s: Sampling | None) -> str:
    """What the root bar and ``resolve`` add: the count and interval, or why there is none."""
    if s is None:
        return ""
    if s.tally is None:
        return "measured, not counted: no sampling interval" if not s.sampler.counted else "not a count of samples"
    return interval_text(s.tally, s.unit)


def sampling_json(s: Sampling | None, wall_ns: int | None = None) -> dict[str, object] | None:
    """The API's ``sampling`` object (null when there is no answer)."""
    if s is None:
        return None
    t = s.tally
    doc: dict[str, object] = {
        "measure": s.measure,
        "sdk": s.sampler.sdk or None,
        "why": s.sampler.why,
        "unit": s.unit,
        "samples": t.samples if t is not None else None,
        "period": t.period if t is not None else None,
        "interval95": {"low": round(t.low), "high": round(t.high)} if t is not None else None,
        "sigma": round(t.sigma, 3) if t is not None else None,
        "countedBy": t.source if t is not None else ("measured, not counted" if not s.sampler.counted else None),
    }
    if wall_ns is not None:
        flagged = s.exceeds(wall_ns)
        doc["wallNanos"] = str(wall_ns)
        doc["exceedsWall"] = flagged
        doc["exceedsWallWhy"] = s.why_exceeds() if flagged else None
    return doc
