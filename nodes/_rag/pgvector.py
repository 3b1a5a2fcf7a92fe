"""The shared vector backend: PostgreSQL with pgvector (see ``vectors.py`` for the contract).

One table per collection of a workspace (``id text primary key, embedding vector(d), text
text, metadata jsonb``), created on first upsert with an HNSW index on cosine distance:

==================  =============================  ==================================
workspace           table                          index
==================  =============================  ==================================
``default``         ``"rag_<collection>"``         ``"rag_<collection>_hnsw"``
any other ``w``     ``"rag.<tag(w)>.<collection>"``  ``"idx.<tag(w)>.<collection>"``
==================  =============================  ==================================

``default`` keeps the names tables always had, so a single-workspace deployment's
collections stay where they are. ``tag(w)`` is the first 10 characters of the base32
SHA-256 of the workspace id (50 bits; 63 characters at most, PostgreSQL's identifier
limit, for a 48-character collection name). The dot cannot occur in a ``default`` name, so
the two forms never meet. A workspace table carries its owner in its comment
(``orchestrator workspace <w>``), written when the table is created and checked on every
access: two workspaces whose tags collided would get an error, never each other's rows.

Values are always bound parameters; table names are built only from a collection name that
:func:`check_collection` accepted (letters, digits, ``_``, ``-``) and a validated workspace
id, and are quoted. ``where`` is a JSONB containment (``metadata @> :where``), the same
"contains every key/value" rule as the embedded backend. Score = 1 - cosine distance.
"""

from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import dataclass
from typing import Any

from sqlalchemy import text
from sqlalchemy.exc import DBAPIError, SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine
from sqlalchemy.pool import NullPool

from orchestrator.host.credentials import DEFAULT_WORKSPACE
from orchestrator.host.database import async_url
from orchestrator.host.workspace import checked_workspace
from orchestrator.kernel.errors import NodeExecutionError

from .vectors import Hit, Record, _dims_error, check_collection

TAG_CHARS = 10


def workspace_tag(workspace: str) -> str:
    """The table-name tag of a workspace other than ``default`` (see the module docstring)."""
    digest = hashlib.sha256(checked_workspace(workspace).encode()).digest()
    return base64.b32encode(digest).decode()[:TAG_CHARS].lower()


@dataclass(frozen=True)
class _Names:
    table: str  # quoted
    index: str  # quoted
    owner: str | None  # the comment a workspace table carries; None for default's tables


def _names(workspace: str, collection: str) -> _Names:
    name = check_collection(collection).lower().replace("-", "_")
    if workspace == DEFAULT_WORKSPACE:
        return _Names(f'"rag_{name}"', f'"rag_{name}_hnsw"', None)
    tag = workspace_tag(workspace)
    return _Names(f'"rag.{tag}.{name}"', f'"idx.{tag}.{name}"', f"orchestrator workspace {workspace}")


def _literal(vector: list[float]) -> str:
    return "[" + ",".join(repr(float(x)) for x in vector) + "]"


class PgVectorStore:
    """The collections of ``workspace`` on the PostgreSQL server at ``url``."""

    def __init__(self, url: str, *, workspace: str = DEFAULT_WORKSPACE, engine: AsyncEngine | None = None) -> None:
        self.engine = engine or create_async_engine(async_url(url), poolclass=NullPool)
        self._owned = engine is None
        self.workspace = workspace

    async def aclose(self) -> None:
        if self._owned:
            await self.engine.dispose()

    async def _dims(self, conn: AsyncConnection, names: _Names, collection: str) -> int | None:
        """The collection's dimension (None before its first upsert); an error when the
        table is another workspace's (see the module docstring)."""
        row = (await conn.execute(text(
            "SELECT atttypmod, obj_description(attrelid, 'pg_class') FROM pg_attribute "
            "WHERE attrelid = to_regclass(:t) AND attname = 'embedding'"), {"t": names.table})).first()
        if row is None:
            return None
        if names.owner is not None and row[1] != names.owner:
            raise NodeExecutionError(f"collection {collection!r}: its table {names.table} belongs to another "
                                     "workspace (a name-tag collision); use another collection name")
        return int(row[0])

    async def upsert(self, collection: str, records: list[Record]) -> int:
        if not records:
            return 0
        names, dims = _names(self.workspace, collection), len(records[0].vector)
        table = names.table
        for r in records:
            if len(r.vector) != dims:
                raise _dims_error(collection, dims, len(r.vector))
        try:
            async with self.engine.begin() as conn:
                await conn.execute(text("SELECT pg_advisory_xact_lock(hashtext(:t))"), {"t": table})
                known = await self._dims(conn, names, collection)
                if known is None:
                    await conn.execute(text("CREATE EXTENSION IF NOT EXISTS vector"))
                    await conn.execute(text(f"CREATE TABLE IF NOT EXISTS {table} (id text PRIMARY KEY, "
                                            f"embedding vector({dims}) NOT NULL, text text NOT NULL, "
                                            "metadata jsonb NOT NULL)"))
                    await conn.execute(text(f"CREATE INDEX IF NOT EXISTS {names.index} ON {table} "
                                            "USING hnsw (embedding vector_cosine_ops)"))
                    if names.owner is not None:
                        # COMMENT takes no bound parameters; the owner text is built from a
                        # validated workspace id (no quote can occur in it).
                        await conn.execute(text(f"COMMENT ON TABLE {table} IS '{names.owner}'"))
                elif known != dims:
                    raise _dims_error(collection, known, dims)
                await conn.execute(text(
                    f"INSERT INTO {table} (id, embedding, text, metadata) VALUES "  # noqa: S608 (table name validated by check_collection)
                    "(:id, CAST(:v AS vector), :text, CAST(:m AS jsonb)) ON CONFLICT (id) DO UPDATE SET "
                    "embedding = EXCLUDED.embedding, text = EXCLUDED.text, metadata = EXCLUDED.metadata"),
                    [{"id": r.id, "v": _literal(r.vector), "text": r.text, "m": json.dumps(r.metadata)}
                     for r in records])
        except (DBAPIError, SQLAlchemyError, OSError) as exc:
            raise NodeExecutionError(f"pgvector upsert into {collection!r} failed: {_reason(exc)}") from None
        return len(records)

    async def delete(self, collection: str, ids: list[str] | None = None,
                     where: dict[str, Any] | None = None) -> int:
        names = _names(self.workspace, collection)
        table = names.table
        clauses: list[str] = ["TRUE"]
        params: dict[str, Any] = {}
        if ids is not None:
            clauses.append("id = ANY(:ids)")
            params["ids"] = ids
        if where:
            clauses.append("metadata @> CAST(:where AS jsonb)")
            params["where"] = json.dumps(where)
        try:
            async with self.engine.begin() as conn:
                if await self._dims(conn, names, collection) is None:
                    return 0
                result = await conn.execute(text(f"DELETE FROM {table} WHERE {' AND '.join(clauses)}"), params)  # noqa: S608 (table name validated by check_collection)
                return int(result.rowcount)
        except (DBAPIError, SQLAlchemyError, OSError) as exc:
            raise NodeExecutionError(f"pgvector delete from {collection!r} failed: {_reason(exc)}") from None  # noqa: S608 (table name validated by check_collection)

    async def query(self, collection: str, vector: list[float], top_k: int,
                    where: dict[str, Any] | None = None) -> list[Hit]:
        names = _names(self.workspace, collection)
        table = names.table
        filt = "metadata @> CAST(:where AS jsonb)" if where else "TRUE"
        try:
            async with self.engine.connect() as conn:
                known = await self._dims(conn, names, collection)
                if known is None:
                    return []
                if known != len(vector):
                    raise _dims_error(collection, known, len(vector))
                rows = (await conn.execute(text(
                    f"SELECT id, text, metadata, 1 - (embedding <=> CAST(:q AS vector)) AS score FROM {table} "  # noqa: S608 (table name validated by check_collection)
                    f"WHERE {filt} ORDER BY embedding <=> CAST(:q AS vector) LIMIT :k"),
                    {"q": _literal(vector), "k": top_k, "where": json.dumps(where or {})})).all()
        except (DBAPIError, SQLAlchemyError, OSError) as exc:
            raise NodeExecutionError(f"pgvector query of {collection!r} failed: {_reason(exc)}") from None
        return [Hit(str(r[0]), float(r[3]), str(r[1]), dict(r[2])) for r in rows]


def _reason(exc: BaseException) -> str:
    orig = getattr(exc, "orig", None) or exc
    return f"{type(orig).__name__}: {str(orig).splitlines()[0][:300] if str(orig) else ''}"
