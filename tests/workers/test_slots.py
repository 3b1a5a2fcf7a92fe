"""A worker process's node slots: completions that overlap never promise the same free
slot twice, and every promised slot comes back (unit tests of ``workers.process_state``)."""

from __future__ import annotations

from workers.process_state import Handover, Slots


def test_overlapping_completions_share_the_free_slots_instead_of_each_taking_them_all() -> None:
    slots = Slots(10)
    slots.enter()
    slots.enter()  # two steps running, eight slots free
    first, second = Handover(slots), Handover(slots)
    # both ask the store at once (their completions go out in one pipeline)
    assert first.take() == 9  # its own slot and the eight free ones
    assert second.take() == 1  # only its own: the free ones are promised to the first
    first.settle(9)
    second.settle(1)
    assert slots.in_flight == 10 == slots.capacity  # not 2 + 8 + 8


def test_slots_a_completion_does_not_use_are_given_back() -> None:
    slots = Slots(10)
    slots.enter()
    handover = Handover(slots)
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
