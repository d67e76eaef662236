"""CPU-heavy work off the event loop: one helper process per bridge process, started on first use.

A 10,000-span trace costs about 100 ms of CPU to decode, enrich, re-encode and gzip, and threads do not help: upb's
parser and the enrichment's span loop hold the GIL, so a thread doing it takes the loop's turn for up to the whole
5 ms switch interval every time the loop wants the GIL back — several times per request served meanwhile. A process
has its own interpreter: the loop only hands it the answer's bytes (as they came, still gzipped) and takes back the
bytes to send (gzipped there). The helper runs at a lower CPU priority (``nice`` +5), so on a busy machine the
processes that serve requests win the processor and the big answer waits instead.

- ``Offload.run(fn, *args)``: ``fn`` (a module-level function, picklable arguments and result) in the helper;
  a helper that died (killed, out of memory) is replaced once, then the error is raised.
- Started with ``spawn`` (a fresh interpreter: nothing of the bridge's threads, sockets or event loop is inherited)
  when first needed; stopped with the app.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import multiprocessing
import os
from collections.abc import AsyncIterator, Callable
from concurrent.futures.process import BrokenProcessPool
from typing import Any, Final, TypeVar

from aiohttp import web

log = logging.getLogger("bridge.offload")

T = TypeVar("T")
NICENESS: Final = 5


def _lower_priority() -> None:
    try:
        os.nice(NICENESS)
    except OSError:  # not allowed here: run at the same priority
        pass


class Offload:
    def __init__(self, processes: int = 1) -> None:
        self._processes = processes
        self._pool: concurrent.futures.ProcessPoolExecutor | None = None

    def _executor(self) -> concurrent.futures.ProcessPoolExecutor:
        if self._pool is None:
            self._pool = concurrent.futures.ProcessPoolExecutor(
                max_workers=self._processes,
                mp_context=multiprocessing.get_context("spawn"),
                initializer=_lower_priority,
            )
        return self._pool

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        loop = asyncio.get_running_loop()
        for attempt in (1, 2):
            try:
                return await loop.run_in_executor(self._executor(), fn, *args)
            except BrokenProcessPool:
                pool, self._pool = self._pool, None
                if pool is not None:
                    pool.shutdown(wait=False, cancel_futures=True)
                if attempt == 2:
                    raise
                log.warning("the helper process for big answers died; starting a new one")
        raise AssertionError("unreachable")

    async def close(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            await asyncio.to_thread(pool.shutdown, wait=True, cancel_futures=True)


OFFLOAD = web.AppKey("offload", Offload)


def setup(app: web.Application) -> None:
    """``app[OFFLOAD]``, stopped with the app (its helper process is started on first use)."""
    if OFFLOAD in app:
        return
    offload = app[OFFLOAD] = Offload()

    async def lifetime(app: web.Application) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await offload.close()

    app.cleanup_ctx.append(lifetime)
