"""One egress policy for every outbound connection a node opens.

A graph author chooses URLs; the operator chooses where the workers may connect. The
policy refuses any address that is not globally routable (loopback, RFC 1918 private,
link-local, CGNAT shared space, reserved, multicast, unspecified; IPv4-mapped IPv6 is
unwrapped first) unless ``ORCH_EGRESS_ALLOW_PRIVATE`` is set, and refuses cloud-metadata
addresses always, unless one is listed by exact address in ``ORCH_EGRESS_ALLOW``.
``ORCH_EGRESS_ALLOW`` lists hosts, addresses or CIDR networks allowed despite the rule.

The check runs *after* DNS resolution, at connect time, on the address actually
connected to: :func:`egress_client` gives an ``httpx.AsyncClient`` whose transport
resolves each host itself, checks every address, and connects to a checked address
(TLS still verifies the original host name). Every connection the client opens passes
the check, so redirects, retries and pagination need no extra care, and a DNS answer that
changes between a check and the connect (rebinding) cannot slip through. Proxies from
the environment are ignored (``trust_env=False``): a proxy would connect on our behalf.

Why hand-written: the maintained SSRF guards are for ``requests`` (advocate, unmaintained
since 2020) or check a URL before the request (a time-of-check gap); httpcore's network
backend is the one place where the address connected to is known, so the guard sits there.

:meth:`EgressPolicy.check_url` is for clients we do not build (it resolves and checks once;
prefer :func:`egress_client` where the client can be given).
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import httpcore
import httpx

from orchestrator.kernel.errors import EgressDeniedError
from orchestrator.settings import Settings, get_settings

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

# Instance metadata services: credentials of the machine the worker runs on.
METADATA_ADDRESSES = frozenset(ipaddress.ip_address(a) for a in (
    "169.254.169.254",  # AWS, GCP, Azure, OpenStack, DigitalOcean, ...
    "169.254.170.2",  # AWS ECS task metadata
    "100.100.100.200",  # Alibaba Cloud
    "fd00:ec2::254",  # AWS over IPv6
))


def _unwrap(address: IPAddress) -> IPAddress:
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


@dataclass(frozen=True)
class EgressPolicy:
    """Which addresses a node may connect to (see the module docstring)."""

    allow_private: bool = False
    allow_hosts: frozenset[str] = frozenset()
    allow_networks: tuple[IPNetwork, ...] = field(default_factory=tuple)

    @classmethod
    def from_settings(cls, settings: Settings | None = None) -> EgressPolicy:
        settings = settings or get_settings()
        return cls.build(settings.egress_allow_private, settings.egress_allow.split(","))

    @classmethod
    def build(cls, allow_private: bool, allow: Iterable[str]) -> EgressPolicy:
        hosts: set[str] = set()
        networks: list[IPNetwork] = []
        for raw in allow:
            item = raw.strip().lower()
            if not item:
                continue
            try:
                networks.append(ipaddress.ip_network(item, strict=False))
            except ValueError:
                hosts.add(item.rstrip("."))
        return cls(allow_private, frozenset(hosts), tuple(networks))

    def refusal(self, address: IPAddress) -> str | None:
        """Why ``address`` is refused, or None when a connection to it is allowed."""
        address = _unwrap(address)
        if any(address in net for net in self.allow_networks):
            return None
        if address in METADATA_ADDRESSES:
            return "a cloud metadata address"
        if address.is_global and not address.is_multicast:
            return None
        if self.allow_private and not (address.is_multicast or address.is_unspecified):
            return None
        kind = ("loopback" if address.is_loopback else "link-local" if address.is_link_local
                else "private" if address.is_private else "multicast" if address.is_multicast
                else "not globally routable")
        return f"a {kind} address"

    def host_allowed(self, host: str) -> bool:
        return host.lower().rstrip(".") in self.allow_hosts

    async def resolve(self, host: str, port: int) -> list[str]:
        """Every address of ``host``, checked; raises :class:`EgressDeniedError` if any is
        refused (a name that resolves to one public and one private address is refused)."""
        try:
            literal: IPAddress | None = ipaddress.ip_address(host.strip("[]"))
        except ValueError:
            literal = None
        if literal is not None:
            addresses: list[str] = [str(literal)]
        else:
            try:
                infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
            except OSError as exc:
                raise EgressDeniedError(f"cannot resolve host {host!r}: {exc}") from None
            addresses = list(dict.fromkeys(str(info[4][0]) for info in infos))
        if self.host_allowed(host):
            return addresses
        for addr in addresses:
            reason = self.refusal(ipaddress.ip_address(addr.split("%")[0]))
            if reason is not None:
                raise EgressDeniedError(
                    f"connection to {host}:{port} refused by the egress policy: {addr} is {reason} "
                    "(an operator can allow it with ORCH_EGRESS_ALLOW or ORCH_EGRESS_ALLOW_PRIVATE)"
                )
        return addresses

    async def check_url(self, url: str) -> None:
        """Resolve and check the host of ``url`` (http, https, ws, wss only)."""
        parts = urlsplit(url)
        if parts.scheme not in {"http", "https", "ws", "wss"} or not parts.hostname:
            raise EgressDeniedError(f"URL {url!r} is not an http(s) URL with a host")
        default = 443 if parts.scheme in {"https", "wss"} else 80
        await self.resolve(parts.hostname, parts.port or default)


class _GuardedBackend(httpcore.AsyncNetworkBackend):
    """httpcore's network backend with the policy applied to every TCP connect."""

    def __init__(self, policy: EgressPolicy) -> None:
        self._policy = policy
        self._inner = httpcore.AnyIOBackend()

    async def connect_tcp(self, host: str, port: int, timeout: float | None = None,
                          local_address: str | None = None,
                          socket_options: Iterable[Any] | None = None) -> httpcore.AsyncNetworkStream:
        last: Exception | None = None
        for address in await self._policy.resolve(host, port):
            try:
                return await self._inner.connect_tcp(address, port, timeout=timeout,
                                                     local_address=local_address,
                                                     socket_options=socket_options)
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                last = exc
        assert last is not None
        raise last

    async def connect_unix_socket(self, path: str, timeout: float | None = None,
                                  socket_options: Iterable[Any] | None = None) -> httpcore.AsyncNetworkStream:
        raise EgressDeniedError("unix socket connections are refused by the egress policy")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


class EgressTransport(httpx.AsyncHTTPTransport):
    """``httpx.AsyncHTTPTransport`` whose connections pass :class:`EgressPolicy`."""

    def __init__(self, policy: EgressPolicy, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        # httpx builds its pool without a way to pass a network backend; the pool creates
        # every connection through this attribute. tests/nodes/test_egress.py proves a
        # refused address is refused through a real client, so an httpx or httpcore
        # change that breaks this is caught.
        self._pool._network_backend = _GuardedBackend(policy)


def egress_client(policy: EgressPolicy | None = None, **kwargs: Any) -> httpx.AsyncClient:
    """An ``httpx.AsyncClient`` for node traffic: every connection passes ``policy``
    (default: from the settings); environment proxies are not used."""
    policy = policy or EgressPolicy.from_settings()
    kwargs.setdefault("follow_redirects", False)
    return httpx.AsyncClient(transport=EgressTransport(policy), trust_env=False, **kwargs)
