"""What the worker-protecting budgets cost, each beside its same-run baseline.

* JSONata per call: in the worker (``asyncio.to_thread(transform)``, as JSON Transform did)
  vs a child of the evaluator pool (``evaluate_jsonata``), for a small and a 1 MB input;
  and the start-up of a fresh child (what a killed one costs the next call).
* Parameter resolution per node execution with cheap expressions: on the event loop (as
  before), through ``resolve_parameters_off_loop`` (a trial on the loop, which they pass),
  and always in the offload pool (the thread hop the trial saves).
* The red team's Filter (50,000 items x a 150-term condition): how long until it fails on
  ``max_total_steps``, and a simple condition over 100,000 items.

Calls alternate between the two sides of each pair so machine noise hits both alike.
Prints medians and writes ``bench/results/budgets-<time>.json``.

    .venv/bin/python bench/budgets.py [--calls 300]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import statistics
import time
from pathlib import Path
from typing import Any

from orchestrator.host.evaluator import POOL, _Child, evaluate_jsonata
from orchestrator.host.evaluator_child import transform
from orchestrator.kernel.expressions import Scope
from orchestrator.kernel.graph import Node
from orchestrator.kernel.local import LocalRunner
from orchestrator.kernel.parameters import resolve_parameters, resolve_parameters_off_loop
from orchestrator.service.plugins import load_registry
from orchestrator.settings import load_settings

EXPRESSION = '{"who": customer, "total": $sum(items.(price * qty)), "skus": items.sku}'
SMALL = {"customer": "Ada", "items": [{"sku": "a", "price": 2.5, "qty": 2}, {"sku": "b", "price": 4.0, "qty": 1}]}
LARGE = {"customer": "Ada", "items": [{"sku": f"s{i}", "price": 1.5, "qty": i % 7} for i in range(12_000)]}


def median_us(samples: list[float]) -> float:
    return round(statistics.median(samples) * 1e6, 1)


async def jsonata_pair(value: Any, calls: int) -> dict[str, float]:
    inside: list[float] = []
    child: list[float] = []
    for _ in range(calls):
        began = time.perf_counter()
        await asyncio.to_thread(transform, EXPRESSION, value)
        inside.append(time.perf_counter() - began)
        began = time.perf_counter()
        await evaluate_jsonata(EXPRESSION, value, settings=load_settings(), timeout_ms=5000, max_depth=500)
        child.append(time.perf_counter() - began)
    return {"in_worker_us": median_us(inside), "child_process_us": median_us(child)}


def child_start_s(samples: int) -> float:
    times = []
    for _ in range(samples):
        began = time.perf_counter()
        child = _Child(512)
        reply = child.ask(json.dumps({"expression": "1", "input": None, "timeout_ms": 5000, "max_depth": 500,
                                      "cpu_s": 6}).encode(), time.monotonic() + 30, 1 << 20)
        assert reply is not None
        times.append(time.perf_counter() - began)
        child.close(kill=True)
    return round(statistics.median(times), 3)


async def resolution_pair(calls: int) -> dict[str, float]:
    registry = load_registry(load_settings())
    definition = registry.get("set_fields").definition
    node = Node.model_validate({"id": "n", "type": "set_fields", "name": "N",
                                "data": {"fields": {"a": "{{ input.x + 1 }}", "b": "{{ upper(input.s) }}"}}})
    loop = asyncio.get_running_loop()
    on_loop: list[float] = []
    trial: list[float] = []
    thread: list[float] = []
    for _ in range(calls):
        began = time.perf_counter()
        resolve_parameters(node, definition, {}, Scope(input={"x": 1, "s": "abc"}))
        on_loop.append(time.perf_counter() - began)
        began = time.perf_counter()
        await resolve_parameters_off_loop(node, definition, {}, Scope(input={"x": 1, "s": "abc"}))
        trial.append(time.perf_counter() - began)
        began = time.perf_counter()
        await loop.run_in_executor(None, resolve_parameters, node, definition, {}, Scope(input={"x": 1, "s": "abc"}))
        thread.append(time.perf_counter() - began)
    return {"on_loop_us": median_us(on_loop), "trial_on_loop_us": median_us(trial),
            "always_in_thread_us": median_us(thread)}


async def filter_times() -> dict[str, float]:
    registry = load_registry(load_settings())

    def graph(condition: str) -> dict[str, Any]:
        return {"id": "g", "nodes": [{"id": "t", "type": "manual_trigger", "name": "Start"},
                                     {"id": "f", "type": "filter", "name": "F", "data": {"condition": condition}}],
                "edges": [{"id": "e", "source": "t", "sourceHandle": "output", "target": "f",
                           "targetHandle": "input", "data": {"channel": "flow"}}]}

    began = time.perf_counter()
    done = await LocalRunner(registry).run(graph(" + ".join(["$item"] * 150) + " > -1"), list(range(50_000)))
    attack_s = time.perf_counter() - began
    assert done.status == "failed"
    began = time.perf_counter()
    done = await LocalRunner(registry).run(graph("$item.age >= 18"), [{"age": i % 40} for i in range(100_000)])
    normal_s = time.perf_counter() - began
    assert done.status == "succeeded"
    return {"attack_fails_after_s": round(attack_s, 2), "simple_100k_items_s": round(normal_s, 2)}


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=300)
    args = parser.parse_args()
    # the pool's first child
    await evaluate_jsonata("1", None, settings=load_settings(), timeout_ms=5000, max_depth=500)
    results = {
        "jsonata_small": await jsonata_pair(SMALL, args.calls),
        "jsonata_1mb": await jsonata_pair(LARGE, max(10, args.calls // 20)),
        "child_start_s": child_start_s(5),
        "parameter_resolution": await resolution_pair(args.calls),
        "filter": await filter_times(),
        "machine": platform.platform(),
    }
    POOL.close()
    print(json.dumps(results, indent=2))
    out = Path(__file__).parent / "results" / f"budgets-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
