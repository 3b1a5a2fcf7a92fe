"""A start of a stored graph is cheap: the version's validated, compiled plan is cached (in
process and in Redis), a warm start is two Redis round trips, and the cache never runs
a version other than the one asked for (updates, deletes, other workspaces)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

import orchestrator.service.graph_store as graph_store
from orchestrator.kernel.registry import Registry
from orchestrator.local.embedded_redis import EmbeddedRedis
from orchestrator.service import admission
from orchestrator.service.plan_cache import fingerprint
from tests.api.conftest import Api, api_registry, chain, open_api
from tests.fake_nodes import graph
from tests.support.redis_writes import round_trips


@contextmanager
def counted(calls: dict[str, int], module: Any, name: str) -> Iterator[None]:
    """Count calls of ``module.name`` into ``calls[name]``."""
    real = getattr(module, name)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        calls[name] = calls.get(name, 0) + 1
        return real(*args, **kwargs)

    setattr(module, name, wrapper)
    try:
        yield
    finally:
        setattr(module, name, real)


async def start(api: Api, graph_id: str, **body: Any) -> dict[str, Any]:
    response = await api.client.post(f"/graphs/{graph_id}/runs", json={"input": {"x": 1}, **body})
    assert response.status_code == 202, response.text
    run: dict[str, Any] = (await api.client.get(f"/runs/{response.json()['run_id']}")).json()
    return run


def wide(graph_id: str, width: int) -> dict[str, Any]:
    nodes = [("a", "emit", "Start")] + [(f"r{i}", "relay", f"Relay {i}") for i in range(width)]
    return graph(nodes, [("a", "out", f"r{i}", "in") for i in range(width)], id=graph_id)


async def test_a_second_start_of_a_stored_graph_neither_validates_nor_compiles(api: Api) -> None:
    assert (await api.client.post("/graphs", json=wide("w", 50))).status_code == 201
    await start(api, "w")
    calls: dict[str, int] = {}
    with counted(calls, graph_store, "validate_graph"), counted(calls, graph_store, "compile_template"):
        runs = [await start(api, "w") for _ in range(5)]
    assert calls == {}
    assert all(len(run["nodes"]) == 51 and run["meta"]["graph_version"] == 1 for run in runs)


async def test_a_warm_start_is_two_redis_round_trips(api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(admission, "SAMPLE_S", 0.0)  # every start reads the queue depth
    assert (await api.client.post("/graphs", json=wide("w", 50))).status_code == 201
    await start(api, "w")
    calls: list[int] = []
    with round_trips(calls):
        response = await api.client.post("/graphs/w/runs", json={"input": {"x": 1}})
    assert response.status_code == 202
    assert len(calls) == 2  # admission; the create script (guard, plan, run index)
    assert api.dispatched[-1] == (response.json()["run_id"], ["a"])


async def test_starts_in_a_burst_far_below_the_queue_bound_read_its_depth_once(
    api: Api, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A depth reading far below the bound stands for a moment: the starts of a burst make
    one round trip each (the create script), not two."""
    monkeypatch.setattr(admission, "SAMPLE_S", 60.0)  # the whole burst within one reading
    assert (await api.client.post("/graphs", json=wide("w", 50))).status_code == 201
    await start(api, "w")
    calls: list[int] = []
    with round_trips(calls):
        for _ in range(5):
            response = await api.client.post("/graphs/w/runs", json={"input": {"x": 1}})
            assert response.status_code == 202
    assert len(calls) == 5


async def test_a_start_after_an_update_runs_the_new_version(api: Api) -> None:
    assert (await api.client.post("/graphs", json=chain("g1"))).status_code == 201
    assert [n["name"] for n in (await start(api, "g1"))["nodes"].values()] == ["Start", "Middle", "End"]
    renamed = chain("g1")
    renamed["nodes"][2]["name"] = "Finish"
    assert (await api.client.put("/graphs/g1", json=renamed)).status_code == 200
    run = await start(api, "g1")
    assert run["meta"]["graph_version"] == 2
    assert [n["name"] for n in run["nodes"].values()] == ["Start", "Middle", "Finish"]
    old = await start(api, "g1", version=1)
    assert old["meta"]["graph_version"] == 1
    assert [n["name"] for n in old["nodes"].values()] == ["Start", "Middle", "End"]


async def test_a_graph_deleted_and_created_again_under_its_id_runs_as_the_new_graph(api: Api) -> None:
    assert (await api.client.post("/graphs", json=chain("g1"))).status_code == 201
    await start(api, "g1")
    assert (await api.client.delete("/graphs/g1")).status_code == 204
    assert (await api.client.post("/graphs/g1/runs", json={})).status_code == 404
    again = graph([("a", "emit", "Only")], [], id="g1")
    assert (await api.client.post("/graphs", json=again)).status_code == 201
    run = await start(api, "g1")
    assert [n["name"] for n in run["nodes"].values()] == ["Only"]


async def test_a_graph_another_process_deleted_is_not_started_from_the_cache(api: Api) -> None:
    assert (await api.client.post("/graphs", json=chain("g1"))).status_code == 201
    await start(api, "g1")
    await api.redis.delete(api.app.state.services.keys.graph("g1"))  # as another API process would
    response = await api.client.post("/graphs/g1/runs", json={})
    assert response.status_code == 404
    assert "unknown graph 'g1'" in response.json()["error"]["message"]


async def test_runs_started_from_the_cache_are_listed_under_their_graph(api: Api) -> None:
    assert (await api.client.post("/graphs", json=chain("g1"))).status_code == 201
    ids = {(await start(api, "g1"))["run_id"] for _ in range(3)}
    listed = (await api.client.get("/graphs/g1/runs")).json()
    assert {run["run_id"] for run in listed["items"]} == ids


@pytest.fixture
async def two_workspaces(redis_server: EmbeddedRedis, tmp_path: Path) -> AsyncIterator[Api]:
    keys_file = tmp_path / "keys.json"
    keys_file.write_text(json.dumps([{"key": "alpha-key", "workspace": "alpha", "role": "editor"},
                                     {"key": "beta-key", "workspace": "beta", "role": "editor"}]))
    api = await open_api(redis_server, api_keys="admin-key", api_keys_file=str(keys_file))
    yield api
    await api.close()


async def test_a_cached_graph_of_another_workspace_stays_unknown(two_workspaces: Api) -> None:
    api = two_workspaces
    alpha, beta = {"Authorization": "Bearer alpha-key"}, {"Authorization": "Bearer beta-key"}
    assert (await api.client.post("/graphs", json=chain("g1"), headers=alpha)).status_code == 201
    assert (await api.client.post("/graphs/g1/runs", json={}, headers=alpha)).status_code == 202
    refused = await api.client.post("/graphs/g1/runs", json={}, headers=beta)
    assert refused.status_code == 404


async def test_another_api_process_starts_from_the_plan_in_redis_without_validating(
        api: Api, redis_server: EmbeddedRedis) -> None:
    assert (await api.client.post("/graphs", json=wide("w", 20))).status_code == 201
    await start(api, "w")
    other = await open_api(redis_server, key_prefix=api.settings.key_prefix)
    try:
        calls: dict[str, int] = {}
        with counted(calls, graph_store, "validate_graph"), counted(calls, graph_store, "validate"):
            run = await start(other, "w")
        assert calls == {}
        assert len(run["nodes"]) == 21
    finally:
        await other.close()


async def test_a_changed_registry_validates_the_stored_graph_again(
        api: Api, redis_server: EmbeddedRedis) -> None:
    assert (await api.client.post("/graphs", json=chain("g1"))).status_code == 201
    await start(api, "g1")
    smaller = Registry()  # this process's nodes lack the relay type
    for node_type in api_registry():
        if node_type.id != "relay":
            smaller.register(node_type.definition, node_type.executor, node_type.source)
    assert fingerprint(smaller, api.settings.graph_limits()) != fingerprint(api_registry(),
                                                                            api.settings.graph_limits())
    other = await open_api(redis_server, registry=smaller, key_prefix=api.settings.key_prefix)
    try:
        response = await other.client.post("/graphs/g1/runs", json={})
        assert response.status_code == 422
        assert "relay" in response.json()["error"]["message"]
    finally:
        await other.close()
