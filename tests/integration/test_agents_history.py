"""Chat history on real workers: turns of one session share Agno's storage in Redis.

Each turn's agent calls an MCP tool that reports the pid of the process that started
the MCP server (the worker pool process running the agent node), so the test sees which
process ran which turn.
"""

from __future__ import annotations

import re
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
import redis

from orchestrator.local.embedded_workers import WorkerProcesses

pytestmark = pytest.mark.integration

MIN_TURNS = 3
MAX_TURNS = 8  # more turns only while every turn so far ran on the same process
PID_SERVER = '''
import os

from fastmcp import FastMCP

server = FastMCP("worker")


@server.tool()
def worker_pid() -> int:
    """The process id of the process that started this server."""
    return os.getppid()


if __name__ == "__main__":
    server.run("stdio", show_banner=False)
'''
ANSWER = re.compile(r"pid=(\d+) turn=(\d+) history=(\d+)")


@pytest.fixture(scope="module")
def pid_server(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("mcp") / "pid_server.py"
    path.write_text(PID_SERVER)
    return path


def chat_graph(pid_server: Path) -> dict[str, Any]:
    script = [{"call": "worker_pid", "args": {}},
              {"say": "pid={tool_result} turn={turn} history={history}"}]
    return {
        "id": "agents_history",
        "name": "Chat with history",
        "nodes": [
            {"id": "chat", "type": "chat_start", "name": "Chat", "data": {}},
            {"id": "assistant", "type": "agent", "name": "Assistant", "data": {
                "model": "dryrun:history", "script": script, "num_history_runs": MAX_TURNS,
                "prompt": "{{ input.message }}"}},
            {"id": "probe", "type": "mcp_server", "name": "Worker probe", "data": {
                "command": f"{sys.executable} {pid_server}", "timeout_s": 30}},
        ],
        "edges": [
            {"id": "e1", "source": "chat", "sourceHandle": "output", "target": "assistant",
             "targetHandle": "input", "data": {"channel": "flow"}},
            {"id": "e2", "source": "probe", "sourceHandle": "tools", "target": "assistant",
             "targetHandle": "tools", "data": {"channel": "link"}},
        ],
    }


def parent_pid(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat.rsplit(")", 1)[1].split()[1])


async def test_turns_of_one_session_on_different_workers_see_the_earlier_turns(
        run_graph: Any, workers: WorkerProcesses, pid_server: Path) -> None:
    graph = chat_graph(pid_server)
    session = f"chat-{uuid.uuid4().hex[:8]}"
    turns: list[tuple[int, int, int]] = []  # (pid, turn, history) as each answer says
    while len(turns) < MIN_TURNS or len({t[0] for t in turns}) < 2:
        assert len(turns) < MAX_TURNS, f"every turn ran on one process: {turns}"
        result = await run_graph(graph, {"message": f"message {len(turns) + 1}"},
                                 session_id=session)
        assert result.status == "succeeded", result.states
        answer = result.output("assistant")["response"]
        found = ANSWER.search(answer)
        assert found, f"unexpected answer {answer!r}"
        turns.append((int(found[1]), int(found[2]), int(found[3])))
    # every turn saw all the turns before it, whichever process ran them
    assert [(turn, history) for _, turn, history in turns] == [
        (n + 1, n) for n in range(len(turns))]
    # the reported pids are the Celery workers under test (or, under prefork, their children)
    assert all(pid in workers.pids or parent_pid(pid) in workers.pids for pid, _, _ in turns)
    other = await run_graph(graph, {"message": "hello"}, session_id=f"{session}-other")
    assert "turn=1 history=0" in other.output("assistant")["response"]


async def test_every_key_agno_writes_expires(run_graph: Any, sync_redis: redis.Redis,
                                             pid_server: Path) -> None:
    result = await run_graph(chat_graph(pid_server), {"message": "hi"},
                             session_id=f"ttl-{uuid.uuid4().hex[:8]}")
    assert result.status == "succeeded"
    keys = sorted(str(k) for k in sync_redis.scan_iter(match="orc:agno:*"))
    assert any(":sessions:" in k for k in keys) and any(":runs:" in k for k in keys), keys
    without_ttl = [k for k in keys if sync_redis.ttl(k) <= 0]
    assert without_ttl == [], f"agno keys that never expire: {without_ttl}"
