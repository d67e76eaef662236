"""The standalone store on the real shop capture: counts, Pyroscope query semantics, restart, migrations,
retention."""

from __future__ import annotations

import gzip
import json
import sqlite3
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2 as otlp_trace_svc

from bridge import flamegraph
from bridge._proto import profile_pb2, push_pb2
from bridge._proto import querier_pb2 as qpb
from bridge._proto import types_pb2 as tpb
from bridge.call import CallContext, Deadline
from bridge.errors import InvalidArgument
from bridge.pprof import decode_pprof, iter_samples
from bridge.store import Store, decode, schema
from bridge.store.database import DB_FILE
from tests.paths import SHOP_CAPTURE

CPU = "process_cpu:cpu:nanoseconds:cpu:nanoseconds"
CAPTURE_END_S = 1795945320.0  # a little after the shop capture's last request
ALL_MS = (0, 4_000_000_000_000)


def ctx(tenant: str | None = None) -> CallContext:
    return CallContext(deadline=Deadline.start(None, 10.0), tenant=tenant)


def capture_requests() -> list[tuple[str, bytes]]:
    out = []
    for line in (SHOP_CAPTURE / "index.jsonl").read_text().splitlines():
        entry = json.loads(line)
        out.append((entry["path"], (SHOP_CAPTURE / entry["file"]).read_bytes()))
    return out


async def ingest_capture(store: Store, tenant: str | None = None) -> None:
    for path, body in capture_requests():
        if path == "/v1/traces":
            await store.ingest_otlp_traces(otlp_trace_svc.ExportTraceServiceRequest.FromString(body), tenant)
        else:
            records = decode.records_from_push(push_pb2.PushRequest.FromString(body), now_ns=0)
            await store.ingest_profiles(records, tenant)


def capture_samples() -> list[tuple[tuple[str, ...], int, dict[str, str], str, int]]:
    """Every pprof sample of the capture, read with bridge.pprof: (frames, value, labels, service, time_ns)."""
    out = []
    for path, body in capture_requests():
        if path == "/v1/traces":
            continue
        for series in push_pb2.PushRequest.FromString(body).series:
            service = next(p.value for p in series.labels if p.name == "service_name")
            for raw in series.samples:
                profile = decode_pprof(raw.raw_profile)
                for frames, value, labels in iter_samples(profile, 0):
                    out.append((frames, value, labels, service, profile.time_nanos))
    return out


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    s = await Store.open(tmp_path, clock=lambda: CAPTURE_END_S)
    await ingest_capture(s)
    yield s
    await s.close()


def stacks_of(fg: qpb.FlameGraph) -> dict[tuple[str, ...], int]:
    return dict(flamegraph.iter_stacks(flamegraph.decode(fg)))


async def merge(
    store: Store, selector: str = "{}", start: int = ALL_MS[0], end: int = ALL_MS[1], **kw: object
) -> qpb.FlameGraph:
    req = qpb.SelectMergeStacktracesRequest(profile_typeID=CPU, label_selector=selector, start=start, end=end, **kw)
    return (await store.select_merge_stacktraces(req, ctx())).flamegraph


async def test_capture_counts_match_the_fixture_readme(store: Store) -> None:
    c = await store.counts()
    assert (c.spans, c.traces) == (434, 186)
    assert (c.uploads, c.samples, c.sample_value) == (6, 201, 3_590_000_000)
    assert (c.samples_with_span, c.distinct_span_ids) == (185, 114)


async def test_merge_equals_a_plain_sum_of_the_pprof_samples(store: Store) -> None:
    expected: Counter[tuple[str, ...]] = Counter()
    for frames, value, _, service, _ in capture_samples():
        if service == "shop-frontend":
            expected[frames] += value
    fg = await merge(store, '{service_name="shop-frontend"}')
    assert stacks_of(fg) == dict(expected)
    assert fg.total == sum(expected.values())
    assert fg.names[0] == "total"


@pytest.mark.parametrize(
    ("selector", "services"),
    [
        ("{}", {"shop-frontend", "shop-backend"}),
        ('{service_name="shop-backend"}', {"shop-backend"}),
        ('{service_name!="shop-backend"}', {"shop-frontend"}),
        ('{service_name=~"shop-.*"}', {"shop-frontend", "shop-backend"}),
        ('{service_name=~"shop"}', set()),  # anchored, as in Prometheus
        ('{service_name!~".*front.*", env="capture"}', {"shop-backend"}),
        ('{span_name="GET /price"}', {"shop-backend"}),
        ('{span_id="619b43385a5e27a8"}', set()),  # span_id is never a series label
    ],
)
async def test_label_selectors(store: Store, selector: str, services: set[str]) -> None:
    samples = capture_samples()
    expected = 0
    for _, value, labels, service, _ in samples:
        if service not in services:
            continue
        if "span_name" in selector and labels.get("span_name") != "GET /price":
            continue
        expected += value
    fg = await merge(store, selector)
    assert fg.total == expected


async def test_window_is_inclusive_on_capture_start(store: Store) -> None:
    samples = capture_samples()
    first_ns = min(t for *_, t in samples)
    t_ms = first_ns // 1_000_000
    in_first = sum(v for _, v, _, _, t in samples if t == first_ns)
    assert (await merge(store, start=t_ms, end=t_ms)).total == in_first
    assert (await merge(store, start=t_ms + 1, end=t_ms + 999)).total == 0
    assert (await merge(store, start=t_ms - 5000, end=t_ms - 1)).total == 0
    # a span-tight window that starts after the capture window started finds nothing: the profile's one timestamp
    # is its start
    first_service = next(svc for *_, svc, t in samples if t == first_ns)
    sel = f'{{service_name="{first_service}"}}'
    assert (await merge(store, sel, start=t_ms + 500, end=t_ms + 9_000)).total == 0


async def test_max_nodes_folds_into_other(store: Store) -> None:
    full = await merge(store)
    small = await merge(store, max_nodes=5)
    assert small.total == full.total
    assert "other" in small.names
    assert flamegraph.decode(small).count() < flamegraph.decode(full).count()


async def test_span_selector_selects_exactly_that_spans_samples(store: Store) -> None:
    samples = capture_samples()
    by_span: Counter[str] = Counter()
    for _, value, labels, _, _ in samples:
        if "span_id" in labels:
            by_span[labels["span_id"]] += value
    span_id, total = by_span.most_common(1)[0]
    other = next(s for s in by_span if s != span_id)
    req = qpb.SelectMergeSpanProfileRequest(
        profile_typeID=CPU, label_selector="{}", span_selector=[span_id.upper(), other], start=ALL_MS[0], end=ALL_MS[1]
    )
    fg = (await store.select_merge_span_profile(req, ctx())).flamegraph
    assert fg.total == total + by_span[other]
    fg2 = await merge(store, span_selector=[span_id])
    assert fg2.total == total


async def test_one_bad_span_selector_entry_fails_the_request(store: Store) -> None:
    req = qpb.SelectMergeSpanProfileRequest(
        profile_typeID=CPU,
        span_selector=["619b43385a5e27a8", '${__span.tags["pyroscope.profile.id"]}'],
        start=ALL_MS[0],
        end=ALL_MS[1],
    )
    with pytest.raises(InvalidArgument, match="invalid span id length"):
        await store.select_merge_span_profile(req, ctx())


async def test_trace_id_selector(store: Store) -> None:
    by_trace: Counter[str] = Counter()
    for _, value, labels, _, _ in capture_samples():
        if "trace_id" in labels:
            by_trace[labels["trace_id"]] += value
    trace_id, total = by_trace.most_common(1)[0]
    assert (await merge(store, trace_id_selector=[trace_id])).total == total
    with pytest.raises(InvalidArgument, match="cannot be combined"):
        await merge(store, trace_id_selector=[trace_id], span_selector=["619b43385a5e27a8"])


async def test_empty_answer_is_pyroscope_no_data(store: Store) -> None:
    fg = await merge(store, '{service_name="nobody"}')
    assert flamegraph.is_empty(fg)
    assert list(fg.names) == ["total"] and list(fg.levels[0].values) == [0, 0, 0, 0]


async def test_select_merge_profile_is_a_parseable_pprof(store: Store) -> None:
    req = qpb.SelectMergeProfileRequest(
        profile_typeID=CPU, label_selector='{service_name="shop-backend"}', start=ALL_MS[0], end=ALL_MS[1]
    )
    profile = await store.select_merge_profile(req, ctx())
    reparsed = decode_pprof(gzip.compress(profile.SerializeToString()))
    assert isinstance(reparsed, profile_pb2.Profile)
    got: Counter[tuple[str, ...]] = Counter()
    for frames, value, _ in iter_samples(reparsed, 0):
        got[frames] += value
    expected: Counter[tuple[str, ...]] = Counter()
    for frames, value, _, service, _ in capture_samples():
        if service == "shop-backend":
            expected[frames] += value
    assert got == expected


async def test_labels_series_and_profile_types(store: Store) -> None:
    types = await store.profile_types(qpb.ProfileTypesRequest(start=ALL_MS[0], end=ALL_MS[1]), ctx())
    assert [t.ID for t in types.profile_types] == [CPU]
    assert types.profile_types[0].name == "process_cpu"
    names = await store.label_names(tpb.LabelNamesRequest(matchers=['{service_name="shop-backend"}']), ctx())
    assert {"service_name", "span_name", "env", "__name__", "__profile_type__"} <= set(names.names)
    assert "span_id" not in names.names and "trace_id" not in names.names
    values = await store.label_values(tpb.LabelValuesRequest(name="service_name"), ctx())
    assert list(values.names) == ["shop-backend", "shop-frontend"]
    spans = await store.label_values(
        tpb.LabelValuesRequest(name="span_name", matchers=['{service_name="shop-frontend"}']), ctx()
    )
    assert list(spans.names) == ["GET /checkout", "GET /health"]
    series = await store.series(qpb.SeriesRequest(label_names=["service_name"]), ctx())
    assert sorted(ls.labels[0].value for ls in series.labels_set) == ["shop-backend", "shop-frontend"]
    other_tenant = await store.label_values(tpb.LabelValuesRequest(name="service_name"), ctx("someone-else"))
    assert list(other_tenant.names) == []


async def test_select_series_sums_per_step(store: Store) -> None:
    samples = capture_samples()
    req = qpb.SelectSeriesRequest(
        profile_typeID=CPU, label_selector="{}", start=ALL_MS[0], end=ALL_MS[1], group_by=["service_name"], step=3600.0
    )
    resp = await store.select_series(req, ctx())
    totals = {s.labels[0].value: sum(p.value for p in s.points) for s in resp.series}
    expected: Counter[str] = Counter()
    for _, value, _, service, _ in samples:
        expected[service] += value
    assert totals == {k: float(v) for k, v in expected.items()}


async def test_restart_loses_nothing_acknowledged(tmp_path: Path) -> None:
    first = await Store.open(tmp_path, clock=lambda: CAPTURE_END_S)
    await ingest_capture(first)
    before = (
        await first.counts(),
        await merge(first),
        await first.trace_resource_spans("e19e0353f421bfce945f7d1514c6c9f1", None),
    )
    await first.close()
    second = await Store.open(tmp_path, clock=lambda: CAPTURE_END_S)
    try:
        after = (
            await second.counts(),
            await merge(second),
            await second.trace_resource_spans("e19e0353f421bfce945f7d1514c6c9f1", None),
        )
    finally:
        await second.close()
    assert after == before
    assert before[0].spans == 434 and len(before[2]) > 0


async def test_migrates_a_version_1_database(tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / DB_FILE, isolation_level=None)
    assert schema.migrate(conn, target=1) == 1
    conn.execute("INSERT INTO functions (name) VALUES ('main')")
    conn.execute("INSERT INTO stacks (frames) VALUES (?)", ((1).to_bytes(4, "little"),))
    labels = {"__name__": "process_cpu", "__profile_type__": CPU, "service_name": "old"}
    conn.execute(
        "INSERT INTO series (tenant, labels, service, profile_type) VALUES ('anonymous', ?, 'old', ?)",
        (json.dumps(labels, sort_keys=True, separators=(",", ":")), CPU),
    )
    conn.execute("INSERT INTO profiles (series_id, time_ns, duration_ns, total) VALUES (1, 5000000000, 10, 7)")
    conn.execute("INSERT INTO samples VALUES (1, 1, 1, 7, 5, NULL)")
    conn.execute("INSERT INTO samples VALUES (1, 1, 1, 3, NULL, NULL)")
    conn.close()
    store = await Store.open(tmp_path, clock=lambda: 10.0)
    try:
        fg = await merge(store, '{service_name="old"}', 0, 10_000)
        assert stacks_of(fg) == {("main",): 10}
        fg = await merge(store, '{service_name="old"}', 0, 10_000, span_selector=["0000000000000005"])
        assert stacks_of(fg) == {("main",): 7}
    finally:
        await store.close()
    conn = sqlite3.connect(tmp_path / DB_FILE)
    assert schema.current_version(conn) == schema.LATEST
    for name in ("profile_stacks", "samples_profile", "span_profiles", "trace_profiles", "rollups", "spans_long"):
        assert conn.execute("SELECT count(*) FROM sqlite_master WHERE name = ?", (name,)).fetchone()[0] == 1
    for gone in ("samples_span", "samples_trace"):  # replaced by span_profiles / trace_profiles (migration 6)
        assert conn.execute("SELECT count(*) FROM sqlite_master WHERE name = ?", (gone,)).fetchone()[0] == 0
    assert conn.execute("SELECT bucket, span_id, profile_id FROM span_profiles").fetchall() == [(0, 5, 1)]
    conn.close()


async def test_refuses_a_newer_schema(tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / DB_FILE, isolation_level=None)
    schema.migrate(conn)
    conn.execute("UPDATE schema_version SET version = ?", (schema.LATEST + 1,))
    conn.close()
    with pytest.raises(Exception, match="newer than this bridge understands"):
        await Store.open(tmp_path)


async def test_retention_by_age_drops_old_data(tmp_path: Path) -> None:
    now = [CAPTURE_END_S]
    store = await Store.open(tmp_path, clock=lambda: now[0])
    try:
        await ingest_capture(store)
        kept = await store.enforce_retention(max_age_s=3600, max_bytes=1024**3)
        assert (kept.profiles, kept.spans) == (0, 0)
        now[0] = CAPTURE_END_S + 2 * 3600
        dropped = await store.enforce_retention(max_age_s=3600, max_bytes=1024**3)
        assert dropped.profiles == 12 and dropped.spans == 434
        c = await store.counts()
        assert (c.spans, c.samples, c.series) == (0, 0, 0)
        assert (await merge(store)).total == 0
        # ids freed by retention are handed out again: nothing cached under an old id may leak into new answers
        otlp = svc_request_for_reuse()
        await store.ingest_otlp_profiles(otlp, None)
        values = await store.label_values(tpb.LabelValuesRequest(name="service_name"), ctx())
        assert list(values.names) == ["reused"]
        assert stacks_of(await merge(store, '{service_name="reused"}')) == {("fresh", "frames"): 42}
    finally:
        await store.close()


async def test_retention_by_size_drops_oldest_first(tmp_path: Path) -> None:
    store = await Store.open(tmp_path, clock=lambda: CAPTURE_END_S)
    try:
        await ingest_capture(store)
        full = await store.used_bytes()
        result = await store.enforce_retention(max_age_s=10**9, max_bytes=full // 2)
        assert result.used_bytes <= full // 2
        c = await store.counts()
        assert 0 < c.spans < 434
        # what is left is exactly the newest data: everything (spans by start, profiles by capture start) at or
        # after the oldest item kept, and nothing before it
        conn = sqlite3.connect(tmp_path / DB_FILE)
        oldest_kept = min(
            conn.execute("SELECT min(start_ns) FROM spans").fetchone()[0],
            conn.execute("SELECT coalesce(min(time_ns), 1 << 62) FROM profiles").fetchone()[0],
        )
        conn.close()
        starts = [
            span.start_time_unix_nano
            for path, body in capture_requests()
            if path == "/v1/traces"
            for rs in otlp_trace_svc.ExportTraceServiceRequest.FromString(body).resource_spans
            for ss in rs.scope_spans
            for span in ss.spans
        ]
        assert c.spans == sum(1 for t in starts if t >= oldest_kept) < len(starts)
        kept = (await merge(store)).total
        assert kept == sum(v for _, v, _, _, t in capture_samples() if t >= oldest_kept)
    finally:
        await store.close()


async def test_tenants_are_kept_apart(tmp_path: Path) -> None:
    store = await Store.open(tmp_path, clock=lambda: CAPTURE_END_S)
    try:
        await ingest_capture(store, tenant="team-a")
        assert (await merge(store)).total == 0
        req = qpb.SelectMergeStacktracesRequest(profile_typeID=CPU, start=ALL_MS[0], end=ALL_MS[1])
        assert (await store.select_merge_stacktraces(req, ctx("team-a"))).flamegraph.total == 3_590_000_000
        assert await store.trace_by_id("e19e0353f421bfce945f7d1514c6c9f1", ctx()) is None
        assert await store.trace_by_id("e19e0353f421bfce945f7d1514c6c9f1", ctx("team-a")) is not None
    finally:
        await store.close()


async def test_huge_and_negative_windows_do_not_overflow(store: Store) -> None:
    assert (await merge(store, start=-5, end=2**62)).total == 3_590_000_000
    assert await store.search("{}", -1, 2**40, 1, ctx()) != []


async def test_group_commit_isolates_a_failing_job(tmp_path: Path) -> None:
    """Concurrent ingests share one transaction (one fsync); a job that fails is rolled back alone."""
    import asyncio

    store = await Store.open(tmp_path, clock=lambda: CAPTURE_END_S)
    try:
        pushes = [body for path, body in capture_requests() if path != "/v1/traces"]
        batches = [decode.records_from_push(push_pb2.PushRequest.FromString(b), now_ns=0) for b in pushes]

        def failing(conn: sqlite3.Connection) -> None:
            conn.execute("INSERT INTO functions (name) VALUES ('ghost')")
            raise RuntimeError("boom")

        results = await asyncio.gather(
            *(store.ingest_profiles(b, None) for b in batches[:3]),
            store.db.commit(failing),
            *(store.ingest_profiles(b, None) for b in batches[3:]),
            return_exceptions=True,
        )
        assert isinstance(results[3], RuntimeError)
        assert sum(r for r in results if isinstance(r, int)) == 201
        c = await store.counts()
        assert (c.samples, c.sample_value) == (201, 3_590_000_000)
        names = stacks_of(await merge(store))
        assert all("ghost" not in frames for frames in names)
    finally:
        await store.close()
    with pytest.raises(Exception, match="closed"):
        await store.ingest_profiles(batches[0], None)


def svc_request_for_reuse() -> object:
    from opentelemetry.proto.collector.profiles.v1development import profiles_service_pb2 as svc

    req = svc.ExportProfilesServiceRequest()
    d = req.dictionary
    d.string_table.extend(["", "cpu", "nanoseconds", "fresh", "frames"])
    d.function_table.add()
    d.function_table.add(name_strindex=3)
    d.function_table.add(name_strindex=4)
    d.location_table.add()
    d.location_table.add().lines.add(function_index=1)
    d.location_table.add().lines.add(function_index=2)
    d.stack_table.add()
    d.stack_table.add(location_indices=[2, 1])
    d.link_table.add()
    d.attribute_table.add()
    rp = req.resource_profiles.add()
    rp.resource.attributes.add(key="service.name").value.string_value = "reused"
    prof = rp.scope_profiles.add().profiles.add()
    prof.sample_type.type_strindex, prof.sample_type.unit_strindex = 1, 2
    prof.period_type.type_strindex, prof.period_type.unit_strindex = 1, 2
    prof.time_unix_nano = int(CAPTURE_END_S * 1e9)
    prof.samples.add(stack_index=1, values=[42])
    return req


async def test_select_series_average_limit_and_profile_type_window(store: Store) -> None:
    samples = capture_samples()
    by_profile: dict[tuple[str, int], int] = {}
    for _, value, _labels, service, t in samples:
        key = (service, t)
        by_profile[key] = by_profile.get(key, 0) + value
    req = qpb.SelectSeriesRequest(
        profile_typeID=CPU,
        label_selector="{}",
        start=ALL_MS[0],
        end=ALL_MS[1],
        group_by=["service_name"],
        step=3600.0,
        limit=1,
        aggregation=tpb.TIME_SERIES_AGGREGATION_TYPE_AVERAGE,
    )
    resp = await store.select_series(req, ctx())
    totals: dict[str, int] = {}
    for (service, _), value in by_profile.items():
        totals[service] = totals.get(service, 0) + value
    assert len(resp.series) == 1
    assert resp.series[0].labels[0].value == max(totals, key=lambda k: totals[k])  # limit keeps the largest
    point = resp.series[0].points[0]
    assert 0 < point.value < totals[resp.series[0].labels[0].value]  # an average of profiles, not their sum
    first = min(t for *_, t in samples)
    none = await store.profile_types(qpb.ProfileTypesRequest(start=1, end=first // 1_000_000 - 1), ctx())
    assert list(none.profile_types) == []


async def test_go_tool_pprof_reads_select_merge_profile(store: Store, tmp_path: Path) -> None:
    from tests.tools import go_pprof_top

    req = qpb.SelectMergeProfileRequest(
        profile_typeID=CPU, label_selector='{service_name="shop-backend"}', start=ALL_MS[0], end=ALL_MS[1]
    )
    out = tmp_path / "merged.pb.gz"
    out.write_bytes(gzip.compress((await store.select_merge_profile(req, ctx())).SerializeToString()))
    top = go_pprof_top(out, tmp_path)
    assert "count_primes" in top and "Type: cpu" in top


async def test_an_unusable_data_dir_is_a_clear_error(tmp_path: Path) -> None:
    from bridge.store import StoreError

    blocker = tmp_path / "not-a-directory"
    blocker.write_text("a file where the data directory should be")
    with pytest.raises(StoreError, match="cannot open the store at .*not-a-directory"):
        await Store.open(blocker)
