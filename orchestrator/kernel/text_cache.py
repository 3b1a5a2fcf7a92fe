"""A least-recently-used cache keyed by text and bounded by the length of that text.

``functools.lru_cache`` bounds the *number* of entries, not their size: 4,096 distinct
texts of 2 MB each stay in memory (gigabytes, with what was computed from them). This
cache keeps only texts up to ``max_key_chars`` and evicts the least recently used entries
once the keys it holds add up to more than ``max_total_chars`` (or it holds more than
``max_entries``), so its memory is bounded by a few times ``max_total_chars`` whatever it
is asked. Longer texts are computed every time and never kept. Safe to use from several
threads (the kernel evaluates in worker threads as well as on the event loop).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

V = TypeVar("V")


class TextCache(Generic[V]):
    """``get(text)``: ``compute(text)``, remembered when ``text`` is short enough."""

    def __init__(self, compute: Callable[[str], V], *, max_key_chars: int, max_total_chars: int,
                 max_entries: int) -> None:
        self._compute = compute
        self.max_key_chars = max_key_chars
        self.max_total_chars = max_total_chars
        self.max_entries = max_entries
        self._entries: OrderedDict[str, V] = OrderedDict()
        self._chars = 0
        self._lock = threading.Lock()

    def get(self, text: str) -> V:
        if len(text) > self.max_key_chars:
            return self._compute(text)
        with self._lock:
            if text in self._entries:
                self._entries.move_to_end(text)
                return self._entries[text]
        value = self._compute(text)  # outside the lock: a slow computation blocks no one
        with self._lock:
            if text not in self._entries:
                self._entries[text] = value
                self._chars += len(text)
                while self._chars > self.max_total_chars or len(self._entries) > self.max_entries:
                    old, _ = self._entries.popitem(last=False)
                    self._chars -= len(old)
        return value

    @property
    def total_chars(self) -> int:
        """The length of every text held now."""
        return self._chars

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._chars = 0
