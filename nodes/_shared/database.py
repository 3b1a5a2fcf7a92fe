"""SQL for the integration nodes: one parameterised statement on SQLite or PostgreSQL.

Through SQLAlchemy 2's async engine (aiosqlite, asyncpg), one engine per execution
(``NullPool``: a node holds no connection between runs). Contract of :func:`run_statement`:

* the statement is bound with named parameters (``:name``); nothing is interpolated;
* read-only: SQLite runs with ``PRAGMA query_only``, PostgreSQL in a ``READ ONLY``
  transaction; a write is refused by the database itself;
* the statement timeout is enforced by PostgreSQL (``SET LOCAL statement_timeout``) and,
  for SQLite, by interrupting the connection when the time is up;
* at most ``max_rows`` rows are fetched; values become JSON (decimals as numbers, times
  as ISO 8601, bytes as base64).
"""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import decimal
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncConnection, create_async_engine
from sqlalchemy.pool import NullPool

from orchestrator.kernel.errors import NodeExecutionError, NodeTimeoutError, ParameterError

DRIVERS = {"postgresql": "postgresql+asyncpg", "postgres": "postgresql+asyncpg", "sqlite": "sqlite+aiosqlite"}


@dataclass
class Statement:
    sql: str
    parameters: dict[str, Any] | list[dict[str, Any]] = field(default_factory=dict)
    read_only: bool = True
    max_rows: int = 1000
    timeout_s: float = 30.0


def async_url(raw: str) -> str:
    """``postgresql://`` / ``sqlite:///`` URLs with their async driver; others refused."""
    try:
        url = make_url(raw)
    except ArgumentError:
        raise ParameterError("the database URL is not a valid URL", parameter="credential") from None
    backend = url.get_backend_name()
    if backend not in ("postgresql", "sqlite"):
        raise ParameterError(f"database {backend!r} is not supported (postgresql, sqlite)", parameter="credential")
    return url.set(drivername=DRIVERS[backend]).render_as_string(hide_password=False)


def sqlite_url(path: str) -> str:
    file = Path(path).expanduser()
    file.parent.mkdir(parents=True, exist_ok=True)
    return f"sqlite+aiosqlite:///{file}"


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
    if dialect == "postgresql":
        if stmt.read_only:
            await conn.execute(text("SET TRANSACTION READ ONLY"))
        await conn.execute(text(f"SET LOCAL statement_timeout = {max(1, int(stmt.timeout_s * 1000))}"))
    else:
        await conn.execute(text(f"PRAGMA query_only = {'ON' if stmt.read_only else 'OFF'}"))


async def _execute(conn: AsyncConnection, stmt: Statement) -> dict[str, Any]:
    result = await conn.execute(text(stmt.sql), stmt.parameters)
    if not result.returns_rows:
        # rowcount: rows the statement changed; null when the driver cannot tell (asyncpg
        # with a list of parameter sets).
        rowcount = result.rowcount if result.rowcount >= 0 else None
        return {"rows": [], "columns": [], "count": 0, "truncated": False, "rowcount": rowcount}
    columns = list(result.keys())
    fetched = result.fetchmany(stmt.max_rows + 1)
    rows = [{c: to_json(v) for c, v in zip(columns, row, strict=True)} for row in fetched[:stmt.max_rows]]
    return {"rows": rows, "columns": columns, "count": len(rows), "truncated": len(fetched) > stmt.max_rows,
            "rowcount": len(rows)}


async def run_statement(url: str, stmt: Statement) -> dict[str, Any]:
    """Run ``stmt`` on the database at ``url`` (see the module docstring)."""
    engine = create_async_engine(async_url(url), poolclass=NullPool)
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
                    try:
                        await work
                    except SQLAlchemyError:
                        pass
                else:
                    work.cancel()
                raise NodeTimeoutError(f"the statement ran past its timeout of {stmt.timeout_s}s") from None
            if not stmt.read_only:
                await conn.commit()
            return out
    except DBAPIError as exc:
        if "statement timeout" in str(exc.orig) or "canceling statement" in str(exc.orig):
            raise NodeTimeoutError(f"the statement ran past its timeout of {stmt.timeout_s}s") from None
        raise NodeExecutionError(f"the database refused the statement: {type(exc.orig).__name__}: "
                                 f"{str(exc.orig).splitlines()[0][:300]}") from None
    except (SQLAlchemyError, OSError) as exc:
        raise NodeExecutionError(f"database error: {type(exc).__name__}: {str(exc).splitlines()[0][:300]}") from None
    finally:
        await engine.dispose()
