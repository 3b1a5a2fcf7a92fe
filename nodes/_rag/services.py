"""What the integration and RAG nodes use at run time, built lazily from the host's settings.

Workers pass ``services={"redis_url": ..., "settings": ...}`` into every step; from those a
node opens the credential store, the file store and the vector store it needs, for the
duration of one execution (no asyncio object outlives the call, so nothing is shared
across event loops). Credentials, files and vector collections are those of the run's
workspace, read from the run record's ``meta.workspace`` (``nodes/_shared/host.py``:
``services["workspace"]`` overrides it; a run with no record, as in node unit tests, is of
"default"). Tests pass the same two entries.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from nodes._shared.database import sqlite_path
from nodes._shared.host import redis_url_of, run_workspace, workspace_file, workspace_of
from nodes._shared.host import settings_of as settings_of  # re-exported: nodes import it from here
from orchestrator.errors import RequestError
from orchestrator.host.credentials import DEFAULT_WORKSPACE, Credential, CredentialStore
from orchestrator.kernel.errors import ParameterError
from orchestrator.kernel.protocol import FlowContext
from orchestrator.store import redis_client
from orchestrator.store.blobs import Blobs

from .vectors import SqliteVectorStore, VectorStore

EXAMPLES_DIR = Path(__file__).resolve().parents[2] / "examples"
VECTORS_FILE = "vectors.sqlite3"  # the embedded vector store of a workspace other than default


async def load_credential(ctx: FlowContext, name: str, types: tuple[str, ...],
                          parameter: str = "credential") -> Credential:
    """The credential ``name``, which must be one of ``types`` (errors name the parameter)."""
    redis = redis_client.client(redis_url_of(ctx), decode_responses=True)
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
    redis = redis_client.client(redis_url_of(ctx), decode_responses=True)
    try:
        workspace = await workspace_of(ctx, redis)
    finally:
        await redis.aclose()
    # Files a node stores count against its run's storage budget too.
    blobs = Blobs.from_settings(settings_of(ctx), redis_url_of(ctx), workspace=workspace, run_id=ctx.run_id)
    try:
        yield blobs
    finally:
        await blobs.aclose()


@asynccontextmanager
async def open_vector_store(ctx: FlowContext, backend: str, credential: str) -> AsyncIterator[VectorStore]:
    """The run's workspace's vector store that a node names: ``backend``
    default/sqlite/pgvector; a credential (``database_url``) selects pgvector at that URL.

    Collections belong to the workspace: the embedded backend keeps one file per workspace
    (``default``: ``ORCH_VECTOR_SQLITE_PATH``, others ``<workspace dir>/vectors.sqlite3``),
    pgvector one set of tables per workspace (``pgvector.py``)."""
    settings = settings_of(ctx)
    chosen = settings.vector_backend if backend in ("", "default") else backend
    url = settings.vector_database_url
    if credential:
        chosen = "pgvector"
        url = (await load_credential(ctx, credential, ("database_url",))).values["url"]
    workspace = await run_workspace(ctx)
    store: VectorStore
    if chosen == "sqlite":
        store = SqliteVectorStore(settings.vector_sqlite_path if workspace == DEFAULT_WORKSPACE
                                  else workspace_file(settings, workspace, VECTORS_FILE))
    elif chosen == "pgvector":
        if not url:
            raise ParameterError("the pgvector backend needs a database URL: set ORCH_VECTOR_DATABASE_URL "
                                 "or parameter 'credential' (a database_url credential)", parameter="backend")
        if sqlite_path(url) is not None:  # it would open (and create) a file on the worker's disk
            raise ParameterError("the pgvector backend needs a postgresql:// URL, not sqlite", parameter="credential")
        from .pgvector import PgVectorStore

        store = PgVectorStore(url, workspace=workspace)
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
    from the repository for ``examples/...``), else a ParameterError. The error names the
    path as the graph gave it and the roots by their settings, never a folder of the host:
    a graph author learns nothing of the worker's disk from it."""
    roots = readable_roots(ctx)
    candidate = Path(raw).expanduser()
    tries = [candidate] if candidate.is_absolute() else [EXAMPLES_DIR.parent / candidate,
                                                         *(root / candidate for root in roots)]
    for path in tries:
        resolved = path.resolve()
        if any(resolved.is_relative_to(root) for root in roots) and resolved.is_file():
            return resolved
    raise ParameterError(f"parameter 'path': {raw!r} is not a file inside the readable folders (the shipped "
                         "examples/ folder and the folders an operator lists in ORCH_LOADER_PATHS)",
                         parameter="path")


def as_text(value: Any) -> str:
    return value if isinstance(value, str) else "" if value is None else str(value)
