"""Lanes: the broker queues node messages travel on, one per share of the workspaces.

A saturated cluster serves its broker queue first come, first served, so one workspace that
starts 5,000 runs would put 5,000 messages ahead of everyone else's. Lanes split that queue:
``Settings.lanes`` queues (``orchestrator``, ``orchestrator.1``, ... ``orchestrator.<n-1>``),
each workspace assigned its own (below), and every worker consumes all of them in turn (kombu's
Redis transport puts the queue it just took a message from at the end of its next ``BRPOP``;
on RabbitMQ each lane is a consumer with its own prefetch), so a flood waits in its own lane
while another workspace's messages are taken at once.

A message names only its run, whoever sends it (the start, a retry, a reschedule, a drain,
the sweeper's re-send, a child run, beat), so the lane is a pure function of the run id: a
run id starts with two hex digits, its **tag**, and its lane is that tag modulo the number
of lanes. A new run's tag is a lane assigned to its workspace (``orchestrator/store/lanes.py``:
the least-loaded lanes, so with no more active workspaces than lanes no two share one, and a
workspace of weight w has w lanes its runs take in turn), made by :func:`run_id_with_tag`;
when the assignment cannot be asked, its workspace's hash (``crc32(workspace) mod 256``,
:func:`new_run_id`). A tag is below 256 and taken modulo the lanes, so a change of
``ORCH_LANES`` still puts every message on an existing lane. A run id chosen by the caller
has the tag of its own hash, and a child run takes its parent's tag (:func:`tagged`). This
module imports nothing of Celery.
"""

from __future__ import annotations

import uuid

from orchestrator.store.lanes import hash_tag

NODE_QUEUE = "orchestrator"  # lane 0; lane i > 0 is "orchestrator.<i>"
TAG_CHARS = 2  # a run id's first two hex digits: its tag (its lane modulo ORCH_LANES)
_HEX = frozenset("0123456789abcdef")


def lane_queues(lanes: int) -> list[str]:
    """The names of ``lanes`` queues, lane 0 first."""
    if lanes < 1:
        raise ValueError(f"lanes must be at least 1 (ORCH_LANES), got {lanes}")
    return [NODE_QUEUE] + [f"{NODE_QUEUE}.{i}" for i in range(1, lanes)]


def new_run_id(workspace: str) -> str:
    """A fresh run id (32 hex digits, uuid4 entropy) of ``workspace``'s hash lane."""
    return run_id_with_tag(hash_tag(workspace))


def run_id_with_tag(tag: int) -> str:
    """A fresh run id (32 hex digits, uuid4 entropy) whose tag is ``tag`` (0-255): the lane
    ``tag mod lanes``."""
    if not 0 <= tag <= 0xFF:
        raise ValueError(f"a run id's tag is 0-255, got {tag}")
    return f"{tag:02x}" + uuid.uuid4().hex[TAG_CHARS:]


def run_tag(run_id: str) -> int:
    """The tag (0-255) of ``run_id``: its first two hex digits, else a hash of the whole id."""
    head = run_id[:TAG_CHARS]
    if len(head) == TAG_CHARS and set(head) <= _HEX:
        return int(head, 16)
    return hash_tag(run_id)


def tagged(parent_run_id: str, digest: str) -> str:
    """An id derived from ``digest`` (hex) in the lane of ``parent_run_id`` (a child run)."""
    return f"{run_tag(parent_run_id):02x}{digest[TAG_CHARS:]}"


def lane_of(run_id: str, lanes: int) -> int:
    """The lane (0 .. lanes-1) of ``run_id``."""
    return run_tag(run_id) % max(1, lanes)


def queue_for(run_id: str, lanes: int) -> str:
    """The broker queue ``run_id``'s node and drain messages travel on."""
    lane = lane_of(run_id, lanes)
    return NODE_QUEUE if lane == 0 else f"{NODE_QUEUE}.{lane}"
