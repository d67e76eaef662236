"""The language as Tempo defines it, from Tempo's own examples (``tests/fixtures/tempo/traceql/test_examples.yaml``,
a copy of ``pkg/traceql/test_examples.yaml``): every ``valid`` query compiles, every ``parse_fails`` one is a
``ParseError``, every ``validate_fails`` one an ``InvalidQuery``, every ``unsupported`` one Tempo's own
``unsupported`` — section by section, each failure named. Also: the printed form reads back to itself (Tempo's
``TestStringer``), and the generated LALR tables are those of ``grammar.py``."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import yaml

from bridge.traceql.errors import InvalidQuery, ParseError, QueryError, Unsupported
from bridge.traceql.metrics import compile_metrics
from bridge.traceql.parser import parse, parse_attribute
from bridge.traceql.search import compile_search

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = yaml.safe_load((ROOT / "tests/fixtures/tempo/traceql/test_examples.yaml").read_text())
SECTIONS = {"valid": 284, "parse_fails": 87, "validate_fails": 70, "unsupported": 22}


def compile_any(text: str) -> object:
    """What the HTTP API does with the text: a metrics query is compiled for /api/metrics, the rest for search."""
    root = parse(text)
    return compile_metrics(text) if root.is_metrics else compile_search(text)


def outcome(text: str) -> str:
    try:
        compile_any(text)
    except ParseError:
        return "parse_fails"
    except Unsupported:
        return "unsupported"
    except InvalidQuery:
        return "validate_fails"
    except QueryError as e:  # pragma: no cover - named in the failure
        return f"other {type(e).__name__}: {e}"
    return "valid"


@pytest.mark.parametrize("section", SECTIONS)
def test_every_example_lands_in_its_section(section: str) -> None:
    queries = EXAMPLES[section]
    assert len(queries) == SECTIONS[section]  # the copy is whole
    wrong = [(q, got) for q in queries if (got := outcome(q)) != section]
    assert wrong == []


def test_unsupported_says_what_tempo_says() -> None:
    """``unsupportedError``: the feature, then ``not yet supported``; for a scalar filter Tempo never formats its
    ``(%v)``, and neither does the bridge."""
    said = set()
    for q in EXAMPLES["unsupported"]:
        with pytest.raises(Unsupported) as e:
            compile_any(q)
        assert str(e.value).endswith(" not yet supported")
        said.add(e.value.feature)
    assert said == {"parent", "intrinsic (parent)", "scalar filter lhs of type (%v)", "scalar filter rhs of type (%v)"}


@pytest.mark.parametrize("section", ["valid", "unsupported"])
def test_printed_form_parses_back_to_itself(section: str) -> None:
    """Tempo's ``TestStringer``: ``String()`` of a parsed query (without the rewrite, as Tempo's test) parses to the
    same query."""
    wrong = []
    for q in EXAMPLES[section]:
        printed = str(parse(q, rewrite_ast=False))
        if str(parse(printed, rewrite_ast=False)) != printed:
            wrong.append((q, printed))
    assert wrong == []


@pytest.mark.parametrize(
    ("query", "printed"),
    [
        # ast_stringer_test.go TestStringerRoundtrip: where intrinsics and attributes overlap
        ("{ duration = 1s }", "{ duration = 1s }"),
        ("{ .duration = 1s }", "{ .duration = 1s }"),
        ("{ parent.duration = 1s }", "{ parent.duration = 1s }"),
        ("{ span.duration = 1s }", "{ span.duration = 1s }"),
        ("{ resource.duration = 1s }", "{ resource.duration = 1s }"),
        # printed as Tempo prints them (its String() at the fixture's revision)
        ("{ (-(3 / 2) * .test - .blerg + .other)^3 = 2 }", "{ ((((-(1 * .test)) - .blerg) + .other) ^ 3) = 2 }"),
        ('{ .a = "x" || .a = "y" }', "{ .a IN [`x`, `y`] }"),
        ("{ 1 = 2 }", "{ false }"),
        ("{} | rate() by (resource.service.name)", "{ true } | rate()by(resource.service.name)"),
        ('{ ."foo\\" = \\"bar" = "v" }', '{ ."foo\\" = \\"bar" = `v` }'),
        ("{ 1 / 0 = 1 }", "{ (1 / 0) = 1 }"),  # not folded: the division fails, Tempo keeps it for run time
    ],
)
def test_printed_like_tempo(query: str, printed: str) -> None:
    assert str(parse(query)) == printed


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("{ attribute = 4 }", "parse error at line 1, col 3: unknown identifier: attribute"),
        ("(by(namespace) | count()) * 2 > 2", "parse error at line 1, col 5: unknown identifier: namespace"),
        ("{ .a < 3", "parse error at line 1, col 9: syntax error: unexpected $end"),
        ('{ .a = "x }', "parse error at line 1, col 8: literal not terminated"),
    ],
)
def test_errors_say_where(query: str, message: str) -> None:
    with pytest.raises(ParseError) as e:
        parse(query)
    assert str(e.value).startswith(message)


def test_attribute_names_parse_as_tempo_reads_a_tag() -> None:
    a = parse_attribute("resource.service.name")
    assert str(a) == "resource.service.name"
    assert str(parse_attribute("span:name")) == "name"  # an intrinsic prints unscoped
    assert parse_attribute("not an attribute") is None
    assert parse_attribute("{ .a }") is None


def test_lalr_tables_are_those_of_the_grammar() -> None:
    spec = importlib.util.spec_from_file_location("gen_traceql_tables", ROOT / "scripts/gen_traceql_tables.py")
    assert spec and spec.loader
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    assert (ROOT / "bridge/traceql/lalr_tables.json").read_text() == gen.render(), "run scripts/gen_traceql_tables.py"


PRINTED = json.loads((ROOT / "tests/fixtures/tempo/traceql/printed.json").read_text())


def test_every_example_prints_as_tempo_prints_it() -> None:
    """``RootExpr.String()`` of each valid and unsupported example, as Tempo printed it."""
    wrong = {q: str(parse(q)) for q, printed in PRINTED["strings"].items() if str(parse(q)) != printed}
    assert wrong == {}


def test_every_parse_failure_says_what_tempo_says() -> None:
    """The exact error Tempo's ``Parse`` returns — goyacc's expected tokens, the lexer's line and column (line 0
    after a two-character token, as Go's scanner leaves it), the first error when there are several."""
    wrong = {}
    for q, message in PRINTED["errors"].items():
        with pytest.raises(ParseError) as e:
            parse(q)
        if str(e.value) != message:
            wrong[q] = str(e.value)
    assert wrong == {}


def test_every_invalid_query_says_what_tempo_says() -> None:
    """The exact error of Tempo's ``validate()`` for each ``validate_fails`` example."""
    wrong = {}
    for q, message in PRINTED["invalid"].items():
        with pytest.raises(InvalidQuery) as e:
            compile_any(q)
        if str(e.value) != message:
            wrong[q] = str(e.value)
    assert wrong == {}
