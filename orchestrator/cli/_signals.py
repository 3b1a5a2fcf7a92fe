"""SIGTERM handled like Ctrl-C, so a command that started processes stops them.

Python's default SIGTERM ends the interpreter at once: no ``finally``, no ``with`` exit,
so an embedded redis-server and Celery workers (own process groups) would outlive the
command. Inside :func:`terminate_as_interrupt` SIGTERM raises :class:`Terminated` (a
``KeyboardInterrupt``) instead, which unwinds the ``ExitStack`` that owns them. uvicorn
installs its own handlers while it serves and re-raises the signal it caught once it has
shut down; that lands here too.

Raised from a signal handler, ``Terminated`` lands in whatever frame runs at that moment. In
an event loop that may be a background task's (a sweeper pass), whose cleanup then reports
a stray traceback. :func:`run_async` runs a coroutine the way ``asyncio.run`` handles Ctrl-C:
SIGTERM cancels the main task, whose ``finally`` and ``async with`` exits stop the
background tasks in order, and ``Terminated`` is raised once the loop has closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Coroutine, Iterator
from typing import Any, TypeVar

T = TypeVar("T")


class Terminated(KeyboardInterrupt):
    """SIGTERM arrived (``signum``); the exit code is ``128 + signum``."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _raise_terminated(signum: int, _frame: Any) -> None:
    raise Terminated(signum)


@contextlib.contextmanager
def terminate_as_interrupt() -> Iterator[None]:
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def interrupted_exit_code(exc: KeyboardInterrupt) -> int:
    """130 for Ctrl-C (SIGINT), 143 for SIGTERM: what a shell reports for either."""
    return 128 + exc.signum if isinstance(exc, Terminated) else 128 + signal.SIGINT


def run_async(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(main)``, with SIGTERM cancelling ``main`` and then raising
    :class:`Terminated` (a second SIGTERM while it unwinds raises at once)."""
    received: list[int] = []

    async def guarded() -> T:
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None

        def on_sigterm() -> None:
            received.append(signal.SIGTERM)
            loop.remove_signal_handler(signal.SIGTERM)
            signal.signal(signal.SIGTERM, _raise_terminated)  # a second one: no more patience
            task.cancel()

        loop.add_signal_handler(signal.SIGTERM, on_sigterm)
        try:
            return await main
        finally:
            if not received:
                loop.remove_signal_handler(signal.SIGTERM)

    previous = signal.getsignal(signal.SIGTERM)
    try:
        result = asyncio.run(guarded())
    except asyncio.CancelledError:
        if received:
            raise Terminated(signal.SIGTERM) from None
        raise
    finally:
        signal.signal(signal.SIGTERM, previous)
    if received:  # ``main`` ended on its own while it was being cancelled
        raise Terminated(signal.SIGTERM)
    return result
