"""Logging set-up: one line per event, text or JSON.

``server_logger()``: the logger aiohttp's server protocol reports to (``create_app`` hands it over in
``handler_args``). A request aiohttp cannot even parse — an oversize header, a malformed request line — is the
client's fault, not the bridge's: instead of aiohttp's ERROR with a full traceback per request (thousands in a fuzz
run), it becomes one WARNING line, at most one per ``MalformedRequests.INTERVAL_S`` seconds, saying how many more
were dropped meanwhile. Anything else aiohttp reports there keeps its traceback.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Callable
from typing import Any, Final

from aiohttp.http_exceptions import HttpProcessingError


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        extra = getattr(record, "fields", None)
        if isinstance(extra, dict):
            doc.update(extra)
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        return json.dumps(doc, default=str)


class TextFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        extra = getattr(record, "fields", None)
        if isinstance(extra, dict) and extra:
            line += " " + " ".join(f"{k}={v}" for k, v in extra.items())
        return line


def configure(level: str, fmt: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)  # we log one line per request ourselves


class MalformedRequests(logging.Filter):
    """Turns aiohttp's report of an unparseable request into one rate-limited line (see the module's docstring)."""

    INTERVAL_S: Final = 10.0

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.clock = clock
        self.last: float | None = None
        self.dropped = 0

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if not isinstance(exc, HttpProcessingError):
            return True
        now = self.clock()
        if self.last is not None and now - self.last < self.INTERVAL_S:
            self.dropped += 1
            return False
        first = " ".join(str(exc.message).split())[:200]
        more = (
            f" ({self.dropped} more like it in the last {now - self.last:.0f} s)"
            if self.last is not None and self.dropped
            else ""
        )
        peer = record.args[0] if isinstance(record.args, tuple) and record.args else "?"
        record.msg = "refused a request aiohttp cannot parse from %s: HTTP %d, %s%s"
        record.args = (peer, exc.code, first, more)
        record.exc_info = None
        record.exc_text = None
        record.levelno, record.levelname = logging.WARNING, "WARNING"
        self.last, self.dropped = now, 0
        return True


SERVER_LOGGER: Final = "bridge.server"


def server_logger() -> logging.Logger:
    """The logger for aiohttp's server protocol, with ``MalformedRequests`` on it (once)."""
    logger = logging.getLogger(SERVER_LOGGER)
    if not any(isinstance(f, MalformedRequests) for f in logger.filters):
        logger.addFilter(MalformedRequests())
    return logger
