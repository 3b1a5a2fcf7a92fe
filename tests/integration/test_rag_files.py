"""A file uploaded to the API is read by a worker process: BinaryRefs in a run input."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from orchestrator.api import create_app
from orchestrator.local.embedded_redis import EmbeddedRedis
from orchestrator.settings import Settings

pytestmark = pytest.mark.integration

DOC = b"# Field notes\n\nThe heron waits at dawn.\n\nThe otter plays at dusk.\n"


async def test_a_file_uploaded_to_the_api_is_loaded_by_a_worker(redis_server: EmbeddedRedis, run_graph: Any,
                                                                 registry: Any) -> None:
    app = create_app(Settings(redis_url=redis_server.url, api_run_sweeper=False), registry=registry)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://api") as client:
        r = await client.post("/files", files={"file": ("notes.md", DOC, "text/markdown")})
        assert r.status_code == 201, r.text
        ref = r.json()
    await app.state.services.redis.aclose()
    graph = {"id": "load_upload", "nodes": [
        {"id": "t", "type": "manual_trigger", "name": "Start", "data": {}},
        {"id": "load", "type": "document_loader", "name": "Load", "data": {}},
        {"id": "chunk", "type": "text_chunker", "name": "Chunk", "data": {"chunk_size": 30, "chunk_overlap": 0}}],
        "edges": [
            {"id": "e1", "source": "t", "sourceHandle": "output", "target": "load", "targetHandle": "input",
             "data": {"channel": "flow"}},
            {"id": "e2", "source": "load", "sourceHandle": "output", "target": "chunk", "targetHandle": "input",
             "data": {"channel": "flow"}}]}
    done = await run_graph(graph, {"file": ref})
    assert done.status == "succeeded", done.events[-1][1].data
    doc = done.outputs["load"]["output"]["documents"][0]
    assert doc["metadata"] == {"source": "notes.md", "title": "Field notes", "format": "markdown"}
    texts = [c["text"] for c in done.outputs["chunk"]["output"]["documents"]]
    assert any("heron waits at dawn" in t for t in texts) and any("otter plays" in t for t in texts)
