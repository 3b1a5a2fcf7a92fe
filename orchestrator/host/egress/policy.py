"""One egress policy for every outbound connection a node opens.

A graph author chooses URLs; the operator chooses where the workers may connect. The
policy refuses any address that is not globally routable (loopback, RFC 1918 private,
link-local, CGNAT shared space, reserved, multicast, unspecified) unless
``ORCH_EGRESS_ALLOW_PRIVATE`` is set, and refuses cloud-metadata addresses always, unless
one is listed by exact address in ``ORCH_EGRESS_ALLOW``. ``ORCH_EGRESS_ALLOW`` lists hosts,
addresses or CIDR networks allowed despite the rule.

An IPv6 address that carries an IPv4 address is judged by the IPv4 rules on the carried
address (:func:`embedded_ipv4`): IPv4-mapped ``::ffff:a.b.c.d``, IPv4-compatible
``::a.b.c.d``, SIIT ``::ffff:0:a.b.c.d``, NAT64 ``64:ff9b::/96`` and the local-use
``64:ff9b:1::/48`` (RFC 8215), 6to4 ``2002::/16``, Teredo ``2001::/32`` (server and
de-obfuscated client) and ISATAP interface identifiers (``...:0:5efe:a.b.c.d``). A
translator or relay delivers such a packet to the carried address, so
``64:ff9b::7f00:1`` is loopback. For the forms that only carry an address (mapped,
compatible, SIIT, NAT64, 6to4) the carried address decides alone; Teredo and ISATAP
addresses must pass both the IPv6 rules and the IPv4 rules. In ``64:ff9b:1::/48`` the
prefix length (48, 56, 64 or 96; RFC 6052) is the operator's choice and cannot be read
from the address, so the address is read at each length and refused if any reading is.

The check runs *after* DNS resolution, at connect time, on the address actually
connected to: ``egress_client`` (``client.py``) gives an ``httpx.AsyncClient`` whose transport
resolves each host itself, checks every address, and connects to a checked address
(TLS still verifies the original host name). Every connection the client opens passes
the check, so redirects, retries and pagination need no extra care, and a DNS answer that
changes between a check and the connect (rebinding) cannot slip through. Proxies from
the environment are ignored (``trust_env=False``): a proxy would connect on our behalf.

Why hand-written: the maintained SSRF guards are for ``requests`` (advocate, unmaintained
since 2020) or check a URL before the request (a time-of-check gap); httpcore's network
backend is the one place where the address connected to is known, so the guard sits there.
:class:`GuardedConnects` is that guard for both engines in use: httpcore (httpx, above:
``orchestrator/host/egress/client.py``) and httpcore2 (httpx2, the client of the OpenAI and
MCP SDKs: ``orchestrator/host/egress/httpx2.py``), one resolve-and-check code path;
:func:`guarded` puts it into a transport's pool. Neither engine is imported here: the node
host imports this module in every worker and CLI process.

:meth:`EgressPolicy.allowing` adds hosts the operator configured elsewhere (a model
endpoint in ``ORCH_OPENAI_BASE_URL``) for one client, never for the whole process.

:meth:`EgressPolicy.check_url` resolves and checks once: an early check (the MCP Server
node fails with the policy's error before anything connects), never the only one.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from types import ModuleType
from typing import Any, ClassVar, Protocol, TypeVar
from urllib.parse import urlsplit

from orchestrator.kernel.errors import EgressDeniedError
from orchestrator.settings import EgressSettings

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


class _PooledTransport(Protocol):
    _pool: Any  # httpcore's or httpcore2's connection pool


Transport = TypeVar("Transport", bound=_PooledTransport)  # httpx's or httpx2's

# Instance metadata services: credentials of the machine the worker runs on.
METADATA_ADDRESSES = frozenset(ipaddress.ip_address(a) for a in (
    "169.254.169.254",  # AWS, GCP, Azure, OpenStack, DigitalOcean, ...
    "169.254.170.2",  # AWS ECS task metadata
    "100.100.100.200",  # Alibaba Cloud
    "fd00:ec2::254",  # AWS over IPv6
))


_IPV4_COMPATIBLE = ipaddress.ip_network("::/96")  # RFC 4291 (deprecated), not :: and ::1
_IPV4_TRANSLATED = ipaddress.ip_network("::ffff:0:0:0/96")  # SIIT, RFC 2765
_NAT64_WELL_KNOWN = ipaddress.ip_network("64:ff9b::/96")  # RFC 6052
_NAT64_LOCAL_USE = ipaddress.ip_network("64:ff9b:1::/48")  # RFC 8215
_NAT64_LOCAL_USE_LENGTHS = (48, 56, 64, 96)  # RFC 6052 prefix lengths inside a /48
_ISATAP_INTERFACE = 0x00005EFE  # RFC 5214; the u/g bits of the top octet may be set


def _rfc6052(value: int, prefix_length: int) -> ipaddress.IPv4Address:
    """The IPv4 address at ``prefix_length`` in ``value`` (RFC 6052, 2.2): it starts right
    after the prefix and skips bits 64-71 (the "u" octet)."""
    if prefix_length == 96:
        return ipaddress.IPv4Address(value & 0xFFFFFFFF)
    high_bits = 64 - prefix_length
    low_bits = 32 - high_bits
    high = (value >> 64) & ((1 << high_bits) - 1)
    low = (value >> (128 - 72 - low_bits)) & ((1 << low_bits) - 1)
    return ipaddress.IPv4Address((high << low_bits) | low)


def embedded_ipv4(address: ipaddress.IPv6Address) -> tuple[bool, tuple[ipaddress.IPv4Address, ...]]:
    """The IPv4 addresses ``address`` carries, and whether they alone decide (the IPv6
    address only carries them) or the IPv6 rules apply too (Teredo, ISATAP)."""
    value = int(address)
    if address.ipv4_mapped is not None:
        return True, (address.ipv4_mapped,)
    if address in _IPV4_TRANSLATED or address in _NAT64_WELL_KNOWN or (
            address in _IPV4_COMPATIBLE and value > 1):
        return True, (ipaddress.IPv4Address(value & 0xFFFFFFFF),)
    if address in _NAT64_LOCAL_USE:
        readings = dict.fromkeys(_rfc6052(value, n) for n in _NAT64_LOCAL_USE_LENGTHS)
        return True, tuple(readings)
    if address.sixtofour is not None:
        return True, (address.sixtofour,)
    if address.teredo is not None:
        return False, address.teredo
    if (value >> 32) & 0xFCFFFFFF == _ISATAP_INTERFACE:
        return False, (ipaddress.IPv4Address(value & 0xFFFFFFFF),)
    return False, ()


@dataclass(frozen=True)
class EgressPolicy:
    """Which addresses a node may connect to (see the module docstring)."""

    allow_private: bool = False
    allow_hosts: frozenset[str] = frozenset()
    allow_networks: tuple[IPNetwork, ...] = field(default_factory=tuple)

    @classmethod
    def from_settings(cls, settings: EgressSettings) -> EgressPolicy:
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
        if any(address in net for net in self.allow_networks):
            return None
        if isinstance(address, ipaddress.IPv6Address):
            decides, carried = embedded_ipv4(address)
            for inner in carried:
                reason = self.refusal(inner)
                if reason is not None:
                    return f"an IPv6 form of {inner}, {reason}"
            if decides:
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

    def allowing(self, *hosts: str) -> EgressPolicy:
        """This policy with ``hosts`` allowed too (as if listed in ``ORCH_EGRESS_ALLOW``):
        for a client that connects only to endpoints the operator configured."""
        extra = {h.strip().lower().rstrip(".") for h in hosts if h.strip()}
        return replace(self, allow_hosts=self.allow_hosts | extra)

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


class GuardedConnects:
    """The policy applied to every TCP connect of an HTTP engine's network backend.

    One code path for the two engines in use: httpcore (httpx, our node clients) and
    httpcore2 (httpx2, the OpenAI and MCP SDKs' client). A backend class is this mixin plus the
    engine's ``AsyncNetworkBackend`` with ``engine`` naming the engine's module, which
    supplies the inner ``AnyIOBackend`` and the connect errors to fall through on.
    """

    engine: ClassVar[ModuleType]

    def __init__(self, policy: EgressPolicy) -> None:
        self._policy = policy
        self._inner: Any = self.engine.AnyIOBackend()

    async def connect_tcp(self, host: str, port: int, timeout: float | None = None,
                          local_address: str | None = None,
                          socket_options: Iterable[Any] | None = None) -> Any:
        last: Exception | None = None
        retryable = (self.engine.ConnectError, self.engine.ConnectTimeout)
        for address in await self._policy.resolve(host, port):
            try:
                return await self._inner.connect_tcp(address, port, timeout=timeout,
                                                     local_address=local_address,
                                                     socket_options=socket_options)
            except retryable as exc:
                last = exc
        assert last is not None
        raise last

    async def connect_unix_socket(self, path: str, timeout: float | None = None,
                                  socket_options: Iterable[Any] | None = None) -> Any:
        raise EgressDeniedError("unix socket connections are refused by the egress policy")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


def guarded(transport: Transport, backend: GuardedConnects) -> Transport:
    """``transport`` (httpx's or httpx2's ``AsyncHTTPTransport``) with every connection of
    its pool opened through ``backend``.

    httpx builds its pool without a way to pass a network backend; the pool creates every
    connection through this attribute. tests/nodes/test_egress.py (httpx and httpx2) and
    tests/agents/test_mcp_http.py prove a refused address is refused through a real
    client, so an upgrade that breaks this is caught.
    """
    transport._pool._network_backend = backend
    return transport
