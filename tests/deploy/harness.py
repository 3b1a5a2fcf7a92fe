"""The deployment files, read the way Docker Compose and kubectl read them, and the
services they describe started as local processes.

No Docker engine runs here, so a compose service is started by running its ``command``
on this machine with its ``environment`` (after compose's ``${VAR}`` interpolation), with
two substitutions: ``REDIS_URL`` points at an :class:`EmbeddedRedis` the session owns,
and a published port becomes a free local port. Every process is started in its own
process group and stopped by that group's id.
"""

from __future__ import annotations

import functools
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILE = ROOT / "docker-compose.yml"
K8S_DIR = ROOT / "deploy" / "k8s"
BIN = Path(sys.executable).parent  # the venv's console scripts: orchestrator, celery
STOP_GRACE_S = 10.0
API_KEY = "deploy-test-key"  # ORCH_API_KEYS in the shell that runs `docker compose up`

# ${NAME}, ${NAME:-default}, ${NAME-default}, ${NAME:?message}, ${NAME?message}, $$
INTERPOLATION = re.compile(r"\$\$|\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?[-?])(?P<arg>[^}]*))?\}")


def interpolate(text: str, env: Mapping[str, str]) -> str:
    """Compose's variable substitution of ``text`` from ``env``."""

    def replace(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name, op, arg = match.group("name"), match.group("op"), match.group("arg") or ""
        value = env.get(name)
        empty = value is None or (op is not None and op.startswith(":") and value == "")
        if op and op.endswith("-") and empty:
            return arg
        if op and op.endswith("?") and empty:
            raise AssertionError(f"compose needs {name}: {arg}")
        return value or ""

    return INTERPOLATION.sub(replace, text)


def load_compose(env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """docker-compose.yml after interpolation (YAML merge keys resolved by the loader)."""
    text = interpolate(COMPOSE_FILE.read_text(), env if env is not None else os.environ)
    loaded = yaml.safe_load(text)
    assert isinstance(loaded, dict)
    return loaded


def load_k8s() -> list[tuple[Path, dict[str, Any]]]:
    """Every document of every ``deploy/k8s/*.yaml`` (file, document)."""
    docs: list[tuple[Path, dict[str, Any]]] = []
    for path in sorted(K8S_DIR.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc is not None:
                docs.append((path, doc))
    return docs


def argv_of(command: str | list[str]) -> list[str]:
    """A compose ``command`` as an argv, its program resolved to this venv's script."""
    argv = shlex.split(command) if isinstance(command, str) else [str(a) for a in command]
    local = BIN / argv[0]
    if local.exists():
        argv[0] = str(local)
    return argv


def replace_option(argv: list[str], option: str, value: str) -> list[str]:
    """``argv`` with ``--option X`` or ``--option=X`` set to ``value``."""
    out = list(argv)
    for i, arg in enumerate(out):
        if arg == option and i + 1 < len(out):
            out[i + 1] = value
            return out
        if arg.startswith(option + "="):
            out[i] = f"{option}={value}"
            return out
    raise AssertionError(f"{option} not in command {argv}")


@functools.cache
def cli_has(command: str) -> bool:
    """``orchestrator <command> --help`` exits 0."""
    proc = subprocess.run([str(BIN / "orchestrator"), command, "--help"],
                          capture_output=True, timeout=60, cwd=ROOT)
    return proc.returncode == 0


@dataclass
class Service:
    """A compose service running as a local process group."""

    name: str
    proc: subprocess.Popen[bytes]
    log: Path

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> None:
        if self.proc.poll() is None:
            _signal_group(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                pass
        _signal_group(self.proc.pid, signal.SIGKILL)  # children outliving their leader
        self.proc.wait()


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


class Launcher:
    """Starts compose services locally against one Redis; stops all it started."""

    def __init__(self, redis_url: str, workdir: Path) -> None:
        self.redis_url = redis_url
        self.workdir = workdir
        self.started: list[Service] = []

    def environment(self, service: dict[str, Any]) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items()
               if not k.startswith("ORCH_") and k != "REDIS_URL"}
        declared = service.get("environment") or {}
        if isinstance(declared, list):  # the "KEY=value" list form
            declared = dict(item.split("=", 1) for item in declared)
        env.update({k: "" if v is None else str(v) for k, v in declared.items()})
        env["REDIS_URL"] = self.redis_url
        env["PYTHONPATH"] = str(ROOT)
        return env

    def start(self, name: str, service: dict[str, Any], argv: list[str]) -> Service:
        log = self.workdir / f"{name}.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                argv, env=self.environment(service), cwd=self.workdir,
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True,  # its own process group, stopped by its id
            )
        started = Service(name, proc, log)
        self.started.append(started)
        return started

    def stop_all(self) -> None:
        while self.started:
            self.started.pop().stop()


def wait_until(check: Any, timeout_s: float, service: Service, what: str) -> Any:
    """Poll ``check()`` until truthy; fail with the service's log if it exits or times out."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        result = check()
        if result:
            return result
        if not service.alive():
            raise AssertionError(
                f"{service.name} exited with {service.proc.returncode} before {what}:\n"
                f"{service.output()[-3000:]}")
        time.sleep(0.2)
    raise AssertionError(f"{service.name}: no {what} after {timeout_s:.0f} s:\n{service.output()[-3000:]}")


def require_cli(command: str) -> None:
    """Fail unless ``orchestrator <command> --help`` exits 0."""
    if not cli_has(command):
        raise AssertionError(f"`orchestrator {command} --help` failed: no such sub-command")
