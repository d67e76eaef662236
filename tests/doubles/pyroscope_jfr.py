"""The Pyroscope double's ``/ingest?format=jfr`` — a TEST DOUBLE's reading of a Java upload, not Pyroscope's.

Pyroscope takes the recording from the multipart part ``jfr`` (or the whole body) and the ``LabelsSnapshot`` from
the part ``labels``, each gunzipped when it starts with gzip's magic bytes (``pkg/og/convert/jfr/profile.go``
``loadJFRFromForm``, ``decompress``), converts it with grafana/jfr-parser and labels each series with
``pprof/pyroscope/pyroscope.go`` ``Labels``. This double reads the recording with the JDK's own parser — the ``jfr``
tool's ``print --json`` — so it shares nothing with the bridge's reader (``bridge/jfr``), and applies the rules it
models, written here from jfr-parser's ``pprof/parser.go``:

- ``jdk.ExecutionSample`` whose thread is not ``STATE_SLEEPING`` → ``process_cpu:cpu:nanoseconds:cpu:nanoseconds``,
  each worth ``1e9 // sampleRate`` ns (``sampleRate`` 100 when absent);
- ``jdk.ObjectAllocationInNewTLAB`` → ``memory:alloc_in_new_tlab_objects:count:space:bytes`` (1) and
  ``memory:alloc_in_new_tlab_bytes:bytes:space:bytes`` (``tlabSize``); ``jdk.ObjectAllocationOutsideTLAB`` the
  same as ``alloc_outside_tlab_*`` (``allocationSize``);
- a sample's labels: its ``contextId``'s context in the ``LabelsSnapshot`` (string ids resolved), a non-zero
  ``spanId`` as ``profile_id`` (16 hex digits), which Pyroscope renames ``span_id`` (``pkg/model/pprofsplit``);
- frames ``<class>.<method>`` as the recording names them (async-profiler writes the JVM's internal class names,
  ``java/lang/Thread``, which the tool prints as they are), root first; a stack without frames is dropped;
- series labels: the name's tags (not ``__``-prefixed), ``pyroscope_spy``, ``jfr_event`` (the recording's
  ``event`` setting), and the application name as ``service_name`` (``app_name`` when the tags hold one);
- every profile stamped at ``from``.

Other events (wall clock, locks, the JDK's own GC and class events) are not modelled: they are read past, as
jfr-parser reads past what it does not convert, and the agents the tests run record none of the modelled ones'
siblings. jfr-parser's renaming of JVM-generated lambda classes is not modelled either: the tests' hot methods are
plain methods.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from google.protobuf.message import DecodeError

from bridge._proto import jfr_labels_pb2
from tests.doubles.pyroscope import StoredProfile, app_and_tags

STACK_DEPTH: Final = 2048  # the agents' default jstackdepth
JFR_TIMEOUT_S: Final = 60.0
CPU: Final = "process_cpu:cpu:nanoseconds:cpu:nanoseconds"
# event → [(profile type, the field whose value one event adds, or None for 1)]
MODELLED: Final[Mapping[str, tuple[tuple[str, str | None], ...]]] = {
    "jdk.ObjectAllocationInNewTLAB": (
        ("memory:alloc_in_new_tlab_objects:count:space:bytes", None),
        ("memory:alloc_in_new_tlab_bytes:bytes:space:bytes", "tlabSize"),
    ),
    "jdk.ObjectAllocationOutsideTLAB": (
        ("memory:alloc_outside_tlab_objects:count:space:bytes", None),
        ("memory:alloc_outside_tlab_bytes:bytes:space:bytes", "allocationSize"),
    ),
}


def _gunzip(raw: bytes) -> bytes:
    return gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw


def _contexts(raw: bytes) -> dict[int, dict[str, str]]:
    snapshot = jfr_labels_pb2.LabelsSnapshot()
    snapshot.ParseFromString(_gunzip(raw))
    strings = dict(snapshot.strings)
    return {
        cid: {strings.get(k, ""): strings.get(v, "") for k, v in ctx.labels.items()}
        for cid, ctx in snapshot.contexts.items()
    }


async def _print_events(recording: bytes) -> list[dict[str, Any]]:
    tool = shutil.which("jfr")
    if tool is None:
        raise ValueError("this double reads JFR with the JDK's jfr tool, which is not installed")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "upload.jfr"
        path.write_bytes(recording)
        proc = await asyncio.create_subprocess_exec(
            tool, "print", "--json", "--stack-depth", str(STACK_DEPTH), str(path),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        out, err = await asyncio.wait_for(proc.communicate(), JFR_TIMEOUT_S)
    if proc.returncode != 0:
        raise ValueError(f"not a JFR recording: {err.decode(errors='replace').strip()[:300]}")
    events: list[dict[str, Any]] = json.loads(out)["recording"]["events"]
    return events


def _frames(event: dict[str, Any]) -> tuple[str, ...]:
    stack = event["values"].get("stackTrace") or {}
    frames = stack.get("frames") or []
    return tuple(f"{f['method']['type']['name']}.{f['method']['name']}" for f in reversed(frames))


async def ingested_jfr_profiles(query: Mapping[str, str], recording: bytes, labels: bytes) -> list[StoredProfile]:
    """One stored profile per profile type of a JFR upload (see the module docstring)."""
    app, tags = app_and_tags(query)
    base = {**tags, "app_name" if "service_name" in tags else "service_name": app}
    base["pyroscope_spy"] = query.get("spyName") or ""
    try:
        contexts = _contexts(labels) if labels else {}
        events = await _print_events(_gunzip(recording))
    except (OSError, EOFError, DecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"not a JFR upload: {exc!r}") from exc
    period = 1_000_000_000 // int(query.get("sampleRate") or 100)
    jfr_event = next(
        (e["values"]["value"] for e in events if e["type"] == "jdk.ActiveSetting" and e["values"]["name"] == "event"),
        "",
    )
    if jfr_event:
        base["jfr_event"] = jfr_event
    by_type: dict[str, dict[tuple[tuple[str, ...], tuple[tuple[str, str], ...]], int]] = {}
    for event in events:
        frames = _frames(event)
        if not frames:
            continue
        values = event["values"]
        sample = dict(contexts.get(int(values.get("contextId") or 0), {}))
        if values.get("spanId"):
            sample["profile_id"] = f"{int(values['spanId']) & (2**64 - 1):016x}"
        if "profile_id" in sample:
            sample["span_id"] = sample.pop("profile_id")
        key = (frames, tuple(sorted((k, v) for k, v in sample.items() if k and v)))
        adds: tuple[tuple[str, int], ...] = ()
        if event["type"] == "jdk.ExecutionSample" and values.get("state") != "STATE_SLEEPING":
            adds = ((CPU, period),)
        elif event["type"] in MODELLED:
            adds = tuple((t, 1 if f is None else int(values[f])) for t, f in MODELLED[event["type"]])
        for type_id, value in adds:
            table = by_type.setdefault(type_id, {})
            table[key] = table.get(key, 0) + value
    time_ms = int(query.get("from") or 0) * 1000
    return [
        StoredProfile(
            type_id=type_id,
            labels=dict(base),
            time_ms=time_ms,
            samples=[(frames, value, dict(sample)) for (frames, sample), value in table.items() if value],
        )
        for type_id, table in by_type.items()
    ]
