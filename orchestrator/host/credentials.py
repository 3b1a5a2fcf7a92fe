"""Named, typed secrets that graphs reference by name, encrypted at rest in Redis.

A credential is ``{name, type, values}``; ``type`` fixes which values it holds:

================  ===========================  =============================================
type              values (required, optional)  used by
================  ===========================  =============================================
``api_key``       key, (base_url)              Embedding (OpenAI-compatible), HTTP Request
``bearer``        token                        HTTP Request (``Authorization: Bearer``)
``basic``         username, password           HTTP Request (HTTP basic auth)
``header``        name, value                  HTTP Request (one header)
``query_key``     name, value                  HTTP Request (one query parameter)
``database_url``  url                          Database Query, Vector Store (pgvector)
================  ===========================  =============================================

Destinations: a credential carries ``origins``, the ``scheme://host[:port]`` patterns
(``orchestrator/host/egress/origins.py``; ``https://*.example.com`` for subdomains) its secret may be
sent to, set by whoever stores it (an admin). :meth:`Credential.refusal` is the one check
every node makes before attaching a credential to a request. An ``api_key`` may also go to
the origin of its own ``base_url``. Without origins (credentials stored before they
existed, or stored without) a credential goes only to the URL stored in it: its
``base_url``, or, for an ``api_key`` without one, the model endpoint the operator
configured (where such keys always went); any other credential without origins is refused
until an admin sets them (``PATCH /credentials/{name}``).
``database_url`` credentials connect to their own URL and take no origins.

Storage: one Redis hash per workspace (``Keys.credentials``), field = name, value = a
Fernet token (AES-128-CBC + HMAC-SHA256, from ``cryptography``) of the JSON
``{type, values, created_at}``. The key comes from ``ORCH_CREDENTIALS_KEY``: several keys,
comma-separated, newest first, form a ``MultiFernet`` (the first encrypts, any decrypts);
:meth:`CredentialStore.rotate` re-encrypts every credential with the first key.

Provider limits: a credential may carry ``limits`` ``{"rpm": n, "tpm": n}``, the requests
and tokens per minute its provider allows the key; every model node using the credential
shares them, cluster-wide (``orchestrator/host/flow.py``), without a graph repeating them.

Nothing here returns a value to an API caller: :meth:`describe` gives name, type, the
value *names* and the creation time. :func:`mask` replaces known secret values in text.
Workspaces: every method takes the store's ``workspace`` ("default" until the API's keys
belong to workspaces); the Redis key carries it, so scoping is a constructor argument.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field, replace
from typing import Any

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from redis.asyncio import Redis

from orchestrator.errors import RequestError, ResourceNotFoundError
from orchestrator.host.egress.origins import Origin, OriginPattern, parse_patterns
from orchestrator.settings import Settings
from orchestrator.store.keys import Keys

TYPES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "api_key": (("key",), ("base_url",)),
    "bearer": (("token",), ()),
    "basic": (("username", "password"), ()),
    "header": (("name", "value"), ()),
    "query_key": (("name", "value"), ()),
    "database_url": (("url",), ()),
}
# Values that are not secret (shown by describe and never masked).
PUBLIC_VALUES = frozenset({"base_url", "name", "username"})
NO_ORIGINS = frozenset({"database_url"})  # types that connect to their own URL only
MASK = "***"
MIN_MASK_LEN = 4
DEFAULT_WORKSPACE = "default"


@dataclass(frozen=True)
class Credential:
    name: str
    type: str
    values: dict[str, str]
    created_at: float = 0.0
    origins: tuple[str, ...] = ()  # origin patterns it may be sent to (see the module docstring)
    limits: dict[str, int] = field(default_factory=dict)  # provider limits: rpm, tpm (module docstring)

    def secrets(self) -> list[str]:
        """The secret values (for masking)."""
        return [v for k, v in self.values.items() if k not in PUBLIC_VALUES and len(v) >= MIN_MASK_LEN]

    def describe(self) -> dict[str, Any]:
        public = {k: v for k, v in self.values.items() if k in PUBLIC_VALUES}
        return {"name": self.name, "type": self.type, "fields": sorted(self.values), "public": public,
                "origins": list(self.origins), "limits": dict(self.limits), "created_at": self.created_at}

    def allowed(self, endpoint: str | None = None) -> tuple[OriginPattern, ...]:
        """Where it may be sent: its origins and the origin of its own ``base_url``; with
        neither, an ``api_key`` goes to the origin of ``endpoint`` (the operator's model
        endpoint, for a node that calls one); else nowhere."""
        own = [self.values["base_url"]] if self.values.get("base_url") else []
        if not own and not self.origins and endpoint and self.type == "api_key":
            own = [endpoint]
        try:
            return parse_patterns([*self.origins, *(str(Origin.of(url)) for url in own)])
        except ValueError:  # a value stored before it was checked: allow nothing
            return ()

    def refusal(self, url: str, endpoint: str | None = None) -> str | None:
        """Why this credential may not be sent to ``url`` (None when it may); the text
        names the credential and the origin, never a secret."""
        try:
            origin = Origin.of(url)
        except ValueError:
            return f"credential {self.name!r} is sent only to http(s) URLs; got {url!r}"
        allowed = self.allowed(endpoint)
        if any(p.matches(origin) for p in allowed):
            return None
        fix = (f"an admin can allow more with PATCH /credentials/{self.name} {{\"origins\": [...]}} "
               f"(CLI: orchestrator credentials origins {self.name} ORIGIN...)")
        if not allowed:
            return (f"credential {self.name!r} lists no origins it may be sent to, so it is not sent "
                    f"to {origin}; {fix}")
        return (f"credential {self.name!r} may be sent only to {', '.join(str(p) for p in allowed)}, "
                f"not to {origin}; {fix}")


LIMIT_NAMES = ("rpm", "tpm")  # requests and tokens per minute
MAX_LIMIT = 10**9


def check_limits(name: str, limits: dict[str, Any] | None) -> dict[str, int]:
    """``limits`` as stored, or a RequestError naming the bad entry."""
    checked: dict[str, int] = {}
    for key, value in (limits or {}).items():
        if key not in LIMIT_NAMES:
            raise RequestError(f"credential {name!r}: limits take {', '.join(LIMIT_NAMES)}; unknown: {key!r}",
                               parameter="limits")
        if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= MAX_LIMIT:
            raise RequestError(f"credential {name!r}: limits.{key} must be a whole number from 1 to "
                               f"{MAX_LIMIT}; got {value!r}", parameter="limits")
        checked[key] = value
    return checked


def validate(name: str, type_: str, values: dict[str, Any], origins: list[str] | None = None,
             limits: dict[str, Any] | None = None) -> Credential:
    """A credential, or a RequestError naming the bad name, type, value or origin."""
    if not isinstance(name, str) or not name or len(name) > 128 or not name.replace("-", "").replace("_", "") \
            .replace(".", "").isalnum():
        raise RequestError(f"credential name must be 1-128 letters, digits, '-', '_' or '.'; got {name!r}",
                           parameter="name")
    if type_ not in TYPES:
        raise RequestError(f"credential type must be one of {', '.join(TYPES)}; got {type_!r}", parameter="type")
    required, optional = TYPES[type_]
    missing = [k for k in required if not isinstance(values.get(k), str) or not values.get(k)]
    if missing:
        raise RequestError(f"credential {name!r} of type {type_} needs {', '.join(missing)}", parameter="values")
    unknown = sorted(set(values) - set(required) - set(optional))
    if unknown:
        raise RequestError(f"credential {name!r} of type {type_} takes {', '.join(required + optional)}; "
                           f"unknown: {', '.join(unknown)}", parameter="values")
    base_url = values.get("base_url")
    if base_url:
        try:
            Origin.of(str(base_url))
        except ValueError as exc:
            raise RequestError(f"credential {name!r}: base_url {exc}", parameter="values") from None
    return Credential(name, type_, {k: str(v) for k, v in values.items() if v is not None}, time.time(),
                      check_origins(name, type_, origins or []), check_limits(name, limits))


def check_origins(name: str, type_: str, origins: list[str]) -> tuple[str, ...]:
    """``origins`` normalized (``scheme://host[:port]``), or a RequestError naming the bad one."""
    if origins and type_ in NO_ORIGINS:
        raise RequestError(f"credential {name!r} of type {type_} connects only to its own url; "
                           "it takes no origins", parameter="origins")
    try:
        return tuple(str(p) for p in parse_patterns(origins))
    except ValueError as exc:
        raise RequestError(f"credential {name!r}: {exc}", parameter="origins") from None


def fernet(settings: Settings) -> MultiFernet:
    keys = [k.strip() for k in settings.credentials_key.split(",") if k.strip()]
    if not keys:
        raise RequestError("credentials need an encryption key: set ORCH_CREDENTIALS_KEY "
                           "(generate one with `orchestrator credentials keygen`)")
    try:
        return MultiFernet([Fernet(k.encode()) for k in keys])
    except ValueError:
        raise RequestError("ORCH_CREDENTIALS_KEY must hold Fernet keys (32 url-safe base64 bytes), "
                           "comma-separated") from None


def generate_key() -> str:
    return Fernet.generate_key().decode()


def mask(value: Any, secrets: list[str]) -> Any:
    """``value`` with every secret replaced by ``***`` (walks str/list/dict)."""
    if not secrets:
        return value
    if isinstance(value, str):
        for secret in sorted(secrets, key=len, reverse=True):
            value = value.replace(secret, MASK)
        return value
    if isinstance(value, dict):
        return {k: mask(v, secrets) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [mask(v, secrets) for v in value]
    return value


class CredentialStore:
    """Credentials of one workspace (see the module docstring). ``redis`` decodes responses."""

    def __init__(self, redis: Redis, settings: Settings, *, workspace: str = DEFAULT_WORKSPACE) -> None:
        self.redis = redis
        self.settings = settings
        self.key = Keys.of(settings).credentials(workspace)
        self.workspace = workspace

    async def put(self, credential: Credential) -> None:
        """Store (or replace) ``credential``."""
        body = {"type": credential.type, "values": credential.values, "created_at": credential.created_at,
                "origins": list(credential.origins), "limits": credential.limits}
        token = fernet(self.settings).encrypt(json.dumps(body).encode()).decode()
        await self.redis.hset(self.key, credential.name, token)

    async def get(self, name: str) -> Credential:
        token = await self.redis.hget(self.key, name)
        if token is None:
            raise ResourceNotFoundError(f"no credential named {name!r} in workspace {self.workspace!r}",
                                        parameter="credential")
        return self._decrypt(name, token)

    def _decrypt(self, name: str, token: str | bytes) -> Credential:
        raw = token.encode() if isinstance(token, str) else token
        try:
            body = json.loads(fernet(self.settings).decrypt(raw))
        except InvalidToken:
            raise RequestError(f"credential {name!r} cannot be decrypted with ORCH_CREDENTIALS_KEY "
                               "(was the key rotated away?)", parameter="credential") from None
        return Credential(name, body["type"], dict(body["values"]), float(body.get("created_at", 0.0)),
                          tuple(body.get("origins") or ()), dict(body.get("limits") or {}))

    async def set_origins(self, name: str, origins: list[str] | None,
                          limits: dict[str, Any] | None = None) -> Credential:
        """Replace the origins and/or the limits (None: kept) of the stored credential
        ``name`` (its values unchanged)."""
        found = await self.get(name)
        updated = replace(found, origins=found.origins if origins is None else check_origins(name, found.type, origins),
                          limits=found.limits if limits is None else check_limits(name, limits))
        await self.put(updated)
        return updated

    async def list(self) -> list[dict[str, Any]]:
        raw = await self.redis.hgetall(self.key)
        return [self._decrypt(str(n), t).describe() for n, t in sorted(raw.items())]

    async def delete(self, name: str) -> bool:
        return bool(await self.redis.hdel(self.key, name))

    async def rotate(self) -> int:
        """Re-encrypt every credential with the first key; returns how many."""
        f = fernet(self.settings)
        raw = await self.redis.hgetall(self.key)
        for name, token in raw.items():
            data = token.encode() if isinstance(token, str) else token
            await self.redis.hset(self.key, name, f.rotate(data).decode())
        return len(raw)
