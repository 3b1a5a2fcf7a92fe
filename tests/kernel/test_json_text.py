"""``json_value`` gives what ``json.loads`` gives, value or error, for any text; the compact
encoder writes JSON that reads back as the value it was given."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from orchestrator.kernel.json_text import json_encoder, json_value, utf8_len


@pytest.mark.parametrize("text", [
    '{"output":{"type":"data","value":{"x":1,"s1":[1,2.5,null,true]}}}', '[1,2]', '"x"', '1', 'null',
    '{"a":"\\u00e9\\n"}', ' {"a":1}', '{"a":1} ', '\n[1]\n', b'{"a":1}', '1.5e3', '-Infinity',
])
def test_json_value_decodes_as_json_loads(text: Any) -> None:
    assert json_value(text) == json.loads(text)


def test_json_value_reads_nan_as_json_loads_does() -> None:
    assert math.isnan(json_value("NaN"))


@pytest.mark.parametrize("text", ["", "{", '{"a":1}x', "nul", '{"a":1}{"b":2}', "[1,]", " "])
def test_json_value_refuses_what_json_loads_refuses_with_the_same_error(text: str) -> None:
    with pytest.raises(json.JSONDecodeError) as expected:
        json.loads(text)
    with pytest.raises(json.JSONDecodeError) as got:
        json_value(text)
    assert str(got.value) == str(expected.value)


def test_json_value_reads_back_what_the_compact_encoder_writes() -> None:
    value = {"k": ["é", {"n": None, "f": 0.1, "i": -3}], "": {}}
    assert json_value(json_encoder(compact=True)(value)) == value


COMPACT = json_encoder(compact=True)


def test_the_compact_encoder_writes_what_json_loads_reads_back_as_the_same_value() -> None:
    value = {"s": "é😀\n\"\\", "i": [0, -1, 2**63 - 1, 2**64 - 1], "f": [0.1, 1e16, 1.5e-7, -0.0],
             "n": None, "b": [True, False], "nested": {"": {"k": []}}, "t": (1, 2)}
    text = COMPACT(value)
    assert json.loads(text) == {**value, "t": [1, 2]}
    assert ", " not in text and ": " not in text


def test_the_compact_encoder_writes_utf8_and_utf8_len_counts_its_bytes() -> None:
    text = COMPACT({"s": "é😀"})
    assert text == '{"s":"é😀"}'
    assert utf8_len(text) == len(text.encode()) == 14 and utf8_len('{"s":"x"}') == 9


def test_what_the_fast_encoder_refuses_the_standard_one_writes() -> None:
    big = {"i": 2**70, "deep": [[[[]]]]}
    assert COMPACT(big) == json.dumps(big, separators=(",", ":"))  # past 64 bits, exactly
    deep: list[Any] = []
    for _ in range(300):  # past orjson's 254 levels, within the interpreter's
        deep = [deep]
    assert json.loads(COMPACT(deep)) == deep


def test_nan_and_the_infinities_are_null_not_invalid_json() -> None:
    assert COMPACT([math.nan, math.inf, -math.inf]) == "[null,null,null]"


def test_default_turns_what_json_cannot_carry_as_the_standard_encoder_did() -> None:
    import dataclasses
    import datetime

    @dataclasses.dataclass
    class Point:
        x: int

    when = datetime.datetime(2026, 11, 29, 9, 30)
    with_str = json_encoder(compact=True, default=str)
    assert with_str({"when": when, "p": Point(1), 3: "k"}) == \
        json.dumps({"when": when, "p": Point(1), 3: "k"}, default=str, separators=(",", ":"))
    with pytest.raises(TypeError, match="not JSON serializable"):
        COMPACT({"when": when})
