"""The vector store a RAG node names, opened for one execution from the node's host
(``orchestrator.host.node_host``): the run's workspace's collections, on the embedded
SQLite backend or pgvector; and ``as_text``, the text form of a parameter value. No asyncio
object outlives the call, so nothing is shared across event loops."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from orchestrator.host.credentials import DEFAULT_WORKSPACE
from orchestrator.host.database import sqlite_path
from orchestrator.host.node_host import node_host
from orchestrator.kernel.errors import ParameterError
from orchestrator.kernel.protocol import FlowContext

from .vectors import SqliteVectorStore, VectorStore

VECTORS_FILE = "vectors.sqlite3"  # the embedded vector store of a workspace other than default


@asynccontextmanager
async def open_vector_store(ctx: FlowContext, backend: str, credential: str) -> AsyncIterator[VectorStore]:
    """The run's workspace's vector store that a node names: ``backend``
    default/sqlite/pgvector; a credential (``database_url``) selects pgvector at that URL.

    Collections belong to the workspace: the embedded backend keeps one file per workspace
    (``default``: ``ORCH_VECTOR_SQLITE_PATH``, others ``<workspace dir>/vectors.sqlite3``),
    pgvector one set of tables per workspace (``pgvector.py``)."""
    host = node_host(ctx)
    settings, workspace = host.settings, host.workspace
    chosen = settings.vector_backend if backend in ("", "default") else backend
    url = settings.vector_database_url
    if credential:
        chosen = "pgvector"
        url = (await host.credential(credential, ("database_url",))).values["url"]
    store: VectorStore
    if chosen == "sqlite":
        store = SqliteVectorStore(settings.vector_sqlite_path if workspace == DEFAULT_WORKSPACE
                                  else host.workspace_file(VECTORS_FILE))
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


def as_text(value: Any) -> str:
    return value if isinstance(value, str) else "" if value is None else str(value)
