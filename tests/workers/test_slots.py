"""A worker process's node slots: completions that overlap never promise the same free
slot twice, and every promised slot comes back (unit tests of ``workers.process_state``)."""

from __future__ import annotations

from workers.process_state import Handover, Slots


def test_overlapping_completions_never_promise_the_same_free_slot_twice() -> None:
    slots = Slots(10)
    slots.enter()
    slots.enter()  # two steps running, eight slots free
    first, second = Handover(slots), Handover(slots)
    # both ask the store at once (their completions go out in one pipeline)
    assert first.take(20) == 9  # its own slot and the eight free ones
    assert second.take(20) == 1  # only its own: the free ones are promised to the first
    first.settle(9)
    second.settle(1)
    assert slots.in_flight == 10 == slots.capacity  # not 2 + 8 + 8


def test_overlapping_fan_outs_each_reserve_what_they_may_make_ready_not_every_free_slot() -> None:
    slots = Slots(100)
    slots.enter()
    slots.enter()  # two triggers of fan-outs of 40 complete at once, 98 slots free
    first, second = Handover(slots, backlog=5), Handover(slots, backlog=5)
    assert first.take(40) == 40  # its own slot and 39 free ones
    assert second.take(40) == 40  # the first left it enough
    leaf = Handover(slots, backlog=5)
    assert leaf.take(0) == 6  # a completion that readies nothing may take older queued nodes
    assert slots.free() == 100 - 2 - 39 - 39 - 5


def test_slots_a_completion_does_not_use_are_given_back() -> None:
    slots = Slots(10)
    slots.enter()
    handover = Handover(slots, backlog=25)
    assert handover.take() == 10
    handover.settle(3)  # the run's queue held three
    assert slots.in_flight == 3 and slots.free() == 7
    Handover(slots).settle(0)  # a step that took nothing (failed, or a leaf) frees its own
    assert slots.in_flight == 2


def test_nodes_handed_on_without_a_take_are_counted() -> None:
    slots = Slots(4)
    slots.enter()
    Handover(slots).settle(3)  # a redelivered step's undispatched successors
    assert slots.in_flight == 3


def test_a_drain_with_no_free_slot_reserves_nothing_and_one_later_reserves_what_it_sees() -> None:
    slots = Slots(2)
    slots.enter()
    slots.enter()
    assert slots.reserve_free() == 0  # the drain returns at once: its pool thread is not held
    slots.release()
    assert slots.reserve_free() == 1
    assert slots.free() == 0  # reserved for that drain: a concurrent one sees none
