"""Origins: where a credential may be sent.

An origin is ``scheme://host[:port]`` (RFC 6454): two URLs share one when scheme, host and
port are equal, the port defaulting to 80 for http and 443 for https. A credential carries
the origin patterns an admin allows it to be sent to (``orchestrator/host/credentials.py``); a
node attaches it to a request only when the request's origin matches one.

A pattern is an origin whose host may start with ``*.``: ``https://*.example.com`` matches
``https://api.example.com`` and ``https://eu.api.example.com`` (any depth), never
``https://example.com`` itself (list that too when it is wanted). Scheme and port are
never wildcards: ``http://`` and ``https://`` are different origins, so a credential for
``https://api.example.com`` is not sent over plain http to the same host. Patterns carry no
path, query, fragment or user info.

URLs are parsed with httpx's parser, the one the node clients connect with, so the origin
checked is the origin connected to (a URL that two parsers read differently cannot pass
the check under one reading and connect under the other). httpx is imported at the first
parse, not with this module: node discovery imports it in every worker and CLI process.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import httpx

DEFAULT_PORTS = {"http": 80, "https": 443}
WILDCARD = "*."


@dataclass(frozen=True)
class Origin:
    scheme: str
    host: str
    port: int

    @classmethod
    def of(cls, url: str | httpx.URL) -> Origin:
        """The origin of an http(s) URL; ``ValueError`` for anything else."""
        import httpx

        try:
            parsed = url if isinstance(url, httpx.URL) else httpx.URL(url)
        except (httpx.InvalidURL, TypeError) as exc:
            raise ValueError(f"{url!s} is not a URL ({exc})") from None
        scheme = parsed.scheme.lower()
        if scheme not in DEFAULT_PORTS or not parsed.host:
            raise ValueError(f"{url!s} is not an http(s) URL with a host")
        return cls(scheme, parsed.host.lower().rstrip("."), parsed.port or DEFAULT_PORTS[scheme])

    def __str__(self) -> str:
        return _text(self.scheme, self.host, self.port)


@dataclass(frozen=True)
class OriginPattern:
    scheme: str
    host: str  # may start with "*."
    port: int

    @classmethod
    def parse(cls, text: str) -> OriginPattern:
        """``scheme://host[:port]`` with an optional ``*.`` host prefix; ``ValueError``
        saying what is wrong otherwise."""
        raw = text.strip()
        scheme, sep, rest = raw.partition("://")
        scheme = scheme.lower()
        if not sep or scheme not in DEFAULT_PORTS:
            raise ValueError(f"origin {text!r} must start with http:// or https://")
        if any(c in rest for c in "/?#@\\") or not rest:
            raise ValueError(f"origin {text!r} must be scheme://host[:port], without path, query or user")
        wildcard = rest.startswith(WILDCARD)
        try:
            origin = Origin.of(f"{scheme}://{rest[len(WILDCARD):] if wildcard else rest}")
        except ValueError:
            raise ValueError(f"origin {text!r} is not scheme://host[:port]") from None
        if "*" in origin.host or (wildcard and "." not in origin.host):
            raise ValueError(f"origin {text!r}: '*.' may only prefix a domain with a dot, "
                             "e.g. https://*.example.com")
        return cls(scheme, WILDCARD + origin.host if wildcard else origin.host, origin.port)

    def matches(self, origin: Origin) -> bool:
        if (self.scheme, self.port) != (origin.scheme, origin.port):
            return False
        if self.host.startswith(WILDCARD):
            return origin.host.endswith(self.host[1:])  # ".example.com": a strict subdomain
        return self.host == origin.host

    def __str__(self) -> str:
        return _text(self.scheme, self.host, self.port)


def _text(scheme: str, host: str, port: int) -> str:
    """``scheme://host[:port]``, the port only when it is not the scheme's default."""
    shown = f"[{host}]" if ":" in host else host
    return f"{scheme}://{shown}" + ("" if DEFAULT_PORTS[scheme] == port else f":{port}")


def parse_patterns(items: list[str] | tuple[str, ...]) -> tuple[OriginPattern, ...]:
    """Every item parsed (duplicates dropped, order kept); ``ValueError`` names a bad one."""
    return tuple(dict.fromkeys(OriginPattern.parse(item) for item in items))


def allows(patterns: tuple[OriginPattern, ...], url: str | httpx.URL) -> bool:
    """Whether ``url`` is an http(s) URL whose origin one of ``patterns`` matches."""
    try:
        origin = Origin.of(url)
    except ValueError:
        return False
    return any(p.matches(origin) for p in patterns)
