"""Group commit: the calls one loop iteration makes for the same key go as one.

A fan-out's branches run on one worker's loop; each completes with a script call of its
own, and most of what such a call costs Redis is fixed: parsing the call, building its
``KEYS`` and ``ARGV`` tables, the prelude's closures and their garbage (``redis_cost.py``'s
``call_floor``: about 207,000 instructions, a third of what a fan-out branch's completion
cost in all). :class:`GroupCommit` collects the items submitted for one key until
the end of the loop iteration (``call_soon``, as the command stream ends a write,
``batching.py``) and sends them with one call of ``send``, which answers each item in
order; each submitter awaits its own answer. A failed call fails every item in it, as a
connection lost under a pipeline does: the store's scripts are made to be sent again
(a completion seen twice changes nothing more). A group goes at once when it holds
``MAX_ITEMS`` items or ``MAX_SIZE`` of their ``size`` (a completion's texts: its outputs
may be megabytes each), so that one call never holds Redis (single-threaded: every other
client waits) much longer than its items would one by one.

Why not in the command stream: the stream writes commands as they are queued, knowing
nothing of what they do; only the store knows which of its calls may go together (the
same run's completions, one script that applies them in order, `lua/complete.lua`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

MAX_ITEMS = 64  # items per call; a larger burst goes as several calls
MAX_SIZE = 1 << 20  # a group whose items' sizes add up to this goes at once

K = TypeVar("K", bound=Hashable)
Item = TypeVar("Item")


@dataclass
class _Group(Generic[Item]):
    """The items one call will send, their submitters' futures and their size."""

    items: list[Item] = field(default_factory=list)
    futures: list[asyncio.Future[Any]] = field(default_factory=list)
    size: int = 0


class GroupCommit(Generic[K, Item]):
    """Send the items submitted for one key within a loop iteration in one call of
    ``send(key, items)``, which returns one answer per item, in order; ``size`` weighs an
    item against ``MAX_SIZE``."""

    def __init__(self, send: Callable[[K, list[Item]], Awaitable[Sequence[Any]]],
                 size: Callable[[Item], int] = lambda _: 0) -> None:
        self._send, self._size = send, size
        self._open: dict[K, _Group[Item]] = {}
        self._calls: set[asyncio.Task[None]] = set()

    def submit(self, key: K, item: Item) -> asyncio.Future[Any]:
        """Queue ``item`` under ``key``; its future gets its answer (or the call's error)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        group = self._open.get(key)
        if group is None:
            group = self._open[key] = _Group()
            loop.call_soon(self._close, key, group)
        group.items.append(item)
        group.futures.append(future)
        group.size += self._size(item)
        if len(group.items) >= MAX_ITEMS or group.size >= MAX_SIZE:
            self._close(key, group)
        return future

    def _close(self, key: K, group: _Group[Item]) -> None:
        """Send ``group`` (once: closed when full, and again at the iteration's end)."""
        if self._open.get(key) is not group:
            return
        del self._open[key]
        call = asyncio.ensure_future(self._call(key, group.items, group.futures))
        self._calls.add(call)
        call.add_done_callback(self._calls.discard)

    async def _call(self, key: K, items: list[Item], futures: list[asyncio.Future[Any]]) -> None:
        try:
            answers = await self._send(key, items)
            if len(answers) != len(items):
                raise RuntimeError(f"a group call answered {len(answers)} of its {len(items)} items")
        except asyncio.CancelledError:
            for future in futures:
                future.cancel()
            raise
        except Exception as exc:  # every item's caller gets it (a cancelled caller is done already)
            for future in futures:
                if not future.done():
                    future.set_exception(exc)
            return
        for future, answer in zip(futures, answers, strict=True):
            if not future.done():
                future.set_result(answer)
