from __future__ import annotations

from typing import Any

import pytest

from tests.faketime import mend_sleep
from tests.span_stack import Stack, start_stack


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--update-golden", action="store_true", help="rewrite tests/golden/ from the current output")


@pytest.fixture
def update_golden(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--update-golden"))


@pytest.fixture
async def stack(aiohttp_server: Any, aiohttp_client: Any) -> Stack:
    """The bridge in proxy mode in front of the Tempo and Pyroscope doubles holding the shop capture
    (``tests/span_stack.py``); a module whose tests need another stack defines its own ``stack``."""
    return await start_stack(aiohttp_server, aiohttp_client)


mend_sleep()  # tests/faketime.py: the suite also runs under libfaketime with a real monotonic clock
