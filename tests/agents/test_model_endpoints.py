"""Which server a model node calls with which key (docs/security.md, "Model endpoints and keys").

Real Agno models against local OpenAI-compatible stub servers. The operator's key is in the
environment throughout; "attacker" stubs stand in for hosts a graph chooses. Loopback is
allowed by the egress policy where a test says so, so what keeps a key from a server is the
endpoint rule (or the egress policy where that is what the test shows), not an unreachable
address.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from orchestrator.kernel.errors import EgressDeniedError, ParameterError
from orchestrator.kernel.protocol import NodeEvent
from tests.agents.conftest import data_in, drain, load_executor, make_ctx
from tests.agents.openai_stub import OPERATOR_KEY, StubServer, attacker, operator_key, stub
from tests.nodes.rag_support import allow_loopback, node_redis, redis_services, store_credential

__all__ = ["allow_loopback", "attacker", "node_redis", "operator_key", "stub"]

CREDENTIAL_KEY = "sk-workspace-credential-9876543210"

agent = load_executor("agents/agent")
llm = load_executor("ai/llm_completion")
structured = load_executor("ai/structured_output")
classifier = load_executor("ai/classifier")
selector = load_executor("ai/model_selector")

NODES: dict[str, tuple[Any, dict[str, Any]]] = {  # node type -> (executor, parameters besides the model)
    "agent": (agent, {"prompt": "hi", "history": False}),
    "llm_completion": (llm, {"prompt": "hi"}),
    "structured_output": (structured, {"prompt": "hi", "schema": {"type": "object"}, "max_attempts": 1}),
    "classifier": (classifier, {"text": "hi", "labels": ["a", "b"]}),
}


def _services(node_redis: Any, stub: StubServer, **settings: Any) -> dict[str, Any]:
    return redis_services(node_redis, openai_base_url=stub.base_url, **settings)


async def _run(node_type: str, model: Any, services: dict[str, Any]) -> tuple[list[NodeEvent], Any]:
    executor, data = NODES[node_type]
    return await drain(executor.execute({**data, "model": model}, data_in({}),
                                        make_ctx(node_type=node_type, services=services)))


def _seen(server: StubServer) -> str:
    return json.dumps(server.requests)


@pytest.mark.parametrize("provider", ["openai-chat", "openai-like"])
@pytest.mark.parametrize("node_type", sorted(NODES))
async def test_a_graph_chosen_base_url_is_refused_and_the_server_gets_nothing(
        node_redis: Any, stub: StubServer, attacker: StubServer, operator_key: str, allow_loopback: None,
        node_type: str, provider: str) -> None:
    model = {"provider": provider, "id": "gpt-4o-mini", "base_url": attacker.base_url}
    with pytest.raises(ParameterError, match="ORCH_MODEL_BASE_URLS") as caught:
        await _run(node_type, model, _services(node_redis, stub))
    assert caught.value.parameter == "model" and attacker.base_url in caught.value.message
    assert attacker.requests == [] and stub.requests == []
    assert OPERATOR_KEY not in str(caught.value)


async def test_a_model_selector_passes_the_spec_on_and_the_base_url_is_refused_all_the_same(
        node_redis: Any, stub: StubServer, attacker: StubServer, operator_key: str,
        allow_loopback: None) -> None:
    spec = await selector.materialize({"model": {"provider": "openai-chat", "id": "m",
                                                 "base_url": f"{attacker.base_url}/../admin?x="}},
                                      "model", make_ctx(node_type="model_selector"))
    with pytest.raises(ParameterError, match="not a model endpoint the operator configured"):
        await _run("agent", spec, _services(node_redis, stub))
    assert attacker.requests == []


async def test_the_operators_endpoint_gets_the_operators_key_and_no_event_shows_it(
        node_redis: Any, stub: StubServer, operator_key: str) -> None:
    """No ORCH_EGRESS_ALLOW: the operator's own endpoint on loopback is reachable as configured."""
    stub.echo_auth = True
    events, result = await _run("llm_completion", "openai-chat:gpt-4o-mini", _services(node_redis, stub))
    assert stub.requests[0]["headers"]["authorization"] == f"Bearer {OPERATOR_KEY}"
    assert result.outputs["output"].value["text"].strip() == "Stub says: Bearer ***"
    assert OPERATOR_KEY not in json.dumps([e.to_json() for e in events])


async def test_a_base_url_the_operator_lists_may_be_picked_and_gets_the_operators_key(
        node_redis: Any, stub: StubServer, attacker: StubServer, operator_key: str) -> None:
    listed = attacker  # here: a second server the operator trusts
    services = _services(node_redis, stub, model_base_urls=f"http://other.invalid/v1, {listed.base_url}/")
    _, result = await _run("llm_completion", {"provider": "openai-like", "id": "m", "base_url": listed.base_url},
                           services)
    assert result.outputs["output"].value["text"].startswith("Stub says: hi")
    assert listed.requests[0]["headers"]["authorization"] == f"Bearer {OPERATOR_KEY}" and stub.requests == []


async def test_a_credential_endpoint_gets_the_credentials_key_and_nothing_of_the_operators(
        node_redis: Any, stub: StubServer, attacker: StubServer, operator_key: str, allow_loopback: None,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The OpenAI SDK reads OPENAI_ORG_ID and OPENAI_CUSTOM_HEADERS from the worker's
    environment; towards a workspace's own server none of it is sent."""
    monkeypatch.setenv("OPENAI_ORG_ID", "org-operator-canary")
    monkeypatch.setenv("OPENAI_CUSTOM_HEADERS", f"X-Operator-Token: {OPERATOR_KEY}")
    own = attacker  # the workspace admin's server
    own.echo_auth = True
    services = _services(node_redis, stub)
    await store_credential(services, "team-llm", "api_key", {"key": CREDENTIAL_KEY, "base_url": own.base_url})
    events, result = await _run("agent", {"provider": "openai-chat", "id": "m", "credential": "team-llm"},
                                services)
    headers = own.requests[0]["headers"]
    assert headers["authorization"] == f"Bearer {CREDENTIAL_KEY}"
    assert "openai-organization" not in headers and "x-operator-token" not in headers
    assert OPERATOR_KEY not in _seen(own) and "org-operator-canary" not in _seen(own) and stub.requests == []
    assert result.outputs["output"].value["response"].strip() == "Stub says: Bearer ***"
    assert CREDENTIAL_KEY not in json.dumps([e.to_json() for e in events])


async def test_a_graph_base_url_outside_the_credentials_origins_is_refused(
        node_redis: Any, stub: StubServer, attacker: StubServer, operator_key: str,
        allow_loopback: None) -> None:
    services = _services(node_redis, stub)
    await store_credential(services, "team-llm", "api_key", {"key": CREDENTIAL_KEY, "base_url": stub.base_url})
    model = {"provider": "openai-chat", "id": "m", "credential": "team-llm", "base_url": attacker.base_url}
    with pytest.raises(ParameterError, match=r"credential 'team-llm' may be sent only to http://127\.0\.0\.1:\d+, "
                                             r"not to http://127\.0\.0\.1:\d+"):
        await _run("llm_completion", model, services)
    assert attacker.requests == [] and stub.requests == []


async def test_a_credential_endpoint_passes_the_egress_policy_at_connect(
        node_redis: Any, stub: StubServer, attacker: StubServer, operator_key: str) -> None:
    """Without ORCH_EGRESS_ALLOW, a workspace's endpoint on loopback is refused when the
    client connects (an admin of a workspace is not the operator)."""
    services = _services(node_redis, stub)
    for name, url in (("loopback", attacker.base_url), ("metadata", "http://169.254.169.254/latest")):
        await store_credential(services, name, "api_key", {"key": CREDENTIAL_KEY, "base_url": url})
        with pytest.raises(RuntimeError, match="refused by the egress policy") as caught:
            await _run("llm_completion", {"provider": "openai-like", "id": "m", "credential": name}, services)
        assert CREDENTIAL_KEY not in str(caught.value)
    assert attacker.requests == []


async def test_the_model_client_refuses_synchronous_calls_and_other_origins(
        node_redis: Any, stub: StubServer, attacker: StubServer, operator_key: str) -> None:
    from nodes._ai.models import resolve_model

    ctx = make_ctx(services=_services(node_redis, stub))
    model: Any = await resolve_model("openai-chat:m", ctx)
    with pytest.raises(RuntimeError, match="synchronous model calls"):
        model.get_client()
    client = model.get_async_client()
    with pytest.raises(EgressDeniedError, match="refused a request to"):
        await client.post(f"{attacker.base_url}/chat/completions", body={}, cast_to=object)
    await client.close()
    assert attacker.requests == []
