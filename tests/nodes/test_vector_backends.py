"""One contract, two vector backends: the embedded SQLite store and PostgreSQL + pgvector."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from nodes._rag.pgvector import PgVectorStore
from nodes._rag.vectors import Record, SqliteVectorStore, VectorStore
from orchestrator.kernel.errors import NodeExecutionError
from tests.nodes.rag_support import node_redis, pg_url, redis_services, run_with, store_credential

__all__ = ["node_redis", "pg_url"]


@pytest.fixture(params=["sqlite", "pgvector"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[VectorStore]:
    if request.param == "sqlite":
        yield SqliteVectorStore(tmp_path / "v.sqlite3")
        return
    pg = PgVectorStore(request.getfixturevalue("pg_url"))
    yield pg
    await pg.aclose()


def _collection() -> str:
    return "c_" + secrets.token_hex(4)


def _records() -> list[Record]:
    return [Record("e", [1.0, 0.0, 0.0], "east", {"dir": "e", "lang": "en"}),
            Record("n", [0.0, 1.0, 0.0], "north", {"dir": "n", "lang": "en"}),
            Record("ne", [1.0, 1.0, 0.0], "north-east", {"dir": "ne", "lang": "fr"})]


async def test_query_orders_by_cosine_and_scores(store: VectorStore) -> None:
    c = _collection()
    assert await store.upsert(c, _records()) == 3
    hits = await store.query(c, [0.9, 0.1, 0.0], 2)
    assert [h.id for h in hits] == ["e", "ne"]
    assert hits[0].score == pytest.approx(0.9 / (0.82 ** 0.5), abs=1e-4)
    assert hits[0].metadata == {"dir": "e", "lang": "en"} and hits[0].text == "east"


async def test_where_filters_by_metadata_containment(store: VectorStore) -> None:
    c = _collection()
    await store.upsert(c, _records())
    hits = await store.query(c, [1.0, 0.0, 0.0], 10, {"lang": "en"})
    assert sorted(h.id for h in hits) == ["e", "n"]


async def test_upsert_replaces_and_delete_removes(store: VectorStore) -> None:
    c = _collection()
    await store.upsert(c, _records())
    await store.upsert(c, [Record("e", [0.0, 0.0, 1.0], "east moved", {"dir": "up"})])
    hits = await store.query(c, [0.0, 0.0, 1.0], 1)
    assert (hits[0].id, hits[0].text) == ("e", "east moved")
    assert await store.delete(c, ids=["n"]) == 1
    assert await store.delete(c, where={"lang": "fr"}) == 1
    assert [h.id for h in await store.query(c, [1.0, 0.0, 0.0], 10)] == ["e"]


async def test_unknown_collection_is_empty_and_dimensions_are_checked(store: VectorStore) -> None:
    c = _collection()
    assert await store.query(c, [1.0, 0.0], 3) == []
    await store.upsert(c, _records())
    with pytest.raises(NodeExecutionError, match="3-dimensional vectors; got 2"):
        await store.upsert(c, [Record("x", [1.0, 0.0], "", {})])
    with pytest.raises(NodeExecutionError, match="3-dimensional vectors; got 2"):
        await store.query(c, [1.0, 0.0], 3)


async def test_nodes_use_pgvector_through_a_database_url_credential(node_redis: Any, pg_url: str) -> None:
    services = redis_services(node_redis)
    await store_credential(services, "vectors", "database_url", {"url": pg_url})
    docs = {"documents": [{"text": "alpha", "vector": [1.0, 0.0], "metadata": {"source": "a"}},
                          {"text": "beta", "vector": [0.0, 1.0], "metadata": {"source": "b"}}]}
    c = _collection()
    await run_with("vector_store", {"collection": c, "credential": "vectors"}, {"input": docs}, services)
    out = await run_with("vector_search", {"collection": c, "credential": "vectors", "top_k": 1},
                         {"input": {"vector": [0.1, 0.9]}}, services)
    assert [h["text"] for h in out["hits"]] == ["beta"]


async def test_settings_select_pgvector_for_every_node(pg_url: str, tmp_path: Path) -> None:
    from orchestrator.settings import Settings

    services: dict[str, Any] = {"settings": Settings(vector_backend="pgvector", vector_database_url=pg_url)}
    c = _collection()
    await run_with("vector_store", {"collection": c}, {"input": {"documents": [
        {"text": "only in postgres", "vector": [1.0, 0.0], "metadata": {}}]}}, services)
    out = await run_with("vector_search", {"collection": c}, {"input": {"vector": [1.0, 0.0]}}, services)
    assert out["hits"][0]["text"] == "only in postgres"


# -- workspaces: one collection name, one collection per workspace -------------------------


@pytest.fixture(params=["sqlite", "pgvector"])
def backend_settings(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    from orchestrator.settings import Settings

    if request.param == "sqlite":
        return Settings(vector_backend="sqlite", vector_sqlite_path=str(tmp_path / "default.sqlite3"),
                        workspace_data_dir=str(tmp_path / "workspaces"))
    return Settings(vector_backend="pgvector", vector_database_url=request.getfixturevalue("pg_url"))


async def _texts(settings: Any, workspace: str, collection: str) -> list[str]:
    out = await run_with("vector_search", {"collection": collection, "top_k": 10}, {"input": {"vector": [1.0, 0.0]}},
                         {"settings": settings, "workspace": workspace})
    return [h["text"] for h in out["hits"]]


async def test_two_workspaces_with_one_collection_name_never_meet(backend_settings: Any) -> None:
    c = _collection()
    alpha, beta = {"settings": backend_settings, "workspace": "alpha"}, {"settings": backend_settings,
                                                                          "workspace": "beta"}
    doc = {"documents": [{"text": "alpha only", "vector": [1.0, 0.0], "metadata": {"source": "hr.md"}}]}
    await run_with("vector_store", {"collection": c}, {"input": doc}, alpha)
    assert await _texts(backend_settings, "beta", c) == []
    deleted = await run_with("vector_store", {"collection": c, "operation": "delete", "where": {"source": "hr.md"}},
                             {}, beta)
    assert deleted["deleted"] == 0
    poison = {"documents": [{"text": "beta's poison", "vector": [1.0, 0.0], "metadata": {"source": "hr.md"}}]}
    await run_with("vector_store", {"collection": c}, {"input": poison}, beta)
    assert await _texts(backend_settings, "alpha", c) == ["alpha only"]
    assert await _texts(backend_settings, "beta", c) == ["beta's poison"]
    assert await _texts(backend_settings, "default", c) == []


async def test_the_default_workspace_finds_collections_stored_before_workspaces(backend_settings: Any) -> None:
    """Data written by the store as it was (no workspace) is default's, in place."""
    c = _collection()
    before: VectorStore = (SqliteVectorStore(backend_settings.vector_sqlite_path)
                           if backend_settings.vector_backend == "sqlite"
                           else PgVectorStore(str(backend_settings.vector_database_url)))
    try:
        await before.upsert(c, [Record("old", [1.0, 0.0], "stored earlier", {})])
    finally:
        await before.aclose()
    assert await _texts(backend_settings, "default", c) == ["stored earlier"]
    assert await _texts(backend_settings, "alpha", c) == []


def test_pgvector_table_names_fit_postgres_identifiers_and_differ_from_defaults() -> None:
    from nodes._rag.pgvector import _names

    longest = _names("w" * 128, "c" * 48)
    assert len(longest.table.strip('"')) <= 63 and len(longest.index.strip('"')) <= 63
    assert _names("default", "docs").table == '"rag_docs"'
    assert "." in _names("alpha", "docs").table and _names("alpha", "docs") != _names("beta", "docs")


async def test_a_pgvector_table_of_another_workspace_is_refused_even_if_its_name_matches(pg_url: str) -> None:
    from sqlalchemy import text

    from nodes._rag.pgvector import _names

    c = _collection()
    alpha = PgVectorStore(pg_url, workspace="alpha")
    try:
        await alpha.upsert(c, [Record("a", [1.0, 0.0], "alpha's", {})])
        async with alpha.engine.begin() as conn:  # as if another workspace's tag were the same
            await conn.execute(text(f"COMMENT ON TABLE {_names('alpha', c).table} IS 'orchestrator workspace other'"))
        with pytest.raises(NodeExecutionError, match="belongs to another workspace"):
            await alpha.query(c, [1.0, 0.0], 3)
        with pytest.raises(NodeExecutionError, match="belongs to another workspace"):
            await alpha.upsert(c, [Record("b", [1.0, 0.0], "more", {})])
    finally:
        await alpha.aclose()


async def test_a_sqlite_url_as_pgvector_credential_is_refused_and_creates_no_file(node_redis: Any,
                                                                                   tmp_path: Path) -> None:
    from orchestrator.kernel.errors import ParameterError

    services = redis_services(node_redis)
    target = tmp_path / "made-by-a-credential.db"
    await store_credential(services, "not-pg", "database_url", {"url": f"sqlite:///{target}"})
    with pytest.raises(ParameterError, match="postgresql:// URL"):
        await run_with("vector_search", {"collection": "c", "credential": "not-pg"}, {"input": {"vector": [1.0]}},
                       services)
    assert not target.exists()
