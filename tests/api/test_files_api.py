"""``/files`` over the API: upload returns a BinaryRef, download streams it back."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from orchestrator.embedded_redis import EmbeddedRedis
from tests.api.conftest import Api, open_api


@pytest.fixture
async def fapi(redis_server: EmbeddedRedis) -> AsyncIterator[Api]:
    api = await open_api(redis_server, files_max_bytes=4096, max_body_bytes=1024)
    yield api
    await api.close()


async def test_upload_then_download_round_trips_bytes_and_type(fapi: Api) -> None:
    data = bytes(range(256)) * 10  # above the JSON body limit, below the file limit
    r = await fapi.client.post("/files", files={"file": ("blob.bin", data, "application/x-thing")})
    assert r.status_code == 201, r.text
    ref = r.json()["$binary"]
    assert ref["size"] == len(data) and ref["mime"] == "application/x-thing"
    assert ref["ref"].startswith("redis:default:")
    got = await fapi.client.get(f"/files/{ref['ref']}")
    assert got.status_code == 200 and got.content == data
    assert got.headers["content-type"] == "application/x-thing"
    assert 'filename="blob.bin"' in got.headers["content-disposition"]
    ttl = await fapi.redis.ttl(f"{fapi.settings.key_prefix}:blob:default:{ref['ref'].rsplit(':', 1)[1]}")
    assert 0 < ttl <= fapi.settings.retention_s


async def test_upload_over_the_limit_is_a_413_and_stores_nothing(fapi: Api) -> None:
    r = await fapi.client.post("/files", files={"file": ("big.bin", b"x" * 5000, "application/octet-stream")})
    assert r.status_code == 413
    assert await fapi.redis.keys(f"{fapi.settings.key_prefix}:blob:*") == []


async def test_unknown_and_malformed_refs(fapi: Api) -> None:
    missing = await fapi.client.get("/files/redis:default:" + "0" * 32)
    assert missing.status_code == 404
    bad = await fapi.client.get("/files/not-a-ref")
    assert bad.status_code == 400 and bad.json()["error"]["parameter"] == "ref"


async def test_delete_removes_a_file(fapi: Api) -> None:
    ref = (await fapi.client.post("/files", files={"file": ("a.txt", b"hi", "text/plain")})).json()["$binary"]["ref"]
    assert (await fapi.client.delete(f"/files/{ref}")).status_code == 204
    assert (await fapi.client.get(f"/files/{ref}")).status_code == 404


async def test_files_need_the_api_key_like_every_endpoint(redis_server: EmbeddedRedis) -> None:
    api = await open_api(redis_server, api_keys="k-1")
    try:
        assert (await api.client.post("/files", files={"file": ("a", b"x", "text/plain")})).status_code == 401
        assert (await api.client.get("/files/redis:default:" + "0" * 32)).status_code == 401
    finally:
        await api.close()
