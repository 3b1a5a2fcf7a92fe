"""Starting runs over HTTP: manual, webhook (with and without HMAC), chat, rerun rules."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from orchestrator.api import signatures
from orchestrator.kernel.store import RunStatus
from tests.api.conftest import Api, chain
from tests.fake_nodes import graph

SECRET = "s3cret-s3cret-s3cret"


def hook_graph(
    graph_id: str = "hooked",
    path: str = "orders/new",
    settings: dict[str, Any] | None = None,
    **data: Any,
) -> dict[str, Any]:
    return graph(
        [("w", "webhook_trigger", "Hook", {"path": path, **data}), ("r", "relay", "Relay")],
        [("w", "out", "r", "in")],
        id=graph_id,
        settings=settings or {},
    )


def sign(body: bytes, secret: str = SECRET, at: float | None = None) -> str:
    return signatures.sign(secret, body, int(time.time() if at is None else at))


async def test_manual_run_is_accepted_recorded_and_dispatched(api: Api) -> None:
    await api.client.post("/graphs", json=chain("g1"))
    response = await api.client.post("/graphs/g1/runs", json={"input": {"x": 1}})
    assert response.status_code == 202
    run_id = response.json()["run_id"]
    assert api.dispatched == [(run_id, ["a"])]
    run = (await api.client.get(f"/runs/{run_id}")).json()
    assert run["graph_id"] == "g1" and run["meta"]["graph_version"] == 1
    listed = (await api.client.get("/graphs/g1/runs")).json()["items"]
    assert [r["run_id"] for r in listed] == [run_id]


async def test_run_of_an_unknown_graph_is_404(api: Api) -> None:
    assert (await api.client.post("/graphs/nope/runs", json={})).status_code == 404


async def test_trigger_that_is_not_a_trigger_node_is_422_naming_it(api: Api) -> None:
    await api.client.post("/graphs", json=chain("g1"))
    response = await api.client.post("/graphs/g1/runs", json={"trigger": "Middle"})
    assert response.status_code == 422
    assert response.json()["error"]["node_id"] == "b"


async def test_webhook_starts_a_run_of_the_graph_that_owns_the_path(api: Api) -> None:
    await api.client.post("/graphs", json=hook_graph())
    response = await api.client.post("/hooks/orders/new?src=test", json={"order": 7})
    assert response.status_code == 202
    run_id = response.json()["run_id"]
    assert api.dispatched == [(run_id, ["w"])]
    record = await api.store.get_run(run_id)
    assert record.run_input["body"] == {"order": 7}
    assert record.run_input["query"] == {"src": "test"}
    assert record.meta["trigger"] == "webhook"


async def test_webhook_run_input_keeps_credential_headers_out(api: Api) -> None:
    await api.client.post("/graphs", json=hook_graph())
    sent = {"Authorization": "Bearer abc123456", "Cookie": "sid=abc123456", "X-Api-Key": "k-abc123456",
            "X-Auth-Token": "t-abc123456", "X-Webhook-Secret": "s-abc123456", "X-Request-Id": "req-7"}
    response = await api.client.post("/hooks/orders/new", json={"order": 7}, headers=sent)
    assert response.status_code == 202
    record = await api.store.get_run(response.json()["run_id"])
    headers = record.run_input["headers"]
    assert headers["x-request-id"] == "req-7"  # an ordinary header goes through
    assert "abc123456" not in json.dumps(record.run_input)


async def test_webhook_path_nobody_owns_is_404(api: Api) -> None:
    assert (await api.client.post("/hooks/nothing/here", json={})).status_code == 404


async def test_webhook_path_is_released_when_its_graph_is_deleted(api: Api) -> None:
    await api.client.post("/graphs", json=hook_graph())
    await api.client.delete("/graphs/hooked")
    assert (await api.client.post("/hooks/orders/new", json={})).status_code == 404
    assert (await api.client.post("/graphs", json=hook_graph("other"))).status_code == 201


async def test_second_graph_cannot_take_a_used_webhook_path(api: Api) -> None:
    await api.client.post("/graphs", json=hook_graph("one"))
    response = await api.client.post("/graphs", json=hook_graph("two"))
    assert response.status_code == 409
    assert "orders/new" in response.json()["error"]["message"]


@pytest.mark.parametrize("how", ["stored", "env"])
async def test_signed_webhook_runs_with_a_good_signature(api: Api, how: str, monkeypatch: pytest.MonkeyPatch) -> None:
    if how == "stored":
        await api.client.post("/graphs", json=hook_graph())
        put = await api.client.put("/graphs/hooked/webhook-secret", json={"secret": SECRET})
        assert put.status_code == 204
    else:
        monkeypatch.setenv("ORCH_WEBHOOK_SECRET_ORDERS", SECRET)
        hooked = hook_graph(settings={"webhook_secret_env": "ORCH_WEBHOOK_SECRET_ORDERS"})
        saved = await api.client.post("/graphs", json=hooked)
        assert saved.status_code == 201, saved.text
    body = json.dumps({"order": 7}).encode()
    headers = {"content-type": "application/json", "X-Signature-256": sign(body)}
    response = await api.client.post("/hooks/orders/new", content=body, headers=headers)
    assert response.status_code == 202
    record = await api.store.get_run(response.json()["run_id"])
    assert "x-signature-256" not in record.run_input["headers"]


@pytest.mark.parametrize("signature", [None, "sha256=00", "bogus", "t=1,v1=00", "v1=00"])
async def test_signed_webhook_refuses_a_bad_or_missing_signature(api: Api, signature: str | None) -> None:
    await api.client.post("/graphs", json=hook_graph())
    await api.client.put("/graphs/hooked/webhook-secret", json={"secret": SECRET})
    headers = {"content-type": "application/json"}
    if signature is not None:
        headers["X-Signature-256"] = signature
    response = await api.client.post("/hooks/orders/new", content=b'{"a": 1}', headers=headers)
    assert response.status_code == 401
    assert api.dispatched == []


async def test_signature_over_another_body_is_refused(api: Api) -> None:
    await api.client.post("/graphs", json=hook_graph())
    await api.client.put("/graphs/hooked/webhook-secret", json={"secret": SECRET})
    headers = {"content-type": "application/json", "X-Signature-256": sign(b'{"a": 1}')}
    response = await api.client.post("/hooks/orders/new", content=b'{"a": 2}', headers=headers)
    assert response.status_code == 401


async def test_a_signed_request_is_accepted_once(api: Api) -> None:
    await api.client.post("/graphs", json=hook_graph())
    await api.client.put("/graphs/hooked/webhook-secret", json={"secret": SECRET})
    body = b'{"order": 7}'
    headers = {"content-type": "application/json", "X-Signature-256": sign(body)}
    first = await api.client.post("/hooks/orders/new", content=body, headers=headers)
    replay = await api.client.post("/hooks/orders/new", content=body, headers=headers)
    assert first.status_code == 202
    assert replay.status_code == 401
    assert "already used" in replay.json()["error"]["message"]
    assert len(api.dispatched) == 1


@pytest.mark.parametrize("skew_s", [-3600, 3600])
async def test_a_signature_outside_the_tolerance_window_is_refused(api: Api, skew_s: int) -> None:
    await api.client.post("/graphs", json=hook_graph())
    await api.client.put("/graphs/hooked/webhook-secret", json={"secret": SECRET})
    body = b'{"order": 7}'
    headers = {"content-type": "application/json", "X-Signature-256": sign(body, at=time.time() + skew_s)}
    response = await api.client.post("/hooks/orders/new", content=body, headers=headers)
    assert response.status_code == 401
    assert "timestamp" in response.json()["error"]["message"]
    assert api.dispatched == []


async def test_a_changed_timestamp_breaks_the_signature(api: Api) -> None:
    await api.client.post("/graphs", json=hook_graph())
    await api.client.put("/graphs/hooked/webhook-secret", json={"secret": SECRET})
    body = b'{"order": 7}'
    old = sign(body, at=time.time() - 10)
    forged = f"t={int(time.time())}," + old.split(",", 1)[1]
    headers = {"content-type": "application/json", "X-Signature-256": forged}
    assert (await api.client.post("/hooks/orders/new", content=body, headers=headers)).status_code == 401


async def test_webhook_secret_is_never_returned(api: Api) -> None:
    await api.client.post("/graphs", json=hook_graph())
    await api.client.put("/graphs/hooked/webhook-secret", json={"secret": SECRET})
    for url in ("/graphs/hooked", "/graphs", "/graphs/hooked/versions"):
        assert SECRET not in (await api.client.get(url)).text


async def test_waiting_webhook_answers_202_when_the_run_does_not_end_in_time(api: Api) -> None:
    await api.client.post("/graphs", json=hook_graph(response_mode="wait", wait_timeout_s=0.2))
    response = await api.client.post("/hooks/orders/new", json={})
    assert response.status_code == 202
    assert response.json()["status"] == "running"


async def test_chat_message_runs_the_chat_start_node_in_its_session(api: Api) -> None:
    chat = graph([("c", "chat_start", "Chat"), ("r", "relay", "Reply")], [("c", "out", "r", "in")], id="bot")
    await api.client.post("/graphs", json=chat)
    response = await api.client.post("/chats/chat-1/messages", json={"message": "hello", "graph_id": "bot"})
    assert response.status_code == 202
    body = response.json()
    assert body["events_url"].endswith("format=chat")
    record = await api.store.get_run(body["run_id"])
    assert record.session_id == "chat-1"
    assert record.run_input["message"] == "hello"


async def test_chat_message_to_a_graph_without_chat_start_is_422(api: Api) -> None:
    await api.client.post("/graphs", json=chain("g1"))
    response = await api.client.post("/chats/c/messages", json={"message": "hi", "graph_id": "g1"})
    assert response.status_code == 422


async def test_rerun_of_a_live_run_is_409(api: Api) -> None:
    await api.client.post("/graphs", json=chain("g1"))
    run_id = (await api.client.post("/graphs/g1/runs", json={})).json()["run_id"]
    response = await api.client.post(f"/runs/{run_id}/rerun", json={"from_node": "b"})
    assert response.status_code == 409


async def test_rerun_from_a_node_reuses_the_outputs_before_it(api: Api) -> None:
    await api.client.post("/graphs", json=chain("g1"))
    old = (await api.client.post("/graphs/g1/runs", json={"input": 5})).json()["run_id"]
    await api.store.finish_run(old, RunStatus.FAILED, {"message": "b failed"})
    response = await api.client.post(f"/runs/{old}/rerun", json={"from_node": "Middle"})
    assert response.status_code == 202, response.text
    new = response.json()["run_id"]
    assert response.json()["rerun_of"] == old
    assert api.dispatched[-1] == (new, ["b"])
    record = await api.store.get_run(new)
    assert record.meta["rerun_of"] == old and record.run_input == 5


async def test_rerun_from_an_unknown_node_is_422(api: Api) -> None:
    await api.client.post("/graphs", json=chain("g1"))
    old = (await api.client.post("/graphs/g1/runs", json={})).json()["run_id"]
    await api.store.finish_run(old, RunStatus.FAILED)
    response = await api.client.post(f"/runs/{old}/rerun", json={"from_node": "zz"})
    assert response.status_code == 422
    assert response.json()["error"]["node_id"] == "zz"


async def test_approval_for_a_run_that_is_not_waiting_is_409(api: Api) -> None:
    await api.client.post("/graphs", json=chain("g1"))
    run_id = (await api.client.post("/graphs/g1/runs", json={})).json()["run_id"]
    response = await api.client.post(f"/runs/{run_id}/approvals", json={"decision": "approve"})
    assert response.status_code == 409


# -- settings.webhook_secret_env names only operator-designated variables ---------------------------


@pytest.mark.parametrize("name", ["ORCH_CREDENTIALS_KEY", "ORCH_SESSION_SECRET", "OPENAI_API_KEY", "NO_SUCH_VAR_42",
                                  "ORCH_WEBHOOK_SECRET_"])
async def test_a_graph_naming_another_variable_is_refused_at_save(api: Api, name: str) -> None:
    response = await api.client.post("/graphs", json=hook_graph(settings={"webhook_secret_env": name}))
    assert response.status_code == 422
    error = response.json()["error"]
    assert error["parameter"] == "webhook_secret_env" and "ORCH_WEBHOOK_SECRET_ENVS" in error["message"]
    checked = (await api.client.post("/graphs/validate", json=hook_graph(settings={"webhook_secret_env": name})))
    assert checked.json()["valid"] is False


async def test_a_graph_saved_before_the_rule_gets_one_answer_whether_the_variable_is_set_or_not(
        api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    """No existence oracle: ORCH_CREDENTIALS_KEY is set here, NO_SUCH_VAR_42 is not."""
    from orchestrator.service.graph_store import GraphStore
    from tests.api.conftest import api_registry

    monkeypatch.setenv("ORCH_CREDENTIALS_KEY", "an-operator-secret-value")
    store = GraphStore(api.redis, api_registry(), api.settings)
    answers = []
    for i, name in enumerate(["ORCH_CREDENTIALS_KEY", "NO_SUCH_VAR_42"]):
        await store.create(hook_graph(f"old-{i}", path=f"old/{i}", settings={"webhook_secret_env": name}))
        response = await api.client.post(f"/hooks/old/{i}", content=b"{}", headers={"content-type": "application/json"})
        answers.append((response.status_code, response.json()["error"]["message"].replace(name, "NAME")))
    assert answers[0] == answers[1] and answers[0][0] == 401 and api.dispatched == []


async def test_the_operator_can_allow_a_variable_by_name(redis_server: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.api.conftest import open_api

    monkeypatch.setenv("LEGACY_HOOK_SECRET", SECRET)
    api = await open_api(redis_server, webhook_secret_envs="LEGACY_HOOK_SECRET")
    try:
        saved = await api.client.post("/graphs", json=hook_graph(settings={"webhook_secret_env": "LEGACY_HOOK_SECRET"}))
        assert saved.status_code == 201, saved.text
        body = b'{"order": 7}'
        response = await api.client.post("/hooks/orders/new", content=body,
                                         headers={"content-type": "application/json", "X-Signature-256": sign(body)})
        assert response.status_code == 202
    finally:
        await api.close()
