"""What a node's outputs may be, checked when the node completes, before they are stored.

* Every port is one the definition declares, holding a :class:`DataValue`.
* The outputs' JSON is at most ``max_output_bytes`` (``ORCH_MAX_OUTPUT_BYTES``): larger
  payloads belong in a BinaryRef.
* No value nests lists and objects deeper than ``max_output_depth``
  (``ORCH_MAX_OUTPUT_DEPTH``, 128). Outputs are read back as JSON by the API, the console
  and expressions; an encoder stops somewhere (pydantic, which the API answers with, at
  255 levels; Python's ``json`` at its recursion limit), and a run whose view cannot be
  encoded cannot be looked at. The depth is measured without recursion, on values whose
  JSON is long enough to nest that deep (each level takes two brackets); encoding a value
  nested past the interpreter's recursion limit stops there, and fails the same way.

A breach fails the node with a :class:`NodeExecutionError` that names the limit.
"""

from __future__ import annotations

from typing import Any

from .definition import NodeDefinition
from .errors import NodeExecutionError
from .graph import Node
from .json_text import json_encoder
from .nesting import nested_deeper_than
from .protocol import DataValue, ExecutionResult

DEFAULT_MAX_DEPTH = 128
_AS_TEXT = json_encoder(default=str)  # built once (json_text.py)
_PORT_CHARS = len(': {"type": , "value": }')  # around a port's name, type and value in the outputs' JSON
_NAME_CHARS: dict[str, int] = {}  # a port name's or socket type's JSON length: a few names, every step
_NAME_CHARS_MAX = 1024


def _name_chars(name: Any) -> int:
    """The length of ``name``'s JSON text, kept for strings (cleared when it holds too many)."""
    if not isinstance(name, str):  # an executor's odd type: measured, not kept
        return len(_AS_TEXT(name))
    chars = _NAME_CHARS.get(name)
    if chars is None:
        if len(_NAME_CHARS) >= _NAME_CHARS_MAX:
            _NAME_CHARS.clear()
        chars = _NAME_CHARS[name] = len(_AS_TEXT(name))
    return chars


def _too_deep(node: Node, port: str, max_depth: int) -> NodeExecutionError:
    return NodeExecutionError(
        f"output {port!r} nests lists and objects more than {max_depth} levels deep "
        "(ORCH_MAX_OUTPUT_DEPTH); flatten it, or pass it on as text",
        node_id=node.id, node_name=node.name, handle=port,
    )


def check_outputs(node: Node, definition: NodeDefinition, result: ExecutionResult, *, max_bytes: int,
                  max_depth: int = DEFAULT_MAX_DEPTH) -> dict[str, str]:
    """Raise ``NodeExecutionError`` when ``result`` breaks a rule of the module docstring.

    Returns each port's value as the JSON text its size was measured on (``output_preview``
    takes it, instead of encoding the values again)."""
    allowed = {p.id for p in definition.outputs}
    for port, value in result.outputs.items():
        if port not in allowed:
            raise NodeExecutionError(
                f"executor produced a value on undeclared output port {port!r}; declared: {sorted(allowed)}",
                node_id=node.id, node_name=node.name, handle=port,
            )
        if not isinstance(value, DataValue):
            raise NodeExecutionError(
                f"output port {port!r} holds {type(value).__name__}, not a DataValue",
                node_id=node.id, node_name=node.name, handle=port,
            )
    # The length of the outputs' JSON ``{"port": {"type": ..., "value": ...}, ...}``, from
    # each value's text: the same number as encoding them whole.
    texts: dict[str, str] = {}
    size = 2 + 2 * max(0, len(result.outputs) - 1)  # the braces, and ", " between ports
    for port, value in result.outputs.items():
        whole = value.to_json()
        try:
            texts[port] = text = _AS_TEXT(whole["value"])
        except RecursionError:  # nested past the interpreter's limit (or holding itself): too deep
            raise _too_deep(node, port, max_depth) from None
        # Each level of nesting takes two brackets: a shorter text cannot nest deeper (most
        # outputs), a longer one is walked (without recursion).
        if len(text) > 2 * max_depth and nested_deeper_than(value.value, max_depth):
            raise _too_deep(node, port, max_depth)
        size += _name_chars(port) + _name_chars(whole["type"]) + len(text) + _PORT_CHARS
    if size > max_bytes:
        raise NodeExecutionError(
            f"outputs are {size} bytes, above the {max_bytes}-byte limit; store large payloads as a BinaryRef",
            node_id=node.id, node_name=node.name,
        )
    return texts
