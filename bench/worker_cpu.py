"""A worker's CPU per run, measured in process: the node steps alone, no broker, no starts.

    .venv/bin/python bench/worker_cpu.py [--shapes fanout50,chain20] [--runs 100] [--profile 30]
                                         [--starts adhoc|stored] [--in-flight 8]

Starts its own redis-server, builds this process's worker state (``workers.process_state``,
the loop thread and store a worker process uses, with room for every node at once), starts
``--runs`` runs of each shape through ``runs.start_run`` (not measured), then runs them all
with ``workers.tasks.run_here`` on the loop, 8 runs at a time (``--in-flight``), as a worker
does when a run's first node message arrives (the nodes the start sent: a chain's trigger
is completed by the start itself, which sends its successor): a fan-out's branches and a
chain's links are taken from the run's queue at each completion. Reports the process's CPU
per run over that part (the loop thread and the Redis client; Redis itself is another
process). On a loaded machine this is steadier than ``runs_per_s.py``'s runs per second:
pair before and after back to back. ``--in-flight 1``: one run at a time, so each batch of
store calls holds one script, as a lone chain's links do.

``--profile N`` also prints the N most expensive functions by own CPU time (cProfile on
CPU time, several times slower: read the shares, not the total).

``--starts stored`` starts runs of a stored graph as the API does (``runs.start_stored``:
every run's plan derived from the version's compiled one, so what a plan keeps for its
runs is found once per version, as on a worker fed plan references); ``adhoc`` (the
default, as before) compiles each run's own plan (``runs.start_run``).

Shapes: ``fanout50`` (trigger -> 50 set_fields -> the bench pack's join), ``chain20``
(trigger + 19 set_fields). Prints JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import json
import os
import pstats
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from bench.chain import chain_graph  # noqa: E402
from bench.fanout import PACK, fanout_merge_graph  # noqa: E402
from bench.runs_per_s import Starter  # noqa: E402
from orchestrator.local.embedded_redis import EmbeddedRedis  # noqa: E402

SHAPES = {"fanout50": lambda: fanout_merge_graph(50), "chain20": lambda: chain_graph(20)}
IN_FLIGHT = 8  # runs at a time
WARM_RUNS = 10


class InProcessRuns:
    """Runs of this process's worker state (``workers.process_state``, with room for every
    node at once) started without a broker and run on its loop: ``started`` starts runs (of a
    stored graph as the API does, or ad hoc), ``run_all`` runs them ``in_flight`` at a time
    with ``workers.tasks.run_here``, each from the nodes its start sent (a trigger the start
    completed itself sends its successor). Shared by ``worker_cpu.py`` and ``redis_cost.py``."""

    def __init__(self, starts: str = "adhoc", in_flight: int = IN_FLIGHT) -> None:
        from orchestrator.service.graph_store import GraphStore
        from orchestrator.settings import Settings
        from workers import process_state

        process_state.set_capacity(10_000)  # every node of the runs in flight runs here, none is sent
        self.state = process_state.process_state()
        self.starts, self.in_flight = starts, in_flight
        self.sent: dict[str, tuple[list[str], str]] = {}  # run id -> the nodes its start sent, its plan reference
        self.starter = Starter(self.state.store.redis, Settings(), self.state.registry,
                               GraphStore(self.state.store.redis, self.state.registry, Settings()),
                               self.state.store, self._no_dispatch)

    async def _no_dispatch(self, run_id: str, nodes: list[str], plan: str = "") -> None:
        """Nothing goes to the broker: the nodes each start sent are run here."""
        self.sent[run_id] = ([*self.sent.get(run_id, ([], ""))[0], *nodes], plan)

    _no_dispatch.carries_plan = True  # type: ignore[attr-defined]  # takes the plan reference as node messages do

    async def started(self, graph: dict[str, Any], count: int) -> list[str]:
        from orchestrator.service.runs import RunRequest, StoredGraph, start_run, start_stored

        if self.starts == "stored":
            return [await start_stored(self.starter, StoredGraph(str(graph["id"])), RunRequest({"x": 1}),
                                       trigger="bench") for _ in range(count)]
        return [await start_run(self.state.store, self.state.registry, graph, RunRequest({"x": 1}),
                                dispatch=self._no_dispatch) for _ in range(count)]

    async def run_all(self, run_ids: list[str], profiler: cProfile.Profile | None = None) -> None:
        from workers.tasks import run_here

        gate = asyncio.Semaphore(self.in_flight)

        async def one(run_id: str) -> None:
            async with gate:
                nodes, plan = self.sent.pop(run_id)
                await asyncio.gather(*(run_here(run_id, node, plan=plan) for node in nodes))

        if profiler:  # on the loop thread, where the steps run
            profiler.enable()
        try:
            await asyncio.gather(*(one(r) for r in run_ids))
        finally:
            if profiler:
                profiler.disable()


def measure(shapes: list[str], runs: int, profile: int, starts: str = "adhoc",
            in_flight: int = IN_FLIGHT) -> dict[str, Any]:
    from workers import process_state

    runner = InProcessRuns(starts, in_flight)
    state, starter, started, run_all = runner.state, runner.starter, runner.started, runner.run_all

    result: dict[str, Any] = {}
    try:
        for shape in shapes:
            graph = SHAPES[shape]()
            if starts == "stored":
                state.run(starter.graphs.create(graph, str(graph["id"])))
            state.run(run_all(state.run(started(graph, WARM_RUNS))))
            run_ids = state.run(started(graph, runs))
            gc.collect()
            gc.freeze()  # as a worker process does once its node packs are loaded
            profiler = cProfile.Profile(time.process_time) if profile else None
            cpu0, wall0 = time.process_time(), time.monotonic()
            state.run(run_all(run_ids, profiler))
            cpu, wall = time.process_time() - cpu0, time.monotonic() - wall0
            result[shape] = {"runs": runs, "starts": starts, "in_flight": in_flight,
                             "cpu_ms_per_run": round(cpu * 1000 / runs, 2),
                             "wall_ms_per_run": round(wall * 1000 / runs, 2)}
            if profiler:
                print(f"--- {shape}: own CPU time, top {profile}", file=sys.stderr)
                pstats.Stats(profiler, stream=sys.stderr).sort_stats("tottime").print_stats(profile)
    finally:
        process_state.reset()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", default=",".join(SHAPES), help="of " + ",".join(SHAPES))
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--profile", type=int, default=0, help="print the top N functions (cProfile)")
    parser.add_argument("--starts", choices=("adhoc", "stored"), default="adhoc",
                        help="runs of an ad-hoc graph (each its own plan) or of a stored graph's version")
    parser.add_argument("--in-flight", type=int, default=IN_FLIGHT,
                        help="runs at a time (1: each batch of store calls one script, as a lone chain's)")
    args = parser.parse_args()
    shapes = args.shapes.split(",")
    if unknown := set(shapes) - set(SHAPES):
        parser.error(f"--shapes: unknown shape(s) {sorted(unknown)}; known: {', '.join(SHAPES)}")
    with EmbeddedRedis(unix_socket=False) as server:
        os.environ["REDIS_URL"] = os.environ["ORCH_REDIS_URL"] = server.url  # read when the state is built
        os.environ["ORCH_NODE_PATHS"] = str(PACK)
        result = measure(shapes, args.runs, args.profile, args.starts, args.in_flight)
    result["load_average"] = os.getloadavg()
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
