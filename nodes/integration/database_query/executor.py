"""Database Query: one parameterised SQL statement -> ``{rows, columns, count, truncated, rowcount}``.

The connection is a ``database_url`` credential, else the run's workspace's embedded
SQLite database: ``default``'s is ``ORCH_DATABASE_SQLITE_PATH`` (where it always was),
every other workspace's is ``database.sqlite3`` in its own folder
(``<ORCH_WORKSPACE_DATA_DIR>/<workspace>/``, ``orchestrator/host/workspace.py``). So no workspace
reads or changes another's tables.

A credential's ``postgresql://`` URL is the workspace's own server and account: the
database's own access rules apply. A ``sqlite:`` URL names a file on the worker's disk,
which is the operator's, not the workspace's: outside ``default`` it must name a file in
the workspace's folder (a relative path is taken from there), or ``sqlite://`` (in
memory). ``default`` (the operator's ``ORCH_API_KEYS``) may name any path, as before.

The statement text is taken literally (the definition turns expressions off for it):
values from the run go in ``parameters`` and are bound by the driver. Execution and the
SQLite guards (no ATTACH, VACUUM, extensions, PRAGMAs outside a safe list):
``orchestrator/host/database.py``. The URL's password is masked in every error.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nodes._rag.services import as_text
from nodes._shared.values import result
from orchestrator.host.credentials import DEFAULT_WORKSPACE, mask
from orchestrator.host.database import Statement, run_statement, sqlite_path, sqlite_url
from orchestrator.host.node_host import NodeHost, node_host
from orchestrator.host.workspace import workspace_dir, workspace_file
from orchestrator.kernel.errors import OrchestratorError, ParameterError
from orchestrator.kernel.protocol import DataValue, ExecutionResult, FlowContext

EMBEDDED_FILE = "database.sqlite3"  # the embedded database of a workspace other than default


def _parameters(value: Any) -> dict[str, Any] | list[dict[str, Any]]:
    if value in (None, ""):
        return {}
    if isinstance(value, dict):
        return value
    if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        return value
    raise ParameterError("parameter 'parameters' must be an object (or a non-empty list of objects)",
                         parameter="parameters")


def embedded_database(host: NodeHost) -> Path:
    """The embedded SQLite database of the run's workspace (see the module docstring)."""
    if host.workspace == DEFAULT_WORKSPACE:
        return Path(host.settings.database_sqlite_path).expanduser()
    return host.workspace_file(EMBEDDED_FILE)


def confined_url(url: str, host: NodeHost) -> str:
    """``url`` when the workspace may use it (see the module docstring); a ``sqlite:`` URL
    of another workspace than ``default`` becomes its file inside the workspace's folder."""
    settings, workspace = host.settings, host.workspace
    path = sqlite_path(url)
    if path is None or path == ":memory:" or workspace == DEFAULT_WORKSPACE:
        return url
    folder = workspace_dir(settings, workspace)
    file = (folder / Path(path).expanduser()).resolve()
    if not file.is_relative_to(folder) or file == folder:
        raise ParameterError(f"a sqlite database of workspace {workspace!r} must be a file in its folder "
                             "(<ORCH_WORKSPACE_DATA_DIR>/<workspace>; a relative path is taken from there)",
                             parameter="credential")
    return sqlite_url(workspace_file(settings, workspace, str(file.relative_to(folder))))


class DatabaseQuery:
    node_type = "database_query"

    async def execute(self, data: dict[str, Any], inputs: dict[str, DataValue], ctx: FlowContext) -> ExecutionResult:
        sql = as_text(data.get("query")).strip()
        if not sql:
            raise ParameterError("parameter 'query' is required", parameter="query")
        host = node_host(ctx)
        settings = host.settings
        secrets: list[str] = []
        if data.get("credential"):
            credential = await host.credential(as_text(data["credential"]), ("database_url",))
            secrets = credential.secrets()
            url = confined_url(credential.values["url"], host)
        else:
            url = sqlite_url(embedded_database(host))
        timeout = data.get("timeout_s")
        stmt = Statement(sql=sql, parameters=_parameters(data.get("parameters")),
                         read_only=bool(data.get("read_only", True)), max_rows=int(data.get("max_rows") or 1000),
                         timeout_s=float(timeout) if timeout else settings.database_statement_timeout_s,
                         max_bytes=settings.max_output_bytes)
        try:
            out = await run_statement(url, stmt)
        except OrchestratorError as exc:
            exc.message = mask(exc.message, secrets)
            raise
        return result({"output": out})


executor = DatabaseQuery()
