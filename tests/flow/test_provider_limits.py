"""Provider limits on model calls: declared on the operator's endpoint or a credential, and
learned from 429s, shared through Redis; a call that must wait ends the node with
WaitRequested before the provider sees it. Real Agno models against the local stub."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from redis.asyncio import Redis

from orchestrator.kernel.errors import WaitRequested
from orchestrator.store.keys import Keys
from orchestrator.store.limits import RateLimiter
from tests.agents.conftest import data_in, drain, load_executor, make_ctx
from tests.agents.openai_stub import StubServer, operator_key, stub
from tests.nodes.rag_support import allow_loopback, node_redis, redis_services, store_credential

__all__ = ["allow_loopback", "node_redis", "operator_key", "stub"]

llm = load_executor("ai/llm_completion")


@pytest.fixture
async def services(node_redis: Any, stub: StubServer) -> AsyncIterator[dict[str, Any]]:
    """A worker's services with a limiter, the operator's endpoint at the stub."""
    def build(**settings: Any) -> dict[str, Any]:
        found = redis_services(node_redis, openai_base_url=stub.base_url, **settings)
        found["limiter"] = RateLimiter(redis, Keys(found["settings"].key_prefix))
        return found

    redis = Redis.from_url(node_redis.url)
    yield {"build": build}
    await redis.aclose()


async def _call(services: dict[str, Any], node_id: str, model: Any = "openai-chat:gpt-4o-mini") -> Any:
    return await drain(llm.execute({"prompt": "hi", "model": model}, data_in({}),
                                   make_ctx(node_id, node_type="llm_completion", services=services)))


async def test_the_operators_declared_rpm_makes_the_next_call_wait_without_reaching_the_provider(
        services: dict[str, Any], stub: StubServer, operator_key: str) -> None:
    found = services["build"](model_limits=json.dumps({stub.base_url: {"rpm": 1}}))
    _, result = await _call(found, "n1")
    assert result.outputs["output"].value
    with pytest.raises(WaitRequested) as waited:
        await _call(found, "n2")
    assert waited.value.reason == {"limit": f"endpoint:{stub.base_url}:rpm", "source": "provider_limit"}
    assert 50 < waited.value.delay_s <= 62  # one request a minute (at 98%)
    assert len(stub.requests) == 1


async def test_a_credentials_limits_are_shared_by_every_node_using_it(
        services: dict[str, Any], stub: StubServer, allow_loopback: None) -> None:
    found = services["build"]()
    await store_credential(found, "team-key", "api_key", {"key": "sk-team-0123456789", "base_url": stub.base_url},
                           limits={"rpm": 1})
    spec = {"provider": "openai-chat", "id": "gpt-4o-mini", "credential": "team-key"}
    await _call(found, "a", spec)
    with pytest.raises(WaitRequested) as waited:
        await _call(found, "b", spec)
    assert waited.value.reason["limit"] == "cred:default:team-key:rpm"
    assert len(stub.requests) == 1


async def test_a_429_honours_retry_after_and_holds_back_every_other_caller_of_the_key(
        services: dict[str, Any], stub: StubServer, operator_key: str) -> None:
    found = services["build"]()
    stub.fail_status, stub.retry_after = 429, "3"
    with pytest.raises(WaitRequested) as refused:
        await _call(found, "first")
    assert refused.value.reason == {"limit": f"endpoint:{stub.base_url}:rpm", "source": "provider_429"}
    assert refused.value.delay_s == pytest.approx(3, abs=0.01)
    with pytest.raises(WaitRequested) as held:  # nobody else hammers the provider meanwhile
        await _call(found, "second")
    assert 2 < held.value.delay_s <= 3
    assert len(stub.requests) == 1
