"""What runs and uploads keep in the Redis every workspace shares: an output is stored once,
runs and workspaces have byte budgets that name themselves when passed, uploads are
checked as they arrive, and a full Redis is an error that says so (``storage_budget.py``).

Runs go through the API (a real redis-server) and their nodes through the real step
function and run store (``tests/support/inline_worker.py``)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.errors import StoreFullError
from orchestrator.local.embedded_redis import EmbeddedRedis
from orchestrator.store.redis_client import client
from tests.api.conftest import Api, api_registry, open_api
from tests.fake_nodes import graph
from tests.support.inline_worker import drain

MB = 1024 * 1024


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def emitting(graph_id: str, size: int) -> dict[str, Any]:
    """A run whose first node outputs ``size`` bytes of text and whose second relays it."""
    return graph([("a", "emit", "Big", {"value": "x" * size}), ("b", "relay", "Relay")],
                 [("a", "out", "b", "in")], id=graph_id)


async def run_graph(api: Api, graph_json: dict[str, Any], key: str) -> dict[str, Any]:
    saved = await api.client.post("/graphs", json=graph_json, headers=bearer(key))
    assert saved.status_code == 201, saved.text
    started = await api.client.post(f"/graphs/{graph_json['id']}/runs", json={}, headers=bearer(key))
    assert started.status_code == 202, started.text
    await drain(api, api_registry())
    detail = await api.client.get(f"/runs/{started.json()['run_id']}", headers=bearer(key))
    assert detail.status_code == 200
    return dict(detail.json())


@pytest.fixture
async def budget_api(redis_server: EmbeddedRedis, tmp_path: Path) -> AsyncIterator[Api]:
    keys_file = tmp_path / "keys.json"
    keys_file.write_text(json.dumps([{"key": "alpha-key", "workspace": "alpha", "role": "editor"},
                                     {"key": "beta-key", "workspace": "beta", "role": "editor"}]))
    api = await open_api(redis_server, api_keys_file=str(keys_file), run_max_bytes=3 * MB,
                         workspace_max_bytes=5 * MB, blob_redis_max_bytes=2 * MB)
    yield api
    await api.close()


async def test_an_output_is_stored_once_and_its_event_carries_a_preview(budget_api: Api) -> None:
    detail = await run_graph(budget_api, emitting("once", MB), "alpha-key")
    assert detail["status"] == "succeeded"
    assert len(detail["nodes"]["a"]["outputs"]["out"]["value"]) == MB  # GET /runs/{id} answers it whole
    stream = await budget_api.redis.xrange(budget_api.store.keys.events(detail["run_id"]))
    event_bytes = sum(len(fields["e"]) for _, fields in stream)
    assert event_bytes < 100_000, f"the events hold {event_bytes} bytes: the outputs again"
    completed = [json.loads(f["e"]) for _, f in stream if json.loads(f["e"])["event_type"] == "completed"]
    assert all(e["data"]["outputs_truncated"] for e in completed)


async def test_a_run_past_its_budget_fails_naming_it_and_stores_nothing_more(budget_api: Api) -> None:
    # The first node's megabyte fits, the relay's copy of it does not (3 MB: two of them
    # plus a third node would not fit either; here the second copy already passes 2 x 1.5).
    detail = await run_graph(budget_api, emitting("greedy", 3 * MB // 2), "alpha-key")
    assert detail["status"] == "failed"
    error = detail["error"]
    assert error["code"] == "storage_budget" and error["limit"] == "ORCH_RUN_MAX_BYTES"
    assert "ORCH_RUN_MAX_BYTES" in error["message"] and error["node_id"] == "b"
    assert detail["nodes"]["b"]["status"] == "failed" and not detail["nodes"]["b"].get("outputs")


async def test_the_events_a_node_streams_count_against_its_run_budget(redis_server: EmbeddedRedis) -> None:
    api = await open_api(redis_server, api_keys="k-events", run_max_bytes=200_000)
    try:
        chatty = graph([("a", "emit", "Start"), ("t", "ticker", "Chatty", {"count": 3000})],
                       [("a", "out", "t", "in")], id="chatty")
        detail = await run_graph(api, chatty, "k-events")
        assert detail["status"] == "failed" and detail["nodes"]["t"]["status"] == "failed"
        assert detail["error"]["limit"] == "ORCH_RUN_MAX_BYTES"
        stream = await api.redis.xrange(api.store.keys.events(detail["run_id"]))
        assert sum(len(f["e"]) for _, f in stream) < 200_000 + 70_000  # the budget and one counted chunk
    finally:
        await api.close()


async def test_a_workspace_past_its_budget_fails_its_runs_and_leaves_other_workspaces_alone(
        budget_api: Api) -> None:
    for n in range(2):  # 2 x (1 MB + its relay's 1 MB) = 4 MB of the workspace's 5
        assert (await run_graph(budget_api, emitting(f"fill{n}", MB), "alpha-key"))["status"] == "succeeded"
    over = await run_graph(budget_api, emitting("over", MB), "alpha-key")
    assert over["status"] == "failed" and over["error"]["limit"] == "ORCH_WORKSPACE_MAX_BYTES"
    assert "workspace 'alpha'" in over["error"]["message"]
    assert (await run_graph(budget_api, emitting("other", MB), "beta-key"))["status"] == "succeeded"


async def test_an_upload_past_the_workspace_budget_gets_429_naming_it_and_a_delete_gives_room_back(
        budget_api: Api) -> None:
    async def upload(size: int) -> Any:
        return await budget_api.client.post("/files", files={"file": ("f.bin", b"x" * size)},
                                            headers=bearer("beta-key"))

    first = await upload(2 * MB - 1000)
    second = await upload(2 * MB - 1000)
    assert first.status_code == second.status_code == 201
    refused = await upload(2 * MB - 1000)
    assert refused.status_code == 429
    assert refused.json()["error"]["limit"] == "ORCH_WORKSPACE_MAX_BYTES"
    ref = first.json()["$binary"]["ref"]
    assert (await budget_api.client.delete(f"/files/{ref}", headers=bearer("beta-key"))).status_code == 204
    assert (await upload(2 * MB - 1000)).status_code == 201


async def test_an_upload_larger_than_the_store_takes_is_refused_as_it_arrives(budget_api: Api) -> None:
    sent = 0

    async def body() -> AsyncIterator[bytes]:  # 30 MiB, chunked: no Content-Length to refuse early
        nonlocal sent
        head = (b'--b\r\nContent-Disposition: form-data; name="file"; filename="big.bin"\r\n'
                b"Content-Type: application/octet-stream\r\n\r\n")
        yield head
        for _ in range(30 * 16):
            sent += 64 * 1024
            yield b"x" * (64 * 1024)
        yield b"\r\n--b--\r\n"

    refused = await budget_api.client.post("/files", content=body(), headers={
        **bearer("beta-key"), "Content-Type": "multipart/form-data; boundary=b"})
    assert refused.status_code == 413
    message = refused.json()["error"]["message"]
    assert "ORCH_FILES_MAX_BYTES" in message and "ORCH_BLOB_REDIS_MAX_BYTES" in message
    assert sent < 4 * MB, f"{sent} bytes were read before the 413"


async def test_a_full_redis_answers_507_naming_it_and_a_node_step_fails_naming_it(tmp_path: Path) -> None:
    with EmbeddedRedis(unix_socket=False, maxmemory_mb=2) as small:
        api = await open_api(small, api_keys="full-key", workspace_max_bytes=0, run_max_bytes=0)
        try:
            assert (await api.client.post("/graphs", json=emitting("late", 300_000),
                                          headers=bearer("full-key"))).status_code == 201
            assert (await api.client.post("/graphs/late/runs", json={},
                                          headers=bearer("full-key"))).status_code == 202
            filler = client(small.url)
            n = 0
            for size in (65536, 1024, 64):  # fill it as any writer would, to its last bytes
                while True:
                    try:
                        await filler.set(f"fill:{n}", b"x" * size)
                    except Exception as exc:
                        assert "maxmemory" in str(exc)
                        break
                    n += 1
            await filler.aclose()
            # Larger than what Redis frees by itself now and then (a client's query buffer).
            upload = await api.client.post("/files", files={"file": ("f.bin", b"x" * 300_000)},
                                           headers=bearer("full-key"))
            assert upload.status_code == 507
            assert "maxmemory" in upload.json()["error"]["message"]
            saved = await api.client.post("/graphs", json=emitting("g", 300_000), headers=bearer("full-key"))
            assert saved.status_code == 507 and saved.json()["error"]["code"] == "store_full"
            with pytest.raises(StoreFullError, match="maxmemory"):  # the worker retries, then fails the task
                await drain(api, api_registry())
        finally:
            await api.close()
