"""Step observers: how a host watches node executions (traces) without the kernel
knowing how.

:func:`~orchestrator.kernel.step.run_step` enters ``observer.node(...)`` once per
execution it runs (after the claim, around the executor, the retry decision and the
error mode) and calls ``end`` on what it yields with how the execution ended. The
context manager is entered in the step's own task, so whatever the host makes current
there (e.g. a span) is current for the executor too. An observer must not raise.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any, Protocol

from .protocol import EventType, NodeEvent
from .scheduling import RunPlan
from .usage import Usage


@dataclass(frozen=True)
class ObservedNode:
    """Which execution is observed."""

    plan: RunPlan
    node_id: str
    node_type: str
    node_name: str
    attempt: int
    worker_id: str


@dataclass(frozen=True)
class ObservedEnd:
    """How it ended: the node status (succeeded, failed, waiting, retrying), the error
    (as events carry it), and the usage it reported (``usage.py``'s JSON form)."""

    status: str
    error: dict[str, Any] | None
    usage: dict[str, dict[str, float]]


class Observation(Protocol):
    def end(self, ended: ObservedEnd) -> None: ...


class StepObserver(Protocol):
    def node(self, seen: ObservedNode) -> AbstractContextManager[Observation]: ...


class _Unobserved:
    def end(self, ended: ObservedEnd) -> None:
        pass


UNOBSERVED: AbstractContextManager[Observation] = nullcontext(_Unobserved())  # reusable: it holds nothing


def observe(observer: StepObserver | None, seen: ObservedNode) -> AbstractContextManager[Observation]:
    """The host observer's context for one execution (a no-op without one)."""
    if observer is None:
        return UNOBSERVED
    return observer.node(seen)


_USAGE_EVENTS = frozenset({EventType.COMPLETED, EventType.ERROR, EventType.RETRY})


def carries_usage(event: NodeEvent) -> bool:
    """Is ``event`` an execution's own last event (completed, error, retry, or the
    ``progress`` event ``{"suspended": true}`` of a node that suspended)?"""
    if not event.node_id or event.data is None:
        return False
    return event.event_type in _USAGE_EVENTS or (
        event.event_type == EventType.PROGRESS and event.data.get("suspended") is True)


def with_usage(events: list[NodeEvent], usage: Usage) -> dict[str, dict[str, float]]:
    """Put ``usage`` (when any was reported) on the execution's own completed, error,
    retry or suspended event (``data.usage``); returns its JSON form."""
    reported = usage.to_json()
    if reported:
        for ev in events:
            if carries_usage(ev) and ev.data is not None:
                ev.data["usage"] = reported
    return reported

