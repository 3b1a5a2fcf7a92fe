"""A parameter's declared type, bounds and values hold whatever produced its value: an
expression, a wire or a default (the red team lifted Code's memory_mb to 8192 MB with
"{{ 8192 }}", which the literal 8192 could not)."""

from __future__ import annotations

from typing import Any

import pytest

from orchestrator.kernel.definition import Parameter
from orchestrator.kernel.errors import ParameterValueError
from orchestrator.kernel.parameters import within_definition

MEMORY = Parameter(id="memory_mb", type="int", min=32, max=4096)


def test_values_within_the_definition_pass_and_numeric_text_becomes_a_number() -> None:
    assert within_definition(MEMORY, 256) == 256
    assert within_definition(MEMORY, "512") == 512
    assert within_definition(MEMORY, " 64.0 ") == 64
    assert within_definition(MEMORY, None) is None  # unset: the executor's default
    assert within_definition(Parameter(id="s", type="string", max=3), "long text") == "long text"


@pytest.mark.parametrize(("param", "value", "message"), [
    (MEMORY, 8192, "above the maximum 4096"),
    (MEMORY, "8192", "above the maximum 4096"),
    (MEMORY, 16, "below the minimum 32"),
    (MEMORY, "lots", "not a number"),
    (MEMORY, True, "expected an integer"),
    (MEMORY, 64.5, "expected an integer"),
    (Parameter(id="mode", type="enum", values=["a", "b"]), "c", "'c' is not one of 'a', 'b'"),
])
def test_values_outside_the_definition_are_refused_naming_parameter_and_bound(
        param: Parameter, value: Any, message: str) -> None:
    with pytest.raises(ParameterValueError, match=message) as info:
        within_definition(param, value)
    assert repr(param.id) in info.value.message
