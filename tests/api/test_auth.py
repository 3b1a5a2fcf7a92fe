"""Bearer keys guard the API; health and readiness stay open; the body limit holds."""

from __future__ import annotations

import pytest

from orchestrator.local.embedded_redis import EmbeddedRedis
from tests.api.conftest import Api, chain, open_api


async def test_missing_key_is_401(keyed_api: Api) -> None:
    response = await keyed_api.client.get("/graphs")
    assert response.status_code == 401
    assert response.headers["www-authenticate"] == "Bearer"
    assert "Authorization" in response.json()["error"]["message"]


async def test_wrong_key_is_401(keyed_api: Api) -> None:
    response = await keyed_api.client.get("/graphs", headers={"Authorization": "Bearer key-three"})
    assert response.status_code == 401


async def test_every_configured_key_is_accepted(keyed_api: Api) -> None:
    for key in ("key-one", "key-two"):
        response = await keyed_api.client.get("/graphs", headers={"Authorization": f"Bearer {key}"})
        assert response.status_code == 200


async def test_health_and_ready_need_no_key(keyed_api: Api) -> None:
    assert (await keyed_api.client.get("/health")).status_code == 200
    ready = await keyed_api.client.get("/ready")
    assert ready.status_code == 200 and ready.json()["redis"] == "ok"


async def test_metrics_need_a_key_unless_made_public(keyed_api: Api, redis_server: EmbeddedRedis,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    assert (await keyed_api.client.get("/metrics")).status_code == 401
    keyed = await keyed_api.client.get("/metrics", headers={"Authorization": "Bearer key-one"})
    assert keyed.status_code == 200 and "orchestrator_queue_depth" in keyed.text  # ORCH_API_KEYS: as before
    monkeypatch.setenv("ORCH_METRICS_PUBLIC", "1")  # read into the settings of an app started now
    public = await open_api(redis_server, api_keys="key-one")
    try:
        response = await public.client.get("/metrics")
        assert response.status_code == 200
        assert "orchestrator_queue_depth" in response.text
    finally:
        await public.close()


async def test_oversized_body_is_413(redis_server: EmbeddedRedis) -> None:
    api = await open_api(redis_server, max_body_bytes=1000)
    try:
        raw = chain("big")
        raw["description"] = "x" * 2000
        response = await api.client.post("/graphs", json=raw)
        assert response.status_code == 413
        assert "1000 bytes" in response.json()["error"]["message"]
        assert (await api.client.get("/graphs/big")).status_code == 404
    finally:
        await api.close()


async def test_oversized_chunked_body_is_413(redis_server: EmbeddedRedis) -> None:
    api = await open_api(redis_server, max_body_bytes=1000)

    async def chunks():  # type: ignore[no-untyped-def]
        for _ in range(5):
            yield b"x" * 400

    try:
        response = await api.client.post("/graphs", content=chunks(), headers={"content-type": "application/json"})
        assert response.status_code == 413
    finally:
        await api.close()


@pytest.mark.parametrize("url", ["/openapi.json", "/docs", "/redoc"])
async def test_api_docs_need_a_key_when_keys_are_configured(keyed_api: Api, url: str) -> None:
    assert (await keyed_api.client.get(url)).status_code == 401
    ok = await keyed_api.client.get(url, headers={"Authorization": "Bearer key-one"})
    assert ok.status_code == 200


async def test_api_docs_can_be_made_public(redis_server: EmbeddedRedis) -> None:
    api = await open_api(redis_server, api_keys="key-one", public_docs=True)
    try:
        response = await api.client.get("/openapi.json")
        assert response.status_code == 200
        assert "/graphs" in response.json()["paths"]
        assert (await api.client.get("/graphs")).status_code == 401
    finally:
        await api.close()


async def test_api_docs_are_open_without_keys(api: Api) -> None:
    assert (await api.client.get("/openapi.json")).status_code == 200
