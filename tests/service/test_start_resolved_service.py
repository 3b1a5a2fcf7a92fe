"""The service's start (``runs.start_run`` / ``start_stored``): a trigger is resolved at
start within the starting process's bounds, and left to its step past them."""

from __future__ import annotations

from orchestrator.kernel.memory import MemoryStore
from orchestrator.service.runs import START_OUTPUT_BYTES, RunRequest, start_run, starting_for
from orchestrator.settings import Settings
from tests.fake_nodes import graph
from tests.support.inline_worker import repo_registry

REGISTRY = repo_registry()
G = graph([("t", "manual_trigger", "Start"), ("s", "set_fields", "Set", {"fields": {"k": 1}})],
          [("t", "output", "s", "input")])


async def start(run_input: object) -> tuple[MemoryStore, str, list[list[str]]]:
    store, sent = MemoryStore(), list[list[str]]()
    request = RunRequest(run_input, starting=starting_for(REGISTRY, Settings()))
    run_id = await start_run(store, REGISTRY, G, request, dispatch=lambda run_id, nodes: sent.append(nodes))
    return store, run_id, sent


async def test_a_small_input_is_resolved_at_start_and_a_large_one_left_to_the_step() -> None:
    store, run_id, sent = await start({"text": "x" * 100})
    assert sent == [["s"]] and (await store.node_states(run_id))["t"] == "succeeded"
    store, run_id, sent = await start({"text": "x" * (START_OUTPUT_BYTES + 1)})
    assert sent == [["t"]] and (await store.node_states(run_id))["t"] == "pending"


def test_one_starting_per_registry_and_settings() -> None:
    settings = Settings()
    assert starting_for(REGISTRY, settings) is starting_for(REGISTRY, settings)
    assert starting_for(REGISTRY, settings).options.max_output_bytes == min(settings.max_output_bytes,
                                                                              START_OUTPUT_BYTES)
