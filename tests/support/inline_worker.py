"""Run what an in-process API dispatched, on the test's loop, as a worker would.

``tests/api``'s apps record the node tasks they dispatch instead of sending them
(``Api.dispatched``). :func:`drain` runs each with the real step function, the real run
store and the environment a worker builds (its ``NodeHost`` per run), and the
successors that became ready after it, until nothing is left: deterministic, no Celery,
no other process. Attacks that go through the API (a graph saved and run with one
workspace's key) then reach the real node executors.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from orchestrator.host.node_host import HostFactory
from orchestrator.kernel.environment import StepEnvironment
from orchestrator.kernel.local import run_nested
from orchestrator.kernel.registry import Registry
from orchestrator.kernel.step import run_step
from orchestrator.settings import Settings

MAX_STEPS = 200  # a drain that runs more steps than this is a bug in the test


@cache
def repo_registry() -> Registry:
    """The repository's node types, as a worker loads them (once per test process)."""
    from orchestrator.service.plugins import load_registry

    return load_registry(Settings())


async def drain(api: Any, registry: Registry) -> int:
    """Run every dispatched node step and its successors; the number of steps run."""
    env = StepEnvironment(store=api.store, registry=registry, worker_id="inline",
                          host_for=HostFactory(api.settings, api.settings.redis_url), subgraphs=run_nested)
    steps = 0
    while api.dispatched:
        run_id, node_ids = api.dispatched.pop(0)
        for node_id in node_ids:
            steps += 1
            assert steps <= MAX_STEPS, f"run {run_id} did not settle within {MAX_STEPS} steps"
            outcome = await run_step(env, run_id, node_id)
            if outcome.ready:
                await api.store.mark_dispatched(run_id, outcome.ready)
                api.dispatched.append((run_id, list(outcome.ready)))
    return steps
