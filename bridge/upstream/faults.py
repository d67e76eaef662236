"""The one place where aiohttp's client exceptions become the bridge's ``UpstreamError`` tree.

Most specific first: aiohttp's ``ServerTimeoutError`` is both a ``TimeoutError`` and a ``ClientConnectionError``,
so timeouts are checked before connection failures. Callers always ``raise map_client_error(...) from exc``.
"""

from __future__ import annotations

import asyncio

import aiohttp

from bridge.errors import Code, UpstreamError, UpstreamTimeout, UpstreamUnavailable


def map_client_error(
    upstream: str, exc: BaseException, budget: float | aiohttp.ClientTimeout | None = None
) -> UpstreamError:
    """Pure: an exception raised while talking to ``upstream`` → the error the user sees. ``budget`` is the time
    the call was given (seconds), or its ``ClientTimeout``: a timeout message names the figure of the timeout that
    fired (connect, read or total), never another one."""
    if isinstance(exc, UpstreamError):
        return exc
    if isinstance(exc, TimeoutError | asyncio.TimeoutError):
        return _timeout(upstream, exc, budget)
    if isinstance(exc, aiohttp.ClientConnectorError):
        return UpstreamUnavailable(upstream, f"cannot connect to {upstream} ({_why(exc)})")
    if isinstance(exc, aiohttp.ServerDisconnectedError | aiohttp.ClientPayloadError):
        return UpstreamUnavailable(upstream, f"{upstream} closed the connection before answering completely")
    if isinstance(exc, aiohttp.ClientResponseError):
        return UpstreamError(
            upstream, f"{upstream} answered something that is not valid HTTP ({exc.message})", code=Code.INTERNAL
        )
    if isinstance(exc, aiohttp.ClientConnectionError | ConnectionError):
        return UpstreamUnavailable(upstream, f"connection to {upstream} failed ({_why(exc)})")
    if isinstance(exc, aiohttp.ClientError):
        return UpstreamUnavailable(upstream, f"request to {upstream} failed ({_why(exc)})")
    return UpstreamError(upstream, f"request to {upstream} failed ({_why(exc)})", code=Code.INTERNAL)


def _timeout(upstream: str, exc: BaseException, budget: float | aiohttp.ClientTimeout | None) -> UpstreamTimeout:
    if not isinstance(budget, aiohttp.ClientTimeout):
        within = f" within {budget:.3g} s" if budget is not None else " in time"
        return UpstreamTimeout(upstream, f"{upstream} did not answer{within}")
    if isinstance(exc, aiohttp.ConnectionTimeoutError):
        figure = budget.sock_connect or budget.connect
        if figure is not None:
            return UpstreamTimeout(upstream, f"{upstream} did not answer: no connection within {figure:.3g} s")
    elif isinstance(exc, aiohttp.SocketTimeoutError) and budget.sock_read is not None:
        return UpstreamTimeout(upstream, f"{upstream} did not answer: nothing arrived for {budget.sock_read:.3g} s")
    within = f" within {budget.total:.3g} s" if budget.total is not None else " in time"
    return UpstreamTimeout(upstream, f"{upstream} did not answer{within}")


def _why(exc: BaseException) -> str:
    os_error = getattr(exc, "os_error", None)
    if isinstance(os_error, OSError) and os_error.strerror:
        return os_error.strerror.lower()
    text = str(exc).strip()
    return text or type(exc).__name__
