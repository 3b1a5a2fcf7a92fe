"""Keys file changes take effect without a restart, and browser credentials carry nothing
derived from a key (``auth.py``, ``browser_auth.py``)."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import httpx
import pytest
from itsdangerous import URLSafeTimedSerializer

from orchestrator.api.auth import COOKIE
from orchestrator.local.embedded_redis import EmbeddedRedis
from tests.api.conftest import Api, chain, open_api

WITHIN_S = 5.0  # "within a few seconds"


def write_keys(path: Path, keys: list[str]) -> None:
    """Replace the file as an operator's tool does (a new file renamed over the old)."""
    fresh = path.with_suffix(".new")
    fresh.write_text(json.dumps([{"key": k, "workspace": "default", "role": "admin"} for k in keys]))
    os.replace(fresh, path)


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def within(check: Callable[[], Awaitable[bool]], seconds: float = WITHIN_S) -> float:
    """How long until ``check()`` holds; fails after ``seconds``."""
    began = time.monotonic()
    while not await check():
        assert time.monotonic() - began < seconds, f"not within {seconds} s"
        await asyncio.sleep(0.05)
    return time.monotonic() - began


@pytest.fixture
async def keys_api(redis_server: EmbeddedRedis, tmp_path: Path) -> AsyncIterator[tuple[Api, Path]]:
    keys_file = tmp_path / "keys.json"
    write_keys(keys_file, ["key-stays-1234", "key-goes-5678"])
    api = await open_api(redis_server, api_keys_file=str(keys_file))
    yield api, keys_file
    await api.close()


def browser(api: Api) -> httpx.AsyncClient:
    """Another browser on the same app (its own cookie jar)."""
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=api.app), base_url="http://api")


async def test_a_key_removed_from_the_file_stops_working_everywhere_within_seconds(
        keys_api: tuple[Api, Path]) -> None:
    api, keys_file = keys_api
    stays, goes = bearer("key-stays-1234"), bearer("key-goes-5678")
    assert (await api.client.post("/graphs", json=chain("g1"), headers=stays)).status_code == 201
    done_run = (await api.client.post("/graphs/g1/runs", json={}, headers=stays)).json()["run_id"]
    live_run = (await api.client.post("/graphs/g1/runs", json={}, headers=stays)).json()["run_id"]
    await api.store.finish_run(done_run, "cancelled", {"type": "x", "code": "cancelled", "message": "stop"})
    done_url = (await api.client.post("/auth/stream-token", json={"run_id": done_run}, headers=goes)).json()
    live_url = (await api.client.post("/auth/stream-token", json={"run_id": live_run}, headers=goes)).json()
    async with browser(api) as session:
        assert (await session.post("/auth/session", json={"api_key": "key-goes-5678"})).status_code == 200
        assert (await session.get("/graphs")).status_code == 200
        assert (await api.client.get(done_url["events_url"])).status_code == 200
        open_stream = asyncio.ensure_future(api.client.get(live_url["events_url"]))  # the run goes on
        await asyncio.sleep(0.2)
        assert not open_stream.done()

        write_keys(keys_file, ["key-stays-1234"])

        async def refused() -> bool:
            return (await api.client.get("/graphs", headers=goes)).status_code == 401

        await within(refused)
        assert (await session.get("/graphs")).status_code == 401  # the session of that key
        assert (await api.client.get(done_url["events_url"])).status_code == 401  # its stream token
        ended = await asyncio.wait_for(open_stream, WITHIN_S)  # its open stream
        assert "run_completed" not in ended.text
        assert (await api.client.get("/graphs", headers=stays)).status_code == 200

    write_keys(keys_file, ["key-stays-1234", "key-new-9012"])

    async def accepted() -> bool:
        return (await api.client.get("/graphs", headers=bearer("key-new-9012"))).status_code == 200

    await within(accepted)


async def test_a_broken_keys_file_accepts_no_key_until_fixed(keys_api: tuple[Api, Path]) -> None:
    api, keys_file = keys_api
    keys_file.write_text('[{"key": "key-stays-1234", "workspace": ')  # half written

    async def refused() -> bool:
        return (await api.client.get("/graphs", headers=bearer("key-stays-1234"))).status_code == 401

    await within(refused)
    write_keys(keys_file, ["key-stays-1234"])

    async def accepted() -> bool:
        return (await api.client.get("/graphs", headers=bearer("key-stays-1234"))).status_code == 200

    await within(accepted)


def _payload(signed: str) -> str:
    _valid, payload = URLSafeTimedSerializer("unknown").loads_unsafe(signed)
    return json.dumps(payload)


async def test_cookies_and_stream_tokens_carry_nothing_derived_from_the_key(keys_api: tuple[Api, Path]) -> None:
    api, _ = keys_api
    key = "key-goes-5678"
    digest = hashlib.sha256(key.encode()).digest()
    forms = [key, digest.hex(), base64.urlsafe_b64encode(digest).decode().rstrip("="), digest.hex()[:8]]
    seen = []
    for _ in range(2):
        async with browser(api) as session:
            assert (await session.post("/auth/session", json={"api_key": key})).status_code == 200
            seen.append(_payload(session.cookies[COOKIE]))
    assert (await api.client.post("/graphs", json=chain("g1"), headers=bearer(key))).status_code == 201
    run = (await api.client.post("/graphs/g1/runs", json={}, headers=bearer(key))).json()["run_id"]
    token = (await api.client.post("/auth/stream-token", json={"run_id": run}, headers=bearer(key))).json()["token"]
    seen.append(_payload(token))
    for payload in seen:
        assert not any(form in payload for form in forms), payload
    assert seen[0] != seen[1]  # two sign-ins with one key: two unrelated sessions


async def test_signing_out_ends_every_copy_of_the_cookie(keys_api: tuple[Api, Path]) -> None:
    api, _ = keys_api
    async with browser(api) as session, browser(api) as thief:
        assert (await session.post("/auth/session", json={"api_key": "key-stays-1234"})).status_code == 200
        thief.cookies.set(COOKIE, session.cookies[COOKIE])
        assert (await thief.get("/graphs")).status_code == 200
        assert (await session.delete("/auth/session")).status_code == 204
        assert (await thief.get("/graphs")).status_code == 401
