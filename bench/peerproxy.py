"""``--proxy``: a bridge in proxy mode in front of the real Tempo and Pyroscope, each answer checked against what
Grafana would get from the peers directly (issue 23 §4).

- pass-through: the Tempo and Pyroscope questions of ``peerchecks`` through the proxy against the peers (trace by ID
  compared without the ``pyroscope.profile.id`` attribute the bridge adds; ``enrich`` checks that it adds it);
- the span click (``SelectMergeSpanProfile`` as Grafana sends it) in each mode, against the direct question whose
  answer it must be: ``linked`` — the span's own; ``local-root`` — its root's; ``time-window`` — the service's
  ``SelectMergeStacktraces`` over the span widened to whole 10 s capture windows; ``none`` — an empty graph. The
  root bar is the bridge's (it says which answer it gave), so the stacks are compared below it;
- function → spans: the spans the bridge names for the hot function (those Pyroscope's span heatmap names: a subset,
  which the answer says), each against the root's own profile from the peer;
- compare: the span's number in ``/api/v1/spans/…/compare`` (``here.total``, linked) against its linked total from the
  peer.
"""

from __future__ import annotations

import argparse
from typing import Any, Final

from peerchecks import CPU, Asker, fetch, pyroscope_checks, tempo_checks
from peerdata import HOT, WINDOW_S, DataSet, Request
from peerwire import flame_answer, trace_spans

PROFILE_ID: Final = "pyroscope.profile.id"
RESOLUTION: Final = "X-Profile-Bridge-Resolution"


def below_root(answer: Any) -> Any:
    """A flame answer with its root frame's name dropped (the bridge renames it to say how it resolved)."""
    return sorted(((tuple(stack[1:]), v) for stack, v in answer["stacks"]), key=lambda x: x[0])


async def click(ask: Asker, span_id: str, service: str, t: dict[str, int]) -> tuple[int, str, Any]:
    body = {"profileTypeID": CPU, "labelSelector": f'{{service_name="{service}"}}', "spanSelector": [span_id], **t}
    url = f"{ask.sides.proxy}/pyroscope/querier.v1.QuerierService/SelectMergeSpanProfile"
    async with ask.session.post(url, json=body) as resp:
        doc = await resp.json(content_type=None)
        return resp.status, resp.headers.get(RESOLUTION, ""), flame_answer(doc)


async def direct(ask: Asker, rpc: str, body: dict[str, Any]) -> Any:
    status, doc = await fetch(ask.session, "POST", f"{ask.sides.pyroscope}/querier.v1.QuerierService/{rpc}", body)
    return flame_answer(doc) if status == 200 else {"status": status, "stacks": []}


def widened(req: Request, role_start: int, role_end: int) -> dict[str, int]:
    """The whole capture windows under the span, in ms; Pyroscope's end is inclusive, so up to a ms before the next
    window's stamp."""
    w = WINDOW_S * 10**9
    start = role_start // w * w
    end = -(-role_end // w) * w
    return {"start": start // 10**6, "end": end // 10**6 - 1}


async def click_checks(ask: Asker, data: DataSet, t: dict[str, int]) -> None:
    for req in data.requests[:4]:
        web = {"labelSelector": '{service_name="shop-web"}', "profileTypeID": CPU, **t}
        own = await direct(ask, "SelectMergeSpanProfile", {**web, "spanSelector": [req.spans["root"]]})
        status, mode, ours = await click(ask, req.spans["root"], "shop-web", t)
        same = status == 200 and mode == "linked" and below_root(ours) == below_root(own)
        ask.report.add("proxy.click", f"linked {req.spans['root']}", same, "root span", own, {"mode": mode, **ours})
        status, mode, ours = await click(ask, req.spans["render"], "shop-web", t)
        same = status == 200 and mode == "local-root" and below_root(ours) == below_root(own)
        ask.report.add(
            "proxy.click", f"local-root {req.spans['render']}", same, "child span", own, {"mode": mode, **ours}
        )
        # shop-api's profiles carry no span ids (as with pull or eBPF profiling): its spans resolve by time window
        window = widened(req, req.start_ns, req.end_ns)
        api = {"labelSelector": '{service_name="shop-api"}', "profileTypeID": CPU, **window}
        want = await direct(ask, "SelectMergeStacktraces", api)
        status, mode, ours = await click(ask, req.spans["api-root"], "shop-api", t)
        same = status == 200 and mode == "time-window" and below_root(ours) == below_root(want)
        ask.report.add(
            "proxy.click",
            f"time-window {req.spans['api-root']}",
            same,
            f"window {window}",
            want,
            {"mode": mode, **ours},
        )
    status, mode, ours = await click(ask, "0123456789abcdef", "shop-web", t)
    # the honest answer: no profile's samples, one bar that says why (a flame graph needs a value to show it)
    leaves = [stack[-1] for stack, _ in ours["stacks"]]
    same = status == 200 and mode == "none" and ours["total"] <= 1 and all(x.startswith("no samples") for x in leaves)
    ask.report.add(
        "proxy.click", "none (unknown span)", same, "0123456789abcdef", {"mode": "none"}, {"mode": mode, **ours}
    )


async def enrich_checks(ask: Asker, data: DataSet) -> None:
    for req in data.requests[:3]:
        _, real = await fetch(ask.session, "GET", f"{ask.sides.tempo}/api/traces/{req.trace_id}")
        _, ours = await fetch(ask.session, "GET", f"{ask.sides.proxy}/tempo/api/traces/{req.trace_id}")
        r, o = trace_spans(real), trace_spans(ours)
        ids = {sid: span["attributes"].pop(PROFILE_ID, None) for sid, span in o.items()}
        profiled = {sid for sid, s in o.items() if s["resource"].get("service.name") == "shop-web"}
        same = r == o and all(ids[sid] for sid in profiled)
        ask.report.add("proxy.enrich", req.trace_id, same, "trace by ID", {"spans": len(r)}, {"profile ids": ids})


async def function_checks(ask: Asker, data: DataSet, t: dict[str, int]) -> None:
    """The bridge's burners of the web service's hot function, each against the root's own profile."""
    params = {"service": "shop-web", "function": HOT["shop-web"], "from": str(t["start"]), "to": str(t["end"])}
    params["limit"] = "100"
    qs = "&".join(f"{k}={v}" for k, v in params.items())
    status, doc = await fetch(ask.session, "GET", f"{ask.sides.proxy}/api/v1/functions/spans?{qs}")
    got = {s["spanId"]: s["function"]["total"] for s in doc.get("spans", [])} if status == 200 else {}
    want: dict[str, int] = {}
    for req in data.requests:
        body = {
            "profileTypeID": CPU,
            "labelSelector": '{service_name="shop-web"}',
            "spanSelector": [req.spans["root"]],
            **t,
        }
        own = await direct(ask, "SelectMergeSpanProfile", body)
        total = sum(v for stack, v in own["stacks"] if HOT["shop-web"] in stack)
        if total:
            want[req.spans["root"]] = total
    # the spans Pyroscope's span heatmap names (the largest of each time slot and value band: a subset, as the
    # answer's notes say), each with exactly the value its own profile holds
    exact = bool(got) and all(want.get(sid) == total for sid, total in got.items())
    notes = " ".join(doc.get("notes", [])) if isinstance(doc, dict) else ""
    ask.report.add(
        "proxy.functions",
        f"function -> spans ({len(got)} of {len(want)} named)",
        status == 200 and exact and (len(got) == len(want) or "is not seen" in notes),
        qs,
        want,
        {"status": status, "spans": got, "doc": doc if status != 200 else None},
    )


async def compare_checks(ask: Asker, data: DataSet, t: dict[str, int]) -> None:
    for req in data.requests[:2]:
        url = f"{ask.sides.proxy}/api/v1/spans/{req.trace_id}/{req.spans['root']}/compare"
        status, doc = await fetch(ask.session, "GET", url)
        body = {
            "profileTypeID": CPU,
            "labelSelector": '{service_name="shop-web"}',
            "spanSelector": [req.spans["root"]],
            **t,
        }
        own = await direct(ask, "SelectMergeSpanProfile", body)
        here = (doc.get("here") or {}) if isinstance(doc, dict) else {}
        ask.report.add(
            "proxy.compare",
            req.trace_id,
            status == 200 and here.get("mode") == "linked" and here.get("total") == own["total"],
            url,
            own["total"],
            {"status": status, "here.mode": here.get("mode"), "here.total": here.get("total")},
        )


async def proxy_checks(ask: Asker, data: DataSet, args: argparse.Namespace) -> None:
    via = ask.sides.proxy
    if args.only != "pyroscope":
        await tempo_checks(ask, data, args, via=via)
    if args.only != "tempo":
        await pyroscope_checks(ask, data, via=via)
    if args.only is None:
        t = {"start": data.start_ns // 10**6, "end": data.end_ns // 10**6 + 60_000}
        await enrich_checks(ask, data)
        await click_checks(ask, data, t)
        await function_checks(ask, data, t)
        await compare_checks(ask, data, t)
