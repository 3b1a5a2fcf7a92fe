"""Who is calling: API keys that belong to a workspace and carry a role.

Keys come from two settings, both optional:

* ``ORCH_API_KEYS``: comma-separated bearer keys, each an ``admin`` of workspace
  ``default`` (the single-workspace setup, unchanged);
* ``ORCH_API_KEYS_FILE``: a JSON list of ``{"key": "..."}`` or ``{"sha256": "<hex of the
  key>"}`` entries with ``"workspace"`` and ``"role"`` (so keys can be stored hashed).

Each presented key is hashed (SHA-256) and compared with every configured digest in
constant time, with no early exit, so timing says nothing about a guess. With no key
configured at all, auth is off and every caller is an ``admin`` of ``default`` (a local
setup; ``serve`` binds to 127.0.0.1 then).

Roles are ordered: ``viewer`` reads; ``runner`` also starts, cancels and reruns runs,
answers approvals and sends chat messages; ``editor`` also writes graphs, schedules and
webhook secrets; ``admin`` may do everything. A route states the role it needs with
``Depends(role("editor"))`` (``auth.py``); a key below it gets 403. Objects of another workspace are
never visible: the stores answer 404 for them (see ``graph_store`` and ``launch``).

``auth.require_key`` resolves the :class:`Principal` from the bearer header; a request
without one may carry a browser credential instead (a session cookie or a stream token,
``auth.browser_principal``; issued by ``browser_auth.py``), which is accepted only while
its key is still configured.
Placeholder keys (``change-me`` and the like) are refused when the app starts.

The keys file is read again when it changes: :func:`key_ring` looks at its ``stat``
(modification time, size, inode) at most every ``KEYS_FILE_CHECK_S`` and rebuilds the ring
when it differs, so a key removed from the file stops working (as a bearer key, and every
session and stream token of it) within about a second, without a restart; a key added
starts working as fast. A file that cannot be read or parsed after the start accepts no
key until it is fixed (logged as an error naming the file): a half-written file never
leaves a removed key working, nor turns auth off. With a keys file configured, auth stays
on even when the file lists no key.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from orchestrator.errors import AuthError
from orchestrator.kernel.errors import ConfigurationError
from orchestrator.kernel.graph import ID_PATTERN
from orchestrator.settings import Settings

logger = logging.getLogger(__name__)

Role = Literal["viewer", "runner", "editor", "admin"]
KEYS_FILE_CHECK_S = 1.0  # how often the keys file's stat is compared (per API process)
ROLES: tuple[Role, ...] = ("viewer", "runner", "editor", "admin")
DEFAULT_WORKSPACE = "default"
# Values shipped in examples and manifests: a deployment that kept one is open to anyone.
PLACEHOLDER_KEYS = frozenset({
    "change-me", "changeme", "change_me", "replace-me", "replaceme", "secret", "password",
    "api-key", "apikey", "your-api-key", "example", "test", "xxx", "todo",
})


@dataclass(frozen=True)
class Principal:
    workspace: str
    role: Role
    key_id: str  # the first 8 hex digits of the key's SHA-256: names the key in logs
    # The key's SHA-256 (server side only: checking later that the key is still
    # configured, e.g. for a long event stream); empty for the open principal.
    digest: bytes = field(default=b"", repr=False, compare=False)

    def can(self, role: Role) -> bool:
        return ROLES.index(self.role) >= ROLES.index(role)


@dataclass(frozen=True)
class _Entry:
    digest: bytes
    workspace: str
    role: Role


@dataclass(frozen=True)
class KeyRing:
    entries: tuple[_Entry, ...]
    required: bool = False  # a keys file is configured: auth is on even with no entry

    @property
    def enabled(self) -> bool:
        return self.required or bool(self.entries)

    def authenticate(self, token: str) -> Principal | None:
        return self.by_digest(hashlib.sha256(token.encode()).digest())

    def by_digest(self, digest: bytes) -> Principal | None:
        """The principal of the key whose SHA-256 is ``digest`` (every entry compared)."""
        found: _Entry | None = None
        for entry in self.entries:  # no early exit: every digest is compared
            if hmac.compare_digest(digest, entry.digest):
                found = entry
        if found is None:
            return None
        return Principal(found.workspace, found.role, digest.hex()[:8], digest)

    def knows(self, principal: Principal) -> bool:
        """Whether ``principal``'s key is (still) configured; always for the open one."""
        return not self.enabled or (bool(principal.digest) and self.by_digest(principal.digest) is not None)


def _entry(raw: object, where: str) -> _Entry:
    if not isinstance(raw, dict):
        raise ConfigurationError(f"{where}: each key must be an object with key or sha256, workspace, role")
    key, sha = raw.get("key"), raw.get("sha256")
    workspace = str(raw.get("workspace") or DEFAULT_WORKSPACE)
    if not re.fullmatch(ID_PATTERN, workspace):
        raise ConfigurationError(f"{where}: workspace {workspace!r} must be 1-128 letters, digits, '.', '_' or '-'")
    role = raw.get("role", "admin")
    if role not in ROLES:
        raise ConfigurationError(f"{where}: role {role!r} is not one of {', '.join(ROLES)}")
    if isinstance(key, str) and key:
        _refuse_placeholder(key, where)
        digest = hashlib.sha256(key.encode()).digest()
    elif isinstance(sha, str) and len(sha) == 64:
        try:
            digest = bytes.fromhex(sha)
        except ValueError:
            raise ConfigurationError(f"{where}: sha256 must be 64 hex digits") from None
    else:
        raise ConfigurationError(f"{where}: give 'key' or 'sha256' (64 hex digits)")
    return _Entry(digest, workspace, role)


TOKEN_CHARS = re.compile(r"[A-Za-z0-9\-._~+/]+=*")  # RFC 6750's b64token: what a Bearer header carries


def _refuse_placeholder(key: str, where: str) -> None:
    if not TOKEN_CHARS.fullmatch(key):
        # e.g. a JSON object pasted into ORCH_API_KEYS, which is a comma-separated list (the
        # key itself is not repeated: it may be a real secret)
        raise ConfigurationError(
            f"{where}: an API key may hold only letters, digits and -._~+/ (and a trailing =), as an "
            "'Authorization: Bearer' header carries it; ORCH_API_KEYS is a comma-separated list of keys, "
            "workspaces and roles go in ORCH_API_KEYS_FILE (a JSON list)")
    if key.strip().lower() in PLACEHOLDER_KEYS:
        raise ConfigurationError(
            f"{where}: the API key {key!r} is a placeholder; set a real secret "
            "(e.g. `python -c 'import secrets; print(secrets.token_urlsafe(32))'`)")


def _ring(api_keys: str, keys_file: str | None) -> KeyRing:
    entries = []
    for key in (k.strip() for k in api_keys.split(",")):
        if key:
            _refuse_placeholder(key, "ORCH_API_KEYS")
            entries.append(_Entry(hashlib.sha256(key.encode()).digest(), DEFAULT_WORKSPACE, "admin"))
    if keys_file:
        try:
            raw = json.loads(Path(keys_file).read_text())
        except (OSError, ValueError) as exc:
            raise ConfigurationError(f"ORCH_API_KEYS_FILE {keys_file}: cannot read a JSON list ({exc})") from None
        if not isinstance(raw, list):
            raise ConfigurationError(f"ORCH_API_KEYS_FILE {keys_file}: must hold a JSON list of keys")
        entries += [_entry(item, f"ORCH_API_KEYS_FILE {keys_file} item {i}") for i, item in enumerate(raw)]
        _refuse_case_twins(entries, f"ORCH_API_KEYS_FILE {keys_file}")
    return KeyRing(tuple(entries), required=bool(keys_file))


def _stamp(keys_file: str | None) -> tuple[int, ...] | None:
    """What changes when the file is written or replaced (None: no file, or unreadable)."""
    if not keys_file:
        return None
    try:
        info = os.stat(keys_file)
    except OSError:
        return None
    return (info.st_mtime_ns, info.st_ctime_ns, info.st_size, info.st_ino, info.st_dev)


class _Watched:
    """The ring of one (ORCH_API_KEYS, ORCH_API_KEYS_FILE) pair, rebuilt when the file changes."""

    def __init__(self, api_keys: str, keys_file: str | None) -> None:
        self.api_keys, self.keys_file = api_keys, keys_file
        self.ring = _ring(api_keys, keys_file)  # at start an error stops the app
        self.stamp = _stamp(keys_file)
        self.checked_at = time.monotonic()

    def current(self) -> KeyRing:
        now = time.monotonic()
        if not self.keys_file or now - self.checked_at < KEYS_FILE_CHECK_S:
            return self.ring
        self.checked_at = now
        stamp = _stamp(self.keys_file)
        if stamp == self.stamp:
            return self.ring
        self.stamp = stamp
        try:
            self.ring = _ring(self.api_keys, self.keys_file)
            logger.info("ORCH_API_KEYS_FILE %s changed: %d keys", self.keys_file, len(self.ring.entries))
        except ConfigurationError as exc:
            logger.error("%s; no key is accepted until the file is fixed", exc.message)
            self.ring = KeyRing((), required=True)
        return self.ring


_watched: dict[tuple[str, str | None], _Watched] = {}


def _refuse_case_twins(entries: list[_Entry], where: str) -> None:
    """Two workspaces whose ids differ only in case are refused: a workspace's embedded
    files live in a folder named by its id, which a case-insensitive file system would share."""
    seen: dict[str, str] = {}
    for workspace in sorted({e.workspace for e in entries}):
        twin = seen.setdefault(workspace.lower(), workspace)
        if twin != workspace:
            raise ConfigurationError(f"{where}: workspaces {twin!r} and {workspace!r} differ only in case; "
                                     "rename one")


def check_metrics_token(settings: Settings) -> None:
    """A placeholder ``ORCH_METRICS_TOKEN`` stops the app, like a placeholder key."""
    if settings.metrics_token:
        _refuse_placeholder(settings.metrics_token, "ORCH_METRICS_TOKEN")


def key_ring(settings: Settings) -> KeyRing:
    """The configured keys, as the keys file reads now (see the module docstring); the
    first call for a setting raises :class:`ConfigurationError` for a placeholder or
    malformed key."""
    pair = (settings.api_keys, settings.api_keys_file)
    watched = _watched.get(pair)
    if watched is None:
        watched = _watched[pair] = _Watched(*pair)
    return watched.current()


def bearer(header: str | None) -> str:
    """The token of an ``Authorization: Bearer <token>`` header, or an AuthError."""
    if not header:
        raise AuthError("missing Authorization header; send 'Authorization: Bearer <api key>'")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise AuthError("Authorization header must be 'Bearer <api key>'")
    return token.strip()


