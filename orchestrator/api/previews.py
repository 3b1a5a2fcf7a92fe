"""``POST /expressions/preview``: what a parameter value resolves to, for the console.

The console shows, under each parameter field, the value its expression would resolve to
against the last run's data or pinned data. The browser has no expression evaluator (the
kernel's is Python), so it asks here. The value is evaluated by the kernel's own
``expressions.render`` (a parser, never ``eval``) under the budgets of
``Settings.expression_*`` (steps, string and list sizes, result size), in a worker thread
with a wall-clock bound (``PREVIEW_TIMEOUT_S``) after which its ``Spending`` is stopped, so
a costly expression cannot hold the API's event loop; at most ``PREVIEW_CONCURRENCY`` evaluate at
once per process (60 concurrent costly previews held every thread of the default executor and
~260 MB), the others wait their turn within the same bound, then answer ``PreviewBusy``. With ``node_type`` and
``parameter`` the result is also held to the parameter's declared type, bounds and values
as a run would hold it (``parameters.within_definition``).

The answer is 200 either way (the question was answered): ``{ok: true, value}`` or
``{ok: false, error: {type, message}}``, the message naming the expression and the column
of a syntax fault. Nothing is stored; nothing runs but the evaluator.
"""

from __future__ import annotations

import asyncio
import weakref
from typing import Any

from fastapi import APIRouter, Depends
from pydantic import BaseModel, ConfigDict, Field

from orchestrator.kernel.errors import OrchestratorError
from orchestrator.kernel.expressions import Scope, render
from orchestrator.kernel.parameters import within_definition

from .auth import role
from .principal import Principal
from .services import Services, get_services

router = APIRouter(tags=["console"])
PREVIEW_TIMEOUT_S = 2.0  # one preview's evaluation; then its Spending is stopped
PREVIEW_CONCURRENCY = 2  # previews evaluating at once per process (the rest wait up to PREVIEW_TIMEOUT_S)
_SLOTS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = weakref.WeakKeyDictionary()


def _slots() -> asyncio.Semaphore:
    loop = asyncio.get_running_loop()
    slots = _SLOTS.get(loop)
    if slots is None:
        slots = _SLOTS[loop] = asyncio.Semaphore(PREVIEW_CONCURRENCY)
    return slots


class PreviewIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    value: Any = Field(description="the parameter value: a string with {{ }} expressions, or any JSON holding some")
    input: Any = Field(default=None, description="what `input` / `$json` reads (the direct parent's output)")
    nodes: dict[str, Any] = Field(default_factory=dict, max_length=2000,
                                  description="node name -> its main output, what $('Name').item.json reads")
    run_input: Any = Field(default=None, description="what `$run.input` reads")
    node_type: str | None = Field(default=None, max_length=200)
    parameter: str | None = Field(default=None, max_length=200)


def _evaluate(body: PreviewIn, scope: Scope, services: Services) -> Any:
    value = render(body.value, scope)
    if body.node_type and body.parameter:
        definition = services.registry.get(body.node_type).definition
        param = definition.parameter(body.parameter)
        if param is not None:
            value = within_definition(param, value)
    return value


def _finished(slots: asyncio.Semaphore, done: asyncio.Future[Any]) -> None:
    """Give the slot back when the evaluation really ended (also after a timeout), and
    retrieve its outcome so a timed-out one logs no "exception never retrieved"."""
    slots.release()
    if not done.cancelled():
        done.exception()


@router.post("/expressions/preview")
async def preview(body: PreviewIn, services: Services = Depends(get_services),  # noqa: B008
                  who: Principal = Depends(role("viewer"))) -> dict[str, Any]:  # noqa: B008
    """Resolve ``value`` as a node's parameter would be resolved, against ``input`` and
    ``nodes``: ``{ok: true, value}`` or ``{ok: false, error: {type, message}}``."""
    scope = Scope(input=body.input, nodes=body.nodes,
                  run={"id": "preview", "input": body.run_input, "session_id": None},
                  limits=services.settings.expression_limits())
    slots = _slots()
    try:  # a bounded number evaluate at once: previews never hold every thread of the process
        await asyncio.wait_for(slots.acquire(), PREVIEW_TIMEOUT_S)
    except TimeoutError:
        return {"ok": False, "error": {"type": "PreviewBusy", "message": "too many previews at once; try again"}}
    work = asyncio.ensure_future(asyncio.to_thread(_evaluate, body, scope, services))
    work.add_done_callback(lambda done: _finished(slots, done))
    try:
        value = await asyncio.wait_for(asyncio.shield(work), PREVIEW_TIMEOUT_S)
    except TimeoutError:
        scope.spending.stop("the preview took too long")
        return {"ok": False, "error": {"type": "PreviewTimeout",
                                       "message": f"evaluation took longer than {PREVIEW_TIMEOUT_S:g} s"}}
    except OrchestratorError as exc:
        return {"ok": False, "error": {"type": type(exc).__name__, "message": exc.message}}
    return {"ok": True, "value": value}
