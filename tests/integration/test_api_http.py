"""The API over real HTTP (uvicorn on a free port) with real Celery workers and Redis.

The server runs in a thread of the test process; the workers and redis-server are the
session fixtures of ``tests/integration/conftest.py``. Requests go through
``orchestrator.client.Client`` (sync), so these tests also exercise the client's SSE
reconnect logic.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from orchestrator.api import create_app
from orchestrator.client import Client, parse_frames
from orchestrator.kernel.registry import Registry
from orchestrator.local.embedded_redis import EmbeddedRedis, free_port
from orchestrator.local.embedded_workers import WorkerProcesses
from orchestrator.settings import Settings
from tests.fake_nodes import graph
from tests.support.servers import serve_in_thread

pytestmark = pytest.mark.integration



@pytest.fixture
def api_url(redis_server: EmbeddedRedis, workers: WorkerProcesses, registry: Registry) -> Iterator[str]:
    settings = Settings(redis_url=redis_server.url, sse_ping_s=1.0)
    app = create_app(settings, registry=registry)
    with serve_in_thread(app) as url:
        yield url


@pytest.fixture
def client(api_url: str) -> Iterator[Client]:
    with Client(api_url) as c:
        yield c


def slow_chain(graph_id: str, delay_s: float = 0.4) -> dict[str, Any]:
    return graph(
        [
            ("t", "manual_trigger", "Start"),
            ("p1", "probe", "First", {"delay_s": delay_s}),
            ("p2", "probe", "Second", {"delay_s": delay_s}),
        ],
        [("t", "output", "p1", "input"), ("p1", "output", "p2", "input")],
        id=graph_id,
    )


def stream_ids(api_url: str, run_id: str) -> list[str]:
    """Ids of every event in the run's stream (one fresh, complete read)."""
    with Client(api_url) as c:
        return [event_id for event_id, _ in c.iter_events(run_id)]


def test_webhook_run_streams_its_events_to_the_end(client: Client, api_url: str) -> None:
    hooked = graph(
        [
            ("w", "webhook_trigger", "Hook", {"path": "it/orders"}),
            ("p", "probe", "Probe"),
        ],
        [("w", "output", "p", "input")],
        id="it-hook",
    )
    client.create_graph(hooked)
    response = httpx.post(f"{api_url}/hooks/it/orders", json={"order": 7})
    assert response.status_code == 202
    run_id = response.json()["run_id"]
    events = [event for _, event in client.iter_events(run_id)]
    kinds = [(e["node_id"], e["event_type"]) for e in events]
    assert kinds[0] == ("", "run_started") and kinds[-1] == ("", "run_completed")
    assert ("p", "completed") in kinds
    run = client.get_run(run_id)
    assert run["status"] == "succeeded"
    assert run["nodes"]["w"]["outputs"]["output"]["value"]["body"] == {"order": 7}


def test_text_past_ascii_and_integers_past_64_bits_arrive_unchanged_in_events_and_the_run(
        client: Client, api_url: str) -> None:
    """The store writes its JSON as UTF-8 (not escapes) and integers exactly, whatever their
    size: a webhook body comes back the same in the streamed events and the run's view."""
    hooked = graph([("w", "webhook_trigger", "Hook", {"path": "it/utf8"}), ("p", "probe", "Prüfung 😀")],
                   [("w", "output", "p", "input")], id="it-utf8")
    client.create_graph(hooked)
    body = {"name": "Zoë — 你好 😀", "id": 2**70 + 1, "small": -(2**63), "ratio": 1.5e-7}
    response = httpx.post(f"{api_url}/hooks/it/utf8", json=body)
    assert response.status_code == 202
    run_id = response.json()["run_id"]
    events = [event for _, event in client.iter_events(run_id)]
    completed = next(e for e in events if e["node_id"] == "w" and e["event_type"] == "completed")
    assert completed["data"]["outputs"]["output"]["value"]["body"] == body
    assert next(e for e in events if e["node_id"] == "p")["node_name"] == "Prüfung 😀"
    run = client.get_run(run_id)
    assert run["status"] == "succeeded"
    assert run["nodes"]["w"]["outputs"]["output"]["value"]["body"] == body


def test_reconnect_with_last_event_id_misses_nothing_and_repeats_nothing(client: Client, api_url: str) -> None:
    # Long enough that the run is still going when the first stream is dropped, however
    # late that stream opens on a busy machine (0.4 s probes were a race: the stream could
    # open after the run had finished).
    client.create_graph(slow_chain("it-resume", delay_s=2.0))
    run_id = client.start_run("it-resume", {"x": 1})
    first: list[str] = []
    with httpx.stream("GET", f"{api_url}/runs/{run_id}/events", timeout=30) as response:
        for event_id, event_type, data in parse_frames(response.iter_lines()):
            first.append(event_id or "")
            if event_type == "started" and json.loads(data).get("node_id") == "p1":
                break  # drop the connection mid-run
    assert client.get_run(run_id)["status"] == "running"  # the disconnect did not cancel it
    rest = [event_id for event_id, _ in client.iter_events(run_id, last_event_id=first[-1])]
    assert first + rest == stream_ids(api_url, run_id)
    assert client.get_run(run_id)["status"] == "succeeded"


def test_cancel_stops_a_running_run_and_its_stream(client: Client) -> None:
    client.create_graph(slow_chain("it-cancel", delay_s=3.0))
    run_id = client.start_run("it-cancel", None)
    seen: list[tuple[str, str]] = []
    for _, event in client.iter_events(run_id):
        seen.append((event["node_id"], event["event_type"]))
        if event["event_type"] == "started" and event["node_id"] == "p1":
            assert client.cancel(run_id)["cancelled"] is True
    assert seen[-1] == ("", "run_cancelled")
    assert ("p2", "started") not in seen
    assert client.get_run(run_id)["status"] == "cancelled"


def test_a_cancelled_run_ends_its_running_node_cancelled_at_once_and_for_good(client: Client) -> None:
    """A client drawing node states from events sees the running node end with the run; the
    worker that stops it a moment later changes neither its state nor its events."""
    client.create_graph(slow_chain("it-cancel-node", delay_s=3.0))
    run_id = client.start_run("it-cancel-node", None)
    seen: list[tuple[str, str]] = []
    for _, event in client.iter_events(run_id):
        seen.append((event["node_id"], event["event_type"]))
        if event["event_type"] == "started" and event["node_id"] == "p1":
            assert client.cancel(run_id)["cancelled"] is True
            assert client.get_run(run_id)["nodes"]["p1"]["status"] == "cancelled"
    assert seen[-3:] == [("p1", "cancelled"), ("p2", "not_run"), ("", "run_cancelled")]
    deadline = time.monotonic() + 1.5  # the worker notices within a poll (0.2 s) and stops p1
    while time.monotonic() < deadline:
        assert client.get_run(run_id)["nodes"]["p1"]["status"] == "cancelled"
        time.sleep(0.1)
    assert [(e["node_id"], e["event_type"]) for _, e in client.iter_events(run_id)][-3:] == seen[-3:]


def test_rerun_from_a_failed_node_reuses_the_outputs_before_it(client: Client) -> None:
    failing = graph(
        [
            ("t", "manual_trigger", "Start"),
            ("p", "probe", "Before"),
            ("b", "boom", "Breaks", {"message": "bad"}),
        ],
        [("t", "output", "p", "input"), ("p", "output", "b", "input")],
        id="it-rerun",
    )
    client.create_graph(failing)
    old = client.start_run("it-rerun", {"x": 1})
    assert list(client.iter_events(old))[-1][1]["event_type"] == "run_failed"
    new = client.rerun(old, "b")
    events = [event for _, event in client.iter_events(new)]
    started = [e["node_id"] for e in events if e["event_type"] == "started"]
    assert started == ["b"]  # the trigger and "Before" were not run again
    run = client.get_run(new)
    assert run["meta"]["rerun_of"] == old
    assert run["nodes"]["b"]["status"] == "failed"


def test_waiting_webhook_answers_with_the_run_output(client: Client, api_url: str) -> None:
    hooked = graph(
        [
            ("w", "webhook_trigger", "Hook", {"path": "it/wait", "response_mode": "wait"}),
            ("p", "probe", "Probe", {"value": {"ok": True}}),
        ],
        [("w", "output", "p", "input")],
        id="it-wait",
    )
    client.create_graph(hooked)
    response = httpx.post(f"{api_url}/hooks/it/wait", json={"order": 1}, timeout=30)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["status"] == "succeeded"
    assert body["output"]["value"] == {"ok": True}


@pytest.fixture
def second_api_process(redis_server: EmbeddedRedis, workers: WorkerProcesses) -> Iterator[str]:
    """Another API, as its own `orchestrator serve` process on the same Redis."""
    import os
    import signal
    import subprocess
    import sys

    port = free_port()
    env = {**os.environ, "REDIS_URL": redis_server.url}
    proc = subprocess.Popen(  # our own CLI
        [sys.executable, "-m", "orchestrator.cli", "serve", "--host", "127.0.0.1", "--port", str(port)],
        env=env, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError("the second API process did not start")
            time.sleep(0.1)
        yield url
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=15)


def test_a_second_api_process_serves_the_rest_of_a_stream_begun_on_the_first(
    client: Client, api_url: str, second_api_process: str,
) -> None:
    client.create_graph(slow_chain("it-two-apis"))
    run_id = client.start_run("it-two-apis", {"x": 1})
    first: list[str] = []
    with httpx.stream("GET", f"{api_url}/runs/{run_id}/events", timeout=30) as response:
        for event_id, event_type, _ in parse_frames(response.iter_lines()):
            first.append(event_id or "")
            if event_type == "started":
                break  # this client moves to the other API process mid-run
    with Client(second_api_process) as other:
        rest = [event_id for event_id, _ in other.iter_events(run_id, last_event_id=first[-1])]
        assert other.get_run(run_id)["status"] == "succeeded"
    assert first + rest == stream_ids(api_url, run_id)


def test_the_readme_client_snippet_runs_as_written(api_url: str, monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """README's Python example, executed as it stands (only the API address differs)."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    readme = (root / "README.md").read_text()
    snippet = next(block for block in re.findall(r"```python\n(.*?)```", readme, flags=re.S)
                   if "orchestrator.client import Client" in block)
    snippet = snippet.replace('"http://127.0.0.1:8000", api_key="..."', repr(api_url))
    monkeypatch.chdir(root)
    # The repository's own README, executed in a test: a doc example that stops working fails here.
    exec(compile(snippet, "README.md", "exec"), {})
    printed = capsys.readouterr().out
    assert "run_completed" in printed
    assert "'band': 'high'" in printed or '"band": "high"' in printed
