"""A private Redis Cluster for tests: the packaged ``redis-server`` and ``redis-cli``.

:func:`redis_cluster` starts ``primaries * (1 + replicas)`` servers on free loopback ports
(``--cluster-enabled yes``, persistence off, each in its own temp folder), joins them with
``redis-cli --cluster create ... --cluster-replicas N --cluster-yes``, waits until every
node reports ``cluster_state:ok`` and yields a :class:`Cluster`. The servers are stopped by
their pids and the folders removed when the block ends (or at :meth:`Cluster.stop`).

``Cluster.url`` is the ``REDIS_URL`` the settings accept for a cluster
(``redis+cluster://host:port,host:port,...``). ``available()`` says whether both binaries
are installed; tests skip with that reason if not.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

SERVER = "/usr/bin/redis-server"
CLI = "/usr/bin/redis-cli"
START_TIMEOUT_S = 30.0
HOST = "127.0.0.1"


def available() -> bool:
    return os.access(SERVER, os.X_OK) and os.access(CLI, os.X_OK)


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((HOST, port))
        except OSError:
            return False
    return True


def free_cluster_port(taken: set[int]) -> int:
    """A free port <= 55535 whose cluster bus port (+10000) is free too (Redis requires both)."""
    for _ in range(1000):
        port = random.randint(20000, 55535)
        if port not in taken and port + 10000 not in taken and _bindable(port) and _bindable(port + 10000):
            return port
    raise RuntimeError("no free port pair for a redis cluster node")


def _cli(port: int, *args: str, timeout: float = 10.0) -> str:
    done = subprocess.run([CLI, "-h", HOST, "-p", str(port), *args], capture_output=True, text=True,
                          timeout=timeout, check=False)
    return done.stdout + done.stderr


@dataclass
class Cluster:
    folder: Path
    procs: dict[int, subprocess.Popen[bytes]] = field(default_factory=dict)

    @property
    def nodes(self) -> list[tuple[str, int, int]]:
        """(host, port, pid) of every server still running."""
        return [(HOST, port, proc.pid) for port, proc in self.procs.items() if proc.poll() is None]

    @property
    def url(self) -> str:
        return "redis+cluster://" + ",".join(f"{HOST}:{port}" for port in self.procs)

    def primaries(self) -> list[int]:
        """Ports of the nodes that are primaries now (as a live node sees it)."""
        for _, port, _ in self.nodes:
            out = _cli(port, "cluster", "nodes")
            if "master" in out:
                return sorted(int(line.split()[1].split("@")[0].rsplit(":", 1)[1])
                              for line in out.splitlines()
                              if "master" in line.split()[2] and "fail" not in line.split()[2])
        return []

    def replicas_synced(self) -> bool:
        """Whether every running replica's link to its primary is up (it holds a copy)."""
        for _, port, _ in self.nodes:
            info = _cli(port, "info", "replication")
            if "role:slave" in info and "master_link_status:up" not in info:
                return False
        return True

    def kill(self, port: int) -> None:
        """SIGKILL the server on ``port`` (a crash: no save, no goodbye to its peers)."""
        proc = self.procs[port]
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=10)

    def wait_ok(self, timeout_s: float = START_TIMEOUT_S) -> None:
        """Until every running node reports ``cluster_state:ok``."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if all("cluster_state:ok" in _cli(port, "cluster", "info") for _, port, _ in self.nodes):
                return
            time.sleep(0.1)
        raise RuntimeError(f"redis cluster not ok within {timeout_s} s: {self.log_tail()}")

    def log_tail(self, max_chars: int = 1500) -> str:
        tails = []
        for port in self.procs:
            path = self.folder / str(port) / "server.log"
            if path.exists():
                tails.append(f"[{port}] " + path.read_text(errors="replace")[-max_chars:])
        return "\n".join(tails)

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
        for proc in self.procs.values():
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL is not refused
                pass
        shutil.rmtree(self.folder, ignore_errors=True)


def _start_server(folder: Path, port: int) -> subprocess.Popen[bytes]:
    node_dir = folder / str(port)
    node_dir.mkdir()
    args = [SERVER, "--port", str(port), "--bind", HOST, "--dir", str(node_dir),
            "--cluster-enabled", "yes", "--cluster-config-file", str(node_dir / "nodes.conf"),
            "--cluster-node-timeout", "2000", "--save", "", "--repl-diskless-sync-delay", "0", "--appendonly", "no",
            "--logfile", str(node_dir / "server.log"), "--daemonize", "no"]
    return subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)


def start_cluster(primaries: int = 3, replicas: int = 0) -> Cluster:
    if primaries < 3:
        raise ValueError("a Redis Cluster needs at least 3 primaries (redis-cli --cluster create)")
    cluster = Cluster(folder=Path(tempfile.mkdtemp(prefix="orch-rcluster-")))
    try:
        for _ in range(primaries * (1 + replicas)):
            port = free_cluster_port(set(cluster.procs) | {p + 10000 for p in cluster.procs})
            cluster.procs[port] = _start_server(cluster.folder, port)
        deadline = time.monotonic() + START_TIMEOUT_S
        for port, proc in cluster.procs.items():
            while "PONG" not in _cli(port, "ping", timeout=2):
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"redis-server on {port} did not start: {cluster.log_tail()}")
                time.sleep(0.05)
        out = _cli(next(iter(cluster.procs)), "--cluster", "create",
                   *(f"{HOST}:{port}" for port in cluster.procs),
                   "--cluster-replicas", str(replicas), "--cluster-yes", timeout=START_TIMEOUT_S)
        if "[OK] All 16384 slots covered" not in out:
            raise RuntimeError(f"redis-cli --cluster create failed: {out[-2000:]}")
        cluster.wait_ok()
        deadline = time.monotonic() + START_TIMEOUT_S
        while len(cluster.primaries()) != primaries or not cluster.replicas_synced():
            if time.monotonic() > deadline:  # the replicas have not all joined and synced their primary
                raise RuntimeError(f"redis cluster: {cluster.primaries()} are primaries, not {primaries}, "
                                   "or a replica has not synced")
            time.sleep(0.1)
        return cluster
    except BaseException:
        cluster.stop()
        raise


@contextmanager
def redis_cluster(primaries: int = 3, replicas: int = 0) -> Iterator[Cluster]:
    """A running cluster of ``primaries`` primaries with ``replicas`` replicas each."""
    cluster = start_cluster(primaries, replicas)
    try:
        yield cluster
    finally:
        cluster.stop()
