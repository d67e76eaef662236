"""The Pyroscope double's JFR ingest (``tests/doubles/pyroscope_jfr.py``: ``tests/doubles/jfrparse``, grafana/jfr-parser
as Pyroscope calls it) over HTTP, as the Java agent uploads:

- every real recording under ``tests/fixtures/jfr`` — as recorded, and with an empty constant pool added — is stored
  exactly as jfr-parser's own expected outputs say (every profile type, stack, value and label);
- the regression behind it: a chunk that declares a constant pool with no element (async-profiler writes one when it
  has nothing for a type) — the JDK's ``jfr`` tool, which the double used to read with, refuses it (the flake of
  ``test_java_agent.py``: "Pool jdk.types.Package must contain at least one element"); the double, as Pyroscope,
  reads it whole;
- an agent's multipart upload (gzipped ``jfr`` and ``labels`` parts) named and stamped as Pyroscope names it;
- what Pyroscope refuses is refused with its message.

Marked ``slow``: it builds the Go program (seconds, once per machine: the binary is cached by its sources' hash) and
starts a JVM (the jfr tool). Date-safe: the recordings are fixtures, every ``from``/``until`` is a fixed Unix time
and nothing reads the clock; the faketime runs skip it all the same.
"""

from __future__ import annotations

import gzip
import subprocess
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Final
from urllib.parse import urlencode

import aiohttp
import pytest
from aiohttp.test_utils import TestServer

from tests.doubles.pyroscope import PyroscopeDouble, StoredProfile
from tests.doubles.pyroscope_jfr import jfrparse_binary
from tests.jfr_expected import read_expected
from tests.jfr_writer import with_empty_pool
from tests.paths import JFR_FIXTURES
from tests.tools import require_tool

pytestmark = pytest.mark.slow

Server = Callable[..., Awaitable[TestServer]]
Table = dict[tuple[tuple[str, ...], tuple[tuple[str, str], ...]], int]

# recording → its labels part (jfr-parser's testdata beside it), as tests/core/test_jfr_convert.py reads them
RECORDINGS: Final = {
    "dump1": "dump1.labels.pb.gz",
    "new_spancontext": "new_spancontext.labels.gz",
    "wall_tick_sample": None,
    "example": None,
    "dd-trace-java": None,
}
FROM_S: Final = 1_700_000_000
QUERY: Final = {
    "name": "shop-java{region=test}",
    "from": str(FROM_S),
    "until": str(FROM_S + 10),
    "spyName": "javaspy",
    "sampleRate": "100",
    "format": "jfr",
}
EMPTY_POOL: Final = "jdk.types.Package"


@pytest.fixture(scope="module")
def jfrparse() -> Path:
    return jfrparse_binary()  # built before any upload's timeout runs


@pytest.fixture
async def pyro(jfrparse: Path, aiohttp_server: Server) -> PyroscopeDouble:
    double = PyroscopeDouble(profiles=[])
    double.url = str((await aiohttp_server(double.app)).make_url("")).rstrip("/")
    return double


def recording(name: str) -> bytes:
    return gzip.decompress((JFR_FIXTURES / f"{name}.jfr.gz").read_bytes())


def agent_form(jfr: bytes, labels: bytes | None) -> aiohttp.FormData:
    """The agent's multipart body (pyroscope-java ``PyroscopeExporter``): gzipped parts, no Content-Encoding."""
    form = aiohttp.FormData()
    form.add_field("jfr", gzip.compress(jfr, 1), filename="jfr", content_type="application/octet-stream")
    if labels is not None:
        form.add_field("labels", gzip.compress(labels, 1), filename="labels", content_type="application/octet-stream")
    return form


async def upload(pyro: PyroscopeDouble, body: aiohttp.FormData | bytes, **query: str) -> tuple[int, str]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as http:
        async with http.post(f"{pyro.url}/ingest?{urlencode(QUERY | query)}", data=body) as resp:
            return resp.status, await resp.text()


def stored(profiles: list[StoredProfile]) -> dict[str, Table]:
    """Profile type → {(frames, sorted labels): value}, summed."""
    out: dict[str, Table] = {}
    for p in profiles:
        table = out.setdefault(p.type_id, {})
        for frames, value, labels in p.samples:
            key = (frames, tuple(sorted(labels.items())))
            table[key] = table.get(key, 0) + value
    return out


def expected(name: str) -> dict[str, Table]:
    """jfr-parser's expected outputs of a recording, by profile type, as Pyroscope stores them: a sample's
    ``profile_id`` named ``span_id``, empty labels and zero values left out."""
    out: dict[str, Table] = {}
    for path in sorted(JFR_FIXTURES.glob(f"{name}_[0-9]_*_expected.txt.gz")):
        types, period, samples = read_expected(path)
        key = path.name[len(name) + 1 :].removesuffix("_expected.txt.gz").split("_", 1)[1]
        metric = key[: key.index("_" + types[0].replace("/", "__"))]
        for index, sample_type in enumerate(types):
            type_id = f"{metric}:{sample_type.replace('/', ':')}:{period.replace(' ', ':')}"
            table: Table = {}
            for (frames, labels), values in samples.items():
                if values[index]:
                    renamed = tuple(sorted(("span_id" if k == "profile_id" else k, v) for k, v in labels if v))
                    table[(frames, renamed)] = table.get((frames, renamed), 0) + values[index]
            assert out.setdefault(type_id, table) == table, f"{path.name} disagrees with another expected file"
    return out


@pytest.mark.parametrize("empty_pool", [False, True], ids=["as-recorded", "empty-pool"])
@pytest.mark.parametrize("name", sorted(RECORDINGS))
async def test_the_double_stores_what_jfr_parser_makes_of_a_recording(
    pyro: PyroscopeDouble, name: str, empty_pool: bool
) -> None:
    jfr = with_empty_pool(recording(name), EMPTY_POOL) if empty_pool else recording(name)
    labels_file = RECORDINGS[name]
    labels = gzip.decompress((JFR_FIXTURES / labels_file).read_bytes()) if labels_file else None
    status, text = await upload(pyro, agent_form(jfr, labels))
    assert status == 200, text
    want = expected(name)
    assert want
    assert stored(pyro.profiles) == want


async def test_a_recording_the_jdk_tool_refuses_for_an_empty_pool_is_read_whole(
    pyro: PyroscopeDouble, tmp_path: Path
) -> None:
    jfr = with_empty_pool(recording("dump1"), EMPTY_POOL)
    tool = require_tool("jfr", package="openjdk-17-jdk-headless", purpose="show what the JDK's jfr tool refuses")
    (tmp_path / "empty-pool.jfr").write_bytes(jfr)
    done = subprocess.run(
        [tool, "print", "--json", str(tmp_path / "empty-pool.jfr")], capture_output=True, text=True, timeout=120
    )
    assert done.returncode != 0
    assert f"Pool {EMPTY_POOL} must contain at least one element" in done.stderr, done.stderr[-2000:]

    labels = gzip.decompress((JFR_FIXTURES / "dump1.labels.pb.gz").read_bytes())
    status, text = await upload(pyro, agent_form(jfr, labels))
    assert status == 200, text
    assert {p.type_id for p in pyro.profiles} == {"process_cpu:cpu:nanoseconds:cpu:nanoseconds"}
    # jfr-parser pyroscope.Labels: the name's tags, the app as service_name, the spy, the recording's event setting;
    # then one series per context's thread_name (the labels part's; pprofsplit makes it a series label) and one for
    # the samples without a context
    upload_labels = {"service_name": "shop-java", "region": "test", "pyroscope_spy": "javaspy", "jfr_event": "itimer"}
    assert all(p.labels.items() >= upload_labels.items() for p in pyro.profiles)
    added = {frozenset(p.labels) - set(upload_labels) for p in pyro.profiles}
    assert added == {frozenset(), frozenset({"thread_name"})}
    assert {p.time_ms for p in pyro.profiles} == {FROM_S * 1000}  # every profile stamped at from
    # each of the recording's 2188 samples (jfr summary), worth 1e9 / sampleRate ns
    assert sum(v for p in pyro.profiles for _, v, _ in p.samples) == 2188 * 10_000_000


@pytest.mark.parametrize(
    ("body", "message"),
    [
        pytest.param(recording("dump1")[:5000], "jfr parser", id="truncated-recording"),
        pytest.param(b"not a recording at all", "jfr parser", id="not-jfr"),
    ],
)
async def test_what_pyroscope_refuses_the_double_refuses(pyro: PyroscopeDouble, body: bytes, message: str) -> None:
    status, text = await upload(pyro, agent_form(body, None))
    assert (status, pyro.profiles) == (400, [])
    assert message in text, text


async def test_an_upload_without_its_jfr_part_is_refused(pyro: PyroscopeDouble) -> None:
    form = aiohttp.FormData()
    form.add_field("labels", b"\x00", filename="labels")
    status, text = await upload(pyro, form)
    assert (status, text.strip()) == (400, "jfr field is required")
