"""A bounded number of slots per event loop, for work that holds a scarce resource.

A worker process runs one event loop, so slots per loop are slots per process; tests that
start a loop per test get fresh slots each. The size is read (from settings) when a
loop first asks, so a test can change it before its loop starts.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable


class LoopSlots:
    """``slots()``: the running loop's ``asyncio.Semaphore`` of ``size()`` slots."""

    def __init__(self, size: Callable[[], int]) -> None:
        self._size = size
        self._by_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = (
            weakref.WeakKeyDictionary())

    def __call__(self) -> asyncio.Semaphore:
        loop = asyncio.get_running_loop()
        slots = self._by_loop.get(loop)
        if slots is None:
            slots = self._by_loop[loop] = asyncio.Semaphore(max(1, self._size()))
        return slots
