"""SIGTERM and SIGINT to ``orchestrator run``, ``serve`` (embedded) and ``worker`` stop
every process the command started: redis-server, Celery workers, their pool children and
node sandboxes. Each command runs as a real subprocess; its descendants are read from
``/proc`` before the signal and must all be gone within ``GONE_WITHIN_S`` after it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.local.embedded_redis import EmbeddedRedis, free_port
from orchestrator.local.embedded_workers import descendant_pids
from tests.support.foreground import as_foreground_job

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "orchestrator.cli"]
GONE_WITHIN_S = 15.0
SIGNALS = [pytest.param(signal.SIGTERM, id="SIGTERM"), pytest.param(signal.SIGINT, id="SIGINT")]
SLOW_GRAPH = {
    "id": "slow", "name": "Slow",
    "nodes": [
        {"id": "t", "type": "manual_trigger", "name": "Start", "data": {}},
        {"id": "c", "type": "code", "name": "Sleeper",
         "data": {"code": "import time\ntime.sleep(60)\nreturn 1", "timeout_s": 60}},
    ],
    "edges": [{"id": "e", "source": "t", "sourceHandle": "output", "target": "c",
               "targetHandle": "input", "data": {"channel": "flow"}}],
}


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("REDIS_URL", "ORCH_REDIS_URL", "ORCH_API_KEYS", "ORCH_ALLOW_OPEN_API")}
    env.update(extra)
    return env


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"  # a zombie has exited


def _wait_for(predicate: object, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


@pytest.fixture
def started() -> Iterator[list[subprocess.Popen[str]]]:
    """Commands a test started; killed (with what is left under them) if the test fails."""
    procs: list[subprocess.Popen[str]] = []
    yield procs
    for proc in procs:
        for pid in [*descendant_pids(proc.pid), proc.pid]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        proc.communicate(timeout=10)  # reaps it and closes its pipes


def _stop_and_check(proc: subprocess.Popen[str], sig: signal.Signals,
                    expect: tuple[str, ...], codes: tuple[int, ...] = (),
                    group: bool = False) -> None:
    """Signal ``proc``; every descendant it had must be gone within GONE_WITHIN_S and it
    must exit with one of ``codes`` (default: 128 + the signal, as a shell reports).
    ``group``: signal its whole process group, as a terminal's Ctrl-C does."""
    # A process read in the middle of an exec shows an empty command line for a moment:
    # take the snapshot once every expected process is seen, not from a single read.
    deadline = time.monotonic() + 10
    while True:
        tree = descendant_pids(proc.pid)
        names = {pid: _cmdline(pid) for pid in tree}
        missing = [part for part in expect if not any(part in cmd for cmd in names.values())]
        if not missing or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert not missing, (missing, names)
    began = time.monotonic()
    if group:
        os.killpg(proc.pid, sig)
    else:
        proc.send_signal(sig)
    proc.wait(timeout=GONE_WITHIN_S)
    left = [pid for pid in tree if _alive(pid)]
    while left and time.monotonic() - began < GONE_WITHIN_S:
        time.sleep(0.1)
        left = [pid for pid in tree if _alive(pid)]
    assert left == [], {pid: names[pid] for pid in left}
    assert proc.returncode in (codes or (128 + sig,)), proc.returncode


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("sig", "group"), [
    pytest.param(signal.SIGTERM, False, id="SIGTERM"),
    pytest.param(signal.SIGINT, False, id="SIGINT"),
    pytest.param(signal.SIGINT, True, id="ctrl-c-to-the-process-group"),
])
def test_run_stops_redis_workers_pool_and_sandbox_on_signal(
    sig: signal.Signals, group: bool, tmp_path: Path, started: list[subprocess.Popen[str]],
) -> None:
    graph = tmp_path / "slow.json"
    graph.write_text(json.dumps(SLOW_GRAPH))
    proc = subprocess.Popen([*CLI, "run", str(graph), "--json", "--workers", "1"], cwd=ROOT,
                            env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=group, preexec_fn=as_foreground_job)
    started.append(proc)
    assert proc.stdout is not None
    for line in proc.stdout:  # until the code node runs (its sandbox is up right after)
        event = json.loads(line)
        if event["node_id"] == "c" and event["event_type"] == "started":
            break
    _wait_for(lambda: any("bwrap" in _cmdline(p) for p in descendant_pids(proc.pid)),
              20, "the code node's sandbox process")
    _stop_and_check(proc, sig, ("redis-server", "celery", "bwrap"), group=group)
    _, err = proc.communicate(timeout=10)
    assert "Traceback" not in err, err[-3000:]
    assert err.splitlines()[-1] == ("terminated" if sig == signal.SIGTERM else "interrupted")


@pytest.mark.timeout(120)
@pytest.mark.parametrize("sig", SIGNALS)
def test_embedded_serve_stops_redis_and_workers_on_signal(
    sig: signal.Signals, started: list[subprocess.Popen[str]],
) -> None:
    port = free_port()
    proc = subprocess.Popen([*CLI, "serve", "--port", str(port), "--log-level", "warning"],
                            cwd=ROOT, env=_env(), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, preexec_fn=as_foreground_job)
    started.append(proc)
    assert proc.stderr is not None
    first = proc.stderr.readline()
    assert "loopback only" in first and "ORCH_API_KEYS" in first  # it says why it binds there

    def serving() -> bool:
        import socket

        with socket.socket() as s:
            s.settimeout(0.5)
            return s.connect_ex(("127.0.0.1", port)) == 0

    _wait_for(serving, 60, "the API to listen")
    _stop_and_check(proc, sig, ("redis-server", "celery"), codes=(0, 128 + sig))


@pytest.mark.timeout(120)
@pytest.mark.parametrize("sig", SIGNALS)
def test_worker_stops_its_pool_on_signal(
    sig: signal.Signals, tmp_path: Path, started: list[subprocess.Popen[str]],
) -> None:
    """Prefork (the pool that has child processes: the threads pool has none to leave)."""
    with EmbeddedRedis(unix_socket=False) as redis_server:
        proc = subprocess.Popen([*CLI, "worker", "-P", "prefork", "-c", "2", "--loglevel", "INFO"], cwd=ROOT,
                                env=_env(REDIS_URL=redis_server.url), stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True, preexec_fn=as_foreground_job)
        started.append(proc)
        assert proc.stderr is not None
        for line in proc.stderr:
            if "ready." in line:
                break
        _wait_for(lambda: len(descendant_pids(proc.pid)) >= 2, 30, "two pool processes")
        tree = descendant_pids(proc.pid)
        began = time.monotonic()
        proc.send_signal(sig)
        proc.wait(timeout=GONE_WITHIN_S)
        _wait_for(lambda: not any(_alive(p) for p in tree),
                  max(0.1, GONE_WITHIN_S - (time.monotonic() - began)), "the pool to exit")
