"""Celery worker processes this program owns (the CLI's one-command mode, tests, bench).

:class:`WorkerProcesses` starts ``count`` workers, each ``python -m celery -A workers.app
worker -P <pool> -c <concurrency>``, in its own process group with ``REDIS_URL`` (and any
extra ``env``) set, and waits until every one has started consuming: each worker writes a
readiness file from Celery's ``worker_ready`` signal (``workers.app``), which costs no
broker round trip. ``stop`` sends SIGTERM to each process group it started (a warm
shutdown: running nodes finish), waits ``grace_s``, then SIGKILLs the group and any
descendant that left it (a node's sandbox runs in its own session): every process found
under a worker when ``stop`` began is gone when it returns. Nothing is ever signalled by
name.

``pool`` defaults to ``Settings.worker_pool`` ("threads": ``concurrency`` node steps in
flight per process on one event loop, default ``Settings.node_concurrency``); "prefork"
gives ``concurrency`` single-node pool processes per worker (default
``Settings.worker_concurrency``). ``count`` is the number of worker processes.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from orchestrator.settings import WorkerSettings

READY_FILE_ENV = "ORCH_WORKER_READY_FILE"  # orchestrator.queue.app.READY_FILE_ENV
START_TIMEOUT_S = 60.0
STOP_GRACE_S = 10.0
PROJECT_ROOT = Path(__file__).resolve().parents[2]  # the folder holding orchestrator/, workers/, nodes/


class WorkerStartError(RuntimeError):
    """A worker exited or did not become ready; the message carries its log tail,
    ``summary`` what happened and the log's last line (the error, for a one-line report)."""

    def __init__(self, what: str, tail: str) -> None:
        super().__init__(f"{what}: {tail}")
        last = next((line.strip() for line in reversed(tail.splitlines()) if line.strip()), "")
        self.summary = f"{what}: {last}" if last else what


@dataclass(frozen=True)
class WorkerConfig:
    """What worker processes to start: ``count`` of them, each a Celery ``pool`` running
    ``concurrency`` node steps at once (None: the settings'), on ``queue`` (None: every
    lane), with ``env`` added to this process's environment; how long each may take to
    become ready (``start_timeout_s``) and to finish its node steps when stopped
    (``grace_s``)."""

    count: int = 2
    concurrency: int | None = None
    pool: str | None = None
    queue: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    loglevel: str = "WARNING"
    start_timeout_s: float = START_TIMEOUT_S
    grace_s: float = STOP_GRACE_S


class WorkerProcesses:
    """``config.count`` Celery worker processes on ``redis_url``; a context manager. The
    pool and its concurrency default to ``settings``' (the CLI passes the process settings;
    without them, those settings' declared defaults)."""

    def __init__(self, redis_url: str, config: WorkerConfig = WorkerConfig(), *,
                 settings: WorkerSettings | None = None) -> None:
        self.redis_url = redis_url
        settings = settings or WorkerSettings.model_construct()
        self.count = config.count
        self.pool = config.pool or settings.worker_pool
        concurrency = config.concurrency
        if concurrency is None:
            concurrency = settings.worker_concurrency if self.pool == "prefork" else settings.node_concurrency
        self.concurrency = concurrency
        self.env = dict(config.env)
        self.queue = config.queue
        self.loglevel = config.loglevel
        self.start_timeout_s = config.start_timeout_s
        self.grace_s = config.grace_s
        self.dir = Path(tempfile.mkdtemp(prefix="orc-workers-"))
        self.procs: list[subprocess.Popen[bytes]] = []

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    def command(self, index: int) -> list[str]:
        return [
            sys.executable, "-m", "celery", "-A", "workers.app", "worker",
            "-P", self.pool, "-c", str(self.concurrency), "-n", f"w{index}-{os.getpid()}@%h",
            "--without-gossip", "--without-mingle", "--without-heartbeat",
            "--loglevel", self.loglevel,
        ] + (["-Q", self.queue] if self.queue else [])  # no -Q: every lane of the app's settings

    def log_path(self, index: int) -> Path:
        return self.dir / f"w{index}.log"

    def _env(self, index: int) -> dict[str, str]:
        env = dict(os.environ)
        env.pop("ORCH_REDIS_URL", None)
        env.update(self.env)
        env["REDIS_URL"] = self.redis_url
        env[READY_FILE_ENV] = str(self.dir / f"w{index}.ready")
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(PROJECT_ROOT), env.get("PYTHONPATH", "")) if p
        )
        return env

    def start(self) -> WorkerProcesses:
        """Spawn the workers and wait until each one consumes; stop them all on failure."""
        self.spawn()
        try:
            self.wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def spawn(self) -> None:
        """Start the processes without waiting (call :meth:`wait_ready` later)."""
        if self.procs:
            return
        for i in range(self.count):
            with open(self.log_path(i), "wb") as log:
                self.procs.append(subprocess.Popen(
                    self.command(i), env=self._env(i), cwd=str(PROJECT_ROOT),
                    stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                    start_new_session=True,  # its own process group: stop() signals the pool too
                ))

    def wait_ready(self) -> None:
        """Block until every worker wrote its readiness file; raise WorkerStartError if one
        exits or ``start_timeout_s`` passes (the caller stops them)."""
        deadline = time.monotonic() + self.start_timeout_s
        waiting = set(range(self.count))
        while waiting:
            for i in sorted(waiting):
                if (self.dir / f"w{i}.ready").exists():
                    waiting.discard(i)
                elif self.procs[i].poll() is not None:
                    code = self.procs[i].returncode
                    tail = self.log_tail(i)
                    raise WorkerStartError(f"worker w{i} exited with code {code}", tail)
            if waiting and time.monotonic() > deadline:
                i = min(waiting)
                raise WorkerStartError(f"worker w{i} not ready after {self.start_timeout_s:.0f} s",
                                       self.log_tail(i))
            time.sleep(0.05)

    def log_tail(self, index: int, max_chars: int = 3000) -> str:
        try:
            return self.log_path(index).read_text(errors="replace")[-max_chars:]
        except OSError:
            return ""

    def stop(self) -> None:
        """SIGTERM each group we started, wait ``grace_s``, SIGKILL what is left."""
        procs, self.procs = self.procs, []
        strays = [pid for proc in procs for pid in descendant_pids(proc.pid)]
        for proc in procs:
            _signal_group(proc, signal.SIGTERM)
        deadline = time.monotonic() + self.grace_s
        for proc in procs:
            try:
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            _signal_group(proc, signal.SIGKILL)  # pool children outliving their parent
            proc.wait()
        for pid in strays:  # descendants in their own session (sandboxes), orphaned now
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> WorkerProcesses:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def descendant_pids(pid: int) -> list[int]:
    """Every live descendant of ``pid`` (from ``/proc``; empty where there is none).
    Read from the parent links, so it also finds children that started their own session."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").glob("[0-9]*/stat"):
        try:
            stat = entry.read_text()
        except OSError:
            continue  # exited while we looked
        fields = stat[stat.rindex(")") + 2:].split()  # after "pid (comm) "
        children.setdefault(int(fields[1]), []).append(int(entry.parent.name))
    found: list[int] = []
    todo = list(children.get(pid, []))
    while todo:
        child = todo.pop()
        found.append(child)
        todo.extend(children.get(child, []))
    return found


def _signal_group(proc: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    """Signal the process group led by ``proc`` (created with start_new_session)."""
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
