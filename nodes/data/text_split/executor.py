"""Text Split: text -> ``{"chunks": [...], "count": n}``, or a list -> ``{"text": ...}`` (join).

``separator`` splits on a string (empty pieces dropped), ``lines`` on line breaks (blank
lines dropped), ``chunk`` into windows of ``chunk_size`` characters that overlap by
``chunk_overlap``. ``field`` is a dotted path to the text; by default the input itself
when it is a string (a list, for join), else ``input.text`` (``input.chunks`` for join).
"""

from __future__ import annotations

import json
from typing import Any

from nodes._shared.paths import get_path
from nodes._shared.values import input_value, result
from orchestrator.kernel.protocol import DataValue, ExecutionResult, FlowContext


def _source(value: Any, field: Any, *, join: bool) -> Any:
    if field:
        found = get_path(value, str(field))
        if found is None:
            raise ValueError(f"parameter 'field': nothing at {field!r} in the input")
        return found
    if isinstance(value, list if join else str):
        return value
    default = "chunks" if join else "text"
    if isinstance(value, dict) and default in value:
        return value[default]
    kind = "a list" if join else "a string"
    raise ValueError(f"text_split needs {kind} input or an input.{default}; set parameter 'field'")


def chunk(text: str, size: int, overlap: int) -> list[str]:
    if size < 1:
        raise ValueError(f"parameter 'chunk_size' must be at least 1; got {size}")
    if not 0 <= overlap < size:
        raise ValueError(
            f"parameter 'chunk_overlap' must be >= 0 and below chunk_size ({size}); got {overlap}"
        )
    step = size - overlap
    chunks = []
    for start in range(0, len(text), step):
        chunks.append(text[start:start + size])
        if start + size >= len(text):
            break
    return chunks


class TextSplit:
    node_type = "text_split"

    async def execute(
        self, data: dict[str, Any], inputs: dict[str, DataValue], ctx: FlowContext
    ) -> ExecutionResult:
        mode = data.get("mode") or "separator"
        separator = data.get("separator")
        separator = "\n" if separator is None else str(separator)
        value = input_value(inputs)
        if mode == "join":
            parts = _source(value, data.get("field"), join=True)
            if not isinstance(parts, list):
                raise ValueError(f"mode 'join' needs a list; got {type(parts).__name__}")
            return result({"output": {"text": separator.join(_text(p) for p in parts)}})
        text = _source(value, data.get("field"), join=False)
        if not isinstance(text, str):
            raise ValueError(f"mode {mode!r} needs text; got {type(text).__name__}")
        if mode == "separator":
            if separator == "":
                raise ValueError("parameter 'separator' must not be empty in mode 'separator'")
            chunks = [p for p in text.split(separator) if p != ""]
        elif mode == "lines":
            chunks = [line for line in text.splitlines() if line.strip()]
        elif mode == "chunk":
            size = int(data.get("chunk_size") or 1000)
            chunks = chunk(text, size, int(data.get("chunk_overlap") or 0))
        else:
            raise ValueError(
                f"parameter 'mode' must be separator, chunk, lines or join; got {mode!r}"
            )
        return result({"output": {"chunks": chunks, "count": len(chunks)}})


def _text(part: Any) -> str:
    return part if isinstance(part, str) else json.dumps(part, ensure_ascii=False)


executor = TextSplit()
