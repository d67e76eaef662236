"""The Pyroscope double's ``/ingest?format=jfr`` — a TEST DOUBLE's reading of a Java upload that converts it with the
code Pyroscope itself converts it with.

Pyroscope hands a JFR upload to ``pkg/og/convert/jfr/profile.go`` ``ParseToPprof``: the recording from the multipart
part ``jfr`` (or the whole body when it is not multipart), the ``LabelsSnapshot`` from the part ``labels``, each
gunzipped when it starts with gzip's magic bytes (``loadJFRFromForm``, ``decompress``); grafana/jfr-parser's
``pprof.ParseJFR`` turns them into one pprof per kind of event (CPU, wall, allocations in and outside TLABs, locks,
…), and its ``pyroscope.Labels`` names each series (the ``name``'s tags, ``service_name`` or ``app_name``,
``pyroscope_spy``, ``jfr_event``, ``__name__``). The query is read as
``pkg/ingester/pyroscope/ingest_handler.go`` ``parseInputMetadataFromRequest`` reads it.

``tests/doubles/jfrparse`` is a small Go program that does exactly that with jfr-parser and Pyroscope's API module
from the Go module proxy (its ``go.mod`` pins jfr-parser v0.18.0, the version grafana/pyroscope's ``go.mod`` names on
line 222; ``main.go`` says which upstream lines it follows) and prints the ``push.v1.PushRequest`` Pyroscope goes on
with. So the double accepts what Pyroscope accepts, refuses what it refuses (400 with jfr-parser's message), and
shares nothing with the bridge's reader (``bridge/jfr``). Pyroscope's next steps are the double's own
(``tests.doubles.pyroscope_model.pushed_profiles``): one stored profile per series and sample type, ``__delta__``
left out, ``profile_id`` sample labels renamed ``span_id`` and the other sample labels (a context's ``span_name``,
``thread_name``) made series labels, as ``pkg/model/pprofsplit`` does.

It replaces a reading with the JDK's ``jfr print --json``, which refuses what Pyroscope accepts: async-profiler chunks
that declare a constant pool with no element ("Pool jdk.types.Package must contain at least one element", JDK 17's
``ChunkParser.fillConstantPools``) — ``tests/sdk/test_jfr_double.py`` uploads one.

``jfrparse_binary()`` builds the program once: under the system's temporary directory, keyed by a hash of its
``go.mod``, ``go.sum`` and ``main.go`` (so every test process, and every later run, reuses one build); ``.ci/run``
downloads its modules beforehand (``go mod download``), as it does for ``tests/sdk/go``. A test that uploads JFR to
the double builds Go, so it is marked ``slow``; it calls ``jfrparse_binary()`` before its clock starts.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Final

from google.protobuf.message import DecodeError

from bridge._proto import push_pb2
from tests.doubles.pyroscope_model import StoredProfile, pushed_profiles
from tests.paths import ROOT
from tests.tools import require_go

JFRPARSE_DIR: Final = ROOT / "tests" / "doubles" / "jfrparse"
SOURCES: Final = ("go.mod", "go.sum", "main.go")
BUILD_TIMEOUT_S: Final = 480.0
PARSE_TIMEOUT_S: Final = 60.0


def _go_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("LD_PRELOAD", "FAKETIME"))}


@functools.cache
def jfrparse_binary() -> Path:
    """The built ``tests/doubles/jfrparse`` (built now unless a build of these exact sources exists)."""
    digest = hashlib.sha256()
    for name in SOURCES:
        digest.update(name.encode() + b"\0" + (JFRPARSE_DIR / name).read_bytes() + b"\0")
    binary = Path(tempfile.gettempdir()) / "profile-bridge-jfrparse" / digest.hexdigest()[:16] / "jfrparse"
    if binary.is_file():
        return binary
    go = require_go("build the Pyroscope double's JFR converter (tests/doubles/jfrparse)")
    binary.parent.mkdir(parents=True, exist_ok=True)
    partial = binary.with_name(f"jfrparse.{os.getpid()}.partial")
    try:
        done = subprocess.run(
            [go, "build", "-o", str(partial), "."],
            cwd=JFRPARSE_DIR,
            env=_go_env(),
            capture_output=True,
            text=True,
            timeout=BUILD_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise AssertionError(f"go build in {JFRPARSE_DIR} did not finish within {BUILD_TIMEOUT_S:g} s") from None
    assert done.returncode == 0, f"go build in {JFRPARSE_DIR} failed:\n{done.stderr[-3000:]}"
    partial.replace(binary)  # atomic: a concurrent test process sees no binary or a whole one
    return binary


async def converted_upload(query_string: str, content_type: str, body: bytes) -> push_pb2.PushRequest:
    """The PushRequest Pyroscope's JFR converter makes of an upload; ``ValueError`` with its message when it
    refuses the upload."""
    binary = await asyncio.to_thread(jfrparse_binary)
    proc = await asyncio.create_subprocess_exec(
        str(binary), "-query", query_string, "-content-type", content_type,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        out, err = await asyncio.wait_for(proc.communicate(body), PARSE_TIMEOUT_S)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise AssertionError(f"jfrparse did not finish within {PARSE_TIMEOUT_S:g} s") from None
    if proc.returncode == 1:
        raise ValueError(err.decode(errors="replace").strip()[:500])
    assert proc.returncode == 0, f"jfrparse exited with {proc.returncode}: {err.decode(errors='replace')[-2000:]}"
    return push_pb2.PushRequest.FromString(out)


async def ingested_jfr_profiles(query_string: str, content_type: str, body: bytes) -> list[StoredProfile]:
    """The profiles Pyroscope stores of a JFR upload (see the module docstring)."""
    req = await converted_upload(query_string, content_type, body)
    try:
        return pushed_profiles(req)
    except (DecodeError, LookupError) as exc:  # jfr-parser's pprof, read back: a defect of this double if it fails
        raise AssertionError(f"the double cannot read jfr-parser's pprof: {exc!r}") from exc
