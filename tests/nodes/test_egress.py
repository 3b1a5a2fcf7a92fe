"""The egress policy, through a real httpx client against real local servers."""

from __future__ import annotations

import ipaddress
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from nodes._shared.egress import EgressPolicy, egress_client
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
    from nodes._shared.egress_httpx2 import egress_client_httpx2

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
