"""Wait nodes through the API, with the real step function on the test's loop
(``tests/support/inline_worker``): roles and workspaces, form validation, resume URLs,
and the sweeper's timers on Redis's clock."""

from __future__ import annotations

import hashlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.local.embedded_redis import EmbeddedRedis
from orchestrator.service.sweeper import Sweeper
from orchestrator.service.waits import sign, wake_due
from tests.api.conftest import Api, open_api
from tests.support.inline_worker import drain, repo_registry

SECRET = "api-test-resume-secret-0123456789"
KEYS = {"a-editor": ("alpha", "editor"), "a-runner": ("alpha", "runner"), "a-viewer": ("alpha", "viewer"),
        "b-admin": ("beta", "admin")}
FORM = {"type": "object", "properties": {"qty": {"type": "integer", "minimum": 1}}, "required": ["qty"]}


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def wait_graph(graph_id: str, wait: dict[str, Any]) -> dict[str, Any]:
    return {"id": graph_id, "nodes": [
        {"id": "t", "type": "manual_trigger", "name": "Start"},
        {"id": "w", "type": "wait", "name": "Wait", "data": wait},
        {"id": "s", "type": "set_fields", "name": "After", "data": {"fields": {"after": True}}},
    ], "edges": [
        {"id": "e1", "source": "t", "sourceHandle": "output", "target": "w", "targetHandle": "input",
         "data": {"channel": "flow"}},
        {"id": "e2", "source": "w", "sourceHandle": "output", "target": "s", "targetHandle": "input",
         "data": {"channel": "flow"}},
    ]}


@pytest.fixture
async def api(redis_server: EmbeddedRedis, tmp_path: Path) -> AsyncIterator[Api]:
    keys_file = tmp_path / "keys.json"
    keys_file.write_text(json.dumps([{"sha256": hashlib.sha256(k.encode()).hexdigest(), "workspace": w,
                                      "role": r} for k, (w, r) in KEYS.items()]))
    api = await open_api(redis_server, repo_registry(), api_keys_file=str(keys_file),
                         resume_url_secret=SECRET)
    yield api
    await api.close()


async def start_waiting(api: Api, wait: dict[str, Any]) -> str:
    """Save and start a run (alpha's), drained until the Wait node waits."""
    saved = await api.client.post("/graphs", json=wait_graph("gw", wait), headers=auth("a-editor"))
    assert saved.status_code == 201, saved.text
    started = await api.client.post("/graphs/gw/runs", json={"input": {"n": 1}}, headers=auth("a-runner"))
    assert started.status_code == 202, started.text
    run_id = str(started.json()["run_id"])
    await drain(api, repo_registry())
    assert (await api.store.get_run(run_id)).status == "waiting"
    return run_id


async def test_a_form_is_answered_by_a_runner_of_the_workspace_only(api: Api) -> None:
    run_id = await start_waiting(api, {"resume_on": "form", "form_schema": FORM, "message": "How many?"})
    form = f"/runs/{run_id}/waits/w/form"
    listed = (await api.client.get(f"/runs/{run_id}/waits", headers=auth("a-viewer"))).json()["items"]
    assert [(w["node_id"], w["kind"], w["message"], w["schema"]) for w in listed] == [
        ("w", "form", "How many?", FORM)]
    assert (await api.client.post(form, json={"qty": 2}, headers=auth("a-viewer"))).status_code == 403
    assert (await api.client.post(form, json={"qty": 2}, headers=auth("b-admin"))).status_code == 404
    assert (await api.client.get(f"/runs/{run_id}/waits", headers=auth("b-admin"))).status_code == 404
    bad = await api.client.post(form, json={"qty": 0}, headers=auth("a-runner"))
    assert bad.status_code == 422 and bad.json()["error"]["parameter"] == "data.qty"
    missing = await api.client.post(form, json={}, headers=auth("a-runner"))
    assert missing.status_code == 422 and "qty" in missing.json()["error"]["message"]
    assert (await api.client.post(form, content=b"{nope", headers=auth("a-runner"))).status_code == 422
    assert (await api.client.post(form, json={"qty": 3}, headers=auth("a-runner"))).status_code == 200
    again = await api.client.post(form, json={"qty": 4}, headers=auth("a-runner"))
    assert again.status_code == 409
    await drain(api, repo_registry())
    run = (await api.client.get(f"/runs/{run_id}", headers=auth("a-viewer"))).json()
    assert run["status"] == "succeeded"
    assert run["nodes"]["w"]["outputs"]["output"]["value"] == {"qty": 3}


async def test_a_resume_url_needs_the_secret_and_a_url_wait(api: Api, redis_server: EmbeddedRedis) -> None:
    run_id = await start_waiting(api, {"resume_on": "form", "form_schema": FORM})
    wrong_kind = await api.client.post(f"/runs/{run_id}/waits/w/resume-url", headers=auth("a-runner"))
    assert wrong_kind.status_code == 409 and "not a resume URL" in wrong_kind.json()["error"]["message"]
    # a valid signature for a form wait still opens nothing
    signed = f"/resume/{run_id}/w?exp=9999999999&sig={sign(SECRET, run_id, 'w', 9999999999)}"
    assert (await api.client.post(signed, json={"x": 1})).status_code == 403
    closed = await open_api(redis_server, repo_registry(), key_prefix=api.settings.key_prefix,
                            api_keys_file=api.settings.api_keys_file)  # ORCH_RESUME_URL_SECRET unset
    try:
        off = await closed.client.post(f"/runs/{run_id}/waits/w/resume-url", headers=auth("a-runner"))
        assert off.status_code == 409 and "ORCH_RESUME_URL_SECRET" in off.json()["error"]["message"]
        unsigned = await closed.client.post(f"/resume/{run_id}/w?exp=9999999999&sig=" + "0" * 64, json={})
        assert unsigned.status_code == 403
    finally:
        await closed.close()


async def test_a_url_wait_resumes_once_with_the_callback_body(api: Api) -> None:
    run_id = await start_waiting(api, {"resume_on": "url", "timeout_s": 600})
    issued = (await api.client.post(f"/runs/{run_id}/waits/w/resume-url", headers=auth("a-runner"))).json()
    due = (await api.client.get(f"/runs/{run_id}/waits", headers=auth("a-viewer"))).json()["items"][0]["due_at"]
    assert issued["expires_at"] <= due + 1  # the link ends with the wait
    assert (await api.client.post(issued["url"], json={"status": "paid"})).status_code == 200
    assert (await api.client.post(issued["url"], json={"status": "paid"})).status_code == 409
    await drain(api, repo_registry())
    run = (await api.client.get(f"/runs/{run_id}", headers=auth("a-viewer"))).json()
    assert run["nodes"]["w"]["outputs"]["output"]["value"] == {"status": "paid"}
    assert await api.store.timers.due_at(run_id, "w") is None  # its timer went with the answer


async def test_the_sweeper_wakes_a_due_timer_on_redis_clock_and_drops_finished_ones(api: Api) -> None:
    run_id = await start_waiting(api, {"resume_on": "time", "duration_s": 30})
    due = await api.store.timers.due_at(run_id, "w")
    now = await Sweeper(api.store, lambda *_: None, api.settings).redis_now()
    assert due is not None and 29 < due - now <= 30.5
    assert await wake_due(api.store, lambda *_: None, now) == []  # not due yet
    sent: list[tuple[str, str]] = []
    assert await wake_due(api.store, lambda r, n: sent.append((r, n)), due + 0.1) == [(run_id, "w")]
    assert sent == [(run_id, "w")]
    api.dispatched.append((run_id, ["w"]))
    await drain(api, repo_registry())
    assert (await api.store.get_run(run_id)).status == "succeeded"
    assert await api.store.timers.due_at(run_id, "w") is None
