"""A node's execution, and its own events on their way to its run's log
(``RunStore.append_events``).

:func:`drive` calls an executor: a synchronous one in the loop's thread pool, an async
one on the loop, and an async generator's events, as it yields them, to the step's sink.

A node streams events while it runs: the deltas of a text it generates, a long task's progress.
Each used to go to the store in a call of its own, awaited before the node went on: a
script call per event, and a node that streamed faster than a round trip waited on Redis
at every event. :class:`EventStream` keeps at most one call in flight per node execution;
what the node emits meanwhile waits, in order, and goes with the next call. A burst then
costs a call per round trip, not one per event, and a node that streams slower than a
round trip still sends each event at once. Order holds: one call at a time, in the order
emitted. Past ``MAX_WAITING`` waiting events the node waits for the calls to catch up (the
back-pressure the awaited call gave).

A failed call (a storage budget refusing the events' bytes, a lost connection) fails the
node: it is raised at the node's next emit, or at :meth:`EventStream.flush`, which its
step awaits when the executor returns, before the node's completion is stored, so the
node's streamed events come before its ``completed`` event. On every other way out
(the executor raised, the node waits or is cancelled) the step still waits for what was
emitted (:meth:`EventStream.settle`) before it stores anything.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Sequence
from typing import Any, Protocol

from orchestrator.kernel.protocol import DataValue, ExecutionResult, FlowContext, NodeEvent

log = logging.getLogger(__name__)

MAX_WAITING = 256  # events a node may emit ahead of the call in flight before it waits


class Appends(Protocol):
    """What a stream appends to: ``RunStore.append_events``."""

    async def append_events(self, events: Sequence[NodeEvent], *, token: int | None = None) -> list[str]: ...


class EventStream:
    """One node execution's events, appended to ``store`` under its claim's ``token`` in
    order, with at most one call in flight."""

    def __init__(self, store: Appends, token: int | None) -> None:
        self._store, self._token = store, token
        self._waiting: list[NodeEvent] = []
        self._call: asyncio.Task[None] | None = None
        self._error: Exception | None = None

    @property
    def unsettled(self) -> bool:
        """A call is in flight, or one failed: :meth:`flush` has something to wait for or
        raise (a node that streamed nothing costs its step no await)."""
        return self._call is not None or self._error is not None

    async def emit(self, event: NodeEvent) -> None:
        """Queue ``event``; it goes now, or with the next call if one is in flight."""
        if self._error is not None:
            raise self._error
        self._waiting.append(event)
        if self._call is None:
            self._call = asyncio.ensure_future(self._send())
        elif len(self._waiting) >= MAX_WAITING:
            await self.flush()

    async def flush(self) -> None:
        """Wait until every event emitted so far is stored; raise the error of a failed call."""
        while self._call is not None:
            await asyncio.shield(self._call)
        if self._error is not None:
            raise self._error

    async def settle(self) -> None:
        """:meth:`flush`, for a node that ends another way: a failed call is logged, not raised."""
        try:
            await self.flush()
        except Exception as exc:  # the node already ends with an error of its own
            log.warning("a node's streamed events were not all stored: %s", exc)

    async def _send(self) -> None:
        try:
            while self._waiting:
                batch, self._waiting = self._waiting, []
                await self._store.append_events(batch, token=self._token)
        except Exception as exc:
            self._error, self._waiting = exc, []
        finally:
            self._call = None


_ON_LOOP: dict[Any, bool] = {}  # an execute function -> whether it is async (asked per step, answered once)
_ON_LOOP_MAX = 1024


def _runs_on_loop(execute: Any) -> bool:
    """Whether ``execute`` is a coroutine or async generator function, kept per function
    (``inspect`` takes ~2 us to tell, and every step asks)."""
    func = getattr(execute, "__func__", execute)  # a bound method: its function
    try:
        return _ON_LOOP[func]
    except (KeyError, TypeError):  # not known yet, or not hashable (asked every time)
        pass
    on_loop = inspect.iscoroutinefunction(execute) or inspect.isasyncgenfunction(execute)
    try:
        if len(_ON_LOOP) >= _ON_LOOP_MAX:
            _ON_LOOP.clear()
        _ON_LOOP[func] = on_loop
    except TypeError:
        pass
    return on_loop


async def drive(executor: Any, data: dict[str, Any], inputs: dict[str, DataValue],
                 ctx: FlowContext, sink: Any) -> ExecutionResult:
    """Call execute; stream events of an async generator to ``sink`` as they come.

    A synchronous ``execute`` (neither a coroutine nor an async generator function) runs in
    the loop's default executor, a bounded thread pool, so its CPU or blocking work never
    stalls the other steps on the loop."""
    execute = executor.execute
    if _runs_on_loop(execute):
        produced = execute(data, inputs, ctx)
    else:
        produced = await asyncio.get_running_loop().run_in_executor(None, execute, data, inputs, ctx)
    if inspect.isasyncgen(produced):
        result: ExecutionResult | None = None
        try:
            async for item in produced:
                if isinstance(item, ExecutionResult):
                    result = item
                elif isinstance(item, NodeEvent):
                    await sink(item)
                else:
                    raise TypeError(f"execute yielded {type(item).__name__}; expected NodeEvent or ExecutionResult")
        finally:
            await produced.aclose()  # a cancelled or failed stream closes its resources now
        if result is None:
            raise TypeError("execute stream ended without an ExecutionResult")
        return result
    if inspect.isawaitable(produced):
        produced = await produced
    if not isinstance(produced, ExecutionResult):
        raise TypeError(f"execute returned {type(produced).__name__}; expected ExecutionResult")
    return produced
