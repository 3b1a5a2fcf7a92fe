"""Conversation history lives in Agno's session storage on the run's Redis."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from orchestrator.local.embedded_redis import EmbeddedRedis, free_port
from orchestrator.settings import Settings
from tests.agents.conftest import data_in, drain, load_executor, make_ctx

agent = load_executor("agents/agent")


@pytest.fixture(scope="module")
def redis_url() -> Iterator[str]:
    with EmbeddedRedis(port=free_port(), unix_socket=False) as server:
        yield server.url


async def test_three_turns_on_fresh_agents_share_history_through_redis(redis_url: str) -> None:
    services = {"redis_url": redis_url,
                "settings": Settings(retention_s=600, key_prefix="orc")}
    responses = []
    for turn, message in enumerate(["first", "second", "third"]):
        ctx = make_ctx(run_id=f"run-{turn}", session_id="chat-42", services=services)
        _, result = await drain(agent.execute({"model": "dryrun:x", "prompt": message},
                                              data_in({}), ctx))
        responses.append(result.outputs["output"].value["response"])
    assert "Reply #3 to: third (history: 2 earlier turns)" in responses[2]
    client = redis.Redis.from_url(redis_url)
    keys = [k.decode() for k in client.keys("orc:agno*")]
    no_ttl = [k for k in keys if not 0 < client.ttl(k) <= 600]
    assert keys and no_ttl == [], f"agno keys without a TTL: {no_ttl}"
    client.close()
    other = make_ctx(run_id="run-x", session_id="chat-other", services=services)
    _, result = await drain(agent.execute({"model": "dryrun:x", "prompt": "hi"}, data_in({}),
                                          other))
    assert "history: 0 earlier turns" in result.outputs["output"].value["response"]


async def test_one_session_id_in_two_workspaces_keeps_two_histories(redis_url: str) -> None:
    settings = Settings(retention_s=600, key_prefix="ws2")

    async def turn(workspace: str, n: int, message: str) -> str:
        services = {"redis_url": redis_url, "settings": settings, "workspace": workspace}
        ctx = make_ctx(run_id=f"{workspace}-run-{n}", session_id="ticket-9", services=services)
        _, result = await drain(agent.execute({"model": "dryrun:x", "prompt": message}, data_in({}), ctx))
        return str(result.outputs["output"].value["response"])

    assert "history: 0 earlier turns" in await turn("alpha", 1, "my PIN is 4921")
    assert "history: 0 earlier turns" in await turn("beta", 1, "what was the PIN?")
    assert "history: 1 earlier turns" in await turn("beta", 2, "again")
    assert "history: 1 earlier turns" in await turn("alpha", 2, "second")
    assert "history: 0 earlier turns" in await turn("default", 1, "third party")
    client = redis.Redis.from_url(redis_url)
    try:
        sessions = sorted(k.decode() for k in client.scan_iter(match="ws2:agno*:sessions:ticket-9"))
        alpha_runs = client.zrange("ws2:agno:ws:alpha:runs:by_session:ticket-9", 0, -1)
    finally:
        client.close()
    assert sessions == ["ws2:agno:sessions:ticket-9", "ws2:agno:ws:alpha:sessions:ticket-9",
                        "ws2:agno:ws:beta:sessions:ticket-9"]
    assert len(alpha_runs) == 2
