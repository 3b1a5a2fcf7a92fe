"""What the integration and RAG nodes use at run time, built lazily from the host's settings.

Workers pass ``services={"redis_url": ..., "settings": ...}`` into every step; from those a
node opens the credential store, the file store and the vector store it needs, for the
duration of one execution (no asyncio object outlives the call, so nothing is shared
across event loops). Credentials and files are those of the run's workspace, read from
the run record's ``meta.workspace`` (``services["workspace"]`` overrides it; a run with no
record, as in node unit tests, is of "default"). Tests pass the same two entries.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from redis.asyncio import Redis

from orchestrator.blobs import Blobs
from orchestrator.credentials import DEFAULT_WORKSPACE, Credential, CredentialStore
from orchestrator.kernel.errors import ParameterError, RequestError
from orchestrator.kernel.protocol import FlowContext
from orchestrator.keys import Keys
from orchestrator.settings import Settings, get_settings

from .vectors import SqliteVectorStore, VectorStore

EXAMPLES_DIR = Path(__file__).resolve().parents[2] / "examples"


def settings_of(ctx: FlowContext) -> Settings:
    found = ctx.services.get("settings")
    return found if isinstance(found, Settings) else get_settings()


async def workspace_of(ctx: FlowContext, redis: Redis) -> str:
    """The run's workspace (see the module docstring); a Redis error propagates rather
    than falling back to another workspace."""
    given = ctx.services.get("workspace")
    if given:
        return str(given)
    raw = await redis.hget(Keys(settings_of(ctx).key_prefix).run(ctx.run_id), "meta")
    meta = json.loads(raw) if raw else {}
    return str(meta.get("workspace") or DEFAULT_WORKSPACE) if isinstance(meta, dict) else DEFAULT_WORKSPACE


def redis_url_of(ctx: FlowContext) -> str:
    url = ctx.services.get("redis_url") or settings_of(ctx).redis_url
    if not url:
        raise RequestError("this node needs Redis (credentials, files): the host passed no redis_url")
    return str(url)


async def load_credential(ctx: FlowContext, name: str, types: tuple[str, ...],
                          parameter: str = "credential") -> Credential:
    """The credential ``name``, which must be one of ``types`` (errors name the parameter)."""
    redis = Redis.from_url(redis_url_of(ctx), decode_responses=True)
    try:
        workspace = await workspace_of(ctx, redis)
        found = await CredentialStore(redis, settings_of(ctx), workspace=workspace).get(name)
    except RequestError as exc:
        raise ParameterError(f"parameter '{parameter}': {exc.message}", parameter=parameter) from None
    finally:
        await redis.aclose()
    if found.type not in types:
        raise ParameterError(f"parameter '{parameter}': credential {name!r} is of type {found.type}; "
                             f"this node takes {', '.join(types)}", parameter=parameter)
    return found


@asynccontextmanager
async def open_blobs(ctx: FlowContext) -> AsyncIterator[Blobs]:
    redis = Redis.from_url(redis_url_of(ctx), decode_responses=True)
    try:
        workspace = await workspace_of(ctx, redis)
    finally:
        await redis.aclose()
    blobs = Blobs.from_settings(settings_of(ctx), redis_url_of(ctx), workspace=workspace)
    try:
        yield blobs
    finally:
        await blobs.aclose()


@asynccontextmanager
async def open_vector_store(ctx: FlowContext, backend: str, credential: str) -> AsyncIterator[VectorStore]:
    """The vector store a node names: ``backend`` default/sqlite/pgvector; a credential
    (``database_url``) selects pgvector at that URL."""
    settings = settings_of(ctx)
    chosen = settings.vector_backend if backend in ("", "default") else backend
    url = settings.vector_database_url
    if credential:
        chosen = "pgvector"
        url = (await load_credential(ctx, credential, ("database_url",))).values["url"]
    store: VectorStore
    if chosen == "sqlite":
        store = SqliteVectorStore(settings.vector_sqlite_path)
    elif chosen == "pgvector":
        if not url:
            raise ParameterError("the pgvector backend needs a database URL: set ORCH_VECTOR_DATABASE_URL "
                                 "or parameter 'credential' (a database_url credential)", parameter="backend")
        from .pgvector import PgVectorStore

        store = PgVectorStore(url)
    else:
        raise ParameterError(f"parameter 'backend' must be default, sqlite or pgvector; got {chosen!r}",
                             parameter="backend")
    try:
        yield store
    finally:
        await store.aclose()


def readable_roots(ctx: FlowContext) -> list[Path]:
    extra = [Path(p).expanduser().resolve() for p in settings_of(ctx).loader_paths.split(os.pathsep) if p.strip()]
    return [EXAMPLES_DIR, *extra]


def readable_path(ctx: FlowContext, raw: str) -> Path:
    """``raw`` resolved inside one of the readable roots (relative paths: from each root, or
    from the repository for ``examples/...``), else a ParameterError."""
    roots = readable_roots(ctx)
    candidate = Path(raw).expanduser()
    tries = [candidate] if candidate.is_absolute() else [EXAMPLES_DIR.parent / candidate,
                                                         *(root / candidate for root in roots)]
    for path in tries:
        resolved = path.resolve()
        if any(resolved.is_relative_to(root) for root in roots) and resolved.is_file():
            return resolved
    raise ParameterError(f"parameter 'path': {raw!r} is not a file inside the readable folders "
                         f"({', '.join(str(r) for r in roots)}; add one with ORCH_LOADER_PATHS)", parameter="path")


def as_text(value: Any) -> str:
    return value if isinstance(value, str) else "" if value is None else str(value)
