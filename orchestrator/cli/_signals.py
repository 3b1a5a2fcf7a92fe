"""SIGTERM handled like Ctrl-C, so a command that started processes stops them.

Python's default SIGTERM ends the interpreter at once: no ``finally``, no ``with`` exit,
so an embedded redis-server and Celery workers (own process groups) would outlive the
command. Inside :func:`terminate_as_interrupt` SIGTERM raises :class:`Terminated` (a
``KeyboardInterrupt``) instead, which unwinds the ``ExitStack`` that owns them. uvicorn
installs its own handlers while it serves and re-raises the signal it caught once it has
shut down; that lands here too.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
from typing import Any


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
