"""A private RabbitMQ node for the broker tests: Debian's rabbitmq-server on free ports.

The machine's own RabbitMQ (if any) is never used: each :class:`RabbitServer` is a node of
its own name, ports, data folder and config in a temporary folder, started as the current
user (``/usr/lib/rabbitmq/bin/rabbitmq-server``: the ``/usr/sbin`` wrapper would switch to
the ``rabbitmq`` user, who cannot write the folder) and stopped by the pid it writes. It
shares the machine's epmd (Erlang's port mapper), which is a name registry, not a broker.
``available()`` says whether the binary is installed; tests skip with that reason if not.
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

from orchestrator.local.embedded_redis import free_port

SERVER = Path("/usr/lib/rabbitmq/bin/rabbitmq-server")
START_TIMEOUT_S = 60.0
DEPLOY_CONF = Path(__file__).resolve().parents[2] / "deploy" / "rabbitmq" / "rabbitmq.conf"


def available() -> bool:
    return SERVER.exists() and shutil.which("erl") is not None


class RabbitServer:
    def __init__(self) -> None:
        self.port = free_port()
        self.dist_port = free_port()
        self.folder = Path(tempfile.mkdtemp(prefix="orch-rabbit-"))
        self.node = f"orchtest{self.port}@localhost"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.port}//"

    def start(self) -> RabbitServer:
        (self.folder / "mnesia").mkdir()
        (self.folder / "log").mkdir()
        (self.folder / "enabled_plugins").write_text("[].\n")
        # the deployment's settings (deploy/rabbitmq/rabbitmq.conf), on this node's port;
        # guest may connect from loopback only (RabbitMQ's default)
        (self.folder / "rabbitmq.conf").write_text(
            f"listeners.tcp.1 = 127.0.0.1:{self.port}\n{DEPLOY_CONF.read_text()}")
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(self.folder),
            "RABBITMQ_CONF_ENV_FILE": "/dev/null", "RABBITMQ_NODENAME": self.node,
            "RABBITMQ_NODE_PORT": str(self.port), "RABBITMQ_DIST_PORT": str(self.dist_port),
            "ERL_EPMD_ADDRESS": "127.0.0.1",
            "RABBITMQ_MNESIA_BASE": str(self.folder / "mnesia"),
            "RABBITMQ_LOG_BASE": str(self.folder / "log"),
            "RABBITMQ_CONFIG_FILE": str(self.folder / "rabbitmq.conf"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(self.folder / "enabled_plugins"),
            "RABBITMQ_PID_FILE": str(self.folder / "pid"),
        }
        with (self.folder / "server.out").open("wb") as log:
            self.proc = subprocess.Popen([str(SERVER)], env=env, stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"rabbitmq-server exited {self.proc.returncode}: {self.log_tail()}")
            if _speaks_amqp(self.port):  # a connect alone could reach another process that took the port
                return self
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"rabbitmq-server did not listen within {START_TIMEOUT_S} s: {self.log_tail()}")

    def log_tail(self, max_chars: int = 2000) -> str:
        path = self.folder / "server.out"
        return path.read_text(errors="replace")[-max_chars:] if path.exists() else ""

    def stop(self) -> None:
        if self.proc is not None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)  # the script and the Erlang VM it started
            except ProcessLookupError:
                pass
            self.proc.wait(timeout=10)
            self.proc = None
        shutil.rmtree(self.folder, ignore_errors=True)


def started(attempts: int = 3) -> RabbitServer:
    """A started server: one that exited at its start (another process took one of the
    ports found free for it first) is started again on other ports."""
    for _ in range(attempts - 1):
        server = RabbitServer()
        try:
            return server.start()
        except RuntimeError:
            server.stop()
    return RabbitServer().start()


def _speaks_amqp(port: int) -> bool:
    """Whether the server on ``port`` answers AMQP 0-9-1's protocol header with a method
    frame (its ``Connection.Start``)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as conn:
            conn.settimeout(2.0)
            conn.sendall(b"AMQP\x00\x00\x09\x01")
            return conn.recv(1) == b"\x01"
    except OSError:
        return False
