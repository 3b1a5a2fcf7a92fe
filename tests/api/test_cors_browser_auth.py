"""Browsers: CORS for listed origins only; session cookies (CSRF-safe) and stream tokens."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

import pytest

from orchestrator.api.auth import COOKIE, CSRF_HEADER
from orchestrator.api.browser_auth import MaskTokens
from orchestrator.local.embedded_redis import EmbeddedRedis
from tests.api.conftest import Api, chain, open_api

LISTED = "http://console.example:5173"
UNLISTED = "http://evil.example"


@pytest.fixture
async def browser_api(redis_server: EmbeddedRedis) -> AsyncIterator[Api]:
    api = await open_api(redis_server, api_keys="key-one,key-two", cors_origins=f"{LISTED}, http://other:1")
    yield api
    await api.close()


def preflight(origin: str, method: str = "POST") -> dict[str, str]:
    return {
        "Origin": origin,
        "Access-Control-Request-Method": method,
        "Access-Control-Request-Headers": f"content-type,{CSRF_HEADER.lower()}",
    }


async def test_preflight_is_answered_for_a_listed_origin_only(browser_api: Api) -> None:
    ok = await browser_api.client.options("/graphs/g1/runs", headers=preflight(LISTED))
    assert ok.status_code == 200
    assert ok.headers["access-control-allow-origin"] == LISTED
    assert ok.headers["access-control-allow-credentials"] == "true"
    assert CSRF_HEADER.lower() in ok.headers["access-control-allow-headers"].lower()
    refused = await browser_api.client.options("/graphs/g1/runs", headers=preflight(UNLISTED))
    assert refused.status_code == 400
    assert "access-control-allow-origin" not in refused.headers


async def test_simple_requests_carry_allow_origin_only_for_listed_origins(browser_api: Api) -> None:
    auth = {"Authorization": "Bearer key-one"}
    listed = await browser_api.client.get("/graphs", headers={**auth, "Origin": LISTED})
    assert listed.headers["access-control-allow-origin"] == LISTED
    other = await browser_api.client.get("/graphs", headers={**auth, "Origin": UNLISTED})
    assert "access-control-allow-origin" not in other.headers


async def test_no_cors_headers_without_a_list(keyed_api: Api) -> None:
    response = await keyed_api.client.options("/graphs", headers=preflight(LISTED))
    assert "access-control-allow-origin" not in response.headers


@pytest.mark.parametrize("origins", ["*", "app.example.com", "https://app.example.com/ui"])
async def test_wildcard_or_malformed_origin_is_refused(redis_server: EmbeddedRedis, origins: str) -> None:
    with pytest.raises(ValueError, match="ORCH_CORS_ORIGINS"):
        await open_api(redis_server, cors_origins=origins)


async def test_session_endpoint_says_when_auth_is_off(api: Api) -> None:
    assert (await api.client.get("/auth/session")).json() == {"auth": False, "signed_in": True, "csrf_token": ""}
    assert (await api.client.post("/auth/session", json={"api_key": "anything"})).json()["auth"] is False


async def sign_in(api: Api, key: str = "key-one") -> str:
    response = await api.client.post("/auth/session", json={"api_key": key})
    assert response.status_code == 200, response.text
    return str(response.json()["csrf_token"])


async def test_sign_in_sets_an_httponly_samesite_cookie(browser_api: Api) -> None:
    wrong = await browser_api.client.post("/auth/session", json={"api_key": "nope"})
    assert wrong.status_code == 401 and COOKIE not in wrong.cookies
    response = await browser_api.client.post("/auth/session", json={"api_key": "key-one"})
    cookie = response.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=lax" in cookie
    assert "Secure" not in cookie  # plain http here
    assert "key-one" not in cookie  # the cookie carries a digest, never the key
    secure = await browser_api.client.post(
        "/auth/session", json={"api_key": "key-one"}, headers={"X-Forwarded-Proto": "https"}
    )
    assert "Secure" in secure.headers["set-cookie"]


async def test_a_session_reads_and_needs_its_csrf_token_to_write(browser_api: Api) -> None:
    assert (await browser_api.client.get("/graphs")).status_code == 401
    csrf = await sign_in(browser_api)
    assert (await browser_api.client.get("/graphs")).status_code == 200
    info = (await browser_api.client.get("/auth/session")).json()
    assert info == {"auth": True, "signed_in": True, "csrf_token": csrf, "workspace": "default", "role": "admin"}
    no_csrf = await browser_api.client.post("/graphs", json=chain("g1"))
    assert no_csrf.status_code == 401 and CSRF_HEADER in no_csrf.json()["error"]["message"]
    wrong = await browser_api.client.post("/graphs", json=chain("g1"), headers={CSRF_HEADER: "forged"})
    assert wrong.status_code == 401
    assert (await browser_api.client.get("/graphs/g1")).status_code == 404  # nothing was stored
    created = await browser_api.client.post("/graphs", json=chain("g1"), headers={CSRF_HEADER: csrf})
    assert created.status_code == 201


async def test_sign_out_and_key_removal_end_the_session(redis_server: EmbeddedRedis) -> None:
    api = await open_api(redis_server, api_keys="key-one,key-two", session_secret="s" * 32)
    try:
        await sign_in(api, "key-two")
        cookie = api.client.cookies[COOKIE]
        assert (await api.client.get("/graphs")).status_code == 200
        assert (await api.client.delete("/auth/session")).status_code == 204
        assert (await api.client.get("/graphs")).status_code == 401
    finally:
        await api.close()
    # The same secret, but key-two is no longer configured: its cookie is refused.
    again = await open_api(redis_server, api_keys="key-one", session_secret="s" * 32)
    try:
        again.client.cookies.set(COOKIE, cookie)
        assert (await again.client.get("/graphs")).status_code == 401
    finally:
        await again.close()


async def test_a_forged_or_foreign_cookie_is_refused(redis_server: EmbeddedRedis) -> None:
    api = await open_api(redis_server, api_keys="key-one", session_secret="a" * 32)
    other = await open_api(redis_server, api_keys="key-one", session_secret="b" * 32)
    try:
        await sign_in(api)
        other.client.cookies.set(COOKIE, api.client.cookies[COOKIE])
        assert (await other.client.get("/graphs")).status_code == 401
        other.client.cookies.set(COOKIE, "garbage")
        assert (await other.client.get("/graphs")).status_code == 401
    finally:
        await api.close()
        await other.close()


async def test_stream_token_opens_only_its_run_events(browser_api: Api) -> None:
    auth = {"Authorization": "Bearer key-one"}
    await browser_api.client.post("/graphs", json=chain("g1"), headers=auth)
    run_a = (await browser_api.client.post("/graphs/g1/runs", json={}, headers=auth)).json()["run_id"]
    run_b = (await browser_api.client.post("/graphs/g1/runs", json={}, headers=auth)).json()["run_id"]
    assert (await browser_api.client.post("/auth/stream-token", json={"run_id": run_a})).status_code == 401
    grant = (await browser_api.client.post("/auth/stream-token", json={"run_id": run_a}, headers=auth)).json()
    token = grant["token"]
    await browser_api.store.finish_run(run_a, "cancelled", {"type": "x", "code": "cancelled", "message": "stop"})
    ok = await browser_api.client.get(grant["events_url"])
    assert ok.status_code == 200 and "run_started" in ok.text
    assert (await browser_api.client.get(f"/runs/{run_b}/events?token={token}")).status_code == 401
    assert (await browser_api.client.get(f"/runs/{run_a}?token={token}")).status_code == 401
    assert (await browser_api.client.get(f"/runs/{run_a}/events?token=x{token}")).status_code == 401


async def test_expired_stream_token_is_refused(redis_server: EmbeddedRedis) -> None:
    api = await open_api(redis_server, api_keys="key-one", stream_token_ttl_s=-1)
    auth = {"Authorization": "Bearer key-one"}
    try:
        await api.client.post("/graphs", json=chain("g1"), headers=auth)
        run = (await api.client.post("/graphs/g1/runs", json={}, headers=auth)).json()["run_id"]
        grant = (await api.client.post("/auth/stream-token", json={"run_id": run}, headers=auth)).json()
        assert (await api.client.get(grant["events_url"])).status_code == 401
    finally:
        await api.close()


def test_access_log_masks_tokens() -> None:
    record = logging.LogRecord(
        "uvicorn.access", logging.INFO, __file__, 1, '%s - "%s %s HTTP/%s" %d',
        ("127.0.0.1:1", "GET", "/runs/r1/events?format=chat&token=SECRET.VALUE", "1.1", 200), None,
    )
    MaskTokens().filter(record)
    assert "SECRET" not in record.getMessage() and "token=***" in record.getMessage()


async def test_console_is_served_without_credentials(browser_api: Api) -> None:
    response = await browser_api.client.get("/ui/")
    assert response.status_code == 200 and "<html" in response.text.lower()
    assert "default-src 'self'" in response.headers["content-security-policy"]
    redirect = await browser_api.client.get("/ui")
    assert redirect.status_code == 307 and redirect.headers["location"] == "ui/"  # relative: proxy prefixes work


async def test_runs_are_listed_across_graphs_and_filtered_by_status(api: Api) -> None:
    for graph_id in ("g1", "g2"):
        assert (await api.client.post("/graphs", json=chain(graph_id))).status_code == 201
    first = (await api.client.post("/graphs/g1/runs", json={})).json()["run_id"]
    second = (await api.client.post("/graphs/g2/runs", json={})).json()["run_id"]
    await api.store.finish_run(first, "cancelled", {"type": "x", "code": "cancelled", "message": "stop"})
    listed = (await api.client.get("/runs")).json()["items"]
    assert {r["run_id"] for r in listed} == {first, second}
    assert {r["graph_id"] for r in listed} == {"g1", "g2"}
    cancelled = (await api.client.get("/runs?status=cancelled")).json()["items"]
    assert [r["run_id"] for r in cancelled] == [first]
    bad = await api.client.get("/runs?status=bogus")
    assert bad.status_code == 422 and "bogus" in bad.text


async def test_console_ships_its_canvas_library_as_built_from_the_lock_file(api: Api) -> None:
    import hashlib
    from pathlib import Path

    vendor = Path(__file__).parents[2] / "orchestrator" / "api" / "ui" / "vendor"
    for line in (vendor / "SHA256SUMS").read_text().splitlines():
        digest, name = line.split()
        served = await api.client.get(f"/ui/vendor/{name}")
        assert served.status_code == 200
        assert hashlib.sha256(served.content).hexdigest() == digest, name
