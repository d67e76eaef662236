"""Reading an upstream answer whole, within ``PROFILE_BRIDGE_MAX_UPSTREAM_ANSWER_BYTES``: the declared length is
checked first, then the bytes as they arrive, so a chunked answer of any size costs at most the limit (plus one
chunk) before the bridge stops reading and drops the connection. Pass-through answers never come here: they
stream."""

from __future__ import annotations

from typing import Final

import aiohttp

from bridge.errors import UpstreamTooLarge

CHUNK: Final = 256 * 1024
SETTING: Final = "PROFILE_BRIDGE_MAX_UPSTREAM_ANSWER_BYTES"


def too_large(upstream: str, what: str, limit: int, size: int | None = None) -> UpstreamTooLarge:
    told = f"{size} bytes" if size is not None else f"over {limit} bytes"
    return UpstreamTooLarge(
        upstream,
        f"{upstream} answered {what} with {told}, more than the {limit} bytes the "
        f"bridge reads whole ({SETTING}): narrow the query, or raise the setting",
    )


async def read_capped(resp: aiohttp.ClientResponse, limit: int, upstream: str, what: str) -> bytes:
    """The whole body of ``resp`` (still in its Content-Encoding when the session does not decompress), or
    ``UpstreamTooLarge`` as soon as it passes ``limit`` bytes."""
    if resp.content_length is not None and resp.content_length > limit:
        raise too_large(upstream, what, limit, resp.content_length)
    parts: list[bytes] = []
    size = 0
    async for chunk in resp.content.iter_chunked(CHUNK):
        size += len(chunk)
        if size > limit:
            resp.close()  # stop reading: the rest never arrives here
            raise too_large(upstream, what, limit)
        parts.append(chunk)
    return b"".join(parts)
