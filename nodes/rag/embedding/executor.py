"""Embedding: documents -> the same documents with a ``vector`` each (or one text -> a vector).

Embedders are in ``nodes/_rag/embedders.py``. A base URL from the graph (parameter or
credential) is reached through the egress policy; the operator's own
``ORCH_OPENAI_BASE_URL`` is trusted as configured.
"""

from __future__ import annotations

from typing import Any

import httpx

from nodes._rag.documents import documents_in
from nodes._rag.embedders import (
    DEFAULT_DIMENSIONS,
    Embedder,
    HashEmbedder,
    OpenAIEmbedder,
    default_api_key,
    is_offline,
    split_spec,
)
from nodes._rag.services import as_text, load_credential, settings_of
from nodes._shared.egress import egress_client
from nodes._shared.values import input_value, result
from orchestrator.credentials import mask
from orchestrator.kernel.errors import OrchestratorError, ParameterError
from orchestrator.kernel.protocol import DataValue, ExecutionResult, FlowContext


async def _embed(data: dict[str, Any], ctx: FlowContext, texts: list[str]) -> tuple[str, list[list[float]]]:
    spec = as_text(data.get("model")) or "openai:text-embedding-3-small"
    dims = data.get("dimensions")
    if is_offline(spec):
        embedder: Embedder = HashEmbedder(name=spec, dimensions=int(dims or DEFAULT_DIMENSIONS))
        return embedder.name, await embedder.embed(texts)
    provider, model = split_spec(spec)
    if provider not in ("openai", "openai-like"):
        raise ParameterError(f"parameter 'model': provider {provider!r} is not supported (openai, dryrun)",
                             parameter="model")
    base_url, key, trusted = as_text(data.get("base_url")), "", False
    if data.get("credential"):
        cred = await load_credential(ctx, as_text(data["credential"]), ("api_key", "bearer"))
        key = cred.values.get("key") or cred.values.get("token", "")
        base_url = base_url or cred.values.get("base_url", "")
    if not base_url:
        base_url, trusted = settings_of(ctx).openai_base_url or "https://api.openai.com/v1", True
    key = key or default_api_key()
    timeout = httpx.Timeout(float(data.get("timeout_s") or 60))
    client = httpx.AsyncClient(timeout=timeout) if trusted else egress_client(timeout=timeout)
    async with client:
        embedder = OpenAIEmbedder(name=spec, model=model, base_url=base_url, api_key=key, client=client,
                                  batch_size=int(data.get("batch_size") or 64),
                                  dimensions=int(dims) if dims else None)
        try:
            return spec, await embedder.embed(texts)
        except OrchestratorError as exc:
            exc.message = mask(exc.message, [key] if len(key) >= 4 else [])
            raise


class Embedding:
    node_type = "embedding"

    async def execute(self, data: dict[str, Any], inputs: dict[str, DataValue], ctx: FlowContext) -> ExecutionResult:
        text = as_text(data.get("text"))
        if text:
            name, vectors = await _embed(data, ctx, [text])
            return result({"output": {"text": text, "vector": vectors[0], "model": name,
                                      "dimensions": len(vectors[0])}})
        docs = documents_in(input_value(inputs), as_text(data.get("field")))
        name, vectors = await _embed(data, ctx, [d["text"] for d in docs]) if docs else (str(data.get("model")), [])
        out = [{**doc, "vector": vec} for doc, vec in zip(docs, vectors, strict=True)]
        return result({"output": {"documents": out, "count": len(out), "model": name,
                                  "dimensions": len(vectors[0]) if vectors else 0}})


executor = Embedding()
