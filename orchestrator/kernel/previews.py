"""Previews: what completed and error events carry of a node's outputs and parameters
(the whole values are stored once, by the store)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from .json_text import json_encoder
from .protocol import DataValue

PREVIEW_CHARS = 2000  # a resolved parameter's JSON in completed/error events is cut here
OUTPUT_PREVIEW_CHARS = 16 * 1024  # the outputs a completed event carries, all ports together
_SCALARS = (str, int, float, bool, type(None))  # JSON decodes their JSON back to an equal value

# Built once (json_text.py): values as text, an unknown object as ``str(o)`` (outputs) or
# ``"<TypeName>"`` (parameters).
_OUTPUT_TEXT = json_encoder(default=str)
_PARAMETER_TEXT = json_encoder(default=lambda o: f"<{type(o).__name__}>")


def output_preview(outputs: dict[str, DataValue], texts: Mapping[str, str] | None = None
                   ) -> tuple[dict[str, Any], bool]:
    """The outputs as the completed event carries them, and whether any was cut. Outputs
    are stored once, by the store; the event carries each port's ``{type, value}`` while
    their JSON stays within ``OUTPUT_PREVIEW_CHARS``, and past that ``{type, preview,
    chars}``: the value's JSON cut short, and its full length. Readers that need the
    whole value read the stored outputs. ``texts``: each port's value as JSON text, when
    already encoded (``check_outputs``)."""
    out: dict[str, Any] = {}
    left = OUTPUT_PREVIEW_CHARS
    for port, value in outputs.items():
        whole = value.to_json()
        text = texts[port] if texts is not None and port in texts else _OUTPUT_TEXT(whole["value"])
        if len(text) <= left:
            out[port], left = whole, left - len(text)
        else:
            out[port], left = {"type": whole["type"], "preview": text[:left] + "…", "chars": len(text)}, 0
    return out, any("preview" in v for v in out.values())


def parameter_preview(data: dict[str, Any], known: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The resolved parameters as events carry them (for a run view): JSON values as they
    are, a materialized artifact as ``"<TypeName>"``, a value whose JSON is longer than
    ``PREVIEW_CHARS`` as that JSON cut short. ``known`` holds previews already made of some
    of the values (the same at every step), taken as they are."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        if known is not None and key in known:
            out[key] = known[key]
            continue
        text = _PARAMETER_TEXT(value)
        if len(text) > PREVIEW_CHARS:
            out[key] = text[:PREVIEW_CHARS] + "…"
        else:  # a scalar as it is (its JSON decodes to itself), else what its JSON decodes to
            out[key] = value if type(value) in _SCALARS else json.loads(text)
    return out


__all__ = ["OUTPUT_PREVIEW_CHARS", "PREVIEW_CHARS", "output_preview", "parameter_preview"]
