"""What a test process writes to Redis, seen at the one place every command passes
(``AbstractConnection.send_packed_command``: a pipeline is one write)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from redis.asyncio.connection import AbstractConnection


@contextmanager
def redis_writes(seen: Callable[[Any, bool], None]) -> Iterator[None]:
    """Call ``seen(command, check_health)`` for each write to any asyncio Redis connection
    while the block runs (health-check PINGs are sent with ``check_health=False``)."""
    real = AbstractConnection.send_packed_command

    async def watched(self: AbstractConnection, command: Any, check_health: bool = True) -> None:
        seen(command, check_health)
        await real(self, command, check_health)

    AbstractConnection.send_packed_command = watched  # type: ignore[method-assign]
    try:
        yield
    finally:
        AbstractConnection.send_packed_command = real  # type: ignore[method-assign]


@contextmanager
def round_trips(calls: list[int]) -> Iterator[None]:
    """Append 1 to ``calls`` per round trip (one pipeline = one; health-check PINGs not counted)."""

    def seen(_: Any, check_health: bool) -> None:
        if check_health:
            calls.append(1)

    with redis_writes(seen):
        yield


@contextmanager
def bytes_written(sizes: list[int]) -> Iterator[None]:
    """Append the size of each write to ``sizes``."""

    def seen(command: Any, _: bool) -> None:
        chunks = [command] if isinstance(command, bytes | str) else list(command)
        sizes.append(sum(len(c) for c in chunks))

    with redis_writes(seen):
        yield
