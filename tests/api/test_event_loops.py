"""The app on the event loop that serves it: the background sweeper shares no loop-bound
Redis connection or pool lock with request handlers (the fuzz test once hung on that)."""

from __future__ import annotations

import asyncio
import threading

import httpx
from redis.asyncio import Redis

from orchestrator.api import create_app
from orchestrator.local.embedded_redis import EmbeddedRedis
from tests.api.conftest import api_registry, chain, make_settings


def test_lifespan_on_another_loop_does_not_break_requests_on_this_one(redis_server: EmbeddedRedis) -> None:
    """Starlette's TestClient runs the lifespan on a loop of its own thread while a test
    serves requests on another loop: the sweeper must not borrow the requests' client."""
    from orchestrator.store.redis_store import RedisRunStore

    settings = make_settings(redis_server, sweep_period_s=0.05)
    runner = asyncio.Runner()
    redis = Redis.from_url(redis_server.url, decode_responses=True)
    app = create_app(settings, registry=api_registry(), redis=redis, run_store=RedisRunStore(redis, settings),
                     dispatch=lambda run_id, nodes: None)
    client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://api")
    errors: list[BaseException] = []
    lifespan_started = threading.Event()
    stop_lifespan = threading.Event()

    def lifespan_loop() -> None:
        async def main() -> None:
            async with app.router.lifespan_context(app):
                lifespan_started.set()
                while not stop_lifespan.is_set():
                    await asyncio.sleep(0.02)
        try:
            asyncio.run(main())
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    thread = threading.Thread(target=lifespan_loop, daemon=True)
    thread.start()
    try:
        assert lifespan_started.wait(10)
        assert runner.run(client.post("/graphs", json=chain("g1"))).status_code == 201
        for _ in range(30):  # requests on this loop while the sweeper passes on the other
            response = runner.run(asyncio.wait_for(client.get("/graphs/g1"), 5))
            assert response.status_code == 200
            runner.run(asyncio.sleep(0.01))
    finally:
        stop_lifespan.set()
        thread.join(15)
        runner.run(client.aclose())
        runner.run(redis.aclose())
        runner.close()
    assert not thread.is_alive()
    assert errors == []
