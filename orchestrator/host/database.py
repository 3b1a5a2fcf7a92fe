"""SQL for the integration nodes: one parameterised statement on SQLite or PostgreSQL.

Through SQLAlchemy 2's async engine (aiosqlite, asyncpg), one engine per execution
(``NullPool``: a node holds no connection between runs). Contract of :func:`run_statement`:

* the statement is bound with named parameters (``:name``); nothing is interpolated;
* read-only: SQLite runs with ``PRAGMA query_only``, PostgreSQL in a ``READ ONLY``
  transaction; a write is refused by the database itself;
* the statement timeout is enforced by PostgreSQL (``SET LOCAL statement_timeout``) and,
  for SQLite, by interrupting the connection when the time is up;
* at most ``max_rows`` rows and ``max_bytes`` bytes (the node's output budget,
  ``ORCH_MAX_OUTPUT_BYTES``) are fetched; values become JSON (decimals as numbers, times
  as ISO 8601, bytes as base64). Rows come through a server-side cursor (SQLAlchemy's
  ``stream``), a few at a time: a statement that selects a million rows costs the worker
  the rows it keeps, never the whole result (the plain cursors of aiosqlite and asyncpg
  fetch every row before the first is read). A result past ``max_bytes`` fails the node
  naming the budget. PostgreSQL has no per-value limit to set: one batch (at most 50 rows,
  asyncpg's) may arrive before the budget is checked, so one row is bounded only by
  PostgreSQL's own 1 GB message limit; and a PostgreSQL write (``read_only`` off) is read
  through the plain cursor, whose status gives ``rowcount``, so its ``RETURNING`` rows
  arrive whole before the budget is checked. SQLite's limits below leave no such gap.

A SQLite statement reaches its one database file and nothing else, and builds no value
larger than the node's budget. Every SQLite connection is opened here (not from URL
options, which are refused) with the limits of :func:`sqlite_limits`
(``SQLITE_LIMIT_LENGTH``: no string, blob or row past ``max_bytes``, so
``randomblob(400000000)`` fails before SQLite allocates it; the statement's text, its
expression depth, compound selects, function arguments, LIKE patterns, bound variables,
columns and trigger depth bounded; ``SQLITE_LIMIT_ATTACHED`` 0; no sorter threads), and an
authorizer (:class:`SqliteGuard`) that refuses, before the statement runs:

* ``ATTACH`` and ``DETACH`` (an ``ATTACH`` creates a file at any path the worker may
  write), and so ``VACUUM`` in both forms, which SQLite runs by attaching a database
  (``VACUUM INTO '<path>'`` writes a copy anywhere);
* loading extensions (``load_extension()``; Python's sqlite3 also leaves it disabled) and
  ``fts3_tokenizer()``;
* every ``PRAGMA`` except :data:`PRAGMAS_INTROSPECTION` (with any argument),
  :data:`PRAGMAS_READ` (read, not set) and :data:`PRAGMAS_SET`: the rest change the file,
  the connection's guards (``query_only``), memory use, or reveal the file's path
  (``database_list``).

SQLAlchemy and the drivers are imported when a statement runs, not with this module: node
discovery imports it in every worker and CLI process, and they cost about a second there.
"""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import decimal
import json
import sqlite3
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from orchestrator.kernel.errors import NodeExecutionError, NodeTimeoutError, OrchestratorError, ParameterError

if TYPE_CHECKING:
    import aiosqlite
    from sqlalchemy.engine import URL, Connection
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

DRIVERS = {"postgresql": "postgresql+asyncpg", "postgres": "postgresql+asyncpg", "sqlite": "sqlite+aiosqlite"}


@dataclass
class Statement:
    sql: str
    parameters: dict[str, Any] | list[dict[str, Any]] = field(default_factory=dict)
    read_only: bool = True
    max_rows: int = 1000
    timeout_s: float = 30.0
    max_bytes: int = 8 * 1024 * 1024  # the node's output budget (ORCH_MAX_OUTPUT_BYTES)


SQL_MAX_BYTES = 1_000_000  # statement text: far above a hand-written statement
BUDGET_NAME = "the node's output budget ORCH_MAX_OUTPUT_BYTES"


def sqlite_limits(max_bytes: int) -> dict[int, int]:
    """The ``sqlite3.Connection.setlimit`` values of every connection (SQLite's defaults in
    comments; each is a bound on memory or on C recursion that a statement chooses)."""
    return {
        sqlite3.SQLITE_LIMIT_LENGTH: max(1024, max_bytes),  # 1e9: a string, blob or row
        sqlite3.SQLITE_LIMIT_SQL_LENGTH: max(1024, min(SQL_MAX_BYTES, max_bytes)),  # 1e9; checked first
        sqlite3.SQLITE_LIMIT_EXPR_DEPTH: 500,  # 1000
        sqlite3.SQLITE_LIMIT_COMPOUND_SELECT: 100,  # 500
        sqlite3.SQLITE_LIMIT_FUNCTION_ARG: 100,  # 127 (1000 when compiled so)
        sqlite3.SQLITE_LIMIT_LIKE_PATTERN_LENGTH: 10_000,  # 50,000
        sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER: 10_000,  # 32,766
        sqlite3.SQLITE_LIMIT_COLUMN: 2000,  # 2000
        sqlite3.SQLITE_LIMIT_TRIGGER_DEPTH: 100,  # 1000
        sqlite3.SQLITE_LIMIT_ATTACHED: 0,  # 10: see SqliteGuard
        sqlite3.SQLITE_LIMIT_WORKER_THREADS: 0,  # 0; sorter threads would each hold a buffer
    }


def _parse_url(raw: str) -> URL:
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        return make_url(raw)
    except ArgumentError:
        raise ParameterError("the database URL is not a valid URL", parameter="credential") from None


def async_url(raw: str) -> str:
    """``postgresql://`` / ``sqlite:///`` URLs with their async driver; others refused."""
    url = _parse_url(raw)
    backend = url.get_backend_name()
    if backend not in ("postgresql", "sqlite"):
        raise ParameterError(f"database {backend!r} is not supported (postgresql, sqlite)", parameter="credential")
    return url.set(drivername=DRIVERS[backend]).render_as_string(hide_password=False)


def sqlite_url(path: str | Path) -> str:
    file = Path(path).expanduser()
    file.parent.mkdir(parents=True, exist_ok=True)
    return f"sqlite+aiosqlite:///{file}"


def sqlite_path(raw: str) -> str | None:
    """The file a ``sqlite:`` URL names (``:memory:`` for none), None for another database;
    a SQLite URL with options (``?...``) is refused: connections are opened here."""
    url = _parse_url(raw)
    if url.get_backend_name() != "sqlite":
        return None
    if url.query:
        raise ParameterError(f"a sqlite URL takes no options; got ?{'&'.join(sorted(url.query))}",
                             parameter="credential")
    return url.database or ":memory:"


# -- the SQLite authorizer (see the module docstring) -----------------------------------

# Schema introspection, with any argument (a table or index name).
PRAGMAS_INTROSPECTION = frozenset({
    "table_info", "table_xinfo", "table_list", "index_list", "index_info", "index_xinfo",
    "foreign_key_list", "foreign_key_check", "integrity_check", "quick_check", "collation_list",
})
# Settings a statement may read but not set (SQLAlchemy reads read_uncommitted on connect).
PRAGMAS_READ = frozenset({
    "user_version", "application_id", "schema_version", "data_version", "page_count", "page_size",
    "freelist_count", "encoding", "journal_mode", "query_only", "read_uncommitted", "foreign_keys",
})
# Connection-local switches a statement may also set.
PRAGMAS_SET = frozenset({"foreign_keys"})
FUNCTIONS_REFUSED = frozenset({"load_extension", "fts3_tokenizer"})


class SqliteGuard:
    """The authorizer of every SQLite connection (``sqlite3.Connection.set_authorizer``);
    ``refused`` says why it last denied an action, for the node's error."""

    def __init__(self) -> None:
        self.refused: str | None = None

    def __call__(self, action: int, arg1: str | None, arg2: str | None, _db: str | None,
                 _trigger: str | None) -> int:
        reason = self._reason(action, arg1, arg2)
        if reason is None:
            return sqlite3.SQLITE_OK
        self.refused = reason
        return sqlite3.SQLITE_DENY

    @staticmethod
    def _reason(action: int, arg1: str | None, arg2: str | None) -> str | None:
        if action in (sqlite3.SQLITE_ATTACH, sqlite3.SQLITE_DETACH):
            return "ATTACH, DETACH and VACUUM are not allowed (a statement reaches only its own database file)"
        if action == sqlite3.SQLITE_FUNCTION and (arg2 or "").lower() in FUNCTIONS_REFUSED:
            return f"the function {arg2}() is not allowed"
        if action == sqlite3.SQLITE_PRAGMA:
            name = (arg1 or "").lower()
            if name in PRAGMAS_INTROSPECTION or name in PRAGMAS_SET:
                return None
            if name in PRAGMAS_READ:
                return None if arg2 is None else f"PRAGMA {name} may be read but not set"
            return (f"PRAGMA {name} is not allowed; allowed: {', '.join(sorted(PRAGMAS_INTROSPECTION))}, "
                    f"reading {', '.join(sorted(PRAGMAS_READ))}, setting {', '.join(sorted(PRAGMAS_SET))}")
        return None


def _sqlite_engine(path: str, stmt: Statement, guard: SqliteGuard) -> AsyncEngine:
    """An engine whose one connection is the guarded SQLite connection to ``path``."""
    import aiosqlite
    from sqlalchemy.ext.asyncio import create_async_engine
    from sqlalchemy.pool import NullPool

    read_only = stmt.read_only

    def connect() -> sqlite3.Connection:  # runs on aiosqlite's thread, which then owns it
        conn = sqlite3.connect(path)
        try:
            for limit, value in sqlite_limits(stmt.max_bytes).items():
                conn.setlimit(limit, value)
            conn.execute(f"PRAGMA query_only = {'ON' if read_only else 'OFF'}")
            conn.set_authorizer(guard)
        except BaseException:
            conn.close()
            raise
        return conn

    async def creator() -> aiosqlite.Connection:
        return await aiosqlite.Connection(connect, 64)

    return create_async_engine("sqlite+aiosqlite://", async_creator=creator, poolclass=NullPool)


def to_json(value: Any) -> Any:
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, decimal.Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(value)).decode()
    if isinstance(value, uuid.UUID | dt.timedelta):
        return str(value)
    if isinstance(value, dict):
        return {str(k): to_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_json(v) for v in value]
    return str(value)


async def _prepare(conn: AsyncConnection, dialect: str, stmt: Statement) -> None:
    """PostgreSQL's per-transaction guards (SQLite's are set when it connects)."""
    from sqlalchemy import text

    if dialect == "postgresql":
        if stmt.read_only:
            await conn.execute(text("SET TRANSACTION READ ONLY"))
        await conn.execute(text(f"SET LOCAL statement_timeout = {max(1, int(stmt.timeout_s * 1000))}"))


def _json_bytes(value: Any) -> int:
    """About the bytes of ``value`` in the output's JSON (never fewer for text and bytes)."""
    if isinstance(value, str):
        return len(value) + 2
    if isinstance(value, bytes | bytearray | memoryview):
        return (len(value) + 2) // 3 * 4 + 2
    if isinstance(value, dict | list):
        return len(json.dumps(value, default=str))
    return 24


def _fetch(conn: Connection, stmt: Statement) -> dict[str, Any]:
    """Run ``stmt`` and read its rows within the budgets (on SQLAlchemy's greenlet, through
    ``AsyncConnection.run_sync``: the sync ``Result`` API over the async drivers)."""
    from sqlalchemy import text

    # A server-side cursor cannot run a statement per parameter set, and asyncpg's does not
    # report the rows a write changed: PostgreSQL writes keep the plain cursor (see above).
    if isinstance(stmt.parameters, list) or (conn.dialect.name == "postgresql" and not stmt.read_only):
        result = conn.execute(text(stmt.sql), stmt.parameters)
    else:
        result = conn.execution_options(stream_results=True, max_row_buffer=50).execute(
            text(stmt.sql), stmt.parameters)
    with result:
        if not result.returns_rows:
            # rowcount: rows the statement changed; null when the driver cannot tell
            # (asyncpg with a list of parameter sets, or through a server-side cursor).
            rowcount = result.rowcount if result.rowcount >= 0 else None
            return {"rows": [], "columns": [], "count": 0, "truncated": False, "rowcount": rowcount}
        columns = list(result.keys())
        rows: list[dict[str, Any]] = []
        size = 0
        for row in result:
            if len(rows) == stmt.max_rows:
                return {"rows": rows, "columns": columns, "count": len(rows), "truncated": True,
                        "rowcount": len(rows)}
            size += sum(_json_bytes(v) + len(c) + 4 for c, v in zip(columns, row, strict=True))
            if size > stmt.max_bytes:
                raise NodeExecutionError(
                    f"the result is larger than {BUDGET_NAME} ({stmt.max_bytes} bytes) after {len(rows)} "
                    "rows: select fewer rows (max_rows, LIMIT) or smaller columns")
            rows.append({c: to_json(v) for c, v in zip(columns, row, strict=True)})
    return {"rows": rows, "columns": columns, "count": len(rows), "truncated": False, "rowcount": len(rows)}


async def _execute(conn: AsyncConnection, stmt: Statement) -> dict[str, Any]:
    return await conn.run_sync(_fetch, stmt)


def _driver_errors() -> tuple[type[Exception], ...]:
    """The drivers' own errors: SQLAlchemy wraps them as DBAPIError when a statement starts,
    but not when a server-side cursor fetches its rows (asyncpg's and aiosqlite's adapters)."""
    import asyncpg

    return (sqlite3.Error, asyncpg.PostgresError)


def _refusal(orig: BaseException | None, stmt: Statement, guard: SqliteGuard) -> OrchestratorError:
    """The node's error for a driver's error ``orig``."""
    message = str(orig)
    if "statement timeout" in message or "canceling statement" in message:
        return NodeTimeoutError(f"the statement ran past its timeout of {stmt.timeout_s}s")
    if getattr(orig, "sqlite_errorcode", None) == sqlite3.SQLITE_TOOBIG or "string or blob too big" in message:
        return NodeExecutionError(f"the statement built a value larger than {BUDGET_NAME} ({stmt.max_bytes} "
                                  "bytes; SQLite's SQLITE_LIMIT_LENGTH)")
    if guard.refused is not None:  # "not authorized" / "authorization denied": say what and why
        return NodeExecutionError(f"the statement was refused: {guard.refused}")
    first_line = message.splitlines()[0][:300] if message else ""
    return NodeExecutionError(f"the database refused the statement: {type(orig).__name__}: {first_line}")


async def run_statement(url: str, stmt: Statement) -> dict[str, Any]:
    """Run ``stmt`` on the database at ``url`` (see the module docstring)."""
    from sqlalchemy.exc import DBAPIError, SQLAlchemyError
    from sqlalchemy.ext.asyncio import create_async_engine
    from sqlalchemy.pool import NullPool

    path = sqlite_path(url)
    sql_max_bytes = min(SQL_MAX_BYTES, stmt.max_bytes)
    if len(stmt.sql.encode()) > sql_max_bytes:
        raise ParameterError(f"the statement is longer than {sql_max_bytes} bytes (SQLITE_LIMIT_SQL_LENGTH); "
                             "values go in parameters", parameter="query")
    guard = SqliteGuard()
    errors = _driver_errors()
    engine = (_sqlite_engine(path, stmt, guard) if path is not None
              else create_async_engine(async_url(url), poolclass=NullPool))
    dialect = engine.dialect.name
    try:
        async with engine.connect() as conn:
            await _prepare(conn, dialect, stmt)
            work = asyncio.ensure_future(_execute(conn, stmt))
            try:
                out = await asyncio.wait_for(asyncio.shield(work), timeout=stmt.timeout_s + (1.0 if dialect ==
                                                                                               "postgresql" else 0))
            except TimeoutError:
                if dialect == "sqlite":
                    driver = (await conn.get_raw_connection()).driver_connection
                    if driver is not None:
                        await driver.interrupt()
                    ended: tuple[type[Exception], ...] = (SQLAlchemyError, *errors)
                    try:
                        await work
                    except ended:
                        pass
                else:
                    work.cancel()
                raise NodeTimeoutError(f"the statement ran past its timeout of {stmt.timeout_s}s") from None
            if not stmt.read_only:
                await conn.commit()
            return out
    except DBAPIError as exc:
        raise _refusal(exc.orig, stmt, guard) from None
    except errors as exc:
        raise _refusal(exc, stmt, guard) from None
    except (SQLAlchemyError, OSError) as exc:
        raise NodeExecutionError(f"database error: {type(exc).__name__}: {str(exc).splitlines()[0][:300]}") from None
    finally:
        await engine.dispose()
