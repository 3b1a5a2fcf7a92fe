"""Socket types: the catalogue, the coercion table row by row, and refusals."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.kernel.errors import CoercionError
from orchestrator.kernel.protocol import BinaryRef
from orchestrator.kernel.sockets import (
    SOCKET_TYPES,
    can_connect,
    coerce,
    coerce_parameter,
    socket_catalogue,
)

SEED_TYPES = {
    "agent", "tools", "model", "string", "text", "float", "int", "boolean", "json",
    "messages", "message", "array", "binary", "document", "vector", "trigger", "color",
}

# (source, target, value, expected) for every row of the seeds' coercion tables.
TABLE_ROWS: list[tuple[str, str, Any, Any]] = [
    ("int", "float", 3, 3.0),
    ("int", "string", 42, "42"),
    ("float", "string", 0.5, "0.5"),
    ("boolean", "string", True, "true"),
    ("boolean", "string", False, "false"),
    ("string", "text", "hello", "hello"),
    ("text", "string", "long text", "long text"),
    ("json", "string", {"a": [1, 2]}, json.dumps({"a": [1, 2]})),
    ("json", "text", {"a": 1}, json.dumps({"a": 1}, indent=2)),
    ("string", "messages", "hi", [{"role": "user", "content": "hi"}]),
    (
        "messages", "string",
        [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}], "a",
    ),
    ("string", "message", "hi", {"role": "user", "content": "hi"}),
    ("message", "string", {"role": "user", "content": "hey"}, "hey"),
    ("message", "text", {"role": "user", "content": "hey"}, "hey"),
    ("document", "text", {"text": "body", "metadata": {"p": 1}}, "body"),
    ("document", "json", {"text": "b", "metadata": {"p": 1}}, {"text": "b", "metadata": {"p": 1}}),
]


def test_catalogue_lists_every_seed_type_plus_data_and_any() -> None:
    ids = {entry["id"] for entry in socket_catalogue()}
    assert ids == SEED_TYPES | {"data", "any"}
    assert set(SOCKET_TYPES) == ids


def test_catalogue_entries_carry_a_hex_colour_a_shape_and_a_label() -> None:
    for entry in socket_catalogue():
        assert entry["color"].startswith("#") and len(entry["color"]) == 7
        assert entry["shape"] in {"circle", "square", "diamond", "circle-dashed"}
        assert entry["label"]
    assert SOCKET_TYPES["tools"].shape == "square"
    assert SOCKET_TYPES["boolean"].color == "#10b981"


def test_catalogue_is_json_serialisable() -> None:
    assert json.loads(json.dumps(socket_catalogue())) == socket_catalogue()


@pytest.mark.parametrize(("source", "target", "value", "expected"), TABLE_ROWS)
def test_each_table_row_connects_and_converts(
    source: str, target: str, value: Any, expected: Any
) -> None:
    assert can_connect(source, target)
    assert coerce(value, source, target) == expected


@pytest.mark.parametrize("sid", sorted(SEED_TYPES))
def test_a_socket_connects_to_its_own_type_and_passes_values_untouched(sid: str) -> None:
    marker = object()
    assert can_connect(sid, sid)
    assert coerce(marker, sid, sid) is marker


def test_structural_pass_through_hands_over_the_same_object() -> None:
    artifact = object()
    assert can_connect("agent", "tools")
    assert coerce(artifact, "agent", "tools") is artifact


@pytest.mark.parametrize("sid", sorted(SEED_TYPES))
def test_every_type_connects_to_and_from_data_and_any(sid: str) -> None:
    for generic in ("data", "any"):
        assert can_connect(sid, generic)
        assert can_connect(generic, sid)


@pytest.mark.parametrize(
    ("source", "target"),
    [
        ("string", "int"), ("float", "int"), ("text", "messages"), ("tools", "agent"),
        ("json", "array"), ("model", "string"), ("vector", "array"), ("string", "boolean"),
        ("messages", "text"), ("binary", "string"), ("trigger", "boolean"),
    ],
)
def test_pairs_outside_the_table_are_refused_naming_both_types(source: str, target: str) -> None:
    assert not can_connect(source, target)
    with pytest.raises(CoercionError) as info:
        coerce("x", source, target)
    assert repr(source) in info.value.message and repr(target) in info.value.message


def test_values_into_data_or_any_pass_untouched() -> None:
    value = {"k": [1, "2"]}
    assert coerce(value, "json", "data") is value
    assert coerce(value, "string", "any") is value


@pytest.mark.parametrize(
    ("target", "value", "expected"),
    [
        ("int", "3", 3),
        ("int", " 7 ", 7),
        ("int", 4.0, 4),
        ("int", "5.0", 5),
        ("float", "2.5", 2.5),
        ("float", 2, 2.0),
        ("string", 3, "3"),
        ("string", True, "true"),
        ("string", None, ""),
        ("string", {"a": 1}, '{"a": 1}'),
        ("text", [1, 2], "[1, 2]"),
        ("boolean", "TRUE", True),
        ("boolean", "no", False),
        ("boolean", 0, False),
        ("json", {"a": 1}, {"a": 1}),
        ("json", '{"a": 1}', {"a": 1}),
        ("json", [1], [1]),
        ("array", "[1, 2]", [1, 2]),
        ("array", (1, 2), [1, 2]),
        ("messages", {"role": "system", "content": "s"}, [{"role": "system", "content": "s"}]),
        ("message", "yo", {"role": "user", "content": "yo"}),
        ("document", "body", {"text": "body", "metadata": {}}),
        ("vector", [1, 2.5], [1.0, 2.5]),
        ("binary", {"ref": "tmp/a"}, {"ref": "tmp/a"}),
        ("color", "#eab308", "#eab308"),
        ("trigger", {"anything": 1}, None),
    ],
)
def test_data_values_convert_to_the_target_type_when_they_can(
    target: str, value: Any, expected: Any
) -> None:
    assert coerce(value, "data", target) == expected
    assert coerce(value, "any", target) == expected


def test_a_binary_ref_object_passes_as_binary() -> None:
    ref = BinaryRef(ref="tmp/abc", mime="application/pdf", size=10)
    assert coerce(ref, "data", "binary") is ref


def test_data_into_a_structural_socket_passes_untouched() -> None:
    value = {"provider": "x"}
    assert coerce(value, "data", "model") is value


@pytest.mark.parametrize(
    ("target", "value", "json_name"),
    [
        ("int", "abc", "string"),
        ("int", True, "boolean"),
        ("int", 2.5, "number"),
        ("float", {"a": 1}, "object"),
        ("float", "nan", "string"),
        ("boolean", "maybe", "string"),
        ("json", 5, "number"),
        ("json", "not json", "string"),
        ("array", {"a": 1}, "object"),
        ("message", 12, "number"),
        ("vector", ["a"], "array"),
        ("color", "red", "string"),
        ("binary", "file.pdf", "string"),
        ("document", None, "null"),
    ],
)
def test_data_that_cannot_convert_raises_naming_both_types_and_the_json_type(
    target: str, value: Any, json_name: str
) -> None:
    with pytest.raises(CoercionError) as info:
        coerce(value, "data", target)
    message = info.value.message
    assert "'data'" in message and repr(target) in message and json_name in message


def test_a_table_row_with_a_malformed_value_raises_coercion_error() -> None:
    with pytest.raises(CoercionError, match="'messages'"):
        coerce([], "messages", "string")
    with pytest.raises(CoercionError, match="'document'"):
        coerce(42, "document", "text")


@pytest.mark.parametrize(
    ("param_type", "value", "expected"),
    [
        ("string", 12, "12"),
        ("text", {"a": 1}, '{"a": 1}'),
        ("int", "12", 12),
        ("float", "0.7", 0.7),
        ("boolean", "true", True),
        ("json", '{"k": 2}', {"k": 2}),
        ("array", "[3]", [3]),
        ("messages", "hi", [{"role": "user", "content": "hi"}]),
        ("secret", "s3", "s3"),
        ("code", 1, "1"),
        ("enum", 2, 2),
        ("model", "offline:echo", "offline:echo"),
        ("graph", {"nodes": []}, {"nodes": []}),
    ],
)
def test_wired_values_coerce_to_the_declared_parameter_type(
    param_type: str, value: Any, expected: Any
) -> None:
    assert coerce_parameter(value, param_type) == expected


@pytest.mark.parametrize(("param_type", "value"), [("int", "twelve"), ("graph", [1]), ("json", 3)])
def test_a_parameter_value_that_cannot_convert_names_the_parameter_type(
    param_type: str, value: Any
) -> None:
    with pytest.raises(CoercionError, match=repr(param_type)):
        coerce_parameter(value, param_type)


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=8,
)


@given(value=_json, target=st.sampled_from(sorted(SOCKET_TYPES)))
@settings(deadline=None)
def test_coercing_any_json_from_data_either_converts_or_raises_coercion_error(
    value: Any, target: str
) -> None:
    try:
        coerce(value, "data", target)
    except CoercionError:
        pass


@given(source=st.sampled_from(sorted(SOCKET_TYPES)), target=st.sampled_from(sorted(SOCKET_TYPES)))
@settings(deadline=None)
def test_can_connect_agrees_with_coerce_refusing_unknown_pairs(source: str, target: str) -> None:
    if can_connect(source, target):
        return
    with pytest.raises(CoercionError, match="cannot connect"):
        coerce(None, source, target)
