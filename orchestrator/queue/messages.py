"""Node task messages built from a template, for a Redis broker: what Celery's
``send_task`` and kombu's Redis transport would put on the node queue, without them
(drain messages too: the same envelope for task ``orchestrator.drain``, arguments
``(run_id[, hops][, plan])`` and a fresh task id each, as ``dispatch.send_drains`` sends them).

A node task message is always the same but for its ids: task ``orchestrator.node``,
arguments ``(run_id, node_id)`` (and the run's plan reference, when the sender knows it:
``orchestrator/store/plan_refs.py``), task id ``"{run_id}:{node_id}"``, queue
``orchestrator``, no countdown. Through Celery, one message costs ~0.3 ms of Python
(``as_task_v2``, the argument repr, kombu's serializer, ``prepare_message``, the
transport's routing, a producer from the pool); here the fixed parts are encoded once
per process and a message is a few string joins, so starting a run does not pay a
library's generality for it.

The message is Celery's protocol v2 as kombu's Redis transport stores it (a JSON
envelope: ``body`` base64 of ``[args, kwargs, embed]``, ``headers``, ``properties``
with ``delivery_info`` and a fresh ``delivery_tag``), so workers consume it unchanged;
``tests/queue/test_messages.py`` compares it with one Celery publishes. A RabbitMQ
broker, a delayed message (a retry) and a traced process (OpenTelemetry's Celery
instrumentation puts the trace context in the headers) go through Celery instead
(``orchestrator/queue/dispatch.py``).
"""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Sequence
from urllib.parse import parse_qs, urlsplit

from celery.utils.nodenames import anon_nodename

from orchestrator.queue.app import DRAIN_TASK, NODE_QUEUE, NODE_TASK

_EMBED = '{"callbacks": null, "errbacks": null, "chain": null, "chord": null}'


def redis_url_of(broker_url: str) -> str | None:
    """A redis-py URL for a kombu Redis broker URL, or None when the broker is not a plain
    Redis one (RabbitMQ, Sentinel, options redis-py would not read the same way)."""
    parts = urlsplit(broker_url)
    if parts.scheme in ("redis", "rediss") and not parts.query:
        return broker_url
    if parts.scheme == "redis+socket":
        query = parse_qs(parts.query)
        if set(query) - {"virtual_host"}:
            return None
        return f"unix://{parts.path}?db={query.get('virtual_host', ['0'])[0] or '0'}"
    return None


class NodeMessages:
    """Encodes the node task message of ``(run_id, node_id)``, and a run's drain messages
    (see the module docstring)."""

    def __init__(self, queue: str = NODE_QUEUE) -> None:
        self.queue = queue
        origin = anon_nodename()
        # Celery's reply_to is a per-thread id for results; node tasks send none back.
        properties: dict[str, object] = {"reply_to": str(uuid.uuid4()), "delivery_mode": 2,
                      "delivery_info": {"exchange": "", "routing_key": queue}, "priority": 0,
                      "body_encoding": "base64"}
        self._heads = {task: _head(task, origin) for task in (NODE_TASK, DRAIN_TASK)}
        self._properties = json.dumps(properties)[:-1]

    def encode(self, run_id: str, node_id: str, plan: str = "") -> str:
        """The envelope kombu's Redis transport would LPUSH for this node task (``plan``:
        the run's plan reference, a third argument when given)."""
        args = (run_id, node_id, plan) if plan else (run_id, node_id)
        return self._message(NODE_TASK, f"{run_id}:{node_id}", args)

    def encode_drains(self, run_id: str, count: int, hops: int = 0, plan: str = "") -> list[str]:
        """``count`` drain messages of ``run_id``, with the arguments ``send_drains`` gives
        them (``hops``, ``plan``: see there)."""
        args = drain_args(run_id, hops, plan)
        return [self._message(DRAIN_TASK, str(uuid.uuid4()), args) for _ in range(count)]

    def _message(self, task_name: str, task_id: str, args: tuple[str | int, ...]) -> str:
        ids = json.dumps(args)
        task = json.dumps(task_id)
        body = base64.b64encode(f"[{ids}, {{}}, {_EMBED}]".encode()).decode()
        argsrepr = json.dumps(repr(args))
        return (f'{self._heads[task_name]}, "id": {task}, "root_id": {task}, "argsrepr": {argsrepr}}}, '
                f'"properties": {self._properties}, "correlation_id": {task}, '
                f'"delivery_tag": "{uuid.uuid4()}"}}, "body": "{body}"}}')

    def encode_all(self, run_id: str, node_ids: Sequence[str], plan: str = "") -> list[str]:
        """The messages of ``node_ids`` in the order a worker should take them: kombu's
        workers pop from the list's tail, so the first node is pushed first."""
        return [self.encode(run_id, node_id, plan) for node_id in node_ids]


def drain_args(run_id: str, hops: int, plan: str) -> tuple[str | int, ...]:
    """A drain task's arguments: ``(run_id[, hops][, plan])``, the trailing defaults left out."""
    return (run_id, hops, plan) if plan else (run_id, hops) if hops else (run_id,)


def _head(task_name: str, origin: str) -> str:
    """A message's JSON up to its headers' ids: everything fixed for ``task_name``."""
    headers: dict[str, object] = {
        "lang": "py", "task": task_name, "shadow": None, "eta": None, "expires": None, "group": None,
        "group_index": None, "retries": 0, "timelimit": [None, None], "parent_id": None, "kwargsrepr": "{}",
        "origin": origin, "ignore_result": None, "replaced_task_nesting": 0, "stamped_headers": None,
        "stamps": {}}
    return '{"content-encoding": "utf-8", "content-type": "application/json", "headers": ' + json.dumps(headers)[:-1]
