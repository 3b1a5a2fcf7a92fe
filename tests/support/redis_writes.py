"""What a test process writes to Redis, seen where commands are written: any asyncio
connection's ``send_packed_command`` (a pipeline is one write), and the writes of
the batchers' own connections (``store/batching.py``: one write per chunk of commands)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from redis.asyncio.connection import AbstractConnection

from orchestrator.store.batching import Stream


@contextmanager
def redis_writes(seen: Callable[[Any, bool], None]) -> Iterator[None]:
    """Call ``seen(command, check_health)`` for each write to any asyncio Redis connection
    while the block runs (health-check PINGs are sent with ``check_health=False``)."""
    real = AbstractConnection.send_packed_command
    real_stream = Stream.write

    async def watched(self: AbstractConnection, command: Any, check_health: bool = True) -> None:
        seen(command, check_health)
        await real(self, command, check_health)

    def streamed(conn: Any, packed: list[bytes]) -> None:  # a batcher's own connection (store/batching.py)
        seen(packed, True)
        real_stream(conn, packed)

    AbstractConnection.send_packed_command = watched  # type: ignore[method-assign]
    Stream.write = staticmethod(streamed)  # type: ignore[method-assign,assignment]
    try:
        yield
    finally:
        AbstractConnection.send_packed_command = real  # type: ignore[method-assign]
        Stream.write = staticmethod(real_stream)  # type: ignore[method-assign,assignment]


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
