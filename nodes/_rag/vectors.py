"""Vector stores: one interface, two backends.

``SqliteVectorStore`` (the embedded default) keeps the collections of one workspace in
one SQLite file (``default``: ``ORCH_VECTOR_SQLITE_PATH``; any other workspace its own
``vectors.sqlite3`` in its folder, ``orchestrator/host/workspace.py``) and searches exactly (cosine,
numpy, imported on first use rather than at node discovery) over the collection's matrix,
cached per process and reloaded when the collection's version changes. It needs no service,
and every worker process on the machine shares it through SQLite's own locking (WAL).
``PgVectorStore`` is the server every worker of a deployment shares: PostgreSQL with the
pgvector extension, one table per collection of a workspace with an HNSW cosine index,
through SQLAlchemy's async engine (asyncpg).

A store object is one workspace's: collection names are namespaced by the workspace it
was opened for (``services.open_vector_store``), so another workspace's collection of the
same name is a different collection, never readable or writable from here.

Contract, both backends: vectors are compared by cosine similarity (``score`` in [-1, 1],
higher is closer); ``upsert`` replaces a record with the same id; all vectors of a
collection have the collection's dimension (a different one is an error naming both);
``where`` keeps records whose metadata contains every given key with the given value.

Why the embedded backend is hand-written (see docs/architecture.md): Qdrant's local mode
locks its folder to one process (the workers are several), and sqlite-vec needs
``sqlite3`` extension loading, which common Python builds leave out.
"""

from __future__ import annotations

import asyncio
import json
import re
import sqlite3
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from orchestrator.kernel.errors import NodeExecutionError, ParameterError

_COLLECTION = re.compile(r"^[A-Za-z0-9_-]{1,48}$")


@dataclass
class Record:
    id: str
    vector: list[float]
    text: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass
class Hit:
    id: str
    score: float
    text: str
    metadata: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "score": round(self.score, 6), "text": self.text, "metadata": self.metadata}


class VectorStore(Protocol):
    async def upsert(self, collection: str, records: list[Record]) -> int: ...

    async def delete(self, collection: str, ids: list[str] | None = None,
                     where: dict[str, Any] | None = None) -> int: ...

    async def query(self, collection: str, vector: list[float], top_k: int,
                    where: dict[str, Any] | None = None) -> list[Hit]: ...

    async def aclose(self) -> None: ...


def check_collection(name: str) -> str:
    if not isinstance(name, str) or not _COLLECTION.match(name):
        raise ParameterError(f"parameter 'collection' must be 1-48 letters, digits, '_' or '-'; got {name!r}",
                             parameter="collection")
    return name


def _matches(metadata: dict[str, Any], where: dict[str, Any] | None) -> bool:
    return not where or all(metadata.get(k) == v for k, v in where.items())


def _dims_error(collection: str, expected: int, got: int) -> NodeExecutionError:
    return NodeExecutionError(f"collection {collection!r} holds {expected}-dimensional vectors; got {got} "
                              "(use the same embedding model, or another collection)")


# -- embedded: SQLite + numpy ---------------------------------------------------------

_SCHEMA = """
CREATE TABLE IF NOT EXISTS collections (name TEXT PRIMARY KEY, dims INTEGER NOT NULL, version INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS vectors (
    collection TEXT NOT NULL, id TEXT NOT NULL, vector BLOB NOT NULL, text TEXT NOT NULL,
    metadata TEXT NOT NULL, PRIMARY KEY (collection, id));
"""


@dataclass
class _Matrix:
    version: int
    ids: list[str]
    texts: list[str]
    metadata: list[dict[str, Any]]
    vectors: Any  # np.ndarray (n, dims), rows L2-normalised


_CACHE: dict[tuple[str, str], _Matrix] = {}
_CACHE_LOCK = threading.Lock()


def _normalised(vector: list[float]) -> Any:
    import numpy as np

    arr = np.asarray(vector, dtype=np.float32)
    norm = float(np.linalg.norm(arr))
    return arr / norm if norm else arr


class SqliteVectorStore:
    """The embedded backend (see the module docstring)."""

    def __init__(self, path: str | Path) -> None:
        self.path = str(Path(path).expanduser())

    def _connect(self) -> sqlite3.Connection:
        Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(self.path, timeout=30.0, isolation_level=None)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.executescript(_SCHEMA)
        return conn

    def _dims(self, conn: sqlite3.Connection, collection: str) -> tuple[int, int] | None:
        row = conn.execute("SELECT dims, version FROM collections WHERE name = ?", (collection,)).fetchone()
        return None if row is None else (int(row[0]), int(row[1]))

    def _upsert(self, collection: str, records: list[Record]) -> int:
        if not records:
            return 0
        dims = len(records[0].vector)
        for r in records:
            if len(r.vector) != dims:
                raise _dims_error(collection, dims, len(r.vector))
        conn = self._connect()
        try:
            conn.execute("BEGIN IMMEDIATE")
            known = self._dims(conn, collection)
            if known is not None and known[0] != dims:
                conn.execute("ROLLBACK")
                raise _dims_error(collection, known[0], dims)
            conn.execute("INSERT INTO collections (name, dims, version) VALUES (?, ?, 1) ON CONFLICT (name) "
                         "DO UPDATE SET version = version + 1", (collection, dims))
            conn.executemany(
                "INSERT OR REPLACE INTO vectors (collection, id, vector, text, metadata) VALUES (?, ?, ?, ?, ?)",
                [(collection, r.id, _normalised(r.vector).tobytes(), r.text, json.dumps(r.metadata))
                 for r in records])
            conn.execute("COMMIT")
        finally:
            conn.close()
        return len(records)

    def _delete(self, collection: str, ids: list[str] | None, where: dict[str, Any] | None) -> int:
        conn = self._connect()
        try:
            conn.execute("BEGIN IMMEDIATE")
            rows = conn.execute("SELECT id, metadata FROM vectors WHERE collection = ?", (collection,)).fetchall()
            doomed = [r[0] for r in rows if (ids is None or r[0] in ids) and _matches(json.loads(r[1]), where)]
            conn.executemany("DELETE FROM vectors WHERE collection = ? AND id = ?", [(collection, i) for i in doomed])
            conn.execute("UPDATE collections SET version = version + 1 WHERE name = ?", (collection,))
            conn.execute("COMMIT")
        finally:
            conn.close()
        return len(doomed)

    def _matrix(self, collection: str) -> _Matrix | None:
        import numpy as np

        conn = self._connect()
        try:
            known = self._dims(conn, collection)
            if known is None:
                return None
            key = (self.path, collection)
            with _CACHE_LOCK:
                cached = _CACHE.get(key)
            if cached is not None and cached.version == known[1]:
                return cached
            rows = conn.execute("SELECT id, vector, text, metadata FROM vectors WHERE collection = ? ORDER BY id",
                                (collection,)).fetchall()
        finally:
            conn.close()
        vectors = (np.stack([np.frombuffer(r[1], dtype=np.float32) for r in rows]) if rows
                   else np.zeros((0, known[0]), dtype=np.float32))
        matrix = _Matrix(known[1], [r[0] for r in rows], [r[2] for r in rows],
                         [json.loads(r[3]) for r in rows], vectors)
        with _CACHE_LOCK:
            _CACHE[key] = matrix
        return matrix

    def _query(self, collection: str, vector: list[float], top_k: int, where: dict[str, Any] | None) -> list[Hit]:
        import numpy as np

        matrix = self._matrix(collection)
        if matrix is None or not matrix.ids:
            return []
        if matrix.vectors.shape[1] != len(vector):
            raise _dims_error(collection, int(matrix.vectors.shape[1]), len(vector))
        scores = matrix.vectors @ _normalised(vector)
        keep = [i for i in range(len(matrix.ids)) if _matches(matrix.metadata[i], where)] if where else None
        order = np.argsort(-scores, kind="stable") if keep is None else sorted(keep, key=lambda i: -scores[i])
        return [Hit(matrix.ids[i], float(scores[i]), matrix.texts[i], matrix.metadata[i])
                for i in list(order)[:top_k]]

    async def upsert(self, collection: str, records: list[Record]) -> int:
        return await asyncio.to_thread(self._upsert, check_collection(collection), records)

    async def delete(self, collection: str, ids: list[str] | None = None,
                     where: dict[str, Any] | None = None) -> int:
        return await asyncio.to_thread(self._delete, check_collection(collection), ids, where)

    async def query(self, collection: str, vector: list[float], top_k: int,
                    where: dict[str, Any] | None = None) -> list[Hit]:
        return await asyncio.to_thread(self._query, check_collection(collection), vector, top_k, where)

    async def aclose(self) -> None:
        return None
