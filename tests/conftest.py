from __future__ import annotations

from typing import Any

import pytest

from tests.faketime import mend_sleep
from tests.span_stack import Stack, start_stack


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--update-golden", action="store_true", help="rewrite tests/golden/ from the current output")
    parser.addoption(
        "--files-share",
        metavar="K/N",
        help="run only every N-th test file (of those collected, sorted by path), starting at the K-th: .ci/run's two "
        "faketime passes (one per libfaketime mode) split the suite so, each file running once with the clock ahead",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    share = config.getoption("--files-share")
    if not share:
        return
    try:
        k, n = (int(part) for part in share.split("/"))
        assert 0 <= k < n
    except (ValueError, AssertionError):
        raise pytest.UsageError(f"--files-share {share!r}: expected K/N with 0 <= K < N, e.g. 0/2") from None
    files = sorted({item.nodeid.partition("::")[0] for item in items})
    mine = set(files[k::n])
    kept = [item for item in items if item.nodeid.partition("::")[0] in mine]
    config.hook.pytest_deselected(items=[item for item in items if item.nodeid.partition("::")[0] not in mine])
    items[:] = kept


@pytest.fixture
def update_golden(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--update-golden"))


@pytest.fixture
async def stack(aiohttp_server: Any, aiohttp_client: Any) -> Stack:
    """The bridge in proxy mode in front of the Tempo and Pyroscope doubles holding the shop capture
    (``tests/span_stack.py``); a module whose tests need another stack defines its own ``stack``."""
    return await start_stack(aiohttp_server, aiohttp_client)


mend_sleep()  # tests/faketime.py: the suite also runs under libfaketime with a real monotonic clock
