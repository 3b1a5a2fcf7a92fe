"""GroupCommit (orchestrator/store/group_commit.py): what one loop iteration submits for a
key goes in one call, each submitter gets its own answer or the call's error."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from orchestrator.store import group_commit
from orchestrator.store.group_commit import GroupCommit


class Recorder:
    """A ``send`` that records each call and answers each item with its double."""

    def __init__(self, fail: Exception | None = None, short: bool = False) -> None:
        self.calls: list[tuple[str, list[int]]] = []
        self.fail, self.short = fail, short

    async def __call__(self, key: str, items: list[int]) -> list[Any]:
        self.calls.append((key, list(items)))
        await asyncio.sleep(0)  # answered later, as a reply from Redis is
        if self.fail is not None:
            raise self.fail
        return [2 * i for i in items][: len(items) - 1 if self.short else None]


async def test_one_iterations_items_for_a_key_go_in_one_call_and_each_gets_its_answer() -> None:
    send = Recorder()
    groups: GroupCommit[str, int] = GroupCommit(send)
    answers = await asyncio.gather(*(groups.submit("run-1", i) for i in range(5)),
                                   groups.submit("run-2", 7))
    assert answers == [0, 2, 4, 6, 8, 14]
    assert send.calls == [("run-1", [0, 1, 2, 3, 4]), ("run-2", [7])]


async def test_items_of_later_iterations_go_in_later_calls() -> None:
    send = Recorder()
    groups: GroupCommit[str, int] = GroupCommit(send)
    assert await groups.submit("run", 1) == 2
    assert await groups.submit("run", 2) == 4
    assert send.calls == [("run", [1]), ("run", [2])]


async def test_a_full_group_goes_at_once_and_the_rest_in_the_next_call() -> None:
    send = Recorder()
    groups: GroupCommit[str, int] = GroupCommit(send)
    count = group_commit.MAX_ITEMS + 3
    answers = await asyncio.gather(*(groups.submit("run", i) for i in range(count)))
    assert answers == [2 * i for i in range(count)]
    assert [len(items) for _, items in send.calls] == [group_commit.MAX_ITEMS, 3]


async def test_a_group_goes_at_once_when_its_items_reach_the_size_bound() -> None:
    send = Recorder()
    groups: GroupCommit[str, int] = GroupCommit(send, size=lambda i: group_commit.MAX_SIZE // 2 if i >= 10 else 1)
    answers = await asyncio.gather(*(groups.submit("run", i) for i in (1, 2, 10, 11, 3, 12, 13)))
    assert answers == [2, 4, 20, 22, 6, 24, 26]
    assert [items for _, items in send.calls] == [[1, 2, 10, 11], [3, 12, 13]]


@pytest.mark.parametrize("send", [Recorder(fail=ConnectionError("reset")), Recorder(short=True)],
                         ids=["raises", "answers-short"])
async def test_a_failed_call_fails_every_item_in_it(send: Recorder) -> None:
    groups: GroupCommit[str, int] = GroupCommit(send)
    results = await asyncio.gather(*(groups.submit("run", i) for i in range(3)), return_exceptions=True)
    assert all(isinstance(r, ConnectionError | RuntimeError) for r in results), results
    if send.short:
        assert "answered 2 of its 3 items" in str(results[0])


async def test_a_cancelled_submitter_leaves_the_others_their_answers() -> None:
    send = Recorder()
    groups: GroupCommit[str, int] = GroupCommit(send)
    first, second = groups.submit("run", 1), groups.submit("run", 2)
    first.cancel()
    assert await second == 4
    assert send.calls == [("run", [1, 2])]  # sent all the same: it may already be applied
