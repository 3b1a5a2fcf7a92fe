"""``/credentials`` over the API: stored encrypted, never returned, typed, deletable."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from cryptography.fernet import Fernet

from orchestrator.local.embedded_redis import EmbeddedRedis
from tests.api.conftest import Api, open_api

KEY = Fernet.generate_key().decode()


@pytest.fixture
async def capi(redis_server: EmbeddedRedis) -> AsyncIterator[Api]:
    api = await open_api(redis_server, credentials_key=KEY)
    yield api
    await api.close()


async def test_a_stored_credential_is_described_but_its_secret_never_returned(capi: Api) -> None:
    r = await capi.client.post("/credentials", json={"name": "openai", "type": "api_key",
                                                     "values": {"key": "sk-VERY-SECRET", "base_url": "http://x/v1"}})
    assert r.status_code == 201, r.text
    assert r.json()["public"] == {"base_url": "http://x/v1"} and r.json()["fields"] == ["base_url", "key"]
    for response in (r, await capi.client.get("/credentials"), await capi.client.get("/credentials/openai")):
        assert "sk-VERY-SECRET" not in response.text
    listed = (await capi.client.get("/credentials")).json()["credentials"]
    assert [(c["name"], c["type"]) for c in listed] == [("openai", "api_key")]


async def test_secrets_are_encrypted_at_rest(capi: Api) -> None:
    await capi.client.post("/credentials", json={"name": "db", "type": "database_url",
                                                 "values": {"url": "postgresql://u:pw-PLAIN@h/db"}})
    raw: dict[str, Any] = await capi.redis.hgetall(f"{capi.settings.key_prefix}:cred:default")
    assert list(raw) == ["db"] and "pw-PLAIN" not in raw["db"]
    assert b"pw-PLAIN" in Fernet(KEY.encode()).decrypt(raw["db"].encode())


async def test_bad_type_or_missing_value_is_a_400_naming_it(capi: Api) -> None:
    r = await capi.client.post("/credentials", json={"name": "x", "type": "password", "values": {}})
    assert r.status_code == 400 and r.json()["error"]["parameter"] == "type"
    r = await capi.client.post("/credentials", json={"name": "x", "type": "basic", "values": {"username": "u"}})
    assert r.status_code == 400 and "password" in r.json()["error"]["message"]


async def test_delete_then_get_is_a_404(capi: Api) -> None:
    await capi.client.post("/credentials", json={"name": "t", "type": "bearer", "values": {"token": "abc123"}})
    assert (await capi.client.delete("/credentials/t")).status_code == 204
    assert (await capi.client.get("/credentials/t")).status_code == 404
    assert (await capi.client.delete("/credentials/t")).status_code == 404


async def test_without_a_key_credentials_cannot_be_stored(redis_server: EmbeddedRedis) -> None:
    api = await open_api(redis_server)
    try:
        r = await api.client.post("/credentials", json={"name": "t", "type": "bearer", "values": {"token": "abc"}})
        assert r.status_code == 400 and "ORCH_CREDENTIALS_KEY" in r.json()["error"]["message"]
    finally:
        await api.close()


async def test_rotation_re_encrypts_with_the_new_key(capi: Api) -> None:
    from orchestrator.host.credentials import CredentialStore

    await capi.client.post("/credentials", json={"name": "t", "type": "bearer", "values": {"token": "tok-1"}})
    new = Fernet.generate_key().decode()
    both = capi.settings.model_copy(update={"credentials_key": f"{new},{KEY}"})
    assert await CredentialStore(capi.redis, both).rotate() == 1
    only_new = capi.settings.model_copy(update={"credentials_key": new})
    assert (await CredentialStore(capi.redis, only_new).get("t")).values == {"token": "tok-1"}


# -- origins: where nodes may send a credential ---------------------------------------------------------


async def test_origins_are_stored_normalized_and_described(capi: Api) -> None:
    r = await capi.client.post("/credentials", json={"name": "partner", "type": "header",
                                                     "values": {"name": "X-Api-Key", "value": "hdr-SECRET"},
                                                     "origins": ["HTTPS://API.Example.com:443", "https://*.example.com",
                                                                 "http://10.0.0.5:8080"]})
    assert r.status_code == 201, r.text
    assert r.json()["origins"] == ["https://api.example.com", "https://*.example.com", "http://10.0.0.5:8080"]
    assert (await capi.client.get("/credentials/partner")).json()["origins"] == r.json()["origins"]


@pytest.mark.parametrize("origin", ["api.example.com", "ftp://x.example.com", "https://x.example.com/path",
                                    "https://user@x.example.com", "https://*", "https://a.*.example.com"])
async def test_a_malformed_origin_is_a_400_naming_it(capi: Api, origin: str) -> None:
    r = await capi.client.post("/credentials", json={"name": "t", "type": "bearer", "values": {"token": "tok-123"},
                                                     "origins": [origin]})
    assert r.status_code == 400 and r.json()["error"]["parameter"] == "origins" and origin in r.text


async def test_database_url_credentials_take_no_origins(capi: Api) -> None:
    r = await capi.client.post("/credentials", json={"name": "db", "type": "database_url",
                                                     "values": {"url": "postgresql://h/db"},
                                                     "origins": ["https://x.example.com"]})
    assert r.status_code == 400 and "takes no origins" in r.text


async def test_an_admin_sets_origins_without_sending_the_secret_again(capi: Api) -> None:
    from orchestrator.host.credentials import CredentialStore

    await capi.client.post("/credentials", json={"name": "t", "type": "bearer", "values": {"token": "tok-KEEP-1"}})
    r = await capi.client.patch("/credentials/t", json={"origins": ["https://api.example.com"]})
    assert r.status_code == 200 and r.json()["origins"] == ["https://api.example.com"]
    stored = await CredentialStore(capi.redis, capi.settings).get("t")
    assert stored.values == {"token": "tok-KEEP-1"} and stored.origins == ("https://api.example.com",)
    assert (await capi.client.patch("/credentials/nope", json={"origins": []})).status_code == 404


@pytest.mark.parametrize(("pattern", "url", "allowed"), [
    ("https://api.example.com", "https://api.example.com/v1/x?q=1", True),
    ("https://api.example.com", "https://API.example.com:443/", True),
    ("https://api.example.com", "http://api.example.com/", False),  # scheme
    ("https://api.example.com", "https://api.example.com:8443/", False),  # port
    ("https://api.example.com", "https://api.example.com.evil.net/", False),
    ("https://api.example.com", "https://evil.net/?https://api.example.com", False),
    ("https://*.example.com", "https://eu.api.example.com/", True),
    ("https://*.example.com", "https://example.com/", False),  # the domain itself is not a subdomain
    ("https://*.example.com", "https://badexample.com/", False),
    ("http://127.0.0.1:8080", "http://127.0.0.1:8080/x", True),
    ("http://[::1]:8080", "http://[::1]:8080/x", True),
])
def test_origin_patterns_match_scheme_host_and_port(pattern: str, url: str, allowed: bool) -> None:
    from orchestrator.host.egress.origins import allows, parse_patterns

    assert allows(parse_patterns([pattern]), url) is allowed


async def test_a_credentials_provider_limits_are_stored_shown_and_changed_without_the_secret(capi: Api) -> None:
    r = await capi.client.post("/credentials", json={"name": "team", "type": "api_key",
                                                     "values": {"key": "sk-team-0123456789"},
                                                     "limits": {"rpm": 500, "tpm": 200000}})
    assert r.status_code == 201 and r.json()["limits"] == {"rpm": 500, "tpm": 200000}
    changed = await capi.client.patch("/credentials/team", json={"limits": {"rpm": 60}})
    assert changed.status_code == 200 and changed.json()["limits"] == {"rpm": 60}
    assert "sk-team" not in changed.text
    bad = await capi.client.patch("/credentials/team", json={"limits": {"rps": 1}})
    assert bad.status_code == 400 and "limits take rpm, tpm" in bad.json()["error"]["message"]
