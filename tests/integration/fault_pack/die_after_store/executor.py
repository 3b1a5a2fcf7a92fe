"""A node whose worker dies between storing its completion and acknowledging its task.

With ``ORCH_FAULT_KILL_DIR`` set (only in the fault tests' workers), importing this module
wraps ``workers.tasks.run_step``: after the step of a ``die_after_store`` node returns
(outputs stored by the barrier), the process writes ``<dir>/<run>.<node>.killed`` and
SIGKILLs itself, once per run and node. Test code only: production has no such hook.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

from orchestrator.kernel.protocol import DataValue, ExecutionResult, FlowContext

KILL_DIR_ENV = "ORCH_FAULT_KILL_DIR"
_ran: set[tuple[str, str]] = set()


class DieAfterStore:
    node_type = "die_after_store"

    async def execute(self, data: dict[str, Any], inputs: dict[str, DataValue],
                      ctx: FlowContext) -> ExecutionResult:
        _ran.add((ctx.run_id, ctx.node_id))
        received = inputs.get("input")
        return ExecutionResult(outputs={"output": DataValue(
            "data", {"value": data.get("value"), "input": received.value if received else None})})


def _install(kill_dir: Path) -> None:
    import workers.tasks as tasks

    real = tasks.run_step

    async def run_step_then_die(env: Any, run_id: str, node_id: str, **kw: Any) -> Any:
        outcome = await real(env, run_id, node_id, **kw)
        marker = kill_dir / f"{run_id}.{node_id}.killed"
        if (run_id, node_id) in _ran and not marker.exists():
            marker.touch()
            os.kill(os.getpid(), signal.SIGKILL)
        return outcome

    tasks.run_step = run_step_then_die  # type: ignore[assignment]


if os.environ.get(KILL_DIR_ENV):
    _install(Path(os.environ[KILL_DIR_ENV]))

executor = DieAfterStore()
