"""Vector Store: upsert documents with vectors into a collection, or delete records.

A record's id is the document's ``id`` (or ``metadata.id``) when it has one, else a hash
of its source, chunk index and text: loading the same document twice replaces its
records instead of duplicating them.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from nodes._rag.services import as_text, open_vector_store
from nodes._rag.vectors import Record
from nodes._shared.paths import get_path
from nodes._shared.values import input_value, result
from orchestrator.kernel.errors import ParameterError
from orchestrator.kernel.protocol import DataValue, ExecutionResult, FlowContext


def record_id(doc: dict[str, Any]) -> str:
    meta = doc.get("metadata") or {}
    given = doc.get("id") or meta.get("id")
    if given is not None:
        return str(given)
    key = json.dumps([meta.get("source"), meta.get("page"), meta.get("chunk_index"), doc.get("text")])
    return hashlib.sha256(key.encode()).hexdigest()[:32]


def records_in(value: Any, field: str) -> list[Record]:
    found = get_path(value, field) if field else value
    if isinstance(found, dict) and not field:
        found = found.get("documents", found)
    items = found if isinstance(found, list) else [found]
    records = []
    for i, doc in enumerate(items):
        vector = doc.get("vector") if isinstance(doc, dict) else None
        if not isinstance(vector, list) or not vector or not all(isinstance(x, int | float) for x in vector):
            raise ParameterError(f"input document {i} has no vector (a list of numbers); put an Embedding node "
                                 "before the Vector Store", parameter="field")
        records.append(Record(record_id(doc), [float(x) for x in vector], as_text(doc.get("text")),
                              dict(doc.get("metadata") or {})))
    return records


class VectorStoreNode:
    node_type = "vector_store"

    async def execute(self, data: dict[str, Any], inputs: dict[str, DataValue], ctx: FlowContext) -> ExecutionResult:
        collection = as_text(data.get("collection"))
        operation = as_text(data.get("operation")) or "upsert"
        async with open_vector_store(ctx, as_text(data.get("backend")), as_text(data.get("credential"))) as store:
            if operation == "upsert":
                records = records_in(input_value(inputs), as_text(data.get("field")))
                count = await store.upsert(collection, records)
                return result({"output": {"collection": collection, "upserted": count,
                                          "ids": [r.id for r in records]}})
            if operation == "delete":
                ids, where = data.get("ids"), data.get("where")
                if ids is not None and not (isinstance(ids, list) and all(isinstance(i, str) for i in ids)):
                    raise ParameterError("parameter 'ids' must be a list of strings", parameter="ids")
                if where is not None and not isinstance(where, dict):
                    raise ParameterError("parameter 'where' must be an object", parameter="where")
                if ids is None and not where:
                    raise ParameterError("delete needs parameter 'ids' or 'where' (refusing to empty the "
                                         "collection)", parameter="ids")
                deleted = await store.delete(collection, ids, where)
                return result({"output": {"collection": collection, "deleted": deleted}})
        raise ParameterError(f"parameter 'operation' must be upsert or delete; got {operation!r}",
                             parameter="operation")


executor = VectorStoreNode()
