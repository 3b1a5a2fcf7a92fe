"""Text Chunker: documents -> ``{"documents": [chunk, ...], "count": n}``.

Each chunk keeps its document's metadata and adds ``chunk_index`` (0-based within the
document), ``start`` and ``end`` (character offsets into the document's text, so
``text[start:end]`` is the chunk). Splitting is :func:`nodes._rag.chunking.split_text`.
"""

from __future__ import annotations

from typing import Any

from nodes._rag.chunking import DEFAULT_SEPARATORS, char_length, split_text, token_length
from nodes._rag.documents import documents_in
from nodes._shared.values import input_value, result
from orchestrator.kernel.errors import ParameterError
from orchestrator.kernel.protocol import DataValue, ExecutionResult, FlowContext


class TextChunker:
    node_type = "text_chunker"

    async def execute(self, data: dict[str, Any], inputs: dict[str, DataValue], ctx: FlowContext) -> ExecutionResult:
        size = int(data.get("chunk_size") or 1000)
        overlap = int(data.get("chunk_overlap") or 0)
        length = token_length if data.get("unit") == "tokens" else char_length
        separators = data.get("separators") or list(DEFAULT_SEPARATORS)
        if not isinstance(separators, list) or not all(isinstance(s, str) for s in separators):
            raise ParameterError("parameter 'separators' must be a list of strings", parameter="separators")
        chunks: list[dict[str, Any]] = []
        for doc in documents_in(input_value(inputs), str(data.get("field") or "")):
            try:
                spans = split_text(doc["text"], size=size, overlap=overlap, length=length,
                                   separators=tuple(separators))
            except ValueError as exc:
                raise ParameterError(str(exc), parameter="chunk_overlap") from None
            for index, span in enumerate(spans):
                meta = {**doc["metadata"], "chunk_index": index, "start": span.start, "end": span.end}
                chunks.append({"text": span.text, "metadata": meta})
        return result({"output": {"documents": chunks, "count": len(chunks)}})


executor = TextChunker()
