"""Secrets masked in events, errors and logs, and the list of what counts as one.

:func:`operator_secrets` are the values of the worker's own configuration that must never
reach a graph's view (events, outputs, errors) nor a host a graph chose:

* every environment variable, and every entry of ``ORCH_SECRETS_FILE``, whose name ends in
  ``_KEY``, ``_KEYS``, ``_TOKEN``, ``_SECRET`` or ``_PASSWORD`` (``OPENAI_API_KEY``,
  ``ORCH_CREDENTIALS_KEY``, ``ORCH_SESSION_SECRET``, ``ORCH_S3_SECRET_ACCESS_KEY``, ...);
  comma-separated values count item by item (``ORCH_API_KEYS``, rotated Fernet keys);
* the password of every variable ending in ``_URL`` (``REDIS_URL``, a database URL);
* every API key of ``ORCH_API_KEYS`` and each ``key`` entry of ``ORCH_API_KEYS_FILE``.

Values shorter than ``MIN_SECRET_CHARS`` are left alone: masking them would mangle
ordinary words. :func:`redact` masks those values, plus the secrets a node execution
registered with :func:`mask_also` (the key of a credential a model sends), in text and
JSON. Registration lives in a context variable: it covers the task that registered it
and the tasks it starts afterwards, never another node's.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from contextvars import ContextVar
from functools import lru_cache
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from orchestrator.host.credentials import mask
from orchestrator.settings import Settings

SECRET_SUFFIXES = ("_KEY", "_KEYS", "_TOKEN", "_SECRET", "_PASSWORD")
MIN_SECRET_CHARS = 6
_ALSO: ContextVar[frozenset[str]] = ContextVar("orchestrator_masked_secrets", default=frozenset())


def _items(value: str) -> list[str]:
    return [value, *(part.strip() for part in value.split(",") if "," in value)]


def _url_password(value: str) -> str | None:
    try:
        return urlsplit(value).password
    except ValueError:
        return None


@lru_cache(maxsize=8)
def _file_keys(path: str, mtime_ns: int) -> tuple[str, ...]:
    try:
        raw = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return ()
    entries = raw if isinstance(raw, list) else []
    return tuple(str(e["key"]) for e in entries if isinstance(e, dict) and isinstance(e.get("key"), str))


def _keys_file(path: str | None) -> tuple[str, ...]:
    if not path:
        return ()
    try:
        return _file_keys(path, Path(path).stat().st_mtime_ns)
    except OSError:
        return ()


def operator_secrets(settings: Settings) -> list[str]:
    """The operator's secret values (see the module docstring) for the host's ``settings``
    (a node asks its host: :meth:`NodeHost.operator_secrets`), longest first."""
    try:
        from_file = settings.secrets
    except ValueError:  # a bad secrets file is reported where it is used
        from_file = {}
    values: list[str] = []
    for name, value in {**os.environ, **from_file}.items():
        upper = name.upper()
        if upper.endswith(SECRET_SUFFIXES):
            values += _items(value)
        elif upper.endswith("_URL") and (password := _url_password(value)):
            values.append(password)
    values += _items(settings.api_keys) + list(_keys_file(settings.api_keys_file))
    return sorted({v for v in values if len(v) >= MIN_SECRET_CHARS}, key=len, reverse=True)


def mask_also(values: Iterable[str]) -> None:
    """Mask ``values`` too, in what this task and the tasks it starts later redact."""
    extra = {v for v in values if len(v) >= 4}
    if extra:
        _ALSO.set(_ALSO.get() | extra)


def redact(value: Any, settings: Settings) -> Any:
    """``value`` with every secret of ``settings`` and of this execution masked (walks
    str/list/dict); a node calls :meth:`NodeHost.redact`."""
    return mask(value, [*operator_secrets(settings), *_ALSO.get()])
