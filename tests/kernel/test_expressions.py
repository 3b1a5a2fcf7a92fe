"""Expressions: parsing, references, evaluation, rendering, and every error path."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.kernel.errors import EvaluationError, ExpressionError
from orchestrator.kernel.expressions import (
    Scope,
    check_syntax,
    evaluate,
    find_references,
    has_expression,
    parse_template,
    render,
)

SCOPE = Scope(
    input={
        "x": 3, "name": "Ada", "tags": ["a", "b", "c"], "nested": {"k": [10, 20]}, "flag": False,
    },
    nodes={
        "Chat Start": {"message": "hello", "n": 2},
        "HTTP Request": {"response": {"status": 200, "items": [{"id": 1}, {"id": 2}]}},
    },
    run={"id": "run-1", "input": {"q": "why"}},
    extra={"$item": {"v": 7}, "$index": 2},
)


def ev(text: str, scope: Scope = SCOPE) -> Any:
    return evaluate(parse_template(text), scope)


# --- template structure ------------------------------------------------------------------


def test_has_expression_detects_double_braces_only() -> None:
    assert has_expression("hi {{ input }}")
    assert not has_expression("hi { input }")


@pytest.mark.parametrize("text", ["{{ input.x }}", "  {{input.x}}\n", "{{ 1 }}"])
def test_a_string_that_is_one_expression_is_whole(text: str) -> None:
    assert parse_template(text).whole


@pytest.mark.parametrize("text", ["x {{ input.x }}", "{{ 1 }}{{ 2 }}", "plain"])
def test_a_string_with_text_or_several_expressions_is_not_whole(text: str) -> None:
    assert not parse_template(text).whole


def test_references_collect_node_names_in_both_quote_styles() -> None:
    t = parse_template("""{{ $('Chat Start').item.json.message }} {{ $("HTTP Request").json }}""")
    assert t.references() == {"Chat Start", "HTTP Request"}
    assert not t.uses_input()


@pytest.mark.parametrize("text", ["{{ input.x }}", "{{ $json['x'] }}", "a {{ len(input) }}"])
def test_uses_input_is_true_for_input_and_dollar_json(text: str) -> None:
    assert parse_template(text).uses_input()


def test_find_references_walks_lists_and_dicts() -> None:
    value = {"a": ["{{ $('A').item.json.x }}", {"b": "{{ $('B').first().json }}"}], "c": 5}
    assert find_references(value) == {"A", "B"}


def test_a_closing_brace_pair_inside_a_string_literal_does_not_end_the_expression() -> None:
    assert ev("{{ 'a}}b' + input.name }}") == "a}}bAda"


def test_parsed_templates_are_cached() -> None:
    assert parse_template("{{ input.x + 1 }}") is parse_template("{{ input.x + 1 }}")


# --- syntax errors -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("hello {{ input.x", "unterminated"),
        ("{{ 'abc }}", "unterminated string"),
        ("{{ }}", "empty expression"),
        ("{{ (1 + 2 }}", "expected ')'"),
        ("{{ 1 + }}", "expected a value"),
        ("{{ input.x = 1 }}", "use =="),
        ("{{ bogus(1) }}", "unknown function 'bogus'"),
        ("{{ input.upperz() }}", "unknown function 'upperz'"),
        ("{{ len(1, 2) }}", "len() takes"),
        ("{{ foo.bar }}", "unknown name 'foo'"),
        ("{{ $('A').item }}", "expected .item.json"),
        ("{{ $(A) }}", "quoted node name"),
        ("{{ 1 2 }}", "end of expression"),
        ("{{ [1, 2 }}", "',' or ']'"),
        ("{{ input.x # }}", "unexpected character '#'"),
        ("{{ 1 if true }}", "expected 'else'"),
    ],
)
def test_syntax_errors_name_the_fault_and_quote_the_expression(text: str, fragment: str) -> None:
    with pytest.raises(ExpressionError) as info:
        parse_template(text)
    message = info.value.message
    assert fragment in message
    assert "column" in message
    assert text[text.index("{{") :][:12] in message
    assert info.value.node_id is None


def test_the_column_points_at_the_fault() -> None:
    with pytest.raises(ExpressionError, match="column 12"):
        parse_template("abc {{ 1 + * }}")


def test_deep_nesting_is_a_syntax_error_not_a_crash() -> None:
    with pytest.raises(ExpressionError, match="nested too deeply"):
        parse_template("{{ " + "(" * 500 + "1" + ")" * 500 + " }}")


def test_check_syntax_raises_for_the_first_bad_template_in_a_structure() -> None:
    check_syntax({"ok": ["{{ input }}", 3, None]})
    with pytest.raises(ExpressionError, match="nope"):
        check_syntax({"ok": "{{ input }}", "bad": ["x", "{{ nope(1) }}"]})


# --- evaluation --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("{{ $('Chat Start').item.json.message }}", "hello"),
        ("{{ $('Chat Start').json.n }}", 2),
        ("{{ $('HTTP Request').first().json.response.status }}", 200),
        ("{{ $('HTTP Request').item.json.response.items[1].id }}", 2),
        ("{{ $('HTTP Request').item.json.response.items[-1]['id'] }}", 2),
        ("{{ input.x }}", 3),
        ("{{ $json.nested.k[0] }}", 10),
        ("{{ $json['name'] }}", "Ada"),
        ("{{ $run.id }}", "run-1"),
        ("{{ $run.input.q }}", "why"),
        ("{{ $item.v }}", 7),
        ("{{ $index }}", 2),
        ("{{ input.tags.length }}", 3),
        ("{{ [1, 'a', null, true] }}", [1, "a", None, True]),
        ("{{ input.nested }}", {"k": [10, 20]}),
    ],
)
def test_primaries_and_accessors_reach_the_scope(text: str, expected: Any) -> None:
    assert ev(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "{{ input.missing }}", "{{ input.tags[10] }}", "{{ input.x.y }}", "{{ 5['a'] }}",
        "{{ null.a }}",
    ],
)
def test_missing_keys_indexes_and_members_of_non_containers_yield_null(text: str) -> None:
    assert ev(text) is None


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("{{ 1 + 2 * 3 }}", 7),
        ("{{ (1 + 2) * 3 }}", 9),
        ("{{ 7 % 4 }}", 3),
        ("{{ 6 / 3 }}", 2),
        ("{{ 7 / 2 }}", 3.5),
        ("{{ -input.x }}", -3),
        ("{{ 'n=' + input.x }}", "n=3"),
        ("{{ input.x + '!' }}", "3!"),
        ("{{ [1] + [2] }}", [1, 2]),
        ("{{ input.x == 3 }}", True),
        ("{{ input.x != 3 }}", False),
        ("{{ 1 == true }}", False),
        ("{{ input.x < 4 and input.x >= 3 }}", True),
        ("{{ 'a' < 'b' }}", True),
        ("{{ 'b' in input.tags }}", True),
        ("{{ 'z' not in input.tags }}", True),
        ("{{ 'd' in 'Ada' }}", True),
        ("{{ 'k' in input.nested }}", True),
        ("{{ not input.flag }}", True),
        ("{{ input.flag or 'fallback' }}", "fallback"),
        ("{{ input.name and input.x }}", 3),
        ("{{ 0 and bogus_free }}" if False else "{{ 0 and 1 / 0 }}", 0),
        ("{{ 1 or 1 / 0 }}", 1),
        ("{{ 'yes' if input.x > 2 else 'no' }}", "yes"),
        ("{{ 'yes' if input.flag else 'no' }}", "no"),
    ],
)
def test_operators_follow_precedence_and_short_circuit(text: str, expected: Any) -> None:
    assert ev(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("{{ len(input.tags) }}", 3),
        ("{{ len('abc') }}", 3),
        ("{{ str(5) }}", "5"),
        ("{{ str(true) }}", "true"),
        ("{{ int('42') }}", 42),
        ("{{ int(3.9) }}", 3),
        ("{{ float('2.5') }}", 2.5),
        ("{{ bool('false') }}", False),
        ("{{ bool(1) }}", True),
        ("{{ upper(input.name) }}", "ADA"),
        ("{{ input.name.lower() }}", "ada"),
        ("{{ trim('  x ') }}", "x"),
        ("{{ json(input.nested) }}", '{"k": [10, 20]}'),
        ("{{ parse_json('{\"a\": 1}').a }}", 1),
        ("{{ keys(input.nested) }}", ["k"]),
        ("{{ values(input.nested) }}", [[10, 20]]),
        ("{{ contains(input.tags, 'a') }}", True),
        ("{{ join(input.tags, '-') }}", "a-b-c"),
        ("{{ split('a,b', ',') }}", ["a", "b"]),
        ("{{ replace('aXa', 'X', 'Y') }}", "aYa"),
        ("{{ round(2.567, 2) }}", 2.57),
        ("{{ round(2.5) }}", 2),
        ("{{ abs(-4) }}", 4),
        ("{{ min(3, 1, 2) }}", 1),
        ("{{ max(input.nested.k) }}", 20),
        ("{{ sum([1, 2, 3]) }}", 6),
        ("{{ default(input.missing, 'd') }}", "d"),
        ("{{ default(input.x, 'd') }}", 3),
        ("{{ startswith(input.name, 'A') }}", True),
        ("{{ endswith(input.name, 'x') }}", False),
    ],
)
def test_table_functions_compute_their_results(text: str, expected: Any) -> None:
    assert ev(text) == expected


def test_now_returns_an_iso_timestamp() -> None:
    value = ev("{{ now() }}")
    assert isinstance(value, str)
    assert datetime.fromisoformat(value).tzinfo is not None


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("{{ upper(5) }}", "upper() cannot take (number)"),
        ("{{ len(input.x) }}", "len() cannot take (number)"),
        ("{{ int('abc') }}", "int() cannot take (string)"),
        ("{{ join(input.tags, 5) }}", "join() cannot take (array, number)"),
        ("{{ sum(['a']) }}", "sum() cannot take (array)"),
        ("{{ round(true) }}", "round() cannot take (boolean)"),
        ("{{ 1 / 0 }}", "division by zero"),
        ("{{ 1 % 0 }}", "division by zero"),
        ("{{ input.nested - 1 }}", "cannot apply '-' to object and number"),
        ("{{ -'a' }}", "cannot negate a string"),
        ("{{ input.x < 'a' }}", "cannot compare number < string"),
        ("{{ 1 in 5 }}", "cannot test number in number"),
        ("{{ $('Nowhere').item.json }}", "'Nowhere' has no output"),
        ("{{ $nothing }}", "unknown variable $nothing"),
    ],
)
def test_runtime_faults_raise_evaluation_errors_naming_the_cause(text: str, fragment: str) -> None:
    with pytest.raises(EvaluationError) as info:
        ev(text)
    assert fragment in info.value.message
    assert text in info.value.message


# --- rendering ---------------------------------------------------------------------------


def test_whole_templates_keep_their_json_type() -> None:
    assert ev("{{ input.x }}") == 3 and isinstance(ev("{{ input.x }}"), int)
    assert ev("{{ input.nested }}") == {"k": [10, 20]}
    assert ev("{{ input.missing }}") is None


def test_embedded_templates_stringify_json_null_and_booleans() -> None:
    text = "n={{ input.nested }} m={{ input.missing }} f={{ input.flag }} t={{ true }} x={{ 3 }}"
    assert ev(text) == 'n={"k": [10, 20]} m= f=false t=true x=3'


def test_render_walks_structures_and_leaves_other_values_alone() -> None:
    value = {"a": "{{ input.x }}", "b": ["hi {{ input.name }}", 4, None], "c": {"d": True}}
    assert render(value, SCOPE) == {"a": 3, "b": ["hi Ada", 4, None], "c": {"d": True}}


# --- properties --------------------------------------------------------------------------

_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3)
    | st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=10,
)

_TEMPLATES = [
    "{{ input.a + input.b }}", "{{ input.a * 2 - input.b }}", "{{ len(input) }}",
    "{{ upper(input.a) }}", "{{ input.a < input.b }}", "{{ input.a / input.b }}",
    "{{ input[0].x }}", "{{ keys(input) }}", "{{ join(input, ',') }}", "{{ sum(input) }}",
    "{{ max(input) }}", "{{ int(input.a) }}", "{{ round(input.a, 1) }}", "{{ input.a in input.b }}",
    "{{ contains(input, input.a) }}", "{{ $('N').item.json.a % input }}", "{{ -input.a }}",
    "v={{ input }} {{ $item }}", "{{ split(input.a, input.b) }}", "{{ float(input) }}",
    "{{ parse_json(input.a) }}", "{{ replace(input.a, 'a', input.b) }}", "{{ abs(input) }}",
]


_SYMBOLS = list("{}$()[]'\".,+-*/%<=>!abin 0123 _\\")


@given(text=st.text(alphabet=st.sampled_from(_SYMBOLS), max_size=40))
@settings(deadline=None)
def test_parsing_any_text_returns_a_template_or_raises_expression_error(text: str) -> None:
    try:
        parse_template(text)
    except ExpressionError:
        pass


@given(text=st.text(max_size=60))
@settings(deadline=None)
def test_parsing_arbitrary_unicode_raises_nothing_but_expression_error(text: str) -> None:
    try:
        parse_template("{{ " + text)
    except ExpressionError:
        pass


@given(data=_json, node=_json, template=st.sampled_from(_TEMPLATES))
@settings(deadline=None)
def test_evaluating_on_random_json_raises_only_evaluation_error(
    data: Any, node: Any, template: str
) -> None:
    scope = Scope(input=data, nodes={"N": node}, extra={"$item": data})
    try:
        evaluate(parse_template(template), scope)
    except EvaluationError:
        pass


@given(text=st.text().filter(lambda t: "{{" not in t))
@settings(deadline=None)
def test_rendering_a_string_without_braces_returns_it_unchanged(text: str) -> None:
    assert render(text, SCOPE) == text


@given(value=_json)
@settings(deadline=None)
def test_a_whole_template_keeps_the_json_type_of_its_value(value: Any) -> None:
    out = render("{{ input }}", Scope(input=value))
    assert out == value and type(out) is type(value)
    assert json.dumps(out) == json.dumps(value)
