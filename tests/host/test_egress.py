"""The egress policy, through a real httpx client against real local servers."""

from __future__ import annotations

import ipaddress
import ssl
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from orchestrator.host.egress.client import egress_client
from orchestrator.host.egress.policy import EgressPolicy
from orchestrator.kernel.errors import EgressDeniedError


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        if self.path.startswith("/redirect"):
            self.send_response(302)
            self.send_header("Location", f"http://127.0.0.1:{self.server.server_address[1]}/secret")
            self.end_headers()
            return
        body = b"secret"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def local_server() -> Iterator[int]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("address", [
    "127.0.0.1", "::1", "10.0.0.5", "172.16.3.4", "192.168.1.1", "169.254.10.10", "100.64.0.1",
    "0.0.0.0", "224.0.0.1", "::ffff:127.0.0.1", "fe80::1", "fc00::1",
])
def test_default_policy_refuses_non_public_addresses(address: str) -> None:
    assert EgressPolicy().refusal(ipaddress.ip_address(address)) is not None


@pytest.mark.parametrize("address", ["169.254.169.254", "fd00:ec2::254", "100.100.100.200"])
def test_metadata_addresses_stay_refused_when_private_ones_are_allowed(address: str) -> None:
    assert EgressPolicy(allow_private=True).refusal(ipaddress.ip_address(address)) is not None
    assert EgressPolicy.build(False, [address]).refusal(ipaddress.ip_address(address)) is None


def test_public_addresses_pass() -> None:
    assert EgressPolicy().refusal(ipaddress.ip_address("1.1.1.1")) is None
    assert EgressPolicy().refusal(ipaddress.ip_address("2606:4700:4700::1111")) is None


def _v4(text: str) -> int:
    return int(ipaddress.IPv4Address(text))


def _v6(value: int) -> ipaddress.IPv6Address:
    return ipaddress.IPv6Address(value)


# Each IPv6 form that carries an IPv4 address, built from the address by its RFC's layout.
EMBEDDINGS = {
    "mapped ::ffff:a.b.c.d": lambda v4: _v6(0xFFFF << 32 | v4),
    "compatible ::a.b.c.d": lambda v4: _v6(v4),
    "SIIT ::ffff:0:a.b.c.d": lambda v4: _v6(0xFFFF << 48 | v4),
    "NAT64 64:ff9b::/96": lambda v4: _v6(0x64FF9B << 96 | v4),
    "NAT64 64:ff9b:1::/48 at /96": lambda v4: _v6(0x64FF9B0001 << 80 | v4),
    "NAT64 64:ff9b:1::/48 at /48": lambda v4: _v6(
        0x64FF9B0001 << 80 | (v4 >> 16) << 64 | (v4 & 0xFFFF) << 40),
    "NAT64 64:ff9b:1::/48 at /64": lambda v4: _v6(0x64FF9B0001 << 80 | v4 << 24),
    "6to4 2002::/16": lambda v4: _v6(0x2002 << 112 | v4 << 80 | 1),
    "ISATAP ...:0:5efe:a.b.c.d": lambda v4: _v6(0x2606_4700 << 96 | 0x5EFE << 32 | v4),
}


@pytest.mark.parametrize("form", sorted(EMBEDDINGS))
@pytest.mark.parametrize("inner", ["127.0.0.1", "10.1.2.3", "192.168.0.7", "169.254.169.254", "0.0.0.0"])
def test_an_ipv6_form_carrying_a_non_public_ipv4_address_is_refused(form: str, inner: str) -> None:
    address = EMBEDDINGS[form](_v4(inner))
    reason = EgressPolicy().refusal(address)
    assert reason is not None, str(address)
    # The local-use prefix is read at every length (the error names the first refused
    # reading); "::" is the unspecified IPv6 address before it is a compatible 0.0.0.0.
    assert inner in reason or "64:ff9b:1::/48" in form or str(address) == "::", reason


@pytest.mark.parametrize("form", sorted(EMBEDDINGS))
def test_an_ipv6_form_carrying_a_metadata_address_is_refused_when_private_ones_are_allowed(form: str) -> None:
    address = EMBEDDINGS[form](_v4("169.254.169.254"))
    assert EgressPolicy(allow_private=True).refusal(address) is not None, str(address)


@pytest.mark.parametrize("form", sorted(set(EMBEDDINGS) - {
    "NAT64 64:ff9b:1::/48 at /96", "NAT64 64:ff9b:1::/48 at /48", "NAT64 64:ff9b:1::/48 at /64"}))
def test_an_ipv6_form_carrying_a_public_ipv4_address_stays_allowed(form: str) -> None:
    assert EgressPolicy().refusal(EMBEDDINGS[form](_v4("8.8.8.8"))) is None


def test_a_local_use_nat64_address_is_read_at_every_prefix_length() -> None:
    # Its prefix length is the operator's choice: an address reading as a public address at
    # every length passes; one reading as loopback at any length is refused.
    assert EgressPolicy().refusal(ipaddress.ip_address("64:ff9b:1:808:8:808:808:808")) is None
    reason = EgressPolicy().refusal(ipaddress.ip_address("64:ff9b:1:808:8:808:7f00:1"))
    assert reason is not None and "127.0.0.1" in reason


def test_a_teredo_address_is_judged_on_its_server_and_its_obfuscated_client() -> None:
    def teredo(server: str, client: str) -> ipaddress.IPv6Address:
        return _v6(0x2001 << 112 | _v4(server) << 64 | 0x8000_63BF << 32 | (_v4(client) ^ 0xFFFFFFFF))

    allow_private = EgressPolicy(allow_private=True)
    assert allow_private.refusal(teredo("65.54.227.120", "169.254.169.254")) is not None
    assert allow_private.refusal(teredo("169.254.169.254", "8.8.8.8")) is not None
    assert allow_private.refusal(teredo("65.54.227.120", "8.8.8.8")) is None
    assert EgressPolicy().refusal(teredo("65.54.227.120", "127.0.0.1")) is not None


async def test_a_client_refuses_nat64_loopback_before_connecting() -> None:
    async with egress_client(EgressPolicy()) as client:
        with pytest.raises(EgressDeniedError, match=r"64:ff9b::7f00:1 is an IPv6 form of 127\.0\.0\.1"):
            await client.get("http://[64:ff9b::7f00:1]:9/")


async def test_client_refuses_loopback_by_name_and_by_address(local_server: int) -> None:
    async with egress_client(EgressPolicy()) as client:
        for host in ("127.0.0.1", "localhost"):
            with pytest.raises(EgressDeniedError, match="egress policy"):
                await client.get(f"http://{host}:{local_server}/")


async def test_allow_list_opens_one_network(local_server: int) -> None:
    policy = EgressPolicy.build(False, ["127.0.0.0/8"])
    async with egress_client(policy) as client:
        response = await client.get(f"http://127.0.0.1:{local_server}/")
    assert response.text == "secret"


async def test_allowed_host_name_is_matched_exactly(local_server: int) -> None:
    async with egress_client(EgressPolicy.build(False, ["localhost"])) as client:
        assert (await client.get(f"http://localhost:{local_server}/")).status_code == 200
        with pytest.raises(EgressDeniedError):
            await client.get(f"http://127.0.0.1:{local_server}/")


async def test_redirect_to_a_refused_address_is_refused(local_server: int) -> None:
    # The first hop is allowed by name; the redirect names a loopback address.
    policy = EgressPolicy.build(False, ["localhost"])
    async with egress_client(policy, follow_redirects=True) as client:
        with pytest.raises(EgressDeniedError):
            await client.get(f"http://localhost:{local_server}/redirect")


async def test_environment_proxy_is_not_used(local_server: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{local_server}")
    monkeypatch.setenv("http_proxy", f"http://127.0.0.1:{local_server}")
    async with egress_client(EgressPolicy()) as client:
        with pytest.raises(EgressDeniedError):
            await client.get("http://192.0.2.1:9/", timeout=0.5)  # TEST-NET: never via the proxy


async def test_check_url_refuses_other_schemes_and_private_hosts() -> None:
    policy = EgressPolicy()
    with pytest.raises(EgressDeniedError):
        await policy.check_url("file:///etc/passwd")
    with pytest.raises(EgressDeniedError):
        await policy.check_url("http://169.254.169.254/latest/meta-data/")
    with pytest.raises(EgressDeniedError):
        await policy.check_url("http://localhost:8000/")


async def test_an_httpx2_client_passes_the_same_policy(local_server: int) -> None:
    """The OpenAI SDK's engine (httpx2/httpcore2) through the one guard: refused by name and
    address, allowed by the allow-list, redirects re-checked."""
    from orchestrator.host.egress.httpx2 import egress_client_httpx2

    async with egress_client_httpx2(EgressPolicy()) as client:
        for host in ("127.0.0.1", "localhost"):
            with pytest.raises(EgressDeniedError, match="egress policy"):
                await client.get(f"http://{host}:{local_server}/")
    async with egress_client_httpx2(EgressPolicy.build(False, ["localhost"]), follow_redirects=True) as client:
        assert (await client.get(f"http://localhost:{local_server}/")).text == "secret"
        with pytest.raises(EgressDeniedError):
            await client.get(f"http://localhost:{local_server}/redirect")


async def test_allowing_opens_hosts_for_one_client_only(local_server: int) -> None:
    base = EgressPolicy()
    async with egress_client(base.allowing("LOCALHOST.")) as client:
        assert (await client.get(f"http://localhost:{local_server}/")).status_code == 200
        with pytest.raises(EgressDeniedError):
            await client.get(f"http://127.0.0.1:{local_server}/")
    assert base.allow_hosts == frozenset()


async def test_node_clients_share_one_tls_context_so_building_one_loads_no_certificates() -> None:
    """A worker builds a client per node step on the loop all its steps share: loading the CA
    bundle for each (70-90 ms on a busy host) held that loop for seconds when a hundred agent
    steps started at once, and connects timed out behind it."""
    from orchestrator.host.egress.httpx2 import egress_client_httpx2

    for build in (egress_client, egress_client_httpx2):
        first, second = build(EgressPolicy()), build(EgressPolicy.build(True, []))
        async with first, second:
            contexts = [c._transport._pool._ssl_context for c in (first, second)]  # type: ignore[attr-defined]
            assert contexts[0] is contexts[1]
            assert contexts[0].verify_mode == ssl.CERT_REQUIRED and contexts[0].check_hostname


async def test_the_connection_limits_a_caller_gives_bound_the_pool() -> None:
    """A client given its own transport ignores ``limits``: the egress clients hand them to the
    transport (the OpenAI SDK's client asks for 1,000 connections, 100 kept alive)."""
    import httpx
    import httpx2

    from orchestrator.host.egress.httpx2 import egress_client_httpx2

    for build, limits in ((egress_client, httpx.Limits(max_connections=7, max_keepalive_connections=3)),
                          (egress_client_httpx2, httpx2.Limits(max_connections=7, max_keepalive_connections=3))):
        async with build(EgressPolicy(), limits=limits) as given, build(EgressPolicy()) as default:
            pools = [c._transport._pool for c in (given, default)]  # type: ignore[attr-defined]
            assert (pools[0]._max_connections, pools[0]._max_keepalive_connections) == (7, 3)
            assert (pools[1]._max_connections, pools[1]._max_keepalive_connections) == (100, 20)
