"""Embedding: documents -> the same documents with a ``vector`` each (or one text -> a vector).

Embedders are in ``nodes/_rag/embedders.py``. Which server is called with which key is
``orchestrator/host/endpoint.py``, as for models: with a ``credential``, its key goes to its own
``base_url`` (or to a ``base_url`` parameter its origins allow), never the worker's key; a
``base_url`` parameter without a credential must be one the operator configured
(``ORCH_OPENAI_BASE_URL``, ``ORCH_MODEL_BASE_URLS``), else the node fails naming it. Every
request passes the egress policy (the operator's own endpoints as configured).
"""

from __future__ import annotations

from typing import Any

from nodes._rag.documents import documents_in
from nodes._rag.embedders import (
    DEFAULT_DIMENSIONS,
    Embedder,
    HashEmbedder,
    OpenAIEmbedder,
    is_offline,
    split_spec,
    word_tokens,
)
from nodes._rag.services import as_text
from nodes._shared.values import input_value, result
from orchestrator.host.credentials import mask
from orchestrator.host.endpoint import resolve_endpoint
from orchestrator.host.node_host import node_host
from orchestrator.kernel.errors import OrchestratorError, ParameterError
from orchestrator.kernel.protocol import DataValue, ExecutionResult, FlowContext


async def _embed(data: dict[str, Any], ctx: FlowContext, texts: list[str]) -> tuple[str, list[list[float]]]:
    spec = as_text(data.get("model")) or "openai:text-embedding-3-small"
    dims = data.get("dimensions")
    if is_offline(spec):
        embedder: Embedder = HashEmbedder(name=spec, dimensions=int(dims or DEFAULT_DIMENSIONS))
        vectors = await embedder.embed(texts)
        await ctx.report_usage(f"dryrun:{spec.partition(':')[2] or spec}", {"input_tokens": word_tokens(texts),
                                                                            "calls": 1})
        return embedder.name, vectors
    provider, model = split_spec(spec)
    if provider not in ("openai", "openai-like"):
        raise ParameterError(f"parameter 'model': provider {provider!r} is not supported (openai, dryrun)",
                             parameter="model")
    credential = as_text(data.get("credential"))
    endpoint = await resolve_endpoint(ctx, base_url=as_text(data.get("base_url")), credential=credential,
                                      parameter="credential" if credential else "base_url")
    import httpx  # here, not at node discovery

    from orchestrator.host.egress.client import egress_client

    timeout = httpx.Timeout(float(data.get("timeout_s") or 60))
    async with egress_client(endpoint.policy(node_host(ctx).settings), timeout=timeout) as client:
        embedder = OpenAIEmbedder(name=spec, model=model, base_url=endpoint.base_url, api_key=endpoint.api_key,
                                  client=client, batch_size=int(data.get("batch_size") or 64),
                                  dimensions=int(dims) if dims else None)
        try:
            vectors = await embedder.embed(texts)
            await ctx.report_usage(f"{provider}:{model}", {"input_tokens": embedder.input_tokens, "calls": 1})
            return spec, vectors
        except OrchestratorError as exc:
            exc.message = node_host(ctx).redact(mask(exc.message, endpoint.secrets()))
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
