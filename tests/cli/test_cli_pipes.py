"""The CLI as a subprocess where the behaviour needs one: a closed stdout pipe, and
``--api-url`` after the action against a (stub) HTTP API."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIG_GRAPH = {"id": "big", "version": 1, "nodes": [
    {"id": f"n{i}", "type": "set_fields", "name": f"Node {i}", "data": {"x": "y" * 200}}
    for i in range(2000)  # ~0.5 MB of JSON: more than a pipe buffer holds
], "edges": []}


class _Api(BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # a server over its queue bound: every run start is refused
        body = json.dumps({"error": {"type": "OverloadedError", "code": "overloaded",
                                     "message": "10000 node tasks are queued, above ORCH_MAX_QUEUED_NODES=10000",
                                     "limit": "ORCH_MAX_QUEUED_NODES"}}).encode()
        self.send_response(429)
        self.send_header("content-type", "application/json")
        self.send_header("retry-after", "7")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        body = json.dumps(BIG_GRAPH if self.path.startswith("/graphs/big")
                          else {"graphs": [], "total": 0}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        return None


@pytest.fixture
def api_url() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Api)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _cli_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("ORCH_API_URL", "ORCH_API_KEY")}


@pytest.mark.timeout(60)
def test_graphs_get_piped_into_head_ends_quietly(api_url: str) -> None:
    cmd = (f"{sys.executable} -m orchestrator.cli graphs get big --api-url {api_url} "
           f"| head -n 3")
    done = subprocess.run(["bash", "-o", "pipefail", "-c", cmd], cwd=ROOT, env=_cli_env(),
                          capture_output=True, text=True, timeout=60)
    assert done.stdout.splitlines()[0] == "{"
    assert "BrokenPipe" not in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 141  # 128 + SIGPIPE: what a shell reports


@pytest.mark.timeout(60)
def test_graphs_list_accepts_api_url_after_the_action(api_url: str) -> None:
    done = subprocess.run([sys.executable, "-m", "orchestrator.cli", "graphs", "list",
                           "--api-url", api_url], cwd=ROOT, env=_cli_env(),
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"graphs": [], "total": 0}


@pytest.mark.timeout(60)
def test_runs_start_on_a_busy_server_says_so_and_when_to_retry(api_url: str) -> None:
    done = subprocess.run([sys.executable, "-m", "orchestrator.cli", "runs", "start", "g1", "--api-url", api_url],
                          cwd=ROOT, env=_cli_env(), capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert "server busy" in done.stderr and "ORCH_MAX_QUEUED_NODES" in done.stderr
    assert "retry after 7 s" in done.stderr
    assert "Traceback" not in done.stderr


def test_run_whose_worker_cannot_start_says_why_in_one_line() -> None:
    """A worker that exits at start (here: a pool name Celery does not know) ends
    `orchestrator run` with one error line carrying the worker's own words, no traceback."""
    env = {**_cli_env(), "ORCH_WORKER_POOL": "no-such-pool"}
    done = subprocess.run([sys.executable, "-m", "orchestrator.cli", "run", "examples/branch_merge.json",
                           "--input", '{"score": 3}'], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=90)
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    (line,) = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert "worker w0 exited with code 2" in line
    assert "'no-such-pool' is not one of" in line


@pytest.mark.timeout(60)
def test_a_setting_that_cannot_be_used_is_one_error_line_not_a_traceback(tmp_path: Path) -> None:
    """A Redis Cluster without a broker of its own: the CLI names the setting and exits 2."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ORCH_")}
    env.update(REDIS_URL="redis+cluster://127.0.0.1:1,127.0.0.1:2", PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-m", "orchestrator.cli", "run", str(ROOT / "examples/branch_merge.json")],
                          env=env, cwd=tmp_path, capture_output=True, text=True, timeout=50)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith("error: REDIS_URL names a Redis Cluster")
    assert "ORCH_BROKER_URL" in done.stderr


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("setting", "value", "says"), [
    ("ORCH_LANES", "abc", "setting ORCH_LANES: Input should be a valid integer"),
    ("ORCH_WORKSPACE_LIMITS", '{"acme": {"weight": 0}}',
     "setting ORCH_WORKSPACE_LIMITS: ORCH_WORKSPACE_LIMITS['acme']"),
    ("REDIS_URL", "ftp://user:hunter2@example", "setting REDIS_URL: the URL's scheme must be one of"),
])
def test_a_malformed_setting_is_one_error_line_naming_it(tmp_path: Path, setting: str, value: str, says: str) -> None:
    """A typo in the environment: the CLI names the variable and what is wrong, exits 2,
    and never echoes a URL's password."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ORCH_") and k != "REDIS_URL"}
    env.update({setting: value, "PYTHONPATH": str(ROOT)})
    done = subprocess.run([sys.executable, "-m", "orchestrator.cli", "graphs", "list"],
                          env=env, cwd=tmp_path, capture_output=True, text=True, timeout=50)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith(f"error: {says}")
    assert "hunter2" not in done.stderr
