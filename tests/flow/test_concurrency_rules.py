"""A graph's settings.concurrency is checked before anything is stored; errors name the field."""

from __future__ import annotations

import pytest

from orchestrator.kernel.errors import GraphSchemaError, ParameterError
from orchestrator.service.admission import held_by


def test_a_key_expression_over_the_run_input_gives_each_value_its_own_key() -> None:
    graph = {"id": "g", "settings": {"concurrency": {"key": "customer-{{ $run.input.customer }}", "max_runs": 2}}}
    held = held_by(graph, {"customer": "acme"}, "ws1")
    assert held is not None
    assert (held.scope, held.key, held.rule.max_runs, held.rule.strategy) == ("ws1:g", "customer-acme", 2, "queue")
    assert held_by({"id": "g"}, {}, "ws1") is None


@pytest.mark.parametrize(("rule", "field"), [
    ({"max_runs": 0}, "settings.concurrency.max_runs"),
    ({"strategy": "lifo"}, "settings.concurrency.strategy"),
    ({"keys": "x"}, "settings.concurrency.keys"),
])
def test_a_malformed_rule_is_a_graph_error_naming_the_field(rule: dict[str, object], field: str) -> None:
    with pytest.raises(GraphSchemaError, match=field.replace(".", r"\.")):
        held_by({"id": "g", "settings": {"concurrency": rule}}, {}, "default")


def test_a_key_that_cannot_be_evaluated_names_the_setting() -> None:
    graph = {"id": "g", "settings": {"concurrency": {"key": "{{ $run.input.a.b.c }}"}}}
    with pytest.raises(ParameterError, match=r"settings\.concurrency\.key"):
        held_by(graph, {"a": 1}, "default")
