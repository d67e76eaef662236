"""The resolution's model: the question (``SpanQuery``), the step that answered (``Step``: linked → local-root →
time-window → none) and the answer (``Resolution``), what its number measures (``Measure``, ``measure_of``) and the
headers every span answer carries. Pure; ``bridge.resolve`` runs the cascade that fills it."""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from bridge import ids
from bridge._proto import querier_pb2
from bridge.errors import InvalidArgument
from bridge.reasons import clock_text
from bridge.sampling import Sampling, quantity_of
from bridge.spans import Span

GRAFANA_UNRESOLVED_HINT: Final = '${__span.tags["pyroscope.profile.id"]}'


class Step(enum.StrEnum):
    """The cascade's step that gave an answer (``X-Profile-Bridge-Resolution``, the API's ``resolution``)."""

    LINKED = "linked"
    LOCAL_ROOT = "local-root"
    TIME_WINDOW = "time-window"
    NONE = "none"


@dataclass(frozen=True, slots=True)
class SpanQuery:
    span_ids: tuple[str, ...]  # raw selector entries as received (the resolver cleans them)
    profile_type: str
    label_selector: str  # e.g. '{service_name="shop-backend"}' or '{}'
    start_ms: int
    end_ms: int
    max_nodes: int | None = None
    trace_id: str | None = None  # when the caller knows it (API/pages): skips the search


@dataclass(frozen=True, slots=True, kw_only=True)
class Resolution:
    """Built by keyword: what a step found, the rest left at its default."""

    step: Step  # the cascade's step that answered
    reason: str  # human text, also the root bar suffix; header gets an ASCII form
    flamegraph: querier_pb2.FlameGraph  # final answer, root already relabelled for non-linked steps
    label_selector: str  # the selector actually used for the answer
    span: Span | None = None  # the span, when found
    local_root: Span | None = None  # its local root, when found
    window_ms: tuple[int, int] | None = None  # the time window queried (time-window step)
    span_ids: tuple[str, ...] = ()  # the span ids whose samples answered (linked/local-root)
    # the wall-clock time the answer's samples were taken in (whole capture windows; time-window mode)
    covered_ms: tuple[int, int] | None = None
    # the total as a count of samples, and what the samples measure (``bridge.sampling``); None for ``none``
    sampling: Sampling | None = None
    answered_type: str = ""  # the profile type that answered, when not the asked one (a CPU equivalent)

    @property
    def reason_header(self) -> str:
        return ascii_header(self.reason)


def clean_span_ids(raw: Iterable[str]) -> tuple[str, ...]:
    """Keep entries that are 16 hex characters, or the Tempo mount's ``<span id>:<trace id>`` (``bridge.ids``), as
    span ids (lower-cased, first occurrence wins): what goes on to Pyroscope is 16 hex only. Nothing valid left →
    ``InvalidArgument`` saying what to fix; an empty selector is never sent on (Pyroscope would match everything)."""
    seen: dict[str, None] = {}
    dropped: list[str] = []
    for entry in raw:
        parsed = ids.selector_entry(entry)
        if parsed is None:
            dropped.append(entry)
        else:
            seen.setdefault(parsed[0], None)
    if seen:
        return tuple(seen)
    if any("${" in d or "__span" in d for d in dropped):
        raise InvalidArgument(
            f"span selector {dropped!r} holds an unresolved Grafana variable: the span has no "
            f"pyroscope.profile.id attribute, so Grafana sent {GRAFANA_UNRESOLVED_HINT} literally. Point Grafana's "
            "Tempo data source at the bridge's /tempo mount (it adds the attribute to every span), or send the "
            "span's 16-hex-character id"
        )
    if dropped and all(d.strip() and not d.strip().strip("0") for d in dropped):
        # Pyroscope takes it and matches nothing (pkg/model/profile.go NewSpanSelector); no span has it
        raise InvalidArgument(
            f"span selector {dropped!r}: an all-zero span id is OpenTelemetry's invalid span id, which no span has; "
            "send the clicked span's 16-hex-character id"
        )
    if dropped:
        raise InvalidArgument(
            f"span selector {dropped!r} has no valid span id: each entry must be 16 hex characters, "
            f"e.g. 7f80395fd15dcdc9, or the bridge's SPAN:TRACE form (Grafana sends {GRAFANA_UNRESOLVED_HINT} "
            "unresolved for a span without that "
            "attribute: point its Tempo data source at the bridge's /tempo mount)"
        )
    raise InvalidArgument(
        "span selector is empty: give at least one 16-hex-character span id (an empty selector would match "
        "every sample)"
    )


def carried_traces(raw: Iterable[str]) -> dict[str, str]:
    """Span id → trace id for the selector entries that carry their trace (``<span id>:<trace id>``, what the Tempo
    mount writes into ``pyroscope.profile.id``); the first one wins."""
    out: dict[str, str] = {}
    for entry in raw:
        parsed = ids.selector_entry(entry)
        if parsed is not None and parsed[1] is not None:
            out.setdefault(parsed[0], parsed[1])
    return out


# --------------------------------------------------------------------------------------------- what a number measures

# modes whose samples belong to the span's request (its own process's local root), not to the whole service
REQUEST_STEPS: Final = frozenset({Step.LINKED, Step.LOCAL_ROOT})


class Attribution(enum.StrEnum):
    """Whose cost a resolution's number is."""

    SPAN = "span"  # samples linked to the span itself
    REQUEST = "request"  # samples linked to its local root: the whole request in that process, children included
    SERVICE = "service"  # the service's samples during a time window: every request it served then
    NOTHING = "nothing"  # no samples


@dataclass(frozen=True, slots=True)
class Measure:
    """What the number of an answer is, said plainly: the headline of the page, the API and ``resolve``."""

    attribution: Attribution
    text: str  # e.g. "shop-frontend CPU during the 19 s window around this span, not this span's own"

    @property
    def own(self) -> bool:
        """True when the number is this span's own cost."""
        return self.attribution is Attribution.SPAN


def seconds_text(ms: int) -> str:
    seconds = ms / 1000
    return f"{seconds:.0f} s" if seconds >= 10 else f"{seconds:.1f} s"


def measure_of(res: Resolution, profile_type: str) -> Measure:
    """Pure: what ``res``'s flame graph total measures. Only ``linked`` is the span's own cost; ``local-root`` is its
    whole request in that process; ``time-window`` is its service's cost during a window, every request included.
    The quantity is what the SDK's samples are (``bridge.sampling``: "sampled on-GIL time"), else the type's."""
    what = res.sampling.measure if res.sampling is not None else quantity_of(profile_type)
    span, root = res.span, res.local_root
    service = (span.service if span is not None else "") or "its service"
    if res.step is Step.LINKED:
        target = "this span" if len(res.span_ids) <= 1 else "spans " + ", ".join(res.span_ids)
        return Measure(Attribution.SPAN, f"{what} linked to {target}")
    if res.step is Step.LOCAL_ROOT:
        name = f" {root.name}" if root is not None and root.name else ""
        return Measure(
            Attribution.REQUEST, f"{service} {what} of the whole request{name} (its local root), not this span's own"
        )
    covered = res.covered_ms or res.window_ms
    if res.step is Step.TIME_WINDOW and covered is not None:
        start, end = covered
        return Measure(
            Attribution.SERVICE,
            f"{service} {what} during the {seconds_text(end - start)} window around "
            f"this span ({clock_text(start * 1_000_000, False)}–"
            f"{clock_text(end * 1_000_000, False)} UTC), not this span's own",
        )
    return Measure(Attribution.NOTHING, f"no {what} samples")


# the headers every span answer carries (the /pyroscope mount and the API), all ASCII
RESOLUTION_HEADER: Final = "X-Profile-Bridge-Resolution"  # the mode
REASON_HEADER: Final = "X-Profile-Bridge-Reason"  # how it was found
ATTRIBUTION_HEADER: Final = "X-Profile-Bridge-Attribution"  # whose cost the total is: span, request, service, nothing
MEASURE_HEADER: Final = "X-Profile-Bridge-Measure"  # that in words
MAX_HEADER_TEXT: Final = 400


def answer_headers(res: Resolution, measure: Measure) -> dict[str, str]:
    return {
        RESOLUTION_HEADER: res.step.value,
        REASON_HEADER: res.reason_header[:MAX_HEADER_TEXT],
        ATTRIBUTION_HEADER: measure.attribution.value,
        MEASURE_HEADER: ascii_header(measure.text)[:MAX_HEADER_TEXT],
    }


_ASCII: Final = str.maketrans({"—": "-", "–": "-", "…": "...", "’": "'", "‘": "'", "“": '"', "”": '"'})


def ascii_header(text: str) -> str:
    """A header-safe form of ``text``: ASCII, no control characters."""
    out = text.translate(_ASCII).encode("ascii", "replace").decode("ascii")
    return "".join(c if 32 <= ord(c) < 127 else " " for c in out)
