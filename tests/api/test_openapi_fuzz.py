"""Schemathesis against the OpenAPI document: no generated request gets a 5xx.

The cases run through httpx's ASGI transport on ONE event loop: the app's Redis client
and its pool lock belong to the loop that first uses them. The schema is read from the
app object (``app.openapi()``), not through ``schemathesis.openapi.from_asgi``, which
fetches it with Starlette's TestClient and so runs the app's lifespan (and its sweeper)
on a second loop of its own. A bounded number of examples keeps this well under a minute.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from redis.asyncio import Redis

from orchestrator.api import create_app
from orchestrator.local.embedded_redis import EmbeddedRedis
from tests.api.conftest import api_registry, chain, make_settings

MAX_EXAMPLES = 150


@pytest.fixture
def fuzz_target(
    redis_server: EmbeddedRedis,
) -> Iterator[tuple[Any, asyncio.Runner, httpx.AsyncClient]]:
    from orchestrator.store.redis_store import RedisRunStore

    runner = asyncio.Runner()
    app_settings = make_settings(redis_server)
    redis = Redis.from_url(redis_server.url, decode_responses=True)
    app = create_app(
        app_settings,
        registry=api_registry(),
        redis=redis,
        run_store=RedisRunStore(redis, app_settings),
        dispatch=lambda run_id, nodes: None,
    )
    client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://api")
    runner.run(client.post("/graphs", json=chain("g1")))  # something real to hit
    schema = schemathesis.openapi.from_dict(app.openapi())
    try:
        yield schema, runner, client
    finally:
        try:
            runner.run(app.state.event_hub.close())  # its readers' connections belong to this loop
            runner.run(client.aclose())
            runner.run(redis.aclose())
        finally:
            runner.close()


def test_no_generated_request_gets_a_server_error(
    fuzz_target: tuple[Any, asyncio.Runner, httpx.AsyncClient],
) -> None:
    schema, runner, client = fuzz_target
    failures: list[str] = []

    @settings(
        max_examples=MAX_EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(case=schema.as_strategy())
    def check(case: Any) -> None:
        kwargs = case.as_transport_kwargs(base_url="http://api")
        kwargs.pop("cookies", None)  # the API reads no cookies; httpx deprecates per-request ones
        response = runner.run(client.request(**kwargs))
        if response.status_code >= 500:
            failures.append(f"{case.method} {kwargs.get('url')}: {response.status_code} {response.text}")
        assert response.status_code < 500, failures[-1]

    check()
