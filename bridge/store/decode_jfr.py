"""Pure: a JFR upload to ``/ingest?format=jfr`` (what Pyroscope's Java SDK sends) → the store's profile records,
named and stamped as Pyroscope names and stamps it.

Pyroscope's path (``pkg/ingester/pyroscope/ingest_handler.go`` → ``pkg/og/convert/jfr/profile.go``
``ParseToPprof`` → grafana/jfr-parser ``pprof.ParseJFR``, ``pprof/pyroscope/pyroscope.go`` ``Labels``):

- the recording (the raw body, or the multipart ``jfr`` part) and the ``labels`` part are gunzipped when they start
  with gzip's magic bytes, whatever their headers say (the Java SDK gzips both without a ``Content-Encoding``);
- every profile jfr-parser makes (``bridge.jfr.convert``) becomes one series per sample type, named
  ``<__name__>:<type>:<unit>:<period type>:<period unit>``;
- series labels: the ``name`` parameter's ``{tags}`` (not ``__``-prefixed ones), ``pyroscope_spy`` = ``spyName``,
  ``jfr_event`` = the recording's async-profiler event (left out when the recording has none: the JDK's own),
  ``service_name`` = the application name — or, when the tags already carry ``service_name``, the application name
  as ``app_name``;
- time: every profile is stamped at ``from`` (Pyroscope's ``StartTime``; the upload's arrival when absent) with the
  duration ``until − from``; the chunk headers' own times are not used;
- ``sampleRate`` (default 100) sets the period CPU and wall samples are worth: ``1e9 // sampleRate`` ns.
"""

from __future__ import annotations

from collections.abc import Mapping

from bridge.compression import GZIP_MAGIC, Budget, GzipError, GzipTooLarge
from bridge.errors import InvalidArgument, ResourceExhausted
from bridge.jfr.convert import JfrProfiles, Labels, convert, parse_labels
from bridge.jfr.cursor import JfrError, JfrTooLarge
from bridge.profiletype import NAME_LABEL, ProfileType
from bridge.store.decode import (
    NANOS,
    SERVICE_LABEL,
    LegacyName,
    ProfileRecord,
    epoch_to_ns,
    legacy_base,
    records_from_samples,
)

JFR_EVENT_LABEL = "jfr_event"
APP_NAME_LABEL = "app_name"


def _inflate(raw: bytes, what: str, max_bytes: int, budget: Budget) -> bytes:
    if raw[:2] != GZIP_MAGIC:
        return raw
    try:
        return budget.gunzip(raw, max_bytes)
    except GzipTooLarge as exc:
        raise ResourceExhausted(f"{what} is {exc}") from exc
    except GzipError as exc:
        raise InvalidArgument(f"{what} is {exc}") from exc


def decode_recording(
    raw: bytes, labels_raw: bytes | None, *, sample_rate: int, max_bytes: int, budget: Budget
) -> JfrProfiles:
    """The recording and its labels part (each gzipped or not) → jfr-parser's profiles. Malformed input is an
    ``InvalidArgument`` naming what is wrong; more than the request's budget is ``ResourceExhausted``."""
    data = _inflate(raw, "the JFR recording", max_bytes, budget)
    labels: Labels | None = None
    try:
        if labels_raw:
            labels = parse_labels(_inflate(labels_raw, "the labels part", max_bytes, budget))
        return convert(data, sample_rate=sample_rate, labels=labels, budget=budget)
    except JfrTooLarge as exc:
        raise ResourceExhausted(f"JFR recording: {exc}") from exc
    except JfrError as exc:
        raise InvalidArgument(f"JFR recording: {exc}") from exc


def jfr_base_labels(name: LegacyName, spy: str, jfr_event: str) -> dict[str, str]:
    """The series labels every profile of one upload carries (jfr-parser ``pprof/pyroscope/pyroscope.go``)."""
    tags = dict(name.labels)
    base = legacy_base(name, spy)
    if SERVICE_LABEL in tags:
        base[APP_NAME_LABEL] = name.service
    if jfr_event:
        base[JFR_EVENT_LABEL] = jfr_event
    return base


def records_from_jfr(
    raw: bytes,
    name: LegacyName,
    *,
    labels_raw: bytes | None = None,
    from_s: int | None,
    until_s: int | None,
    sample_rate: int,
    now_ns: int,
    spy: str = "",
    max_bytes: int,
    budget: Budget,
) -> list[ProfileRecord]:
    """A JFR upload → records, one per series (see the module docstring)."""
    if sample_rate < 0:
        raise InvalidArgument(f"sampleRate {sample_rate} must not be negative")
    result = decode_recording(raw, labels_raw, sample_rate=sample_rate, max_bytes=max_bytes, budget=budget)
    from_ns = epoch_to_ns(from_s) if from_s else None
    until_ns = epoch_to_ns(until_s) if until_s else None
    time_ns = from_ns if from_ns is not None else now_ns
    duration = until_ns - time_ns if until_ns is not None and until_ns > time_ns else 0
    base = jfr_base_labels(name, spy, result.jfr_event)
    out: list[ProfileRecord] = []
    for profile in result.profiles:
        for index, (s_type, s_unit) in enumerate(profile.sample_types):
            ptype = ProfileType(profile.metric, s_type, s_unit, *profile.period_type)
            labelled: Mapping[str, str] = {**base, NAME_LABEL: profile.metric}
            samples = ((frames, values[index], labels) for frames, values, labels in profile.samples)
            # a CPU or wall sample is worth 1e9 // sampleRate ns (bridge/jfr/convert.py): what one sample adds
            period = ptype.sample_period(NANOS // sample_rate if sample_rate else 0)
            out.extend(records_from_samples(labelled, ptype, time_ns, duration, samples, period))
    return out
