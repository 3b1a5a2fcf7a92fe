"""Raw-Celery baselines of bench/concurrency.py and bench/fanout.py, nothing else.

Started as its own worker (``celery -A bench.celery_baseline worker -P threads``) on the
bench's Redis (``BENCH_REDIS_URL``, also the result backend chords need). ``bench.sleep``
records its start and end (epoch s) in a Redis list the bench reads; ``bench.noop`` and
``bench.done`` form a chord whose body pushes to a list the bench BLPOPs.
"""

from __future__ import annotations

import os
import time

import redis
from celery import Celery

QUEUE = "bench-baseline"
SLEEP_TASK = "bench.sleep"
NOOP_TASK = "bench.noop"
DONE_TASK = "bench.done"
URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")

# Chords need a result backend; the plain sleep baseline runs without one (as the engine).
BACKEND = URL if os.environ.get("BENCH_RESULT_BACKEND") == "1" else None
app = Celery("bench_baseline", broker=URL, backend=BACKEND, set_as_current=False)
app.conf.update(task_acks_late=True, worker_prefetch_multiplier=1, task_ignore_result=True,
                task_default_queue=QUEUE, worker_hijack_root_logger=False,
                broker_connection_retry_on_startup=True)
_client = redis.Redis.from_url(URL, decode_responses=True)


@app.task(name=SLEEP_TASK, ignore_result=True)
def sleep_task(key: str, delay_s: float) -> None:
    began = time.time()
    time.sleep(delay_s)
    _client.rpush(key, f"{began},{time.time()}")


@app.task(name=NOOP_TASK)
def noop_task() -> int:
    return 1


@app.task(name=DONE_TASK, ignore_result=True)
def done_task(results: list[int], key: str) -> None:
    _client.lpush(key, str(len(results)))
