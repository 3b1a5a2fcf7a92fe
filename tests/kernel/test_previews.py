"""Previews: what events carry of a node's parameters and outputs."""

from __future__ import annotations

import math

from orchestrator.kernel.previews import PREVIEW_CHARS, parameter_preview


class Artifact:
    pass


def test_a_parameter_preview_is_each_values_json_decoded_and_a_long_one_cut() -> None:
    preview = parameter_preview({
        "text": "plain é", "n": 3, "ratio": 0.5, "on": True, "none": None,
        "pair": (1, "a"), "obj": {"k": [1, Artifact()]}, "long": "y" * (PREVIEW_CHARS + 10),
    })
    assert preview["text"] == "plain é" and preview["n"] == 3 and preview["ratio"] == 0.5
    assert preview["on"] is True and preview["none"] is None
    assert preview["pair"] == [1, "a"]  # what its JSON decodes to
    assert preview["obj"] == {"k": [1, "<Artifact>"]}
    assert preview["long"] == '"' + "y" * (PREVIEW_CHARS - 1) + "…"


def test_a_parameter_preview_keeps_a_float_that_json_cannot_spell_as_the_same_float() -> None:
    assert math.isnan(parameter_preview({"x": math.nan})["x"])
