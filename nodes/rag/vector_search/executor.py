"""Vector Search: a query vector -> the collection's closest records, best first.

``context`` is the hits' texts joined with blank lines, each headed by its source (and
chunk index): ready to put into a prompt. ``query`` passes the input's ``text`` on.
"""

from __future__ import annotations

from typing import Any

from nodes._rag.services import as_text, open_vector_store
from nodes._shared.values import input_value, result
from orchestrator.kernel.errors import ParameterError
from orchestrator.kernel.protocol import DataValue, ExecutionResult, FlowContext


def _label(hit: dict[str, Any]) -> str:
    meta = hit["metadata"]
    parts = [str(meta.get("source", hit["id"]))]
    if meta.get("page") is not None:
        parts.append(f"page {meta['page']}")
    if meta.get("chunk_index") is not None:
        parts.append(f"chunk {meta['chunk_index']}")
    return ", ".join(parts)


class VectorSearch:
    node_type = "vector_search"

    async def execute(self, data: dict[str, Any], inputs: dict[str, DataValue], ctx: FlowContext) -> ExecutionResult:
        value = input_value(inputs)
        vector = data.get("vector")
        if vector is None and isinstance(value, dict):
            vector = value.get("vector")
        if not isinstance(vector, list) or not vector or not all(isinstance(x, int | float) for x in vector):
            raise ParameterError("parameter 'vector' must be a list of numbers (default: input.vector, from an "
                                 "Embedding node with parameter 'text')", parameter="vector")
        where = data.get("where")
        if where is not None and not isinstance(where, dict):
            raise ParameterError("parameter 'where' must be an object", parameter="where")
        top_k = int(data.get("top_k") or 4)
        async with open_vector_store(ctx, as_text(data.get("backend")), as_text(data.get("credential"))) as store:
            found = await store.query(as_text(data.get("collection")), [float(x) for x in vector], top_k, where)
        min_score = data.get("min_score")
        hits = [h.to_json() for h in found if min_score is None or h.score >= float(min_score)]
        context = "\n\n".join(f"[{_label(h)}]\n{h['text'].strip()}" for h in hits)
        query = value.get("text") if isinstance(value, dict) else None
        return result({"output": {"hits": hits, "count": len(hits), "context": context, "query": query}})


executor = VectorSearch()
