from __future__ import annotations

import pytest

from tests.faketime import mend_sleep


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--update-golden", action="store_true", help="rewrite tests/golden/ from the current output")


@pytest.fixture
def update_golden(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--update-golden"))


mend_sleep()  # tests/faketime.py: the suite also runs under libfaketime with a real monotonic clock
