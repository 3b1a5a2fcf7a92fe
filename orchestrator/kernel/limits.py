"""Rate limits a step asks for before a node runs, and the interface that enforces them.

A node's ``settings.limits`` names limits: a ``key`` (text, or an expression over the run's
input and the node's direct input: ``"per-user:{{ $run.input.user }}"``), a quota of
``rate`` units per ``per_s`` seconds, and the ``cost`` of one execution in units. The step
resolves the keys with the run's scope and asks the environment's :class:`Limiter` once
for all of them, before the executor runs. A limiter that refuses answers how long to wait;
the step then raises :class:`~orchestrator.kernel.errors.WaitRequested`: the node's slot is
freed and the same attempt is scheduled again after the wait (the retry schedule).

The kernel knows no backend: the process lends a ``Limiter`` (the Redis one enforces every
limit across the cluster, ``orchestrator/store/limits.py``); without one, limits are not
enforced (a local run).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from pydantic import BaseModel, ConfigDict, Field

from .errors import EvaluationError, ExpressionError, ParameterError, WaitRequested
from .expressions import Scope, render, stringify

MAX_KEY_CHARS = 200


class LimitSpec(BaseModel):
    """One limit of a node's settings (see the module docstring)."""

    model_config = ConfigDict(extra="forbid")
    key: str = Field(min_length=1, max_length=MAX_KEY_CHARS)
    rate: float = Field(gt=0, le=1e9)
    per_s: float = Field(default=60.0, gt=0, le=86400)
    cost: float = Field(default=1.0, gt=0, le=1e9)
    burst: float = Field(default=1.0, ge=1, le=1e9)


@dataclass(frozen=True)
class LimitRequest:
    """What one acquire asks of one key. ``learn``: the key declares no rate; it runs
    unlimited until a 429 teaches it one (adaptive limits of a provider)."""

    key: str
    rate: float = 0.0
    per_s: float = 60.0
    cost: float = 1.0
    burst: float = 1.0
    learn: bool = False


@dataclass(frozen=True)
class LimitDecision:
    """``wait_s`` 0: granted; else the caller waits that long (its slot is reserved for it
    then, under the holder it gave) for ``key``."""

    wait_s: float
    key: str = ""


class Limiter(Protocol):
    """Enforces limits (cluster-wide in this product: ``orchestrator/store/limits.py``)."""

    async def acquire(self, requests: Sequence[LimitRequest], *, holder: str,
                      workspace: str | None) -> LimitDecision: ...


class Ceiling(Protocol):
    """A ceiling of nodes in flight per workspace, cluster-wide (the Redis one with leases:
    ``orchestrator/store/ceiling.py``). The step enters before a node runs (a refusal's
    ``wait_s`` > 0: the step raises WaitRequested, the node is rescheduled holding nothing)
    and leaves when its execution ends, whatever the outcome."""

    async def enter(self, workspace: str, holder: str) -> LimitDecision: ...

    async def leave(self, workspace: str, holder: str) -> None: ...


async def enter_ceiling(ceiling: Ceiling | None, workspace: str | None, holder: str) -> bool:
    """Take a unit of ``workspace``'s ceiling for ``holder``; False when no ceiling applies.
    A refusal raises WaitRequested, ``source`` ``workspace_ceiling``."""
    if ceiling is None:
        return False
    decision = await ceiling.enter(workspace or "default", holder)
    if decision.wait_s > 0:
        raise WaitRequested(f"workspace ceiling {decision.key!r}", delay_s=decision.wait_s,
                            reason={"limit": decision.key, "source": "workspace_ceiling"})
    return True


async def leave_ceiling(ceiling: Ceiling | None, workspace: str | None, holder: str) -> None:
    """Give back ``holder``'s unit, if it holds one (nothing without a ceiling)."""
    if ceiling is not None:
        await ceiling.leave(workspace or "default", holder)


def resolve_limits(specs: Sequence[LimitSpec], scope: Scope, *, node_id: str,
                   node_name: str) -> list[LimitRequest]:
    """The node's limits with their keys evaluated (errors name the node and the setting)."""
    requests: list[LimitRequest] = []
    for index, spec in enumerate(specs):
        where = f"settings.limits[{index}].key"
        try:
            key = stringify(render(spec.key, scope))
        except (EvaluationError, ExpressionError) as exc:
            raise ParameterError(f"{where}: {exc.message}", node_id=node_id, node_name=node_name,
                                 parameter=where) from None
        if not key or len(key) > MAX_KEY_CHARS:
            raise ParameterError(f"{where}: the key evaluated to {len(key)} characters; it must have "
                                 f"1 to {MAX_KEY_CHARS}", node_id=node_id, node_name=node_name,
                                 parameter=where)
        requests.append(LimitRequest(key=key, rate=spec.rate, per_s=spec.per_s, cost=spec.cost,
                                     burst=spec.burst))
    return requests
