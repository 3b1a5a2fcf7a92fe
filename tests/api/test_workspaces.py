"""Workspaces and roles: a key sees only its workspace's objects (404 otherwise), and its
role bounds what it may do (403)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from cryptography.fernet import Fernet

from orchestrator.api import create_app
from orchestrator.kernel.errors import ConfigurationError
from orchestrator.local.embedded_redis import EmbeddedRedis
from tests.api.conftest import Api, chain, make_settings, open_api

KEYS = {
    "a-admin": ("alpha", "admin"), "a-editor": ("alpha", "editor"), "a-runner": ("alpha", "runner"),
    "a-viewer": ("alpha", "viewer"), "b-admin": ("beta", "admin"),
}


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@pytest.fixture
async def ws_api(redis_server: EmbeddedRedis, tmp_path: Path) -> AsyncIterator[Api]:
    entries = []
    for key, (workspace, role) in KEYS.items():
        if key == "b-admin":  # stored hashed: the file never holds the key itself
            entries.append({"sha256": hashlib.sha256(key.encode()).hexdigest(), "workspace": workspace,
                            "role": role})
        else:
            entries.append({"key": key, "workspace": workspace, "role": role})
    keys_file = tmp_path / "keys.json"
    keys_file.write_text(json.dumps(entries))
    api = await open_api(redis_server, api_keys="legacy-admin-key", api_keys_file=str(keys_file),
                         credentials_key=Fernet.generate_key().decode())
    yield api
    await api.close()


async def a_graph_and_run(api: Api) -> str:
    assert (await api.client.post("/graphs", json=chain("ga"), headers=auth("a-admin"))).status_code == 201
    started = await api.client.post("/graphs/ga/runs", json={"input": {"x": 1}}, headers=auth("a-runner"))
    assert started.status_code == 202
    return str(started.json()["run_id"])


@pytest.mark.parametrize(("method", "url", "body"), [
    ("GET", "/graphs/ga", None),
    ("GET", "/graphs/ga/versions", None),
    ("GET", "/graphs/ga/runs", None),
    ("PUT", "/graphs/ga", chain("ga")),
    ("DELETE", "/graphs/ga", None),
    ("PUT", "/graphs/ga/webhook-secret", {"secret": "a-secret-of-sixteen-chars"}),
    ("POST", "/graphs/ga/runs", {}),
])
async def test_another_workspace_gets_404_on_a_graph(ws_api: Api, method: str, url: str, body: object) -> None:
    await a_graph_and_run(ws_api)
    response = await ws_api.client.request(method, url, json=body, headers=auth("b-admin"))
    assert response.status_code == 404
    assert (await ws_api.client.get("/graphs/ga", headers=auth("a-viewer"))).status_code == 200


@pytest.mark.parametrize(("method", "url", "body"), [
    ("GET", "/runs/{run}", None),
    ("GET", "/runs/{run}/events", None),
    ("POST", "/runs/{run}/cancel", None),
    ("POST", "/runs/{run}/rerun", {"from_node": "a"}),
    ("POST", "/runs/{run}/approvals", {"decision": "approve"}),
])
async def test_another_workspace_gets_404_on_a_run_and_its_events(
        ws_api: Api, method: str, url: str, body: object) -> None:
    run_id = await a_graph_and_run(ws_api)
    response = await ws_api.client.request(method, url.format(run=run_id), json=body, headers=auth("b-admin"))
    assert response.status_code == 404
    assert (await ws_api.client.get(f"/runs/{run_id}", headers=auth("a-viewer"))).json()["status"] == "running"


async def test_graph_lists_show_only_the_callers_workspace(ws_api: Api) -> None:
    await a_graph_and_run(ws_api)
    assert (await ws_api.client.post("/graphs", json=chain("gb"), headers=auth("b-admin"))).status_code == 201
    alpha = (await ws_api.client.get("/graphs", headers=auth("a-viewer"))).json()
    beta = (await ws_api.client.get("/graphs", headers=auth("b-admin"))).json()
    assert [g["id"] for g in alpha["items"]] == ["ga"] and alpha["total"] == 1
    assert [g["id"] for g in beta["items"]] == ["gb"] and beta["total"] == 1


async def test_a_chat_message_cannot_start_another_workspaces_graph(ws_api: Api) -> None:
    await a_graph_and_run(ws_api)
    response = await ws_api.client.post("/chats/c1/messages", json={"graph_id": "ga", "message": "hi"},
                                        headers=auth("b-admin"))
    assert response.status_code == 404


@pytest.mark.parametrize(("key", "method", "url", "body", "status"), [
    ("a-viewer", "POST", "/graphs", chain("gv"), 403),
    ("a-viewer", "POST", "/graphs/ga/runs", {}, 403),
    ("a-viewer", "PUT", "/graphs/ga/webhook-secret", {"secret": "a-secret-of-sixteen-chars"}, 403),
    ("a-runner", "POST", "/graphs", chain("gr"), 403),
    ("a-runner", "DELETE", "/graphs/ga", None, 403),
    ("a-runner", "POST", "/graphs/ga/runs", {}, 202),
    ("a-editor", "POST", "/graphs", chain("ge"), 201),
    ("a-editor", "PUT", "/graphs/ga/webhook-secret", {"secret": "a-secret-of-sixteen-chars"}, 204),
])
async def test_roles_bound_what_a_key_may_do(
        ws_api: Api, key: str, method: str, url: str, body: object, status: int) -> None:
    await a_graph_and_run(ws_api)
    response = await ws_api.client.request(method, url, json=body, headers=auth(key))
    assert response.status_code == status
    if status == 403:
        assert "role" in response.json()["error"]["message"]


async def test_orch_api_keys_still_work_as_admins_of_the_default_workspace(ws_api: Api) -> None:
    created = await ws_api.client.post("/graphs", json=chain("gd"), headers=auth("legacy-admin-key"))
    assert created.status_code == 201
    assert (await ws_api.client.get("/graphs/gd", headers=auth("a-admin"))).status_code == 404


async def test_a_hashed_key_authenticates_and_a_near_miss_does_not(ws_api: Api) -> None:
    assert (await ws_api.client.get("/graphs", headers=auth("b-admin"))).status_code == 200
    assert (await ws_api.client.get("/graphs", headers=auth("b-admin "))).status_code == 200  # trimmed
    assert (await ws_api.client.get("/graphs", headers=auth("b-admin2"))).status_code == 401


@pytest.mark.parametrize("keys", ["change-me", "ok-key-one,CHANGEME"])
def test_a_placeholder_key_is_refused_at_start(redis_server: EmbeddedRedis, keys: str) -> None:
    with pytest.raises(ConfigurationError, match="placeholder"):
        create_app(make_settings(redis_server, api_keys=keys))


@pytest.mark.parametrize("keys", ['{"s3cr3t-key": {"workspace": "beta"}}', "ok-key-one,two words"])
def test_a_key_a_bearer_header_cannot_carry_is_refused_at_start_without_echoing_it(
    redis_server: EmbeddedRedis, keys: str,
) -> None:
    """A JSON object pasted into ORCH_API_KEYS (a comma-separated list) would otherwise be
    taken as literal keys no client can send."""
    with pytest.raises(ConfigurationError, match="ORCH_API_KEYS_FILE") as refused:
        create_app(make_settings(redis_server, api_keys=keys))
    assert "s3cr3t" not in str(refused.value) and "words" not in str(refused.value)


def test_a_keys_file_with_an_unknown_role_is_refused_at_start(redis_server: EmbeddedRedis, tmp_path: Path) -> None:
    keys_file = tmp_path / "keys.json"
    keys_file.write_text(json.dumps([{"key": "k" * 20, "workspace": "w", "role": "owner"}]))
    with pytest.raises(ConfigurationError, match="role"):
        create_app(make_settings(redis_server, api_keys_file=str(keys_file)))


async def test_a_browser_session_acts_with_its_keys_workspace(ws_api: Api) -> None:
    await a_graph_and_run(ws_api)
    signed = await ws_api.client.post("/auth/session", json={"api_key": "b-admin"})
    assert signed.status_code == 200
    assert (await ws_api.client.get("/graphs/ga")).status_code == 404
    assert (await ws_api.client.get("/graphs")).json()["items"] == []


async def test_a_stream_token_is_not_issued_for_another_workspaces_run(ws_api: Api) -> None:
    run_id = await a_graph_and_run(ws_api)
    refused = await ws_api.client.post("/auth/stream-token", json={"run_id": run_id}, headers=auth("b-admin"))
    assert refused.status_code == 404
    granted = await ws_api.client.post("/auth/stream-token", json={"run_id": run_id}, headers=auth("a-viewer"))
    assert granted.status_code == 200


async def test_the_runs_list_shows_only_the_callers_workspace(ws_api: Api) -> None:
    run_id = await a_graph_and_run(ws_api)
    mine = (await ws_api.client.get("/runs", headers=auth("a-viewer"))).json()["items"]
    theirs = (await ws_api.client.get("/runs", headers=auth("b-admin"))).json()["items"]
    assert [r["run_id"] for r in mine] == [run_id]
    assert theirs == []


async def test_credentials_and_files_belong_to_the_callers_workspace(ws_api: Api) -> None:
    body = {"name": "api-token", "type": "bearer", "values": {"token": "tok-alpha-123"}}
    assert (await ws_api.client.post("/credentials", json=body, headers=auth("a-admin"))).status_code == 201
    assert (await ws_api.client.get("/credentials/api-token", headers=auth("b-admin"))).status_code == 404
    assert (await ws_api.client.delete("/credentials/api-token", headers=auth("b-admin"))).status_code == 404
    assert (await ws_api.client.get("/credentials", headers=auth("b-admin"))).json()["credentials"] == []
    assert (await ws_api.client.post("/credentials", json=body, headers=auth("a-editor"))).status_code == 403
    uploaded = await ws_api.client.post("/files", files={"file": ("a.txt", b"alpha data", "text/plain")},
                                        headers=auth("a-runner"))
    assert uploaded.status_code == 201, uploaded.text
    ref = uploaded.json()["$binary"]["ref"]
    assert (await ws_api.client.get(f"/files/{ref}", headers=auth("b-admin"))).status_code == 404
    assert (await ws_api.client.get(f"/files/{ref}", headers=auth("a-viewer"))).content == b"alpha data"


async def test_another_workspace_cannot_save_over_a_graph_with_a_base_version(ws_api: Api) -> None:
    await a_graph_and_run(ws_api)
    response = await ws_api.client.put("/graphs/ga?base_version=1", json=chain("ga"), headers=auth("b-admin"))
    assert response.status_code == 404


def hooked(graph_id: str, path: str = "crm/events") -> dict[str, object]:
    return {"id": graph_id, "nodes": [{"id": "w", "type": "webhook_trigger", "name": "Hook", "data": {"path": path}},
                                      {"id": "r", "type": "relay", "name": "Relay"}],
            "edges": [{"id": "e1", "source": "w", "sourceHandle": "out", "target": "r", "targetHandle": "in",
                       "data": {"channel": "flow"}}]}


async def test_a_webhook_path_conflict_names_the_graph_only_to_its_own_workspace(ws_api: Api) -> None:
    created = await ws_api.client.post("/graphs", json=hooked("a-secret-acquisition-2027"), headers=auth("a-editor"))
    assert created.status_code == 201, created.text
    theirs = await ws_api.client.post("/graphs", json=hooked("b-hook"), headers=auth("b-admin"))
    assert theirs.status_code == 409
    assert "a-secret-acquisition-2027" not in theirs.text and "is taken" in theirs.json()["error"]["message"]
    assert (await ws_api.client.get("/graphs/b-hook", headers=auth("b-admin"))).status_code == 404
    ours = await ws_api.client.post("/graphs", json=hooked("a-other"), headers=auth("a-editor"))
    assert ours.status_code == 409 and "a-secret-acquisition-2027" in ours.json()["error"]["message"]
    assert await ws_api.redis.hget(f"{ws_api.settings.key_prefix}:hooks", "crm/events") == "a-secret-acquisition-2027"
    legacy = await ws_api.client.post("/graphs", json=hooked("d-hook"), headers=auth("legacy-admin-key"))
    assert legacy.status_code == 409 and "a-secret-acquisition-2027" not in legacy.text


@pytest.mark.parametrize(("key", "status"), [
    ("legacy-admin-key", 200),  # ORCH_API_KEYS: an admin of default, as before
    ("a-admin", 403), ("a-viewer", 403), ("b-admin", 403),  # another workspace's key sees no global counts
    ("metrics-token-0123456789", 200), ("wrong", 401),
])
async def test_metrics_are_for_the_operator(redis_server: EmbeddedRedis, tmp_path: Path, key: str,
                                            status: int) -> None:
    keys_file = tmp_path / "keys.json"
    keys_file.write_text(json.dumps([{"key": k, "workspace": ws, "role": r} for k, (ws, r) in KEYS.items()]))
    api = await open_api(redis_server, api_keys="legacy-admin-key", api_keys_file=str(keys_file),
                         metrics_token="metrics-token-0123456789")
    try:
        response = await api.client.get("/metrics", headers=auth(key))
        assert response.status_code == status, response.text
        if status == 200:
            assert "orchestrator_queue_depth" in response.text
        if status == 403:
            assert "admin key of workspace 'default' or ORCH_METRICS_TOKEN" in response.json()["error"]["message"]
    finally:
        await api.close()


def test_a_placeholder_metrics_token_is_refused_at_start(redis_server: EmbeddedRedis) -> None:
    with pytest.raises(ConfigurationError, match="ORCH_METRICS_TOKEN"):
        create_app(make_settings(redis_server, api_keys="ok-key-one", metrics_token="change-me"))


def test_workspaces_that_differ_only_in_case_are_refused_at_start(redis_server: EmbeddedRedis,
                                                                  tmp_path: Path) -> None:
    keys_file = tmp_path / "keys.json"
    keys_file.write_text(json.dumps([{"key": "k" * 20, "workspace": "Team", "role": "admin"},
                                     {"key": "j" * 20, "workspace": "team", "role": "admin"}]))
    with pytest.raises(ConfigurationError, match="differ only in case"):
        create_app(make_settings(redis_server, api_keys_file=str(keys_file)))
