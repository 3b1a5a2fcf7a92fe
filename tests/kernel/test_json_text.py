"""``json_value`` gives what ``json.loads`` gives, value or error, for any text."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from orchestrator.kernel.json_text import json_encoder, json_value


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
