"""The shared vector backend: PostgreSQL with pgvector (see ``vectors.py`` for the contract).

One table per collection, ``rag_<collection>`` (``id text primary key, embedding
vector(d), text text, metadata jsonb``), created on first upsert with an HNSW index on
cosine distance. Values are always bound parameters; the table name is built only from
a collection name that :func:`check_collection` accepted (letters, digits, ``_``, ``-``)
and is quoted. ``where`` is a JSONB containment (``metadata @> :where``), the same
"contains every key/value" rule as the embedded backend. Score = 1 - cosine distance.
"""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import text
from sqlalchemy.exc import DBAPIError, SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine
from sqlalchemy.pool import NullPool

from nodes._shared.database import async_url
from orchestrator.kernel.errors import NodeExecutionError

from .vectors import Hit, Record, _dims_error, check_collection


def _table(collection: str) -> str:
    return '"rag_' + check_collection(collection).lower().replace("-", "_") + '"'


def _literal(vector: list[float]) -> str:
    return "[" + ",".join(repr(float(x)) for x in vector) + "]"


class PgVectorStore:
    def __init__(self, url: str, *, engine: AsyncEngine | None = None) -> None:
        self.engine = engine or create_async_engine(async_url(url), poolclass=NullPool)
        self._owned = engine is None

    async def aclose(self) -> None:
        if self._owned:
            await self.engine.dispose()

    async def _dims(self, conn: AsyncConnection, table: str) -> int | None:
        row = (await conn.execute(text(
            "SELECT atttypmod FROM pg_attribute WHERE attrelid = to_regclass(:t) AND attname = 'embedding'"),
            {"t": table})).first()
        return None if row is None else int(row[0])

    async def upsert(self, collection: str, records: list[Record]) -> int:
        if not records:
            return 0
        table, dims = _table(collection), len(records[0].vector)
        for r in records:
            if len(r.vector) != dims:
                raise _dims_error(collection, dims, len(r.vector))
        try:
            async with self.engine.begin() as conn:
                await conn.execute(text("SELECT pg_advisory_xact_lock(hashtext(:t))"), {"t": table})
                known = await self._dims(conn, table)
                if known is None:
                    await conn.execute(text("CREATE EXTENSION IF NOT EXISTS vector"))
                    await conn.execute(text(f"CREATE TABLE IF NOT EXISTS {table} (id text PRIMARY KEY, "
                                            f"embedding vector({dims}) NOT NULL, text text NOT NULL, "
                                            "metadata jsonb NOT NULL)"))
                    await conn.execute(text(f"CREATE INDEX IF NOT EXISTS {table[:-1]}_hnsw\" ON {table} "
                                            "USING hnsw (embedding vector_cosine_ops)"))
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
        table = _table(collection)
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
                if await self._dims(conn, table) is None:
                    return 0
                result = await conn.execute(text(f"DELETE FROM {table} WHERE {' AND '.join(clauses)}"), params)  # noqa: S608 (table name validated by check_collection)
                return int(result.rowcount)
        except (DBAPIError, SQLAlchemyError, OSError) as exc:
            raise NodeExecutionError(f"pgvector delete from {collection!r} failed: {_reason(exc)}") from None  # noqa: S608 (table name validated by check_collection)

    async def query(self, collection: str, vector: list[float], top_k: int,
                    where: dict[str, Any] | None = None) -> list[Hit]:
        table = _table(collection)
        filt = "metadata @> CAST(:where AS jsonb)" if where else "TRUE"
        try:
            async with self.engine.connect() as conn:
                known = await self._dims(conn, table)
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
