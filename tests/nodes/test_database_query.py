"""The Database Query node on SQLite: bound parameters, read-only default, limits, timeouts."""

from __future__ import annotations

import secrets
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from orchestrator.kernel.errors import NodeExecutionError, NodeTimeoutError, ParameterError
from tests.nodes.rag_support import node_redis, pg_url, redis_services, run_with, settings, store_credential

__all__ = ["node_redis", "pg_url"]


@pytest.fixture
def db(tmp_path: Path) -> dict[str, Any]:
    return {"settings": settings(database_sqlite_path=str(tmp_path / "db.sqlite3"))}


async def _write(db: dict[str, Any], sql: str, parameters: Any = None) -> Any:
    return await run_with("database_query", {"query": sql, "parameters": parameters, "read_only": False}, services=db)


async def test_rows_come_back_as_json_with_bound_parameters(db: dict[str, Any]) -> None:
    await _write(db, "CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT, price REAL)")
    done = await _write(db, "INSERT INTO items (name, price) VALUES (:name, :price)",
                        [{"name": "anvil", "price": 12.5}, {"name": "rope", "price": 3.0}])
    assert done["rowcount"] == 2
    out = await run_with("database_query", {"query": "SELECT name, price FROM items WHERE price > :min ORDER BY id",
                                            "parameters": {"min": 1}}, services=db)
    assert out["rows"] == [{"name": "anvil", "price": 12.5}, {"name": "rope", "price": 3.0}]
    assert out["columns"] == ["name", "price"] and out["truncated"] is False


async def test_a_value_is_never_spliced_into_the_sql(db: dict[str, Any]) -> None:
    await _write(db, "CREATE TABLE t (v TEXT)")
    evil = "x'); DROP TABLE t; --"
    await _write(db, "INSERT INTO t (v) VALUES (:v)", {"v": evil})
    out = await run_with("database_query", {"query": "SELECT v FROM t"}, services=db)
    assert out["rows"] == [{"v": evil}]


async def test_read_only_is_the_default_and_refuses_writes(db: dict[str, Any]) -> None:
    await _write(db, "CREATE TABLE t (v INTEGER)")
    with pytest.raises(NodeExecutionError, match=r"readonly|read-only|query_only|attempt to write"):
        await run_with("database_query", {"query": "INSERT INTO t (v) VALUES (1)"}, services=db)
    out = await run_with("database_query", {"query": "SELECT count(*) AS n FROM t"}, services=db)
    assert out["rows"] == [{"n": 0}]


async def test_row_limit_truncates(db: dict[str, Any]) -> None:
    sql = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 50) SELECT i FROM n"
    out = await run_with("database_query", {"query": sql, "max_rows": 10}, services=db)
    assert out["count"] == 10 and out["truncated"] is True and out["rows"][-1] == {"i": 10}


async def test_statement_timeout_interrupts_a_long_query(db: dict[str, Any]) -> None:
    sql = ("WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 100000000) "
           "SELECT count(*) FROM n")
    with pytest.raises(NodeTimeoutError, match=r"timeout of 0\.2s"):
        await run_with("database_query", {"query": sql, "timeout_s": 0.2}, services=db)


async def test_two_statements_are_refused(db: dict[str, Any]) -> None:
    with pytest.raises(NodeExecutionError, match="one statement"):
        await run_with("database_query", {"query": "SELECT 1; SELECT 2"}, services=db)


# -- the node's budget (ORCH_MAX_OUTPUT_BYTES) bounds what a statement builds and returns --


OVER_BUDGET = r"result is larger than the node's output budget ORCH_MAX_OUTPUT_BYTES"


def _budget(tmp_path: Path, max_bytes: int) -> dict[str, Any]:
    return {"settings": settings(database_sqlite_path=str(tmp_path / "db.sqlite3"), max_output_bytes=max_bytes)}


async def test_a_value_larger_than_the_budget_fails_the_node_naming_the_limit(tmp_path: Path) -> None:
    with pytest.raises(NodeExecutionError, match=r"ORCH_MAX_OUTPUT_BYTES \(1048576 bytes; .*SQLITE_LIMIT_LENGTH"):
        await run_with("database_query", {"query": "SELECT randomblob(2000000) AS b"},
                       services=_budget(tmp_path, 1024 * 1024))
    out = await run_with("database_query", {"query": "SELECT length(randomblob(500000)) AS n"},
                         services=_budget(tmp_path, 1024 * 1024))
    assert out["rows"] == [{"n": 500000}]


async def test_rows_past_the_budget_fail_the_node_naming_it(tmp_path: Path) -> None:
    sql = ("WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 1000) "
           "SELECT hex(randomblob(50000)) AS h FROM n")
    with pytest.raises(NodeExecutionError, match=OVER_BUDGET):
        await run_with("database_query", {"query": sql}, services=_budget(tmp_path, 1024 * 1024))


async def test_the_row_limit_stops_the_reading_not_only_the_output(db: dict[str, Any]) -> None:
    # Ten million rows: the plain cursor read all of them before the first was kept.
    sql = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 10000000) SELECT i FROM n"
    out = await run_with("database_query", {"query": sql, "max_rows": 5, "timeout_s": 5}, services=db)
    assert out["rows"] == [{"i": i} for i in range(1, 6)] and out["truncated"] is True


def test_a_400_mb_blob_is_refused_before_the_worker_allocates_it(tmp_path: Path) -> None:
    # In a fresh process, so its peak resident memory is this statement's alone.
    script = f"""
import asyncio, resource
from orchestrator.host.database import Statement, run_statement
from orchestrator.kernel.errors import NodeExecutionError
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
try:
    asyncio.run(run_statement("sqlite:///{tmp_path}/db.sqlite3", Statement(sql="SELECT randomblob(400000000)")))
    print("ran")
except NodeExecutionError as exc:
    print(exc.message)
print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) // 1024, "MB")
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                          cwd=Path(__file__).parents[2])
    message, grown = done.stdout.strip().splitlines()
    assert "SQLITE_LIMIT_LENGTH" in message, done.stdout + done.stderr
    assert int(grown.split()[0]) < 64, grown


async def test_database_url_credential_selects_the_database_and_its_type_is_checked(
        node_redis: Any, tmp_path: Path) -> None:
    services = redis_services(node_redis)
    await store_credential(services, "other", "database_url", {"url": f"sqlite:///{tmp_path / 'other.db'}"})
    await run_with("database_query", {"query": "CREATE TABLE only_here (x INTEGER)", "read_only": False,
                                      "credential": "other"}, services=services)
    out = await run_with("database_query", {"query": "SELECT name FROM sqlite_master", "credential": "other"},
                         services=services)
    assert out["rows"] == [{"name": "only_here"}]
    await store_credential(services, "tok", "bearer", {"token": "abcdef"})
    with pytest.raises(ParameterError, match="of type bearer"):
        await run_with("database_query", {"query": "SELECT 1", "credential": "tok"}, services=services)


# -- SQLite guards: one database file, no other ---------------------------------------------


@pytest.mark.parametrize("sql", [
    "ATTACH DATABASE '{tmp}/attached.db' AS x",
    "VACUUM INTO '{tmp}/copy.db'",
    "VACUUM",
])
async def test_attach_and_vacuum_are_refused_and_create_no_file(tmp_path: Path, sql: str) -> None:
    db = {"settings": settings(database_sqlite_path=str(tmp_path / "db" / "db.sqlite3"))}
    await _write(db, "CREATE TABLE t (v INTEGER)")
    for read_only in (True, False):
        with pytest.raises(NodeExecutionError, match="ATTACH, DETACH and VACUUM are not allowed"):
            await run_with("database_query", {"query": sql.format(tmp=tmp_path), "read_only": read_only},
                           services=db)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["db"]


@pytest.mark.parametrize(("sql", "refusal"), [
    ("PRAGMA database_list", "PRAGMA database_list is not allowed"),
    ("SELECT file FROM pragma_database_list", "PRAGMA database_list is not allowed"),
    ("PRAGMA query_only = OFF", "PRAGMA query_only may be read but not set"),
    ("PRAGMA writable_schema = ON", "PRAGMA writable_schema is not allowed"),
    ("PRAGMA cache_size = -100000000", "PRAGMA cache_size is not allowed"),
    ("PRAGMA temp_store_directory = '/tmp'", "PRAGMA temp_store_directory is not allowed"),
    ("PRAGMA user_version = 7", "PRAGMA user_version may be read but not set"),
    ("SELECT load_extension('/tmp/x.so')", r"load_extension\(\) is not allowed"),
])
async def test_pragmas_outside_the_safe_list_and_extensions_are_refused(db: dict[str, Any], sql: str,
                                                                        refusal: str) -> None:
    with pytest.raises(NodeExecutionError, match=refusal):
        await run_with("database_query", {"query": sql, "read_only": False}, services=db)


async def test_schema_introspection_pragmas_still_work(db: dict[str, Any]) -> None:
    await _write(db, "CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT)")
    info = await run_with("database_query", {"query": "PRAGMA table_info(items)"}, services=db)
    assert [r["name"] for r in info["rows"]] == ["id", "name"]
    listed = await run_with("database_query", {"query": "SELECT name FROM pragma_table_info('items')"}, services=db)
    assert listed["rows"] == [{"name": "id"}, {"name": "name"}]
    version = await run_with("database_query", {"query": "PRAGMA user_version"}, services=db)
    assert version["rows"] == [{"user_version": 0}]
    await _write(db, "PRAGMA foreign_keys = ON")


async def test_sqlite_url_options_are_refused(node_redis: Any, tmp_path: Path) -> None:
    services = redis_services(node_redis)
    await store_credential(services, "opts", "database_url", {"url": f"sqlite:///{tmp_path / 'x.db'}?mode=rwc"})
    with pytest.raises(ParameterError, match="takes no options"):
        await run_with("database_query", {"query": "SELECT 1", "credential": "opts"}, services=services)


async def test_each_workspace_has_its_own_embedded_database(tmp_path: Path) -> None:
    base = settings(database_sqlite_path=str(tmp_path / "default.sqlite3"),
                    workspace_data_dir=str(tmp_path / "workspaces"))
    alpha, beta = {"settings": base, "workspace": "alpha"}, {"settings": base, "workspace": "beta"}
    await _write(alpha, "CREATE TABLE hr (name TEXT)")
    await _write(alpha, "INSERT INTO hr VALUES (:n)", {"n": "alice"})
    with pytest.raises(NodeExecutionError, match="no such table: hr"):
        await run_with("database_query", {"query": "SELECT * FROM hr"}, services=beta)
    with pytest.raises(NodeExecutionError, match="no such table: hr"):
        await run_with("database_query", {"query": "SELECT * FROM hr"}, services={"settings": base})
    out = await run_with("database_query", {"query": "SELECT * FROM hr"}, services=alpha)
    assert out["rows"] == [{"name": "alice"}]
    assert (tmp_path / "workspaces" / "alpha" / "database.sqlite3").is_file()
    assert (tmp_path / "workspaces" / "alpha").stat().st_mode & 0o777 == 0o700


@pytest.mark.parametrize("workspace", ["../escape", "a/b", ".hidden", ""])
async def test_a_workspace_id_that_is_not_an_id_names_no_folder(tmp_path: Path, workspace: str) -> None:
    from orchestrator.host.workspace import workspace_dir
    from orchestrator.kernel.errors import ConfigurationError

    with pytest.raises(ConfigurationError, match="not a valid workspace id"):
        workspace_dir(settings(workspace_data_dir=str(tmp_path)), workspace)


# -- PostgreSQL (a real server from the pgserver wheel) ------------------------------------


@pytest.fixture
async def pg(node_redis: Any, pg_url: str) -> dict[str, Any]:
    services = redis_services(node_redis)
    await store_credential(services, "pg", "database_url", {"url": pg_url})
    return services


async def test_postgres_rows_types_and_bound_parameters(pg: dict[str, Any]) -> None:
    out = await run_with("database_query", {
        "query": "SELECT CAST(:n AS integer) + 1 AS next, CAST(12.50 AS numeric) AS price, "
                 "DATE '2026-01-02' AS day, CAST(:s AS text) AS echoed",
        "parameters": {"n": 41, "s": "x'; DROP TABLE y; --"}, "credential": "pg"}, services=pg)
    assert out["rows"] == [{"next": 42, "price": 12.5, "day": "2026-01-02", "echoed": "x'; DROP TABLE y; --"}]


async def test_postgres_is_read_only_by_default_and_writes_when_asked(pg: dict[str, Any]) -> None:
    table = "t_" + secrets.token_hex(4)
    with pytest.raises(NodeExecutionError, match="read-only transaction"):
        await run_with("database_query", {"query": f"CREATE TABLE {table} (v int)", "credential": "pg"},
                       services=pg)
    await run_with("database_query", {"query": f"CREATE TABLE {table} (v int)", "credential": "pg",
                                      "read_only": False}, services=pg)
    done = await run_with("database_query", {"query": f"INSERT INTO {table} (v) VALUES (:v)",
                                             "parameters": [{"v": 1}, {"v": 2}, {"v": 3}], "credential": "pg",
                                             "read_only": False}, services=pg)
    assert done["rowcount"] in (3, None)  # asyncpg does not count rows of a statement run per item
    out = await run_with("database_query", {"query": f"SELECT v FROM {table} ORDER BY v", "credential": "pg",
                                            "max_rows": 2}, services=pg)
    assert out["rows"] == [{"v": 1}, {"v": 2}] and out["truncated"] is True


async def test_postgres_rows_past_the_budget_fail_the_node_naming_it(pg: dict[str, Any]) -> None:
    services = {**pg, "settings": pg["settings"].model_copy(update={"max_output_bytes": 1024 * 1024})}
    with pytest.raises(NodeExecutionError, match=OVER_BUDGET):
        await run_with("database_query", {"query": "SELECT repeat('x', 50000) AS v FROM generate_series(1, 1000)",
                                          "credential": "pg"}, services=services)


async def test_postgres_statement_timeout(pg: dict[str, Any]) -> None:
    with pytest.raises(NodeTimeoutError, match=r"timeout of 0\.2s"):
        await run_with("database_query", {"query": "SELECT pg_sleep(5)", "credential": "pg", "timeout_s": 0.2},
                       services=pg)
