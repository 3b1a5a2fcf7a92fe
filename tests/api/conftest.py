"""In-process API tests: ``create_app`` over httpx's ASGI transport, against a real
redis-server (one per session, stopped by pid) and the fake node types.

Each test gets its own key prefix, so tests share the server but not state. Runs are
created in the real run store; the dispatcher only records what it was asked to send
(no workers here: the distributed path is tested in tests/integration/).
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from redis.asyncio import Redis

from orchestrator.api import create_app
from orchestrator.kernel.definition import NodeDefinition
from orchestrator.kernel.protocol import DataValue, ExecutionResult, FlowContext
from orchestrator.kernel.registry import Registry
from orchestrator.local.embedded_redis import EmbeddedRedis
from orchestrator.settings import Settings
from orchestrator.store.redis_client import client
from tests.fake_nodes import make_registry


class TriggerExecutor:
    """A trigger that emits the run input (stands in for webhook_trigger / chat_start)."""

    def __init__(self, node_type: str) -> None:
        self.node_type = node_type

    async def execute(self, data: dict[str, Any], inputs: dict[str, DataValue], ctx: FlowContext) -> ExecutionResult:
        return ExecutionResult(outputs={"out": DataValue("data", ctx.run_input)})


def trigger_definition(type_id: str, parameters: list[dict[str, Any]]) -> NodeDefinition:
    return NodeDefinition.model_validate(
        {
            "id": type_id,
            "name": type_id,
            "category": "trigger",
            "trigger": True,
            "parameters": parameters,
            "outputs": [{"id": "out"}],
        }
    )


def api_registry() -> Registry:
    registry = make_registry()
    webhook = trigger_definition(
        "webhook_trigger",
        [
            {"id": "path", "type": "string"},
            {"id": "response_mode", "type": "enum", "values": ["immediate", "wait"]},
            {"id": "wait_timeout_s", "type": "float"},
        ],
    )
    registry.register(webhook, TriggerExecutor("webhook_trigger"), source="tests/api")
    registry.register(trigger_definition("chat_start", []), TriggerExecutor("chat_start"), source="tests/api")
    return registry


@dataclass
class Api:
    client: httpx.AsyncClient
    redis: Redis
    settings: Settings
    dispatched: list[tuple[str, list[str]]] = field(default_factory=list)
    store: Any = None
    app: Any = None
    plans: dict[str, str] = field(default_factory=dict)  # run id -> the plan reference its start messages carried

    carries_plan = True  # the app's dispatcher (a PlanDispatcher): records what it was asked to send

    def __call__(self, run_id: str, nodes: list[str], /, plan: str = "") -> None:
        self.dispatched.append((run_id, list(nodes)))
        if plan:
            self.plans[run_id] = plan

    async def close(self) -> None:
        """Close what the app opened on this loop (the ASGI transport runs no lifespan):
        the event hub's reader connections, the client, the Redis pool."""
        if self.app is not None:
            await self.app.state.event_hub.close()
        await self.client.aclose()
        await self.redis.aclose()


@pytest.fixture(scope="session")
def redis_server() -> Iterator[EmbeddedRedis]:
    with EmbeddedRedis(unix_socket=False) as server:
        yield server


def make_settings(server: EmbeddedRedis, **overrides: Any) -> Settings:
    base: dict[str, Any] = {
        "redis_url": server.url,
        "key_prefix": "t" + secrets.token_hex(4),
        "api_keys": "",
        "sse_ping_s": 5.0,
    }
    return Settings(**{**base, **overrides})


async def open_api(server: EmbeddedRedis, registry: Registry | None = None, **overrides: Any) -> Api:
    """The app on ``server`` with its own key prefix; ``registry`` defaults to the fake
    node types plus stand-in triggers (:func:`api_registry`)."""
    from orchestrator.store.redis_store import RedisRunStore

    settings = make_settings(server, **overrides)
    redis = client(server.url, decode_responses=True)  # as the app makes its own
    store = RedisRunStore(redis, settings)
    api = Api(client=None, redis=redis, settings=settings, store=store)  # type: ignore[arg-type]
    app = create_app(
        settings,
        registry=registry or api_registry(),
        redis=redis,
        run_store=store,
        dispatch=api,
    )
    api.app = app
    api.client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://api")
    return api


@pytest.fixture
async def api(redis_server: EmbeddedRedis) -> AsyncIterator[Api]:
    api = await open_api(redis_server)
    yield api
    await api.close()


@pytest.fixture
async def keyed_api(redis_server: EmbeddedRedis) -> AsyncIterator[Api]:
    """An app that requires one of two API keys."""
    api = await open_api(redis_server, api_keys="key-one, key-two")
    yield api
    await api.close()


def chain(graph_id: str = "g1", **extra: Any) -> dict[str, Any]:
    """emit -> relay -> relay, a valid graph of the fake node types."""
    from tests.fake_nodes import graph

    return graph(
        [("a", "emit", "Start"), ("b", "relay", "Middle"), ("c", "relay", "End")],
        [("a", "out", "b", "in"), ("b", "out", "c", "in")],
        id=graph_id,
        name="chain",
        **extra,
    )
