"""One conversion table: the Type Converter converts as a wire does wherever the socket
table converts, and widens only where the table refuses (kernel/conversion.py)."""

from __future__ import annotations

import math
from typing import Any

import pytest

from orchestrator.kernel.conversion import TARGETS, convert
from orchestrator.kernel.sockets import convert_to
from tests.nodes.node_harness import run_node, values

SAMPLES: list[Any] = [None, True, False, 0, 1, 2, -1, 1.5, 4.0, "", "x", "42", " 4.0 ", "3.5", "true", "no",
                      "y", "n", "[1, 2]", '{"a": 1}', "5", [1, "a"], {"a": [1]}, "nan"]


def _same(a: Any, b: Any) -> bool:
    return (isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b)) or a == b


@pytest.mark.parametrize("target", [t for t in TARGETS if t != "text"])
def test_where_the_socket_table_converts_the_explicit_conversion_agrees(target: str) -> None:
    agreed = 0
    for value in SAMPLES:
        try:
            wired = convert_to(value, target)
        except ValueError:
            continue
        assert _same(convert(value, target), wired), (value, target)
        agreed += 1
    assert agreed >= 2


@pytest.mark.parametrize(("value", "target", "expected"), [
    (True, "int", 1), (False, "float", 0.0), (2, "boolean", True), ("n", "boolean", False),
    ("5", "json", 5), (7, "json", 7), (None, "array", []), ("x", "array", ["x"]),
])
def test_an_explicit_ask_widens_what_a_wire_refuses(value: Any, target: str, expected: Any) -> None:
    with pytest.raises(ValueError):
        convert_to(value, target)
    assert convert(value, target) == expected


@pytest.mark.parametrize(("value", "target"), [("abc", "float"), ("3.5", "int"), ("maybe", "boolean"),
                                               ("{not json", "json"), ([1], "int"), ({"a": 1}, "boolean")])
def test_what_neither_converts_is_refused(value: Any, target: str) -> None:
    with pytest.raises(ValueError):
        convert(value, target)


def test_null_becomes_an_empty_string_on_a_wire_and_in_the_converter() -> None:
    """The two tables disagreed here ("" on a wire, "null" in the node); one rule now."""
    assert convert_to(None, "string") == "" == convert(None, "string")


async def test_the_type_converter_node_is_the_kernel_s_conversion() -> None:
    for value in SAMPLES:
        for target in TARGETS:
            try:
                expected = convert(value, target)
            except ValueError:
                with pytest.raises(ValueError, match=f"cannot convert .* to {target}"):
                    await run_node("type_converter", {"to": target}, {"input": value})
                continue
            out = values(await run_node("type_converter", {"to": target}, {"input": value}))["output"]
            assert _same(out, expected), (value, target)
