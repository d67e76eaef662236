"""Tempo's TraceQL corpus, every case, through the standalone store's HTTP answers (``tests/traceql/conformance.py``):
the examples answer as Tempo's parser and validator do, the search runners find what Tempo's tests assert, the metrics
cases give Tempo's series, and every answer is the real Tempo binary's (``binary_answers.json``, and Traces
Drilldown's request shapes on the shop capture: ``drilldown_answers.json``) but for the known differences, each with
its reason. The counts are those ``docs/traceql.md`` publishes."""

from __future__ import annotations

from pathlib import Path

from tests.traceql import conformance as cf

ROOT = Path(__file__).resolve().parents[2]


async def test_every_case_answers_as_tempo_and_the_docs_say_so(tmp_path: Path) -> None:
    store, shop = await cf.open_stores(tmp_path)
    try:
        outcomes = await cf.everything(store, shop)
    finally:
        await store.close()
        await shop.close()
    wrong = [(o.section, o.case, o.detail) for o in outcomes if o.verdict != cf.CORRECT]
    known = cf.known_differences()
    assert [w for w in wrong if w[2] not in known.values()] == []  # nothing wrong but the known differences
    differing = {tuple(o.case.split(" ", 1)) for o in outcomes if o.verdict != cf.CORRECT}
    assert differing == set(known)  # and each known difference still differs: a fix removes it from the list
    assert (len(cf.BINARY["answers"]), len(cf.DRILLDOWN["answers"])) == (1710, 20)
    assert cf.table(outcomes) in (ROOT / "docs/traceql.md").read_text(), "run scripts/traceql_conformance.py"
