"""A worker's CPU per run, measured in process: the node steps alone, no broker, no starts.

    .venv/bin/python bench/worker_cpu.py [--shapes fanout50,chain20] [--runs 100] [--profile 30]
                                         [--starts adhoc|stored] [--in-flight 8]
                                         [--input-kb 0]

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

``--instructions`` runs the same under valgrind's callgrind (Debian's ``valgrind``) and
reports the instructions this process executed per run and per node over the runs (the
counters zeroed before them and dumped after, as ``redis_cost.py`` does for Redis): a count
that moves by less than 0.1 % from run to run on a machine whose CPU times swing by a
fifth, so a change to the worker's Python shows in one pair. 30-60 x slower: use
``--runs 20`` to ``50``. What it does not see: the kernel's work (each socket write and
read), and how commands batch in real time (under valgrind the worker is slower and Redis
is not): a change that saves instructions but spreads the writes (``redis_reads_per_run``,
Redis's reads of its clients' sockets per run, printed by every mode) can cost more than it
saves; confirm with CPU pairs (bench/README.md, issue 22, 2026-11-29 third session).

``--starts stored`` starts runs of a stored graph as the API does (``runs.start_stored``:
every run's plan derived from the version's compiled one, so what a plan keeps for its
runs is found once per version, as on a worker fed plan references); ``adhoc`` (the
default, as before) compiles each run's own plan (``runs.start_run``).

``--input-kb N`` gives each run an input of about N KB (``{"x": 1, "doc": "..."}``): the
trigger's output, which every node after it reads, and the run's input, which every claim
carries: what a fan-out's branches cost when their source's outputs are large.

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
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from bench.chain import chain_graph  # noqa: E402
from bench.fanout import PACK, fanout_merge_graph  # noqa: E402
from bench.runs_per_s import Starter, redis_counts  # noqa: E402
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

    def __init__(self, starts: str = "adhoc", in_flight: int = IN_FLIGHT, input_kb: int = 0) -> None:
        from orchestrator.service.graph_store import GraphStore
        from orchestrator.settings import Settings
        from workers import process_state

        process_state.set_capacity(10_000)  # every node of the runs in flight runs here, none is sent
        self.state = process_state.process_state()
        self.starts, self.in_flight = starts, in_flight
        self.run_input: dict[str, Any] = {"x": 1, **({"doc": "y" * (input_kb * 1024)} if input_kb else {})}
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
            return [await start_stored(self.starter, StoredGraph(str(graph["id"])), RunRequest(self.run_input),
                                       trigger="bench") for _ in range(count)]
        return [await start_run(self.state.store, self.state.registry, graph, RunRequest(self.run_input),
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


def _callgrind(flag: str) -> None:
    """``callgrind_control flag`` on this process (from a thread: valgrind answers while one runs)."""
    def control() -> None:
        subprocess.run(["callgrind_control", flag, str(os.getpid())], check=True, capture_output=True)

    thread = threading.Thread(target=control)
    thread.start()
    thread.join()


@dataclass(frozen=True)
class Runs:
    """What ``measure`` runs: how the runs start (``InProcessRuns``), how many at a time,
    and their input's size."""

    starts: str = "adhoc"
    in_flight: int = IN_FLIGHT
    input_kb: int = 0


def measure(shapes: list[str], runs: int, profile: int, how: Runs, counted: bool = False) -> dict[str, Any]:
    from workers import process_state

    starts, in_flight = how.starts, how.in_flight
    runner = InProcessRuns(starts, in_flight, how.input_kb)
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
            if counted:
                _callgrind("-z")
            counts0 = state.run(redis_counts(state.store.redis))
            cpu0, wall0 = time.process_time(), time.monotonic()
            state.run(run_all(run_ids, profiler))
            cpu, wall = time.process_time() - cpu0, time.monotonic() - wall0
            counts = state.run(redis_counts(state.store.redis))
            if counted:
                _callgrind("-d")  # one dump per shape, in order
            result[shape] = {"runs": runs, "starts": starts, "in_flight": in_flight, "input_kb": how.input_kb,
                             "cpu_ms_per_run": round(cpu * 1000 / runs, 2),
                             "wall_ms_per_run": round(wall * 1000 / runs, 2),
                             # Redis's reads of its clients' sockets: how many batches the runs' commands came in
                             "redis_reads_per_run": round((counts["reads"] - counts0["reads"]) / runs, 1)}
            if profiler:
                print(f"--- {shape}: own CPU time, top {profile}", file=sys.stderr)
                pstats.Stats(profiler, stream=sys.stderr).sort_stats("tottime").print_stats(profile)
    finally:
        process_state.reset()
    return result


def under_callgrind(argv: list[str], shapes: list[str], runs: int) -> dict[str, Any]:
    """This script again with ``argv`` under callgrind; its JSON with each shape's
    instructions per run and per node added."""
    from bench.redis_cost import instructions  # (redis_cost imports this module)

    for tool in ("valgrind", "callgrind_control"):
        if shutil.which(tool) is None:
            raise SystemExit(f"{tool} not found: apt-get install valgrind")
    out = Path(tempfile.mkdtemp(prefix="worker-cost-"))
    try:
        done = subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}/cg.%p", sys.executable,
                               __file__, *argv, "--counted"], capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise SystemExit(f"under callgrind: exit {done.returncode}\n{done.stderr[-2000:]}")
        result: dict[str, Any] = json.loads(done.stdout[done.stdout.index("{"):])
        dumps = sorted(out.glob("cg.*.*"), key=lambda p: int(p.suffix[1:]))
        for shape, dump in zip(shapes, dumps, strict=True):
            total = instructions(dump)
            nodes = len(SHAPES[shape]()["nodes"])
            result[shape].update(instructions_per_run=round(total / runs),
                                 instructions_per_node=round(total / runs / nodes))
        return result
    finally:
        shutil.rmtree(out, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", default=",".join(SHAPES), help="of " + ",".join(SHAPES))
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--profile", type=int, default=0, help="print the top N functions (cProfile)")
    parser.add_argument("--starts", choices=("adhoc", "stored"), default="adhoc",
                        help="runs of an ad-hoc graph (each its own plan) or of a stored graph's version")
    parser.add_argument("--in-flight", type=int, default=IN_FLIGHT,
                        help="runs at a time (1: each batch of store calls one script, as a lone chain's)")
    parser.add_argument("--input-kb", type=int, default=0, help="each run's input about this many KB (see above)")
    parser.add_argument("--instructions", action="store_true",
                        help="count this process's instructions per run under callgrind (see above)")
    parser.add_argument("--counted", action="store_true", help=argparse.SUPPRESS)  # the run under callgrind
    args = parser.parse_args()
    shapes = args.shapes.split(",")
    if unknown := set(shapes) - set(SHAPES):
        parser.error(f"--shapes: unknown shape(s) {sorted(unknown)}; known: {', '.join(SHAPES)}")
    if args.instructions:
        argv = [a for a in sys.argv[1:] if a != "--instructions"]
        print(json.dumps(under_callgrind(argv, shapes, args.runs), indent=2))
        return
    with EmbeddedRedis(unix_socket=False) as server:
        os.environ["REDIS_URL"] = os.environ["ORCH_REDIS_URL"] = server.url  # read when the state is built
        os.environ["ORCH_NODE_PATHS"] = str(PACK)
        result = measure(shapes, args.runs, args.profile, Runs(args.starts, args.in_flight, args.input_kb),
                         args.counted)
    result["load_average"] = os.getloadavg()
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
