"""One service of the demo shop, ``shop-frontend`` or ``shop-backend``, in its own process (``python -m bridge.demo``,
started by ``bridge.demo.shop``).

SERVER spans come from a small middleware (W3C ``traceparent`` extracted with OpenTelemetry's propagator API); the
frontend's call to the backend injects it by hand, so no instrumentation packages beyond the SDK are needed. Every
answer carries W3C's ``traceresponse`` header (trace id and the SERVER span's id), so a caller knows which span page
to open.

This module imports the SDKs (the ``demo`` extra): only the service processes import it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Final

import pyroscope
from aiohttp import ClientError, ClientSession, ClientTimeout, web
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from pyroscope.otel import PyroscopeSpanProcessor

FRONTEND: Final = "shop-frontend"
BACKEND: Final = "shop-backend"
NAMESPACE: Final = "shop"
PROPAGATOR: Final = TraceContextTextMapPropagator()
DEFAULT_PRIMES_LIMIT: Final = 40_000
DEFAULT_CART_ROUNDS: Final = 40
SLOW_IO_SECONDS: Final = 0.3

log = logging.getLogger("demo")
tracer = trace.get_tracer("bridge.demo")

SESSION = web.AppKey("session", ClientSession)
BACKEND_URL = web.AppKey("backend_url", str)


# --------------------------------------------------------------------------------------------- the CPU burners


def count_primes(limit: int) -> int:
    """Primes below ``limit`` by trial division: deliberately slow, and easy to find in a flame graph."""
    count = 0
    for n in range(2, limit):
        for d in range(2, int(n**0.5) + 1):
            if n % d == 0:
                break
        else:
            count += 1
    return count


def render_json(cart: list[dict[str, object]], rounds: int) -> str:
    """Serialise the cart ``rounds`` times (the frontend's recognisable CPU)."""
    text = ""
    for _ in range(rounds):
        text = json.dumps(cart, sort_keys=True, indent=1)
        cart = json.loads(text)
    return text


def make_cart(items: int) -> list[dict[str, object]]:
    return [
        {
            "sku": f"sku-{i:05d}",
            "name": f"item {i}",
            "qty": 1 + i % 3,
            "tags": ["demo", "shop", str(i % 7)],
            "price": {"amount": 100 + i, "currency": "EUR"},
        }
        for i in range(items)
    ]


# --------------------------------------------------------------------------------------------- handlers


@web.middleware
async def server_spans(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    """One SERVER span per request, continuing the caller's W3C trace context when there is one."""
    parent = PROPAGATOR.extract(request.headers)
    attributes = {"http.request.method": request.method, "url.path": request.path}
    with tracer.start_as_current_span(
        f"{request.method} {request.path}", context=parent, kind=SpanKind.SERVER, attributes=attributes
    ) as span:
        response = await handler(request)
        span.set_attribute("http.response.status_code", response.status)
        context = span.get_span_context()
        response.headers["traceresponse"] = f"00-{context.trace_id:032x}-{context.span_id:016x}-01"
        return response


async def health(request: web.Request) -> web.Response:
    return web.Response(text="ok\n")


async def checkout(request: web.Request) -> web.Response:
    rounds = int(request.query.get("rounds", DEFAULT_CART_ROUNDS))
    with tracer.start_as_current_span("renderCart"):
        body = render_json(make_cart(200), rounds)
    with tracer.start_as_current_span("HTTP GET shop-backend", kind=SpanKind.CLIENT) as span:
        headers: dict[str, str] = {}
        PROPAGATOR.inject(headers)
        url = request.app[BACKEND_URL] + "/price"
        span.set_attribute("url.full", url)
        try:
            async with request.app[SESSION].get(url, headers=headers) as resp:
                span.set_attribute("http.response.status_code", resp.status)
                price = await resp.json() if resp.status == 200 else None
        except (ClientError, TimeoutError) as exc:
            span.record_exception(exc)
            price = None
        if price is None:
            span.set_status(Status(StatusCode.ERROR, "shop-backend did not answer"))
    if price is None:
        raise web.HTTPBadGateway(text="shop-backend did not answer\n")
    return web.json_response({"cart_bytes": len(body), "price": price})


async def slow_io(request: web.Request) -> web.Response:
    with tracer.start_as_current_span("waitForInventory"):
        await asyncio.sleep(SLOW_IO_SECONDS)
    return web.Response(text="in stock\n")


async def price(request: web.Request) -> web.Response:
    limit = int(request.query.get("n", DEFAULT_PRIMES_LIMIT))
    with tracer.start_as_current_span("countPrimes") as span:
        primes = count_primes(limit)
        span.set_attribute("primes.limit", limit)
    return web.json_response({"primes": primes, "amount": 100 + primes % 900, "currency": "EUR"})


def build_app(service: str, backend_url: str = "") -> web.Application:
    app = web.Application(middlewares=[server_spans])
    app.router.add_get("/health", health)
    if service == FRONTEND:
        app[BACKEND_URL] = backend_url.rstrip("/")
        app.router.add_get("/checkout", checkout)
        app.router.add_get("/slow-io", slow_io)
        app.cleanup_ctx.append(_client_session)
    else:
        app.router.add_get("/price", price)
    return app


async def _client_session(app: web.Application) -> AsyncIterator[None]:
    async with ClientSession(timeout=ClientTimeout(total=10, connect=2)) as session:
        app[SESSION] = session
        yield


# --------------------------------------------------------------------------------------------- telemetry


def setup_telemetry(service: str, traces_endpoint: str, profiles_url: str) -> TracerProvider:
    """Traces over OTLP/HTTP to ``traces_endpoint`` (a full ``…/v1/traces`` URL; other ``OTEL_*`` exporter variables
    apply as usual), CPU profiles to the Pyroscope push API at ``profiles_url``; root spans and their samples linked
    by ``PyroscopeSpanProcessor``."""
    resource = Resource.create({"service.name": service, "service.namespace": NAMESPACE})
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(PyroscopeSpanProcessor())
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=traces_endpoint)))
    trace.set_tracer_provider(provider)
    pyroscope.configure(
        application_name=service,
        server_address=profiles_url,
        # the label Grafana's tracesToProfiles adds for service.namespace
        tags={"service_namespace": NAMESPACE},
        sample_rate=100,
    )
    return provider


PARENT_CHECK_SECONDS: Final = 1.0


async def _exit_with_parent(parent_pid: int) -> None:
    """Stop (SIGTERM to ourselves: aiohttp's graceful exit, then the SDKs flush) once the process that started us is
    gone, so a killed supervisor leaves no demo service behind."""
    while os.getppid() == parent_pid:
        await asyncio.sleep(PARENT_CHECK_SECONDS)
    log.info("the demo's supervisor (pid %d) is gone; stopping", parent_pid)
    os.kill(os.getpid(), signal.SIGTERM)


def run_service(
    service: str, sock: socket.socket, backend_url: str, traces_endpoint: str, profiles_url: str, parent_pid: int = 0
) -> None:
    """Serve on ``sock`` until SIGTERM/SIGINT, then flush spans and the last profile window."""
    provider = setup_telemetry(service, traces_endpoint, profiles_url)
    app = build_app(service, backend_url)
    if parent_pid:

        async def watch_parent(app: web.Application) -> AsyncIterator[None]:
            task = asyncio.create_task(_exit_with_parent(parent_pid))
            yield
            task.cancel()

        app.cleanup_ctx.append(watch_parent)
    try:
        host, port = sock.getsockname()[:2]
        log.info("%s listening on http://%s:%d", service, host, port)
        web.run_app(app, sock=sock, print=None, shutdown_timeout=2.0, access_log=None)
    finally:
        provider.shutdown()
        pyroscope.shutdown()
