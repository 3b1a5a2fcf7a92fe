"""A schedule trigger with a 1 s interval starts runs, and two beat replicas do not double-fire."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from redis.asyncio import Redis

from orchestrator.local.embedded_redis import EmbeddedRedis
from orchestrator.local.embedded_workers import PROJECT_ROOT, WorkerConfig, WorkerProcesses
from orchestrator.service.graph_store import GraphStore
from orchestrator.settings import Settings
from tests.fake_nodes import graph

pytestmark = pytest.mark.integration

FAKE_PACK = str(Path(__file__).parent / "fake_pack")
SETTINGS = Settings(node_paths=FAKE_PACK)
WINDOW_S = 4.0
BEAT = ("import argparse, sys; from orchestrator.cli import sweeper_cmd as m; "
        "p = argparse.ArgumentParser(); m.add_parser(p.add_subparsers()); "
        "a = p.parse_args(['beat', '-l', 'INFO']); sys.exit(a.func(a))")


class BeatWorkers(WorkerProcesses):
    """Workers of the app that also holds the schedule tasks (``workers.beat``)."""

    def command(self, index: int) -> list[str]:
        argv = super().command(index)
        argv[argv.index("workers.app")] = "workers.beat"
        return argv


@pytest.fixture
def server() -> Iterator[EmbeddedRedis]:
    with EmbeddedRedis(unix_socket=False) as s:
        yield s


def start_beat(url: str, log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "REDIS_URL": url, "ORCH_NODE_PATHS": FAKE_PACK,
           "PYTHONPATH": str(PROJECT_ROOT)}
    with open(log, "wb") as out:
        return subprocess.Popen([sys.executable, "-c", BEAT], env=env, cwd=str(PROJECT_ROOT),
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def stop(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=10)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


async def test_interval_schedule_starts_runs_once_per_interval_with_two_beats(
    server: EmbeddedRedis, tmp_path: Path,
) -> None:
    from orchestrator.service.plugins import load_registry

    client = Redis.from_url(server.url, decode_responses=True)
    graphs = GraphStore(client, load_registry(SETTINGS), SETTINGS)
    g = graph([("tick", "schedule_trigger", "Every Second", {"interval_s": 1}),
               ("p", "probe", "Probe")], [("tick", "output", "p", "input")], id="every-second")
    await graphs.create(g)
    beats: list[subprocess.Popen[bytes]] = []
    try:
        with BeatWorkers(server.url, WorkerConfig(count=1, concurrency=2, env={"ORCH_NODE_PATHS": FAKE_PACK})):
            beats = [start_beat(server.url, tmp_path / f"beat{i}.log") for i in range(2)]
            deadline = time.monotonic() + 30
            while not await graphs.runs("every-second") and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
            logs = [(tmp_path / f"beat{i}.log").read_text(errors="replace")[-2000:] for i in range(2)]
            assert await graphs.runs("every-second"), f"no scheduled run started; beat logs: {logs}"
            before = len(await graphs.runs("every-second", limit=1000))
            await asyncio.sleep(WINDOW_S)
            run_ids = await graphs.runs("every-second", limit=1000)
            fired = len(run_ids) - before
            assert WINDOW_S - 1 <= fired <= WINDOW_S + 1, fired
            from orchestrator.store.redis_store import RedisRunStore

            store = RedisRunStore(client, SETTINGS)
            record = await store.get_run(run_ids[-1])
            assert record.graph_id == "every-second" and record.meta.get("trigger") == "schedule"
    finally:
        for proc in beats:
            stop(proc)
        await client.aclose()
