"""A run can always be looked at: an output nested deeper than ``ORCH_MAX_OUTPUT_DEPTH``
fails its node with an error naming the limit, instead of a run whose ``GET /runs/{id}``
cannot be encoded (a 500, red-team "other observations")."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from orchestrator.local.embedded_redis import EmbeddedRedis
from tests.api.conftest import Api, open_api
from tests.support.inline_worker import drain, repo_registry


@pytest.fixture
async def vapi(redis_server: EmbeddedRedis) -> AsyncIterator[Api]:
    api = await open_api(redis_server, registry=repo_registry())
    yield api
    await api.close()


def nested(pairs: int) -> Any:
    """``{"a": [{"a": [... "bottom"]}]}``: two levels per pair."""
    value: Any = "bottom"
    for _ in range(pairs):
        value = {"a": [value]}
    return value


def trigger_then_set() -> dict[str, Any]:
    """Start (outputs the run input) -> Set Fields."""
    return {"id": "deep", "nodes": [
        {"id": "t", "type": "manual_trigger", "name": "Start"},
        {"id": "s", "type": "set_fields", "name": "Set", "data": {"fields": {"seen": True}}}],
        "edges": [{"id": "e1", "source": "t", "sourceHandle": "output", "target": "s", "targetHandle": "input",
                   "data": {"channel": "flow"}}]}


async def start_and_view(api: Api, run_input: Any) -> dict[str, Any]:
    started = await api.client.post("/graphs/deep/runs", json={"input": run_input})
    assert started.status_code == 202, started.text
    await drain(api, repo_registry())
    view = await api.client.get(f"/runs/{started.json()['run_id']}")
    assert view.status_code == 200, view.text
    body: dict[str, Any] = view.json()
    return body


async def test_an_output_nested_past_the_limit_fails_its_node_and_the_run_stays_viewable(vapi: Api) -> None:
    assert (await vapi.client.post("/graphs", json=trigger_then_set())).status_code == 201
    view = await start_and_view(vapi, nested(150))  # 300 levels: past the limit (128) and pydantic's (255)
    assert view["status"] == "failed"
    assert view["nodes"]["t"]["status"] == "failed"
    assert "128 levels" in view["error"]["message"] and "ORCH_MAX_OUTPUT_DEPTH" in view["error"]["message"]


async def test_an_output_within_the_limit_is_stored_and_shown(vapi: Api) -> None:
    assert (await vapi.client.post("/graphs", json=trigger_then_set())).status_code == 201
    view = await start_and_view(vapi, nested(60))  # 120 levels
    assert view["status"] == "succeeded"
    assert view["nodes"]["t"]["outputs"]["output"]["value"] == nested(60)


async def test_a_child_is_listed_once_its_run_exists_never_as_an_id_that_answers_404(vapi: Api) -> None:
    """A child run is linked to its parent before its run is created (service/children.py):
    a view of the parent in between lists it only once ``GET /runs/{child}`` answers."""
    from orchestrator.service.child_links import ChildLinks
    from orchestrator.service.runs import RunRequest, start_run

    assert (await vapi.client.post("/graphs", json=trigger_then_set())).status_code == 201
    parent = (await vapi.client.post("/graphs/deep/runs", json={"input": {}})).json()["run_id"]
    child = "c" * 32
    await ChildLinks(vapi.store, vapi, vapi.settings).link(parent, "s", child)  # the child's start under way
    assert (await vapi.client.get(f"/runs/{child}")).status_code == 404
    assert (await vapi.client.get(f"/runs/{parent}")).json()["children"] == []

    await start_run(vapi.store, repo_registry(), trigger_then_set(), RunRequest({}, run_id=child), dispatch=vapi)
    assert (await vapi.client.get(f"/runs/{parent}")).json()["children"] == [child]
    assert (await vapi.client.get(f"/runs/{child}")).status_code == 200
