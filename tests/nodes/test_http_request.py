"""The HTTP Request node against a local server: bodies, auth, statuses, retries, egress."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from orchestrator.kernel.errors import (
    EgressDeniedError,
    NodeExecutionError,
    NodeTimeoutError,
    ParameterError,
    WaitRequested,
)
from orchestrator.kernel.local import run_graph_local
from orchestrator.store.blobs import Blobs
from tests.nodes.local_http import LocalHttp
from tests.nodes.node_harness import registry
from tests.nodes.rag_support import (
    allow_loopback,
    node_redis,
    redis_services,
    run_with,
    set_origins,
    store_credential,
)

__all__ = ["allow_loopback", "node_redis"]


@pytest.fixture
def server() -> Iterator[LocalHttp]:
    with LocalHttp() as s:
        yield s


@pytest.fixture
def services(node_redis: Any) -> dict[str, Any]:
    return redis_services(node_redis)


async def test_loopback_url_is_refused_by_default(server: LocalHttp) -> None:
    with pytest.raises(EgressDeniedError):
        await run_with("http_request", {"url": f"{server.url}/echo"})
    assert server.requests == []


async def test_get_sends_query_and_headers_and_parses_json(server: LocalHttp, allow_loopback: None) -> None:
    out = await run_with("http_request", {"url": f"{server.url}/echo", "query": {"q": "a b", "n": 2},
                                          "headers": {"X-Trace": "t1"}})
    assert out["status"] == 200
    assert out["body"]["path"] == "/echo?q=a+b&n=2" and out["body"]["headers"]["x-trace"] == "t1"


@pytest.mark.parametrize(("body_type", "body", "sent", "mime"), [
    ("json", {"a": [1, 2]}, '{"a":[1,2]}', "application/json"),
    ("form", {"name": "Ada", "n": 3}, "name=Ada&n=3", "application/x-www-form-urlencoded"),
    ("raw", "plain text", "plain text", "text/plain; charset=utf-8"),
])
async def test_post_sends_each_body_type(server: LocalHttp, allow_loopback: None, body_type: str, body: Any,
                                         sent: str, mime: str) -> None:
    out = await run_with("http_request", {"method": "POST", "url": f"{server.url}/echo", "body_type": body_type,
                                          "body": body})
    assert out["body"]["body"].replace(" ", "") == sent.replace(" ", "")
    assert out["body"]["headers"]["content-type"] == mime


async def test_redirects_are_followed(server: LocalHttp, allow_loopback: None) -> None:
    out = await run_with("http_request", {"url": f"{server.url}/redirect"})
    assert out["status"] == 200 and out["url"].endswith("/echo")


async def test_error_status_fails_or_passes_through(server: LocalHttp, allow_loopback: None) -> None:
    with pytest.raises(NodeExecutionError, match=r"answered 404: .*no such item"):
        await run_with("http_request", {"url": f"{server.url}/missing"})
    out = await run_with("http_request", {"url": f"{server.url}/missing", "fail_on_status": False})
    assert out["status"] == 404 and out["body"] == {"error": "no such item"}


async def test_429_waits_the_servers_delay_without_counting_an_attempt(server: LocalHttp,
                                                                       allow_loopback: None) -> None:
    with pytest.raises(WaitRequested) as caught:
        await run_with("http_request", {"url": f"{server.url}/limited"})
    assert caught.value.delay_s == 2.0
    assert caught.value.reason["source"] == "provider_429"
    assert caught.value.reason["limit"].startswith("origin:default:http://127.0.0.1:")


async def test_node_retry_policy_retries_a_503_and_succeeds(server: LocalHttp, allow_loopback: None) -> None:
    graph = {"id": "g", "nodes": [
        {"id": "start", "type": "manual_trigger", "name": "Start", "data": {}},
        {"id": "call", "type": "http_request", "name": "Call", "data": {"url": f"{server.url}/flaky"},
         "settings": {"retry": {"max_attempts": 3, "initial_interval_s": 0, "jitter": False}}}],
        "edges": [{"id": "e1", "source": "start", "sourceHandle": "output", "target": "call", "targetHandle": "input",
                   "data": {"channel": "flow"}}]}
    done = await run_graph_local(graph, registry())
    assert done.status == "succeeded", done.error
    assert done.output("call")["body"] == {"ok": True, "calls": 2}


async def test_timeout_is_a_node_timeout(server: LocalHttp, allow_loopback: None) -> None:
    with pytest.raises(NodeTimeoutError, match=r"timed out after 0\.2s"):
        await run_with("http_request", {"url": f"{server.url}/slow", "timeout_s": 0.2})


async def test_bearer_credential_is_sent_and_masked_in_errors(server: LocalHttp, allow_loopback: None,
                                                             services: dict[str, Any]) -> None:
    await store_credential(services, "svc", "bearer", {"token": "tok-SECRET-123"}, [server.url])
    out = await run_with("http_request", {"url": f"{server.url}/echo", "credential": "svc"}, services=services)
    assert server.requests[-1]["headers"]["authorization"] == "Bearer tok-SECRET-123"
    assert out["body"]["headers"]["authorization"] == "Bearer ***"  # echoed back, masked in the output
    with pytest.raises(NodeExecutionError) as caught:
        await run_with("http_request", {"url": f"{server.url}/reflect-auth", "credential": "svc"},
                       services=services)
    assert "tok-SECRET-123" not in str(caught.value) and "***" in str(caught.value)


async def test_query_key_and_basic_credentials(server: LocalHttp, allow_loopback: None,
                                               services: dict[str, Any]) -> None:
    await store_credential(services, "qk", "query_key", {"name": "api_key", "value": "k-9876"}, [server.url])
    await store_credential(services, "basic", "basic", {"username": "ada", "password": "pw-1234"}, [server.url])
    out = await run_with("http_request", {"url": f"{server.url}/echo", "credential": "qk"}, services=services)
    assert server.requests[-1]["path"] == "/echo?api_key=k-9876"
    assert "k-9876" not in str(out) and out["url"].endswith("api_key=***")
    out = await run_with("http_request", {"url": f"{server.url}/echo", "credential": "basic"}, services=services)
    assert server.requests[-1]["headers"]["authorization"] == "Basic YWRhOnB3LTEyMzQ="
    assert out["body"]["headers"]["authorization"] == "Basic ***"


async def test_unknown_or_wrong_type_credential_is_a_parameter_error(server: LocalHttp, allow_loopback: None,
                                                                     services: dict[str, Any]) -> None:
    with pytest.raises(ParameterError, match="no credential named 'nope'"):
        await run_with("http_request", {"url": f"{server.url}/echo", "credential": "nope"}, services=services)
    await store_credential(services, "db", "database_url", {"url": "sqlite:///x"})
    with pytest.raises(ParameterError, match="of type database_url"):
        await run_with("http_request", {"url": f"{server.url}/echo", "credential": "db"}, services=services)


async def test_large_and_binary_bodies_become_file_references(server: LocalHttp, allow_loopback: None,
                                                              services: dict[str, Any]) -> None:
    out = await run_with("http_request", {"url": f"{server.url}/big", "inline_max_bytes": 1000}, services=services)
    ref = out["body"]["$binary"]
    assert ref["size"] == 5000 and ref["mime"] == "application/octet-stream"
    blobs = Blobs.from_settings(services["settings"])
    try:
        assert (await blobs.get(ref["ref"])).data == b"x" * 5000
        uploaded = await blobs.put(b"\x00\x01binary", mime="application/x-thing")
    finally:
        await blobs.aclose()
    out = await run_with("http_request", {"method": "PUT", "url": f"{server.url}/echo", "body_type": "binary",
                                          "body": uploaded.to_json()}, services=services)
    assert server.requests[-1]["body"] == b"\x00\x01binary"
    assert out["body"]["headers"]["content-type"] == "application/x-thing"


async def test_text_response_and_size_limit(server: LocalHttp, allow_loopback: None) -> None:
    out = await run_with("http_request", {"url": f"{server.url}/text"})
    assert out["body"] == "plain words"
    with pytest.raises(NodeExecutionError, match="exceeds max_bytes"):
        await run_with("http_request", {"url": f"{server.url}/big", "max_bytes": 100})


async def test_pagination_follows_next_urls_and_link_headers(server: LocalHttp, allow_loopback: None) -> None:
    out = await run_with("http_request", {"url": f"{server.url}/pages", "pagination": "next_url",
                                          "items_field": "results"})
    assert out["body"] == [10, 11, 20, 21, 30, 31] and out["pages"] == 3
    out = await run_with("http_request", {"url": f"{server.url}/pages", "pagination": "next_url",
                                          "items_field": "results", "max_pages": 2})
    assert out["body"] == [10, 11, 20, 21] and out["pages"] == 2
    out = await run_with("http_request", {"url": f"{server.url}/linked", "pagination": "link_header"})
    assert out["body"] == ["item-1", "item-2"] and out["pages"] == 2


async def test_a_run_of_another_workspace_cannot_use_the_credential(server: LocalHttp, allow_loopback: None,
                                                                    services: dict[str, Any]) -> None:
    """The run record says which workspace the run belongs to; credentials of other
    workspaces are unknown to its nodes."""
    import json

    from redis.asyncio import Redis

    from orchestrator.store.keys import Keys

    await store_credential(services, "svc", "bearer", {"token": "tok-SECRET-123"})  # workspace default
    redis = Redis.from_url(services["redis_url"], decode_responses=True)
    try:
        await redis.hset(Keys(services["settings"].key_prefix).run("run-test"), "meta",
                         json.dumps({"workspace": "beta"}))
    finally:
        await redis.aclose()
    with pytest.raises(ParameterError, match="svc") as caught:
        await run_with("http_request", {"url": f"{server.url}/echo", "credential": "svc"}, services=services)
    assert "tok-SECRET" not in str(caught.value)


# -- where a credential goes (docs/security.md, "Credentials go only to their origins") ------------------
# Both servers are on loopback, which the test's egress policy allows: what keeps the secret
# from the second one is the credential's origins, not the egress policy.

CREDENTIALS = {  # type -> (values, how the secret shows on a request, the secret)
    "bearer": ({"token": "tok-ORIGIN-123"}, "authorization", "tok-ORIGIN-123"),
    "header": ({"name": "X-Api-Key", "value": "hdr-ORIGIN-456"}, "x-api-key", "hdr-ORIGIN-456"),
    "basic": ({"username": "ada", "password": "pw-ORIGIN-789"}, "authorization", "YWRhOnB3LU9SSUdJTi03ODk="),
    "query_key": ({"name": "api_key", "value": "qk-ORIGIN-000"}, "query", "qk-ORIGIN-000"),
}


@pytest.fixture
def other() -> Iterator[LocalHttp]:
    """A second server: another origin (same host, another port)."""
    with LocalHttp() as s:
        yield s


def _carries(request: dict[str, Any], secret: str) -> bool:
    return secret in request["path"] or any(secret in v for v in request["headers"].values())


@pytest.mark.parametrize("kind", sorted(CREDENTIALS))
async def test_a_credential_is_refused_for_an_origin_it_does_not_allow(
        server: LocalHttp, other: LocalHttp, allow_loopback: None, services: dict[str, Any], kind: str) -> None:
    values, _, secret = CREDENTIALS[kind]
    await store_credential(services, "partner", kind, values, [server.url])
    with pytest.raises(ParameterError, match=rf"credential 'partner' may be sent only to {server.url}, "
                                             rf"not to {other.url}") as caught:
        await run_with("http_request", {"url": f"{other.url}/collect", "credential": "partner"}, services=services)
    assert other.requests == [] and secret not in str(caught.value)
    with pytest.raises(ParameterError, match="partner"):
        await run_with("document_loader", {"source": "url", "url": f"{other.url}/collect", "credential": "partner"},
                       services=services)
    assert other.requests == []


@pytest.mark.parametrize("kind", sorted(CREDENTIALS))
async def test_a_cross_origin_redirect_is_followed_without_the_credential(
        server: LocalHttp, other: LocalHttp, allow_loopback: None, services: dict[str, Any], kind: str) -> None:
    values, where, secret = CREDENTIALS[kind]
    await store_credential(services, "partner", kind, values, [server.url])
    out = await run_with("http_request", {"url": f"{server.url}/redirect-to?to={other.url}/echo",
                                          "credential": "partner"}, services=services)
    assert out["status"] == 200 and out["url"] == f"{other.url}/echo"
    assert _carries(server.requests[0], secret)  # the first hop, on the allowed origin, had it
    assert len(other.requests) == 1 and not _carries(other.requests[0], secret)
    if where != "query":
        assert where not in other.requests[0]["headers"]


@pytest.mark.parametrize("kind", sorted(CREDENTIALS))
async def test_a_same_origin_redirect_keeps_the_credential(
        server: LocalHttp, allow_loopback: None, services: dict[str, Any], kind: str) -> None:
    values, _, secret = CREDENTIALS[kind]
    await store_credential(services, "partner", kind, values, [server.url])
    out = await run_with("http_request", {"url": f"{server.url}/redirect", "credential": "partner"},
                         services=services)
    assert out["status"] == 200 and [r["path"].split("?")[0] for r in server.requests] == ["/redirect", "/echo"]
    assert all(_carries(r, secret) for r in server.requests)
    assert secret not in str(out)  # echoed back by /echo, masked in the output


async def test_a_next_page_on_another_origin_is_refused_without_sending_anything(
        server: LocalHttp, other: LocalHttp, allow_loopback: None, services: dict[str, Any]) -> None:
    await store_credential(services, "svc", "bearer", {"token": "tok-PAGE-SECRET"}, [server.url])
    with pytest.raises(NodeExecutionError, match=rf"page 2 is on another origin.*'svc'.*not to {other.url}"):
        await run_with("http_request", {"url": f"{server.url}/page-to?next={other.url}/stolen", "credential": "svc",
                                        "pagination": "next_url", "items_field": "results"}, services=services)
    assert other.requests == []


async def test_pages_on_the_credentials_origin_all_carry_it(
        server: LocalHttp, allow_loopback: None, services: dict[str, Any]) -> None:
    await store_credential(services, "qk", "query_key", {"name": "api_key", "value": "qk-PAGES-1"}, [server.url])
    out = await run_with("http_request", {"url": f"{server.url}/pages", "credential": "qk",
                                          "pagination": "next_url", "items_field": "results"}, services=services)
    assert out["pages"] == 3 and [r["path"] for r in server.requests] == [
        "/pages?api_key=qk-PAGES-1", "/pages?p=2&api_key=qk-PAGES-1", "/pages?p=3&api_key=qk-PAGES-1"]


async def test_without_a_credential_a_next_page_elsewhere_is_still_followed(
        server: LocalHttp, other: LocalHttp, allow_loopback: None) -> None:
    out = await run_with("http_request", {"url": f"{server.url}/page-to?next={other.url}/pages?p=3",
                                          "pagination": "next_url", "items_field": "results"})
    assert out["pages"] == 2 and out["body"] == [1, 30, 31] and len(other.requests) == 1


async def test_a_credential_stored_without_origins_is_refused_until_an_admin_sets_them(
        server: LocalHttp, allow_loopback: None, services: dict[str, Any]) -> None:
    await store_credential(services, "old", "bearer", {"token": "tok-OLD-SECRET"})  # as before origins existed
    with pytest.raises(ParameterError, match="credential 'old' lists no origins") as caught:
        await run_with("http_request", {"url": f"{server.url}/echo", "credential": "old"}, services=services)
    assert server.requests == [] and "PATCH /credentials/old" in str(caught.value)
    await set_origins(services, "old", [server.url])
    out = await run_with("http_request", {"url": f"{server.url}/echo", "credential": "old"}, services=services)
    assert out["status"] == 200 and server.requests[-1]["headers"]["authorization"] == "Bearer tok-OLD-SECRET"


async def test_an_api_key_credential_goes_to_the_origin_of_its_own_base_url(
        server: LocalHttp, other: LocalHttp, allow_loopback: None, services: dict[str, Any]) -> None:
    await store_credential(services, "llm", "api_key", {"key": "sk-BASE-URL-1", "base_url": f"{server.url}/v1"})
    out = await run_with("http_request", {"url": f"{server.url}/echo", "credential": "llm"}, services=services)
    assert out["status"] == 200 and server.requests[-1]["headers"]["authorization"] == "Bearer sk-BASE-URL-1"
    with pytest.raises(ParameterError, match="'llm' may be sent only to"):
        await run_with("http_request", {"url": f"{other.url}/echo", "credential": "llm"}, services=services)
    assert other.requests == []


async def test_an_idempotency_key_names_the_node_execution_only_when_asked(
    server: LocalHttp, allow_loopback: None,
) -> None:
    await run_with("http_request", {"method": "POST", "url": f"{server.url}/echo", "body_type": "json",
                                    "body": {"a": 1}})
    await run_with("http_request", {"method": "POST", "url": f"{server.url}/echo", "body_type": "json",
                                    "body": {"a": 1}, "idempotency_key": True})
    await run_with("http_request", {"method": "POST", "url": f"{server.url}/echo", "idempotency_key": True,
                                    "headers": {"idempotency-key": "mine"}})
    keys = [r["headers"].get("idempotency-key") for r in server.requests]
    assert keys == [None, "run-test:n1:1", "mine"]  # off by default; the caller's own header wins


async def test_each_page_of_a_keyed_read_gets_a_key_of_its_own(server: LocalHttp, allow_loopback: None) -> None:
    await run_with("http_request", {"url": f"{server.url}/pages", "pagination": "next_url",
                                    "items_field": "results", "idempotency_key": True})
    keys = [r["headers"].get("idempotency-key") for r in server.requests]
    assert keys == ["run-test:n1:1", "run-test:n1:1:page-2", "run-test:n1:1:page-3"]
