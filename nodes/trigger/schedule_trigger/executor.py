"""Schedule Trigger: outputs the scheduler's run input, or ``{"scheduled_at": <ISO time>}``.

The scheduler (beat) reads ``cron`` / ``interval_s``; exactly one must be set. The cron
string is checked here for shape (five fields, allowed characters) so a manual run
reports a bad schedule by parameter name.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

from nodes._shared.values import result
from orchestrator.kernel.protocol import DataValue, ExecutionResult, FlowContext

_CRON_FIELD = re.compile(r"^[\d*/,\-A-Za-z?LW#]+$")


def check_schedule(cron: Any, interval_s: Any) -> None:
    """Raise ValueError naming the parameter when the schedule is missing or malformed."""
    has_cron = isinstance(cron, str) and cron.strip() != ""
    has_interval = interval_s not in (None, "")
    if has_cron == has_interval:
        raise ValueError("set exactly one of parameters 'cron' and 'interval_s'")
    if has_cron:
        fields = str(cron).split()
        if len(fields) != 5 or not all(_CRON_FIELD.match(f) for f in fields):
            raise ValueError(
                "parameter 'cron' must have five fields (minute hour day month weekday); "
                f"got {cron!r}"
            )
    elif float(interval_s) <= 0:
        raise ValueError(f"parameter 'interval_s' must be positive; got {interval_s!r}")


class ScheduleTrigger:
    node_type = "schedule_trigger"

    async def execute(
        self, data: dict[str, Any], inputs: dict[str, DataValue], ctx: FlowContext
    ) -> ExecutionResult:
        return self.at_start(data, ctx.run_input, ctx.session_id)

    def at_start(self, data: dict[str, Any], run_input: Any, session_id: str | None) -> ExecutionResult:
        """The run's start computes it (no step); a bad schedule raises, and the step then
        reports it as the node's error."""
        check_schedule(data.get("cron"), data.get("interval_s"))
        if run_input is not None:
            return result({"output": run_input})
        return result({"output": {"scheduled_at": datetime.now(UTC).isoformat()}})


executor = ScheduleTrigger()
