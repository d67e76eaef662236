"""The shipped nginx front (``deploy/nginx-front.conf`` + ``deploy/nginx-front.js``) run by a real nginx for tests:
its host names, script path and cache directory swapped for the test's, in a complete nginx.conf (njs from Debian's
libnginx-mod-http-js), started in the foreground and stopped at the end — its error log checked for errors."""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.paths import ROOT
from tests.serving import closed_port
from tests.tools import require_file, require_tool

CONF = ROOT / "deploy" / "nginx-front.conf"
SCRIPT = CONF.with_suffix(".js")
SHIPPED_SCRIPT_PATH = "/etc/nginx/njs/nginx-front.js"
SHIPPED_CACHE_PATH = "/var/cache/nginx/profile-bridge-auth"
NJS_MODULE = Path("/usr/lib/nginx/modules/ngx_http_js_module.so")


def front_files(tmp: Path, *, bridge: str, pyroscope: str, tempo: str, listen: str) -> Path:
    """The shipped front, its host names, script and cache paths swapped for ours, in a complete nginx.conf under
    ``tmp`` (njs loaded from Debian's libnginx-mod-http-js)."""
    require_file(NJS_MODULE, package="libnginx-mod-http-js", purpose="run deploy/nginx-front.js in nginx")
    text = CONF.read_text()
    for old, new in (
        ("server bridge:4041;", f"server {bridge};"),
        ("server pyroscope:4040;", f"server {pyroscope};"),
        ("server tempo:3200;", f"server {tempo};"),
        ("listen 4041;", f"listen {listen};"),
        (SHIPPED_SCRIPT_PATH, str(SCRIPT)),
        (SHIPPED_CACHE_PATH, str(tmp / "auth-cache")),
    ):
        assert old in text, f"deploy/nginx-front.conf has no {old!r} any more"
        text = text.replace(old, new)
    (tmp / "front.conf").write_text(text)
    conf = tmp / "nginx.conf"
    conf.write_text(
        f"load_module {NJS_MODULE}; daemon off; master_process off; pid {tmp}/nginx.pid; "
        f"error_log {tmp}/error.log warn; events {{}} http {{ access_log off; "
        f"client_body_temp_path {tmp}/b; proxy_temp_path {tmp}/p; fastcgi_temp_path {tmp}/f; "
        f"uwsgi_temp_path {tmp}/u; scgi_temp_path {tmp}/s; include {tmp}/front.conf; }}"
    )
    return conf


def host_of(url: str) -> str:
    return url.removeprefix("http://").rstrip("/")


@contextlib.asynccontextmanager
async def running_front(bridge: str, pyroscope: str, tempo: str) -> AsyncIterator[str]:
    """nginx with the shipped front between the bridge and the upstreams at these base URLs; yields its base URL."""
    nginx = require_tool("nginx", package="nginx-light", purpose="run deploy/nginx-front.conf")
    port = closed_port()
    with tempfile.TemporaryDirectory(prefix="front-") as tmp:
        conf = front_files(
            Path(tmp),
            bridge=host_of(bridge),
            pyroscope=host_of(pyroscope),
            tempo=host_of(tempo),
            listen=f"127.0.0.1:{port}",
        )
        proc = await asyncio.create_subprocess_exec(nginx, "-p", tmp, "-c", str(conf), stderr=asyncio.subprocess.PIPE)
        try:
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 20
            while True:
                try:
                    _, writer = await asyncio.open_connection("127.0.0.1", port)
                    writer.close()
                    break
                except OSError:
                    if proc.returncode is not None or loop.time() > deadline:
                        err = await proc.stderr.read() if proc.stderr is not None else b""
                        pytest.fail(f"nginx did not start: {err.decode(errors='replace')}")
                    await asyncio.sleep(0.05)
            yield f"http://127.0.0.1:{port}"
        finally:
            if proc.returncode is None:
                proc.terminate()
                await asyncio.wait_for(proc.wait(), 20)
            log = (Path(tmp) / "error.log").read_text() if (Path(tmp) / "error.log").exists() else ""
            assert "[error]" not in log and "js exception" not in log, log
