"""``bridge.dot``: the DOT graph of ``PROFILE_FORMAT_DOT`` and ``render?format=dot``, held to pprof itself — ``go
tool pprof -dot`` (Debian's golang-go) draws the same profiles with the options Pyroscope's ``pkg/frontend/dot``
passes (no node or edge fraction, the node count asked for, values in the sample unit's base unit), and the two
texts must be equal line for line. The one line that differs on purpose is the legend's time, which Pyroscope's
copy of pprof writes as ``Jan 2, 2006 at 3:04pm (MST)`` (checked on its own below)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from bridge import dot
from bridge._proto import profile_pb2
from bridge.pprof import encode_pprof
from tests.tools import go_pprof

NAMES = [
    "main.main",
    "runtime.goexit",
    "github.com/x/y/v2/z.(*T).Method",
    "java.lang.Thread.run",
    "org.example.Shop.checkout(Shop.java)",
    "a::B::c",
    'we"ird\\name',
    "net/http.(*conn).serve",
]


def random_profile(seed: int, type_id: str) -> profile_pb2.Profile:
    rng = random.Random(seed)
    names = [f"pkg.f{i}" for i in range(rng.randint(5, 90))] + NAMES
    stacks: dict[tuple[str, ...], int] = {}
    for _ in range(rng.randint(1, 400)):
        frames = ("runtime.goexit", *(rng.choice(names) for _ in range(rng.randint(0, 15))))
        stacks[frames] = stacks.get(frames, 0) + rng.randint(1, 5000) * rng.choice([1, 1000, 1_000_000])
    return encode_pprof(list(stacks.items()), type_id, duration_nanos=rng.choice([0, 10_000_000_000]))


CASES = [
    (1, 30, "process_cpu:cpu:nanoseconds:cpu:nanoseconds", "s"),
    (2, 100, "process_cpu:cpu:nanoseconds:cpu:nanoseconds", "s"),
    (4, 8, "process_cpu:cpu:nanoseconds:cpu:nanoseconds", "s"),
    (5, 36, "memory:alloc_space:bytes:space:bytes", "B"),
    (7, 50, "memory:alloc_objects:count:space:bytes", "count"),
    (11, 1, "memory:inuse_space:bytes:space:bytes", "B"),
]


@pytest.mark.parametrize(("seed", "nodes", "type_id", "unit"), CASES)
def test_dot_is_what_pprof_draws(tmp_path: Path, seed: int, nodes: int, type_id: str, unit: str) -> None:
    profile = random_profile(seed, type_id)
    path = tmp_path / "profile.pb"
    path.write_bytes(profile.SerializeToString())
    drawn = go_pprof(
        path, tmp_path, "-dot", f"-nodecount={nodes}", "-nodefraction=0", "-edgefraction=0", f"-unit={unit}"
    )
    ours = dot.from_profile(profile, nodes)
    assert ours.splitlines() == drawn.splitlines()
    assert ours.startswith('digraph "') and "Showing nodes accounting for" in ours


def test_the_legend_s_time_is_pyroscope_s_layout() -> None:
    profile = encode_pprof(
        [(("main",), 5)],
        "process_cpu:cpu:nanoseconds:cpu:nanoseconds",
        time_nanos=1_700_000_000_000_000_000,
        duration_nanos=3_600_000_000_000,
    )
    text = dot.from_profile(profile)
    assert "\\lTime: Nov 14, 2023 at 10:13pm (UTC)\\l" in text
    assert "Duration: 1hrs, Total samples = 0 ( 0.00%)" not in text  # 5 ns is 0 s at two decimals …
    assert "Total samples = 0 (1.4e-10%)" in text  # … and its share of the hour as Go's %5.2g prints it


@pytest.mark.parametrize(
    ("name", "short"),
    [
        ("github.com/grafana/pyroscope/v2/pkg/model.(*Tree).Merge", "model.(*Tree).Merge"),
        ("net/http.(*conn).serve", "http.(*conn).serve"),
        ("java.util.concurrent.ThreadPoolExecutor.runWorker(ThreadPoolExecutor.java)", "ThreadPoolExecutor.runWorker"),
        ("(anonymous namespace)::Foo::Bar", "Foo::Bar"),
        ("main", "main"),
    ],
)
def test_names_are_shortened_as_pprof_does(name: str, short: str) -> None:
    assert dot.shorten(name) == short


@pytest.mark.parametrize(
    ("value", "unit", "text"),
    [
        (1_500_000_000, "nanoseconds", "1.50s"),
        (1_000_000, "nanoseconds", "0"),
        (2048, "bytes", "2048B"),
        (7, "count", "7"),
    ],
)
def test_values_are_scaled_to_the_base_unit(value: int, unit: str, text: str) -> None:
    assert dot.scaled_label(value, unit, "") == text


def test_a_profile_without_samples_draws_only_the_legend() -> None:
    text = dot.from_profile(encode_pprof([], "process_cpu:cpu:nanoseconds:cpu:nanoseconds"))
    assert "N1 [" not in text and text.endswith("}\n")
