"""The JFR reader and converter against what Pyroscope's own converter (grafana/jfr-parser) made of the same real
recordings (``tests/fixtures/jfr/``): every profile type, every stack, every value and every label the same."""

from __future__ import annotations

import gzip
import os
import random

import pytest

from bridge.compression import Budget
from bridge.jfr import cursor
from bridge.jfr.convert import convert, merge_generated_names, parse_labels
from tests.jfr_expected import read_expected
from tests.jfr_writer import with_empty_pool
from tests.paths import JFR_FIXTURES

FIXTURES = JFR_FIXTURES
RECORDINGS = {
    "new_spancontext": "new_spancontext.labels.gz",
    "dump1": "dump1.labels.pb.gz",
    "wall_tick_sample": None,
    "example": None,
    "dd-trace-java": None,
}


def recording(name: str) -> bytes:
    return gzip.decompress((FIXTURES / f"{name}.jfr.gz").read_bytes())


def converted(
    name: str, *, empty_pool: bool = False
) -> dict[str, dict[tuple[tuple[str, ...], tuple[tuple[str, str], ...]], list[int]]]:
    labels_file = RECORDINGS[name]
    labels = parse_labels(gzip.decompress((FIXTURES / labels_file).read_bytes())) if labels_file else None
    jfr = with_empty_pool(recording(name), "jdk.types.Package") if empty_pool else recording(name)
    result = convert(jfr, sample_rate=100, labels=labels, budget=Budget(1 << 30))
    out: dict[str, dict[tuple[tuple[str, ...], tuple[tuple[str, str], ...]], list[int]]] = {}
    for profile in result.profiles:
        key = profile.metric + "_" + " ".join(f"{t}__{u}" for t, u in profile.sample_types)
        table = out.setdefault(key, {})
        for frames, values, labels in profile.samples:
            got = table.setdefault((frames, tuple(sorted(labels.items()))), [0] * len(values))
            for i, v in enumerate(values):
                got[i] += v
        out[key] = {k: v for k, v in table.items() if any(v)}
    return out


@pytest.mark.parametrize("name", sorted(RECORDINGS))
def test_every_profile_matches_jfr_parser(name: str) -> None:
    got = converted(name)
    expected_files = sorted(FIXTURES.glob(f"{name}_[0-9]_*_expected.txt.gz"))
    assert expected_files
    expected_metrics = set()
    for path in expected_files:
        metric = path.name[len(name) + 1 :].removesuffix("_expected.txt.gz").split("_", 1)[1]
        expected_metrics.add(metric)
        _, _, samples = read_expected(path)
        assert got.get(metric) == samples, f"{name}: {metric} differs from jfr-parser's"
    assert set(got) == expected_metrics


@pytest.mark.parametrize("name", sorted(RECORDINGS))
def test_a_chunk_with_an_empty_constant_pool_reads_the_same(name: str) -> None:
    """async-profiler declares a pool with no element when it has nothing for a type; the JDK's jfr tool refuses such
    a chunk ("Pool jdk.types.Package must contain at least one element"), jfr-parser — so Pyroscope — reads it whole,
    and so does the bridge."""
    assert converted(name, empty_pool=True) == converted(name)


def test_profile_types_and_labels_as_pyroscope_names_them() -> None:
    result = convert(
        recording("new_spancontext"),
        sample_rate=100,
        labels=parse_labels(gzip.decompress((FIXTURES / "new_spancontext.labels.gz").read_bytes())),
        budget=Budget(1 << 30),
    )
    assert result.jfr_event == "ctimer"
    [cpu] = result.profiles
    assert (cpu.metric, cpu.sample_types, cpu.period_type) == (
        "process_cpu",
        (("cpu", "nanoseconds"),),
        ("cpu", "nanoseconds"),
    )
    # spanId → profile_id (16 hex), spanName → span_name from the labels' strings, contextId → the context's labels
    assert {tuple(sorted(labels.items())) for _, _, labels in cpu.samples} == {
        (),
        (("dyn2", "v2"), ("profile_id", "00000000000000ef"), ("span_name", "Fibonachi")),
        (("dyn1", "v1"), ("profile_id", "0000000000001092"), ("span_name", "Infinite")),
    }
    # period: 1e9 / sampleRate per sample
    assert {v[0] % 10_000_000 for _, v, _ in cpu.samples} == {0}
    half = convert(recording("new_spancontext"), sample_rate=200, budget=Budget(1 << 30))
    assert sum(v[0] for _, v, _ in half.profiles[0].samples) * 2 == sum(v[0] for _, v, _ in cpu.samples)


def test_example_types() -> None:
    names = {
        f"{p.metric}:{t}:{u}:{p.period_type[0]}:{p.period_type[1]}"
        for p in convert(recording("example"), sample_rate=100, budget=Budget(1 << 30)).profiles
        for t, u in p.sample_types
    }
    assert names == {
        "process_cpu:cpu:nanoseconds:cpu:nanoseconds",
        "memory:alloc_in_new_tlab_objects:count:space:bytes",
        "memory:alloc_in_new_tlab_bytes:bytes:space:bytes",
        "memory:alloc_outside_tlab_objects:count:space:bytes",
        "memory:alloc_outside_tlab_bytes:bytes:space:bytes",
        "mutex:contentions:count:mutex:count",
        "mutex:delay:nanoseconds:mutex:count",
    }


@pytest.mark.parametrize(
    ("symbol", "kept"),
    [  # parser/parser_jvm_generated_class_merge_test.go's cases, and what must stay
        (
            "org/example/rideshare/OrderService$$Lambda$669.0x0000000800fd7318",
            "org/example/rideshare/OrderService$$Lambda_",
        ),
        ("Fib$$Lambda.0x00007ffa600c4da0", "Fib$$Lambda_"),
        ("org/example/rideshare/EnclosingClass$$Lambda$4/1283928880", "org/example/rideshare/EnclosingClass$$Lambda_"),
        ("Main$$Lambda$14/0x0000000800c03000", "Main$$Lambda_"),
        ("jdk/internal/reflect/GeneratedMethodAccessor31", "jdk/internal/reflect/GeneratedMethodAccessor_"),
        ("libzstd-jni-1.5.1-16931311898282279136.so", "libzstd-jni-_.so"),
        ("./tmp/libamazonCorrettoCryptoProvider109b39cf33c563eb.so", "libamazonCorrettoCryptoProvider_.so"),
        ("com/x/Foo$$EnhancerBySpringCGLIB$$abc123", "com/x/Foo$$EnhancerBySpringCGLIB$$_"),
        ("java/util/HashMap$Node", "java/util/HashMap$Node"),
        ("lambda$main$0", "lambda$main$0"),
        ("Main$$Lambda$14/0x0000000800c03000\n", "Main$$Lambda$14/0x0000000800c03000\n"),
    ],
)
def test_generated_class_names_merge_as_jfr_parser_merges_them(symbol: str, kept: str) -> None:
    assert merge_generated_names(symbol) == kept


def test_several_chunks_are_the_sum_of_each() -> None:
    one = recording("wall_tick_sample")
    two = recording("new_spancontext")
    both = convert(one + two, sample_rate=100, budget=Budget(1 << 30))
    alone = [convert(x, sample_rate=100, budget=Budget(1 << 30)) for x in (one, two)]

    def total(profiles: list) -> dict[str, int]:
        out: dict[str, int] = {}
        for p in profiles:
            out[p.metric] = out.get(p.metric, 0) + sum(v[0] for _, v, _ in p.samples)
        return out

    expected: dict[str, int] = {}
    for r in alone:
        for k, v in total(r.profiles).items():
            expected[k] = expected.get(k, 0) + v
    assert total(both.profiles) == expected


def test_the_native_varint_loop_reads_as_the_python_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """bridge/jfr/_fastjfr.c against the reader's Python loop: the same numbers and positions on random runs (9-byte
    longs included), the same refusal when a number runs past the end, the same conversion of a real recording."""
    if not cursor.NATIVE:
        if os.environ.get("CI"):
            pytest.fail("bridge.jfr._fastjfr did not build (CI needs a C compiler: pip install -e . builds it)")
        pytest.skip("bridge.jfr._fastjfr is not built; the Python loop runs instead")
    rng = random.Random(5)
    for _ in range(300):
        data = bytes(rng.choice((rng.randrange(128), rng.randrange(128, 256))) for _ in range(rng.randrange(1, 80)))
        count = rng.randrange(0, 12)
        end = rng.randrange(0, len(data) + 1)
        fast, slow = cursor.Cursor(data, 0, end, "t"), cursor.Cursor(data, 0, end, "t")
        try:
            expected: object = (slow.varints_python(count), slow.pos)
        except cursor.JfrError:
            expected = "refused"
        try:
            got: object = (fast.varints(count), fast.pos)
        except cursor.JfrError:
            got = "refused"
        assert got == expected, (data.hex(), count, end)
    nine = b"\xff" * 8 + b"\x80"  # a long's ninth byte keeps all 8 bits
    assert cursor.Cursor(nine, 0, 9, "t").varints(1) == [(1 << 56) - 1 | 0x80 << 56]
    native = converted("example")
    monkeypatch.setattr(cursor, "_native", None)
    assert converted("example") == native
