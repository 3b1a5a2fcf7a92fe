"""A bounded number of slots per event loop, for work that holds a scarce resource.

A worker process runs one event loop, so slots per loop are slots per process; tests that
start a loop per test get fresh slots each. The size is the one the caller passes (from
the settings its host carries) when a loop first asks, so a test can change it before its
loop starts.
"""

from __future__ import annotations

import asyncio
import weakref


class LoopSlots:
    """``slots(size)``: the running loop's ``asyncio.Semaphore``, of ``size`` slots when the
    loop first asks (later sizes are ignored: one process, one setting)."""

    def __init__(self) -> None:
        self._by_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = (
            weakref.WeakKeyDictionary())

    def __call__(self, size: int) -> asyncio.Semaphore:
        loop = asyncio.get_running_loop()
        slots = self._by_loop.get(loop)
        if slots is None:
            slots = self._by_loop[loop] = asyncio.Semaphore(max(1, size))
        return slots
