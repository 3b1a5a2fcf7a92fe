"""Expression budgets: a short expression cannot ask a worker for gigabytes or minutes."""

from __future__ import annotations

import tracemalloc

import pytest

from orchestrator.kernel.errors import ExpressionLimitError
from orchestrator.kernel.expressions import ExpressionLimits, Scope, evaluate, parse_template
from orchestrator.kernel.local import run_graph_local
from tests.fake_nodes import graph, make_registry

REG = make_registry()


def nested_replace(levels: int, seed: str = "abcdefgh") -> str:
    """The attack: each level inserts the seed between every character of the last."""
    return "{{ " + "replace(" * levels + repr(seed) + f", '', {seed!r})" * levels + " }}"


def test_nested_replace_is_refused_before_it_allocates() -> None:
    source = nested_replace(12)
    assert len(source) < 350  # ~4.8 million characters asked for by 316 characters
    tracemalloc.start()
    try:
        with pytest.raises(ExpressionLimitError, match="max_string_chars"):
            evaluate(parse_template(source), Scope())
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 20 * 1024 * 1024


def test_join_of_a_large_separator_is_refused() -> None:
    limits = ExpressionLimits(max_string_chars=1000)
    source = "{{ join(split('a b c d e f g h i j k l'), replace('xxxxxxxxxx', 'x', 'yyyyyyyyyy')) }}"
    with pytest.raises(ExpressionLimitError, match="join"):
        evaluate(parse_template(source), Scope(limits=limits))


def test_string_concatenation_counts_toward_the_limit() -> None:
    limits = ExpressionLimits(max_string_chars=10)
    with pytest.raises(ExpressionLimitError, match="max_string_chars"):
        evaluate(parse_template("{{ 'abcdef' + 'ghijkl' }}"), Scope(limits=limits))
    assert evaluate(parse_template("{{ 'abc' + 'def' }}"), Scope(limits=limits)) == "abcdef"


def test_list_length_is_limited() -> None:
    limits = ExpressionLimits(max_list_items=5)
    with pytest.raises(ExpressionLimitError, match="max_list_items"):
        evaluate(parse_template("{{ split('a b c d e f g') }}"), Scope(limits=limits))
    with pytest.raises(ExpressionLimitError, match="max_list_items"):
        evaluate(parse_template("{{ [1, 2, 3] + [4, 5, 6] }}"), Scope(limits=limits))


def test_steps_are_limited() -> None:
    limits = ExpressionLimits(max_steps=50)
    source = "{{ " + " + ".join(["1"] * 60) + " }}"
    with pytest.raises(ExpressionLimitError, match="max_steps"):
        evaluate(parse_template(source), Scope(limits=limits))


def test_result_size_is_limited_for_values_read_whole() -> None:
    limits = ExpressionLimits(max_result_bytes=100)
    scope = Scope(input={"big": "x" * 500}, limits=limits)
    with pytest.raises(ExpressionLimitError, match="max_result_bytes"):
        evaluate(parse_template("{{ input.big }}"), scope)


def test_ordinary_expressions_stay_within_the_default_limits() -> None:
    scope = Scope(input={"name": "Ada", "tags": ["a", "b"]})
    assert evaluate(parse_template("Hi {{ upper(input.name) }}: {{ join(input.tags, ', ') }}"), scope) \
        == "Hi ADA: a, b"


async def test_a_node_whose_parameter_goes_over_a_limit_fails_naming_parameter_and_limit() -> None:
    g = graph([("a", "emit", "A"), ("b", "relay", "B", {"value": nested_replace(12)})],
              [("a", "out", "b", "in")])
    result = await run_graph_local(g, REG, {"x": 1})
    assert result.status == "failed"
    error = next(e for e in result.events if e.event_type == "error").data["error"]
    assert error["parameter"] == "value"
    assert error["node_id"] == "b"
    assert "max_string_chars" in error["message"]


def test_the_limits_are_settings_of_the_worker() -> None:
    from orchestrator.settings import Settings

    limits = Settings(expression_max_string_chars=10, expression_max_steps=7).expression_limits()
    with pytest.raises(ExpressionLimitError, match="max_string_chars"):
        evaluate(parse_template("{{ 'abcdef' + 'ghijkl' }}"), Scope(limits=limits))
    assert limits.max_steps == 7


def test_many_large_strings_in_one_expression_add_up_to_a_total_limit() -> None:
    """Each copy is within max_string_chars (531,440 characters); sixty of them in one list
    literal would hold 32 MB, from 8 KB of expression. They count toward one total."""
    one = nested_replace(5)[3:-3]
    source = "{{ len([" + ", ".join([one] * 60) + "]) }}"
    assert len(source) < 8500
    tracemalloc.start()
    try:
        with pytest.raises(ExpressionLimitError, match="max_total_chars"):
            evaluate(parse_template(source), Scope())
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 24 * 1024 * 1024


def test_the_total_is_shared_by_every_evaluation_in_one_scope() -> None:
    """One scope per node execution: many parameters cannot each build up to the limits."""
    limits = ExpressionLimits(max_string_chars=800, max_total_chars=1000)
    template = parse_template("{{ replace('" + "x" * 600 + "', 'x', 'y') }}")
    scope = Scope(limits=limits)
    assert evaluate(template, scope) == "y" * 600
    with pytest.raises(ExpressionLimitError, match="max_total_chars"):
        evaluate(template, scope)
    assert evaluate(template, Scope(limits=limits)) == "y" * 600  # a fresh scope, a fresh total


async def test_a_node_whose_parameters_add_up_over_the_total_fails_naming_it() -> None:
    value = [nested_replace(5)] * 40  # 40 templates of 531,440 characters each
    g = graph([("a", "emit", "A"), ("b", "relay", "B", {"value": value})], [("a", "out", "b", "in")])
    result = await run_graph_local(g, REG, {"x": 1})
    assert result.status == "failed"
    error = next(e for e in result.events if e.event_type == "error").data["error"]
    assert (error["node_id"], error["parameter"]) == ("b", "value")
    assert "max_total_chars" in error["message"]


# -- time: steps add up per node execution; an ended execution stops its evaluations ---


def test_steps_of_every_evaluation_in_one_scope_add_up_to_a_total() -> None:
    """Each evaluation is within max_steps; a thousand of them (a condition per item of a
    long list) are not, together."""
    limits = ExpressionLimits(max_steps=100, max_total_steps=1000)
    template = parse_template("{{ " + " + ".join(["input"] * 20) + " > 0 }}")  # ~41 steps
    scope = Scope(input=1, limits=limits)
    for _ in range(24):
        assert evaluate(template, scope) is True
    with pytest.raises(ExpressionLimitError, match=r"above the limit of 1000 \(max_total_steps\)"):
        evaluate(template, scope)
    assert evaluate(template, Scope(input=1, limits=limits)) is True  # a fresh scope, a fresh total


def test_the_default_total_lets_a_simple_condition_run_over_a_hundred_thousand_items() -> None:
    template = parse_template("{{ $item.age >= 18 }}")
    scope = Scope()
    kept = sum(evaluate(template, Scope(extra={"$item": {"age": i % 40}}, spending=scope.spending))
               for i in range(100_000))
    assert kept == 100_000 * 22 // 40


def test_a_stopped_spending_ends_every_evaluation_sharing_it_at_its_next_step() -> None:
    scope = Scope(input=1)
    template = parse_template("{{ input + 1 }}")
    assert evaluate(template, scope) == 2
    scope.spending.stop("the node execution it belongs to has ended")
    with pytest.raises(ExpressionLimitError, match="evaluation stopped: the node execution"):
        evaluate(template, scope)


def test_the_total_steps_and_source_length_are_settings_of_the_worker() -> None:
    from orchestrator.settings import Settings

    limits = Settings(expression_max_total_steps=5, expression_max_source_chars=30).expression_limits()
    assert (limits.max_total_steps, limits.max_source_chars) == (5, 30)


# -- the parse cache and the length of an expression's text ---------------------------


def test_distinct_long_expressions_are_not_kept_parsed() -> None:
    """The red-team attack: distinct 1.9 MB expressions, each parsed once (as validation
    does), grew the process by ~3.6 MB apiece. Now the cache holds none of them."""
    from orchestrator.kernel.expressions import TEMPLATES

    before = TEMPLATES.total_chars
    tracemalloc.start()
    try:
        for i in range(5):
            parse_template("{{ '" + str(i) + "x" * 1_900_000 + "' }}")
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert held < 2 * 1024 * 1024
    assert TEMPLATES.total_chars <= max(before, TEMPLATES.max_total_chars)


def test_short_expressions_stay_parsed_and_the_cache_is_bounded_by_their_total_length() -> None:
    from orchestrator.kernel.text_cache import TextCache

    cache: TextCache[str] = TextCache(str.upper, max_key_chars=10, max_total_chars=30, max_entries=100)
    assert cache.get("abc") == "ABC"
    assert cache.get("abc") is cache.get("abc")
    for i in range(20):
        cache.get(f"key-{i:05d}")  # 9 characters each
    assert cache.total_chars <= 30 and len(cache) == 3
    assert cache.get("x" * 11) == "X" * 11 and len(cache) == 3  # too long to keep


def test_an_expression_text_over_the_limit_is_refused_at_run_time_before_parsing() -> None:
    from orchestrator.kernel.expressions import render

    limits = ExpressionLimits(max_source_chars=50)
    assert render("{{ input }}", Scope(input=3, limits=limits)) == 3
    with pytest.raises(ExpressionLimitError, match=r"60 characters, above the limit of 50 \(max_source_chars\)"):
        render("{{ '" + "x" * 52 + "' }}", Scope(limits=limits))
