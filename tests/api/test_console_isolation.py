"""The console's routes across workspaces and roles (red team of issues 17 and 24): a test
step's run never shows in another workspace's run lists, a draft's id is its workspace's,
testing an edited graph is an editor's right, and the outputs a test step seeds count
toward the storage budgets."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from orchestrator.local.embedded_redis import EmbeddedRedis
from tests.api.conftest import Api, chain, open_api

KEYS = {"a-editor": ("alpha", "editor"), "a-runner": ("alpha", "runner"), "b-editor": ("beta", "editor")}
MB = 1024 * 1024


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@pytest.fixture
async def two(redis_server: EmbeddedRedis, tmp_path: Path) -> AsyncIterator[Api]:
    keys_file = tmp_path / "keys.json"
    keys_file.write_text(json.dumps([{"key": k, "workspace": ws, "role": r} for k, (ws, r) in KEYS.items()]))
    api = await open_api(redis_server, api_keys_file=str(keys_file), run_max_bytes=3 * MB,
                         workspace_max_bytes=5 * MB)
    yield api
    await api.close()


async def test_a_test_step_of_an_unsaved_graph_never_lists_in_another_workspace(two: Api) -> None:
    """alpha tests a step of its draft; beta then creates a graph with that id (drafts
    reserve none): beta's run lists do not show alpha's run, and beta cannot put test runs
    under alpha's draft id."""
    draft = await two.client.put("/graphs/shared/draft", json=chain("shared"), headers=auth("a-editor"))
    assert draft.status_code == 200, draft.text
    started = await two.client.post("/graphs/shared/test-step", json={"node_id": "b", "graph": chain("shared")},
                                    headers=auth("a-editor"))
    assert started.status_code == 202, started.text
    alphas = started.json()["run_id"]
    refused = await two.client.post("/graphs/shared/test-step", json={"node_id": "b", "graph": chain("shared")},
                                    headers=auth("b-editor"))
    assert refused.status_code == 404, refused.text  # alpha's draft: unknown to beta
    assert (await two.client.post("/graphs", json=chain("shared"), headers=auth("b-editor"))).status_code == 201
    listed = (await two.client.get("/graphs/shared/runs", headers=auth("b-editor"))).json()["items"]
    assert alphas not in [r["run_id"] for r in listed]
    everywhere = (await two.client.get("/runs", headers=auth("b-editor"))).json()["items"]
    assert alphas not in [r["run_id"] for r in everywhere]
    own = await two.client.post("/graphs/shared/runs", json={}, headers=auth("b-editor"))
    listed = (await two.client.get("/graphs/shared/runs", headers=auth("b-editor"))).json()["items"]
    assert [r["run_id"] for r in listed] == [own.json()["run_id"]]


async def test_testing_an_edited_graph_needs_the_editor_role(two: Api) -> None:
    assert (await two.client.post("/graphs", json=chain("g1"), headers=auth("a-editor"))).status_code == 201
    edited = await two.client.post("/graphs/g1/test-step", json={"node_id": "b", "graph": chain("g1")},
                                   headers=auth("a-runner"))
    assert edited.status_code == 403 and "editor" in edited.text, edited.text
    unsaved = await two.client.post("/graphs/new/test-step", json={"node_id": "b", "graph": chain("new")},
                                    headers=auth("a-runner"))
    assert unsaved.status_code == 403, unsaved.text
    stored = await two.client.post("/graphs/g1/test-step", json={"node_id": "b"}, headers=auth("a-runner"))
    assert stored.status_code == 202, stored.text  # the stored version: a runner's right


async def test_the_outputs_a_test_step_seeds_count_toward_the_storage_budgets(
        two: Api, redis_server: EmbeddedRedis) -> None:
    """Before: 40 test steps seeding 1.9 MB each grew Redis by 82 MiB while the workspace's
    count grew by 15 KB."""
    big = "x" * (MB + MB // 2)
    codes = []
    for _ in range(4):
        answer = await two.client.post("/graphs/g2/test-step", json={
            "node_id": "b", "graph": chain("g2"), "outputs": {"a": {"out": big}}}, headers=auth("a-editor"))
        codes.append(answer.status_code)
    assert codes == [202, 202, 202, 429], codes
    assert "ORCH_WORKSPACE_MAX_BYTES" in answer.text
    assert len(two.dispatched) == 3  # the refused run was not sent to the workers
    small = await open_api(redis_server, api_keys="k-small", run_max_bytes=MB)
    try:
        over = await small.client.post("/graphs/g3/test-step", json={
            "node_id": "b", "graph": chain("g3"), "outputs": {"a": {"out": big}}}, headers=auth("k-small"))
        assert over.status_code == 429 and "ORCH_RUN_MAX_BYTES" in over.text, over.text
        assert small.dispatched == []
        stem = small.settings.key_prefix + ":run:"
        run_ids = [k[len(stem):] async for k in small.redis.scan_iter(stem + "*") if ":" not in k[len(stem):]]
        statuses = [(await small.store.get_run(r)).status for r in run_ids]
        assert statuses == ["failed"], statuses  # ended at once, not left queued
    finally:
        await small.close()


async def test_a_run_input_counts_toward_the_workspace_budget_before_anything_is_stored(
        redis_server: EmbeddedRedis) -> None:
    """Before: 30 unsigned webhook calls of 1.9 MB grew Redis by 182 MiB, 70 MiB of it (the
    run records' inputs) outside every budget, and past the budget the records kept coming."""
    small = await open_api(redis_server, api_keys="k-in", workspace_max_bytes=MB)
    try:
        assert (await small.client.post("/graphs", json=chain("g4"), headers=auth("k-in"))).status_code == 201
        payload = {"input": {"x": "z" * (MB // 2 + 1000)}}
        first = await small.client.post("/graphs/g4/runs", json=payload, headers=auth("k-in"))
        assert first.status_code == 202, first.text
        second = await small.client.post("/graphs/g4/runs", json=payload, headers=auth("k-in"))
        assert second.status_code == 429 and "ORCH_WORKSPACE_MAX_BYTES" in second.text, second.text
        stem = small.settings.key_prefix + ":run:"
        records = [k async for k in small.redis.scan_iter(stem + "*") if ":" not in k[len(stem):]]
        assert len(records) == 1 and len(small.dispatched) == 1  # the refused run stored nothing
    finally:
        await small.close()


async def test_previews_evaluate_a_bounded_number_at_once(api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: 60 concurrent costly previews (a viewer's) all evaluated at once on the
    default executor's threads; a cheap preview meanwhile took 2.7 s and RSS grew 260 MB."""
    from orchestrator.api import previews

    live, peak, lock = 0, 0, threading.Lock()

    def slow(*_: object) -> int:
        nonlocal live, peak
        with lock:
            live += 1
            peak = max(peak, live)
        time.sleep(0.15)
        with lock:
            live -= 1
        return 1

    monkeypatch.setattr(previews, "_evaluate", slow)
    answers = await asyncio.gather(*[api.client.post("/expressions/preview", json={"value": 1}) for _ in range(8)])
    assert [a.json() for a in answers] == [{"ok": True, "value": 1}] * 8
    assert peak <= previews.PREVIEW_CONCURRENCY, peak


async def test_a_graph_nested_too_deep_is_refused_naming_the_node_not_a_500(api: Api) -> None:
    """Before: a parameter nesting 400 levels made validate, save and draft a 500 (recursion
    in validation), and the stored draft could never be opened again."""
    deep: object = 1
    for _ in range(400):
        deep = {"a": deep}
    bad = chain("deep")
    bad["nodes"][0]["data"] = {"value": deep}
    checked = (await api.client.post("/graphs/validate", json=bad)).json()
    assert checked["valid"] is False and checked["error"]["node_id"] == "a", checked
    assert "200 levels" in checked["error"]["message"]
    saved = await api.client.post("/graphs", json=bad)
    assert saved.status_code == 422 and "200 levels" in saved.text, saved.text
    draft = await api.client.put("/graphs/deep/draft", json=bad)
    assert draft.status_code == 422, draft.text
    assert (await api.client.get("/graphs/deep/draft")).status_code == 200


async def test_an_unauthenticated_body_is_not_read_before_its_401(two: Api) -> None:
    """Before: FastAPI read and parsed a body before the route's key check, so slow
    unauthenticated 2 MiB bodies (90 of them) held 180 MB of the API until their 401."""
    read: list[bytes] = []
    sent: list[dict[str, object]] = []

    async def receive() -> dict[str, object]:
        read.append(b"x")
        return {"type": "http.request", "body": b'{"id": "g"}', "more_body": False}

    async def send(message: dict[str, object]) -> None:
        sent.append(message)

    for key in (None, "not-a-key"):
        headers = [(b"content-type", b"application/json"), (b"content-length", b"11")]
        if key:
            headers.append((b"authorization", f"Bearer {key}".encode()))
        scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
                 "scheme": "http", "path": "/graphs", "raw_path": b"/graphs", "query_string": b"",
                 "headers": headers, "client": ("127.0.0.1", 1), "server": ("api", 80), "root_path": ""}
        await two.app(scope, receive, send)
        assert sent[0]["status"] == 401 and read == [], (sent, read)
        sent.clear()
    answer = await two.client.post("/graphs", json=chain("ok1"), headers=auth("a-editor"))
    assert answer.status_code == 201, answer.text


async def test_a_test_step_of_a_node_that_only_materializes_is_a_422_naming_it(api: Api) -> None:
    """Before: a test step of a toolset (wired into an agent) started a run that failed with
    "'ToolsetExecutor' object has no attribute 'execute'"."""
    from tests.fake_nodes import graph

    linked = graph([("a", "emit", "Start"), ("n", "number", "Num", {"value": 2})], [], id="lk")
    answer = await api.client.post("/graphs/lk/test-step", json={"node_id": "n", "graph": linked})
    assert answer.status_code == 422 and "materialized" in answer.text, answer.text
    assert api.dispatched == []
