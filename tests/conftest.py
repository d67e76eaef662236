from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.faketime import mend_sleep
from tests.span_stack import Stack, start_stack


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--update-golden", action="store_true", help="rewrite tests/golden/ from the current output")
    parser.addoption(
        "--files-share",
        metavar="K/N",
        help="run only every N-th of the suite's test files (sorted by path), starting at the K-th: .ci/run's two "
        "faketime passes (one per libfaketime mode) split the suite so, each file running once with the clock ahead",
    )


def _files_share(config: pytest.Config) -> set[Path] | None:
    """The test files ``--files-share K/N`` keeps: every N-th of the suite's test files sorted by path, from the K-th;
    None without the option. Decided before collection, so the other files are not even imported: each worker of a
    share collects only its own files."""
    share = config.getoption("--files-share")
    if not share:
        return None
    try:
        k, n = (int(part) for part in share.split("/"))
        assert 0 <= k < n
    except (ValueError, AssertionError):
        raise pytest.UsageError(f"--files-share {share!r}: expected K/N with 0 <= K < N, e.g. 0/2") from None
    here = Path(__file__).resolve().parent
    files = sorted(p for p in here.rglob("test_*.py") if "node_modules" not in p.parts)
    return set(files[k::n])


_SHARE = pytest.StashKey[set[Path] | None]()


def pytest_configure(config: pytest.Config) -> None:
    config.stash[_SHARE] = _files_share(config)


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    mine = config.stash.get(_SHARE, None)
    if mine is None or collection_path.suffix != ".py" or not collection_path.name.startswith("test_"):
        return None  # no opinion: pytest's own rules decide
    return collection_path.resolve() not in mine or None


@pytest.fixture
def update_golden(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--update-golden"))


@pytest.fixture
async def stack(aiohttp_server: Any, aiohttp_client: Any) -> Stack:
    """The bridge in proxy mode in front of the Tempo and Pyroscope doubles holding the shop capture
    (``tests/span_stack.py``); a module whose tests need another stack defines its own ``stack``."""
    return await start_stack(aiohttp_server, aiohttp_client)


mend_sleep()  # tests/faketime.py: the suite also runs under libfaketime with a real monotonic clock
