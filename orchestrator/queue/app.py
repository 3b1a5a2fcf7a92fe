"""The Celery application: broker settings that survive a worker dying mid-node.

``make_celery(url, settings)`` configures an app from the settings it is given (``REDIS_URL`` /
``ORCH_REDIS_URL`` is the broker; there is no result backend: node outputs live in the
run store, never in Celery results); ``url`` may name another Redis than the settings'
(the CLI's embedded server, the bench). The
worker process's own instance, with the node tasks registered, is ``workers.app``.

``Settings.broker_url`` (``ORCH_BROKER_URL``) moves the broker off the state Redis: an
``amqp://`` URL puts node messages on RabbitMQ, in one durable quorum queue (replicated,
the queue type RabbitMQ recommends for work that must not be lost), with publisher confirms
(a publish returns once the broker has the message) and Celery's native delayed delivery for
retries (a delayed message waits in RabbitMQ, not in a worker's memory). Everything else
below holds on both brokers; RabbitMQ adds real acknowledgements: a killed worker's channel
closes and the broker redelivers its unacked messages at once (the claim refuses a copy while
a live lease holds the node). RabbitMQ's ``consumer_timeout`` (30 min by default) must be
above the longest node, since a message stays unacked while its node runs
(deploy/rabbitmq/rabbitmq.conf).

Settings and why (measured in notes/celery-redis.md §2):

* ``task_acks_late`` + ``task_reject_on_worker_lost``: a pool child killed mid-node puts
  the message back instead of failing it; execution is at-least-once and the run store
  makes completion exactly-once in effect.
* ``worker_prefetch_multiplier=1``: a busy worker does not sit on messages another could
  run (and reserved messages are not redelivered by the visibility sweep).
* ``visibility_timeout`` (``Settings.visibility_timeout_s``, 24 h) far above any node,
  retry delay and clock skew: kombu compares it with each worker's own clock, so a worker
  whose clock runs ahead would redeliver early a message another worker still runs. The
  sweeper (``orchestrator/service/sweeper.py``), on Redis's clock, is the path that sends lost work
  again; what kombu redelivers anyway is refused by the claim (a live lease answers busy).
  Its sweep runs every ``unacked_restore_interval_s`` instead of kombu's ~100 s (interval
  10 x throttle 10), for the rare message it does restore.
"""

from __future__ import annotations

from collections.abc import Sequence
from urllib.parse import parse_qs, urlsplit

from celery import Celery
from kombu import Exchange, Queue

from orchestrator.kernel.errors import OrchestratorError
from orchestrator.queue.lanes import NODE_QUEUE, lane_queues
from orchestrator.settings import WorkerSettings
from orchestrator.settings.store import broker_problem

__all__ = ["NODE_QUEUE", "configure", "is_amqp", "lanes_of", "make_celery"]

LANES_CONF = "orchestrator_lanes"  # app.conf key: how many lanes (queue/lanes.py) this app sends on
NODE_TASK = "orchestrator.node"  # task name: (run_id, node_id)
DRAIN_TASK = "orchestrator.drain"  # task name: (run_id,): run queued nodes of the run in free slots
NOOP_TASK = "orchestrator.noop"  # a no-op for the raw-Celery baseline in bench/
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
READY_FILE_ENV = "ORCH_WORKER_READY_FILE"  # a worker touches this file once it consumes


def broker_url(redis_url: str) -> str:
    """The Celery broker URL for a redis-py URL (``unix://`` becomes ``redis+socket://``)."""
    parts = urlsplit(redis_url)
    if parts.scheme != "unix":
        return redis_url
    db = parse_qs(parts.query).get("db", ["0"])[0]
    return f"redis+socket://{parts.path}?virtual_host={db}"


AMQP_SCHEMES = frozenset({"amqp", "amqps", "pyamqp"})


def is_amqp(url: str) -> bool:
    """Whether ``url`` names a RabbitMQ (AMQP 0.9.1) broker."""
    return urlsplit(url).scheme in AMQP_SCHEMES


def configure(app: Celery, redis_url: str, settings: WorkerSettings) -> None:
    """Apply the project's broker and worker settings to ``app``: the broker is
    ``settings.broker_url`` when set, else the Redis of ``redis_url``."""
    problem = broker_problem(redis_url, settings.broker_url)
    if problem:
        raise OrchestratorError(problem)
    if settings.broker_url and is_amqp(settings.broker_url):
        _configure_amqp(app, settings.broker_url, settings.lanes)
        return
    if settings.broker_url:
        redis_url = settings.broker_url
    # One queue per lane; a worker with no -Q consumes them all, rotating between them.
    queues = [Queue(name, Exchange(name), routing_key=name) for name in lane_queues(settings.lanes)]
    app.conf.update(
        task_queues=queues,
        **{LANES_CONF: settings.lanes},
        broker_url=broker_url(redis_url),
        result_backend=None,
        task_ignore_result=True,
        task_serializer="json",
        accept_content=["json"],
        task_default_queue=NODE_QUEUE,
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        worker_hijack_root_logger=False,
        worker_redirect_stdouts=False,
        broker_connection_retry_on_startup=True,
        broker_transport_options={
            "visibility_timeout": settings.visibility_timeout_s,
            "unacked_restore_interval": max(1, round(settings.unacked_restore_interval_s)),
            # 1: every tick scans (kombu's default 10 makes the sweep ~10x the interval)
            "unacked_restore_throttle": 1,
        },
        task_routes={name: {"queue": NODE_QUEUE} for name in (NODE_TASK, DRAIN_TASK, NOOP_TASK)},
    )


def _configure_amqp(app: Celery, url: str, lanes: int) -> None:
    """RabbitMQ: each lane is a durable quorum queue bound by its name to one topic exchange
    (Celery's native delayed delivery, which retries need, refuses direct exchanges, and
    binds every queue of ``task_queues`` to its delay exchanges by routing key). A worker
    consumes each lane with its own prefetch (per-consumer QoS): a flooded lane holds at
    most that many of the worker's messages, never the turn of another lane."""
    exchange = Exchange(NODE_QUEUE, type="topic", durable=True)
    queues = [Queue(name, exchange, routing_key=name, durable=True, queue_arguments={"x-queue-type": "quorum"})
              for name in lane_queues(lanes)]
    app.conf.update(
        **{LANES_CONF: lanes},
        broker_url=url,
        result_backend=None,
        task_ignore_result=True,
        task_serializer="json",
        accept_content=["json"],
        task_queues=queues,
        task_default_queue=NODE_QUEUE,
        task_default_exchange=NODE_QUEUE,
        task_default_exchange_type="topic",
        task_default_routing_key=NODE_QUEUE,
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        worker_detect_quorum_queues=True,  # per-consumer prefetch: quorum queues refuse global QoS
        worker_hijack_root_logger=False,
        worker_redirect_stdouts=False,
        broker_connection_retry_on_startup=True,
        broker_transport_options={"confirm_publish": True},
        task_routes={name: {"queue": NODE_QUEUE} for name in (NODE_TASK, DRAIN_TASK, NOOP_TASK)},
    )


def lanes_of(app: Celery) -> int:
    """How many lanes ``app`` sends on (1 for an app this module did not configure)."""
    return int(app.conf.get(LANES_CONF) or 1)


def make_celery(redis_url: str | None, settings: WorkerSettings, include: Sequence[str] = ()) -> Celery:
    """A configured Celery app for ``redis_url`` (None: the default local Redis). Processes
    other than workers only send tasks by name; the worker face (``workers.app``) names its
    task modules in ``include``, which a worker imports at start."""
    app = Celery("orchestrator", set_as_current=False, include=list(include) or None)
    configure(app, redis_url or DEFAULT_REDIS_URL, settings)
    return app

