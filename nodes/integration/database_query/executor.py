"""Database Query: one parameterised SQL statement -> ``{rows, columns, count, truncated, rowcount}``.

The connection is a ``database_url`` credential, else the embedded SQLite database
(``ORCH_DATABASE_SQLITE_PATH``). The statement text is taken literally (the definition
turns expressions off for it): values from the run go in ``parameters`` and are bound by
the driver. Execution: ``nodes/_shared/database.py``. The URL's password is masked in
every error.
"""

from __future__ import annotations

from typing import Any

from nodes._rag.services import as_text, load_credential, settings_of
from nodes._shared.database import Statement, run_statement, sqlite_url
from nodes._shared.values import result
from orchestrator.credentials import mask
from orchestrator.kernel.errors import OrchestratorError, ParameterError
from orchestrator.kernel.protocol import DataValue, ExecutionResult, FlowContext


def _parameters(value: Any) -> dict[str, Any] | list[dict[str, Any]]:
    if value in (None, ""):
        return {}
    if isinstance(value, dict):
        return value
    if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        return value
    raise ParameterError("parameter 'parameters' must be an object (or a non-empty list of objects)",
                         parameter="parameters")


class DatabaseQuery:
    node_type = "database_query"

    async def execute(self, data: dict[str, Any], inputs: dict[str, DataValue], ctx: FlowContext) -> ExecutionResult:
        sql = as_text(data.get("query")).strip()
        if not sql:
            raise ParameterError("parameter 'query' is required", parameter="query")
        settings = settings_of(ctx)
        secrets: list[str] = []
        if data.get("credential"):
            credential = await load_credential(ctx, as_text(data["credential"]), ("database_url",))
            url = credential.values["url"]
            secrets = credential.secrets()
        else:
            url = sqlite_url(settings.database_sqlite_path)
        timeout = data.get("timeout_s")
        stmt = Statement(sql=sql, parameters=_parameters(data.get("parameters")),
                         read_only=bool(data.get("read_only", True)), max_rows=int(data.get("max_rows") or 1000),
                         timeout_s=float(timeout) if timeout else settings.database_statement_timeout_s)
        try:
            out = await run_statement(url, stmt)
        except OrchestratorError as exc:
            exc.message = mask(exc.message, secrets)
            raise
        return result({"output": out})


executor = DatabaseQuery()
