"""The lean pass-through: keep-alive HTTP/1.1 connections to an upstream, driven by one small asyncio protocol each.

aiohttp's client is general: per request it builds a request object, a response object, a stream reader, timers and
tracing hooks, then reads the answer through all of them — about half of what the bridge spends on a relayed call
(``docs/benchmarks.md``). A pass-through needs none of it: the request goes up in one write (head and body), the
answer's head is parsed here, and its body is handed on as it arrives, in the pieces the socket gave.

What takes this path (``bridge.upstream.proxy.stream_through`` decides): plain ``http://`` upstreams, requests whose
body is absent or has a known length of at most ``MAX_BODY`` (read first, sent with the head), no
``Expect``/``Upgrade``. Anything else — and every app without ``setup`` — goes through aiohttp's client as before.

HTTP/1.1 as RFC 9112 says a client reads it: status line and fields up to an empty line (at most ``MAX_HEAD``
bytes); ``1xx`` heads skipped; no body for ``HEAD``, ``204`` and ``304``; ``Transfer-Encoding: chunked`` decoded
(the answer is sent on re-framed by the server side); else ``Content-Length`` (differing values refused); else the
body ends with the connection. A connection goes back to the pool only after a complete, framed answer without
``Connection: close``; idle ones are dropped after ``IDLE_S``. Failures become the same ``UpstreamError``s, with the
same messages, as aiohttp's (``bridge.upstream.faults``).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import os
import time
from collections.abc import AsyncIterator
from typing import Final, cast

from aiohttp import web
from yarl import URL

from bridge.errors import Code, UpstreamError, UpstreamTimeout, UpstreamUnavailable

log = logging.getLogger("bridge.relay")

MAX_BODY: Final = 1024 * 1024  # request bodies up to this size are read and sent with the head
MAX_HEAD: Final = 64 * 1024
IDLE_S: Final = 15.0  # an idle connection older than this is closed, not reused (servers time theirs out too)
MAX_IDLE: Final = 64  # idle connections kept per upstream
HIGH_WATER: Final = 4 * 1024 * 1024  # answer bytes held before the upstream socket stops being read
LOW_WATER: Final = 1024 * 1024


class BadHttp(Exception):
    """The upstream answered something that is not HTTP/1.x."""


class _Closed(Exception):
    """The connection ended before the answer was complete."""


def parse_head(raw: bytes) -> tuple[int, str, list[tuple[str, str]], bool]:
    """Pure: a response head (without its final empty line) → (status, reason, fields, HTTP/1.1?). ``BadHttp``
    when it is not HTTP/1.x."""
    lines = raw.split(b"\r\n")
    version, _, rest = lines[0].partition(b" ")
    code, _, reason = rest.partition(b" ")
    if version not in (b"HTTP/1.1", b"HTTP/1.0") or len(code) != 3 or not code.isdigit():
        raise BadHttp(f"status line {lines[0][:60]!r}")
    fields: list[tuple[str, str]] = []
    for line in lines[1:]:
        name, sep, value = line.partition(b":")
        if not sep or not name or name != name.strip() or b" " in name or b"\t" in name:
            raise BadHttp(f"header line {line[:60]!r}")
        fields.append((name.decode("latin-1"), value.strip(b" \t").decode("latin-1")))
    return int(code), reason.decode("latin-1"), fields, version == b"HTTP/1.1"


class Connection(asyncio.Protocol):
    """One upstream connection: one exchange at a time. The answer's body is queued here as it arrives (decoded
    from chunked framing when it is chunked) and taken by ``read``."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.idle_since = 0.0
        self.closed = False
        self._reset(None)

    def _reset(self, head: asyncio.Future[None] | None) -> None:
        self._head = head
        self._buf = bytearray()
        self._in_body = False
        self.status = 0
        self.reason = ""
        self.fields: list[tuple[str, str]] = []
        self.keep_alive = True
        self._mode = "none"  # "length", "chunked", "eof", "none"
        self._remaining = 0
        self._chunk_state = "size"
        self._chunks: collections.deque[bytes] = collections.deque()
        self._buffered = 0
        self._paused = False
        self._waiter: asyncio.Future[None] | None = None
        self.done = False  # the whole body is queued
        self.error: BaseException | None = None
        self.received = False
        self._head_only = False
        self._sink: asyncio.Transport | None = None
        self.sink_paused = False

    # ------------------------------------------------------------------------------------------- one exchange

    def begin(self, head_only: bool) -> asyncio.Future[None]:
        head: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._reset(head)
        self._head_only = head_only
        return head

    async def read(self) -> bytes:
        """The body bytes queued so far (b"" once the body is complete). Raises ``_Closed`` or ``BadHttp``."""
        while True:
            if self._chunks:
                data = self._chunks[0] if len(self._chunks) == 1 else b"".join(self._chunks)
                self._chunks.clear()
                self._buffered = 0
                if self._paused and self.transport is not None:
                    self._paused = False
                    self.transport.resume_reading()
                return data
            if self.done:
                return b""
            if self.error is not None:
                raise self.error
            await self._next_event()

    async def _next_event(self) -> None:
        """Until the protocol's next event: data, the end of the body, the client's connection full, a failure
        (``_wake``)."""
        self._waiter = asyncio.get_running_loop().create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None

    @property
    def reusable(self) -> bool:
        return self.done and self.keep_alive and self._mode != "eof" and not self.closed and not self._chunks

    # ------------------------------------------------------------------------------------------- protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        self.received = True
        if self._in_body:
            self._body(data)
            return
        if self._head is None:  # bytes nobody asked for: the connection is not usable any more
            self.keep_alive = False
            self._close()
            return
        self._buf += data
        try:
            self._parse_heads()
        except BadHttp as exc:
            self._fail(exc)

    def _parse_heads(self) -> None:
        while not self._in_body:
            end = self._buf.find(b"\r\n\r\n")
            if end < 0:
                if len(self._buf) > MAX_HEAD:
                    raise BadHttp(f"a response head over {MAX_HEAD} bytes")
                return
            status, reason, fields, http11 = parse_head(bytes(self._buf[:end]))
            rest = bytes(self._buf[end + 4 :])
            self._buf = bytearray()
            if 100 <= status < 200:  # informational: the real head follows
                self._buf += rest
                continue
            self.status, self.reason, self.fields = status, reason, fields
            self._frame(http11)
            self._in_body = True
            head, self._head = self._head, None
            if head is not None and not head.done():
                head.set_result(None)
            if self._mode == "none":
                self._finish()
                if rest:
                    self.keep_alive = False
                return
            if rest:
                self._body(rest)

    def _frame(self, http11: bool) -> None:
        connection = ",".join(v for k, v in self.fields if k.lower() == "connection").lower()
        tokens = {t.strip() for t in connection.split(",")}
        self.keep_alive = "keep-alive" in tokens if not http11 else "close" not in tokens
        transfer = ",".join(v for k, v in self.fields if k.lower() == "transfer-encoding").lower()
        lengths = {v.strip() for k, v in self.fields if k.lower() == "content-length"}
        if self._head_only or self.status in (204, 304):
            self._mode = "none"
        elif transfer:
            if transfer.rsplit(",", 1)[-1].strip() != "chunked":
                raise BadHttp(f"transfer coding {transfer!r}")
            self._mode = "chunked"
        elif lengths:
            if len(lengths) != 1 or not next(iter(lengths)).isdigit():
                raise BadHttp(f"Content-Length {sorted(lengths)!r}")
            self._remaining = int(next(iter(lengths)))
            self._mode = "length" if self._remaining else "none"
        else:
            self._mode = "eof"

    def _body(self, data: bytes) -> None:
        if self.done:
            self.keep_alive = False  # more than the framing said: never reuse
            return
        if self._mode == "length":
            if len(data) >= self._remaining:
                if len(data) > self._remaining:
                    self.keep_alive = False
                    data = data[: self._remaining]
                self._remaining = 0
                self._queue(data)
                self._finish()
                return
            self._remaining -= len(data)
            self._queue(data)
        elif self._mode == "chunked":
            try:
                self._dechunk(data)
            except BadHttp as exc:
                self._fail(exc)
        else:
            self._queue(data)

    def _dechunk(self, data: bytes) -> None:
        buf = self._buf
        buf += data
        pos = 0
        out: list[bytes] = []
        while pos < len(buf):
            state = self._chunk_state
            if state == "data":
                take = min(self._remaining, len(buf) - pos)
                out.append(bytes(buf[pos : pos + take]))
                pos += take
                self._remaining -= take
                if self._remaining == 0:
                    self._chunk_state = "crlf"
                continue
            end = buf.find(b"\r\n", pos)
            if end < 0:
                if len(buf) - pos > 4096:
                    raise BadHttp("a chunk size line over 4096 bytes")
                break
            line = bytes(buf[pos:end])
            pos = end + 2
            if state == "crlf":
                if line:
                    raise BadHttp("no CRLF after a chunk")
                self._chunk_state = "size"
            elif state == "size":
                size_text = line.split(b";", 1)[0].strip()
                try:
                    size = int(size_text, 16)
                except ValueError:
                    raise BadHttp(f"chunk size {size_text[:20]!r}") from None
                if size < 0:
                    raise BadHttp("negative chunk size")
                if size == 0:
                    self._chunk_state = "trailer"
                else:
                    self._remaining = size
                    self._chunk_state = "data"
            elif not line:  # the empty line after the trailer fields: the body is complete
                del buf[:pos]
                if out:
                    self._queue(b"".join(out))
                if buf:
                    self.keep_alive = False
                self._finish()
                return
        del buf[:pos]
        if out:
            self._queue(b"".join(out))

    def _queue(self, data: bytes) -> None:
        if not data:
            return
        if self._sink is not None:
            self._to_sink(data)
            return
        self._chunks.append(data)
        self._buffered += len(data)
        if self._buffered > HIGH_WATER and not self._paused and self.transport is not None:
            self._paused = True
            self.transport.pause_reading()
        self._wake()

    def _finish(self) -> None:
        self.done = True
        self._wake()

    # ------------------------------------------------------------------------------------------- splice

    def splice(self, sink: asyncio.Transport) -> None:
        """From now on the body goes straight to ``sink`` (the client's connection, after the answer's head and
        first bytes went out) as each piece arrives: no task switch, no copy, and the next piece is read from the
        upstream while this one is still on its way to the client. Only for a body of known length (the server
        side frames nothing). ``wait_spliced`` follows it."""
        self._sink = sink
        chunks, self._chunks = list(self._chunks), collections.deque()
        self._buffered = 0
        for data in chunks:
            self._to_sink(data)
        if self._paused and not self.sink_paused and self.transport is not None:
            self._paused = False
            self.transport.resume_reading()

    def _to_sink(self, data: bytes) -> None:
        sink = self._sink
        assert sink is not None
        if sink.is_closing():
            self._fail(ConnectionResetError("the client went away"))
            return
        sink.write(data)
        if sink.get_write_buffer_size() > HIGH_WATER and not self.sink_paused and self.transport is not None:
            self.sink_paused = self._paused = True  # the client is slower: stop reading until it catches up
            self.transport.pause_reading()
            self._wake()

    async def wait_spliced(self) -> None:
        """Until the spliced body is complete (returns), the client's connection is full (returns with
        ``sink_paused``: drain it, then ``resume_spliced``), or the exchange failed (raises)."""
        while not self.done and not self.sink_paused:
            if self.error is not None:
                raise self.error
            await self._next_event()
        if self.error is not None and not self.done:
            raise self.error

    def resume_spliced(self) -> None:
        if self.sink_paused and self.transport is not None:
            self.sink_paused = self._paused = False
            self.transport.resume_reading()

    def _fail(self, exc: BaseException) -> None:
        if self.error is None:
            self.error = exc
        self.keep_alive = False
        head, self._head = self._head, None
        if head is not None and not head.done():
            head.set_exception(exc)
        self._wake()
        self._close()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self._mode == "eof" and self._in_body and not self.done:
            self._finish()  # the body ends with the connection
            return
        if not self.done:
            self._fail(_Closed(str(exc) if exc else "closed"))

    def _close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    def abort(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.abort()


class Pool:
    """Idle keep-alive connections to one upstream ``host:port``."""

    def __init__(self, host: str, port: int) -> None:
        self.host = host
        self.port = port
        self._idle: list[Connection] = []

    async def acquire(self, connect_timeout: float | None) -> tuple[Connection, bool]:
        """(a connection, whether it was used before)."""
        now = time.monotonic()
        while self._idle:
            conn = self._idle.pop()
            if (
                not conn.closed
                and now - conn.idle_since < IDLE_S
                and conn.transport is not None
                and not conn.transport.is_closing()
            ):
                return conn, True
            conn.abort()
        loop = asyncio.get_running_loop()
        async with asyncio.timeout(connect_timeout):
            transport, conn = await loop.create_connection(Connection, self.host, self.port)
        if conn.transport is None:  # uvloop calls connection_made a turn after create_connection returns
            conn.transport = transport
        return conn, False

    def release(self, conn: Connection) -> None:
        if conn.reusable and len(self._idle) < MAX_IDLE:
            conn.idle_since = time.monotonic()
            self._idle.append(conn)
        else:
            conn.abort() if not conn.done else conn._close()

    def close(self) -> None:
        idle, self._idle = self._idle, []
        for conn in idle:
            conn.abort()


class Relay:
    """The pools of one app, one per upstream ``host:port``."""

    def __init__(self) -> None:
        self._pools: dict[tuple[str, int], Pool] = {}

    def pool(self, url: URL) -> Pool | None:
        if url.scheme != "http" or not url.host:
            return None
        key = (url.host, url.port or 80)
        pool = self._pools.get(key)
        if pool is None:
            pool = self._pools[key] = Pool(*key)
        return pool

    def close(self) -> None:
        for pool in self._pools.values():
            pool.close()


RELAY = web.AppKey("relay", Relay)


def setup(app: web.Application) -> None:
    """``app[RELAY]``: the app's pass-through goes the lean way (``bridge.upstream.proxy``); closed with the app."""
    if RELAY in app:
        return
    relay = app[RELAY] = Relay()

    async def lifetime(app: web.Application) -> AsyncIterator[None]:
        try:
            yield
        finally:
            relay.close()

    app.cleanup_ctx.append(lifetime)


# --------------------------------------------------------------------------------------------- one exchange


class Exchange:
    """One request on a pooled connection: ``start`` sends it and waits for the answer's head; ``read`` gives the
    body; ``finish`` returns the connection to its pool (or closes it, when the answer was not read through)."""

    def __init__(self, pool: Pool, upstream: str) -> None:
        self.pool = pool
        self.upstream = upstream
        self.conn: Connection | None = None

    async def start(
        self,
        head: bytes,
        body: bytes,
        *,
        head_only: bool,
        connect_timeout: float | None,
        total: float | None,
        sock_read: float | None = None,
    ) -> Connection:
        """Send the request, wait for the answer's head: at most ``connect_timeout`` for the connection, then
        ``sock_read`` (when shorter than ``total``) or ``total``. The timeout messages name the figure that fired,
        as ``bridge.upstream.faults`` does for aiohttp's."""
        head_wait, read_fires = total, False
        if sock_read is not None and (total is None or sock_read < total):
            head_wait, read_fires = sock_read, True
        for attempt in (1, 2):
            try:
                conn, reused = await self.pool.acquire(connect_timeout)
            except TimeoutError as exc:
                figure = f" within {connect_timeout:.3g} s" if connect_timeout is not None else ""
                raise UpstreamTimeout(self.upstream, f"{self.upstream} did not answer: no connection{figure}") from exc
            except OSError as exc:
                why = (os.strerror(exc.errno) if exc.errno else str(exc) or type(exc).__name__).lower()
                raise UpstreamUnavailable(self.upstream, f"cannot connect to {self.upstream} ({why})") from exc
            self.conn = conn
            waiter = conn.begin(head_only)
            assert conn.transport is not None
            conn.transport.writelines((head, body) if body else (head,))
            try:
                async with asyncio.timeout(head_wait):
                    await waiter
                return conn
            except TimeoutError as exc:
                conn.abort()
                if read_fires:
                    message = f"{self.upstream} did not answer: nothing arrived for {head_wait:.3g} s"
                else:
                    within = f" within {total:.3g} s" if total is not None else " in time"
                    message = f"{self.upstream} did not answer{within}"
                raise UpstreamTimeout(self.upstream, message) from exc
            except _Closed as exc:
                conn.abort()
                if reused and not conn.received and attempt == 1 and _idempotent(head):
                    continue  # a keep-alive connection the upstream had closed meanwhile: once more, fresh
                raise UpstreamUnavailable(
                    self.upstream, f"{self.upstream} closed the connection before answering completely"
                ) from exc
            except BadHttp as exc:
                conn.abort()
                raise UpstreamError(
                    self.upstream,
                    f"{self.upstream} answered something that is not valid HTTP ({exc})",
                    code=Code.INTERNAL,
                ) from exc
        raise AssertionError("unreachable")

    def finish(self) -> None:
        conn, self.conn = self.conn, None
        if conn is not None:
            self.pool.release(conn)


def _idempotent(head: bytes) -> bool:
    return head.split(b" ", 1)[0] in (b"GET", b"HEAD", b"OPTIONS", b"PUT", b"DELETE")


def request_head(method: str, target: str, host: str, fields: list[tuple[str, str]]) -> bytes:
    """Pure: the request line and fields, ready to send (field values came from a parsed request: no CR or LF)."""
    lines = [f"{method} {target} HTTP/1.1", f"Host: {host}"]
    lines.extend(f"{k}: {v}" for k, v in fields)
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
