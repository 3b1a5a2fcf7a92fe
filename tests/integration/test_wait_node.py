"""The Wait node on real processes: a run waits holding no worker, survives a restart of the
API and of the worker while it waits, and resumes by form, by signed URL or by time.

Each test owns its worker process (restarted mid-wait: a new process, nothing carried over)
and serves the API in a thread (stopped and served again by a new app); the API's
background sweeper wakes timers. redis-server is the session's.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest

from orchestrator.api import create_app
from orchestrator.client import ApiError, Client
from orchestrator.kernel.registry import Registry
from orchestrator.local.embedded_redis import EmbeddedRedis
from orchestrator.local.embedded_workers import WorkerConfig, WorkerProcesses
from orchestrator.service.waits import sign
from orchestrator.settings import Settings
from tests.fake_nodes import graph
from tests.support.servers import serve_in_thread

pytestmark = pytest.mark.integration

SECRET = "wait-test-resume-secret-0123456789"
FORM = {"type": "object", "properties": {"amount": {"type": "number"}, "note": {"type": "string"}},
        "required": ["amount"]}
DEADLINE_S = 30.0


def wait_graph(graph_id: str, wait: dict[str, Any]) -> dict[str, Any]:
    return graph(
        [("t", "manual_trigger", "Start"), ("w", "wait", "Wait", wait),
         ("after", "set_fields", "After", {"fields": {"after": True}}),
         ("late", "set_fields", "Late", {"fields": {"late": True}})],
        [("t", "output", "w", "input"), ("w", "output", "after", "input"),
         ("w", "timeout", "late", "input")],
        id=graph_id)


@contextmanager
def api(redis_server: EmbeddedRedis, registry: Registry) -> Iterator[str]:
    settings = Settings(redis_url=redis_server.url, resume_url_secret=SECRET, sweep_period_s=0.3)
    with serve_in_thread(create_app(settings, registry=registry)) as url:
        yield url


@contextmanager
def worker(redis_server: EmbeddedRedis) -> Iterator[WorkerProcesses]:
    procs = WorkerProcesses(redis_server.url, WorkerConfig(count=1)).start()
    try:
        yield procs
    finally:
        procs.stop()


def status_becomes(url: str, run_id: str, wanted: set[str]) -> dict[str, Any]:
    deadline = time.monotonic() + DEADLINE_S
    with Client(url) as client:
        while True:
            run = client.get_run(run_id)
            if run["status"] in wanted:
                return run
            assert time.monotonic() < deadline, f"run {run_id} still {run['status']}"
            time.sleep(0.1)


def start_waiting(redis_server: EmbeddedRedis, registry: Registry, graph_json: dict[str, Any]
                  ) -> tuple[str, list[dict[str, Any]], str]:
    """Start a run of ``graph_json`` on a first API and worker, wait until it waits, ask the
    API what it waits for and (for a url wait) for its resume URL; then stop both."""
    with worker(redis_server), api(redis_server, registry) as url, Client(url) as client:
        client.create_graph(graph_json)
        run_id = client.start_run(graph_json["id"], {"order": 7})
        run = status_becomes(url, run_id, {"waiting", "failed", "succeeded"})
        assert run["status"] == "waiting" and run["nodes"]["w"]["status"] == "waiting"
        items = httpx.get(f"{url}/runs/{run_id}/waits").json()["items"]
        link = ""
        if items and items[0]["kind"] == "url":
            link = client.resume_url(run_id, "w")
    return run_id, items, link


def outputs(run: dict[str, Any], node: str) -> dict[str, Any]:
    return {port: v["value"] for port, v in run["nodes"][node]["outputs"].items()}


def test_a_form_answer_resumes_the_run_after_an_api_and_worker_restart(
        redis_server: EmbeddedRedis, registry: Registry) -> None:
    run_id, items, _ = start_waiting(redis_server, registry, wait_graph(
        "wait-form", {"resume_on": "form", "form_schema": FORM, "message": "How much?"}))
    assert items == [{"node_id": "w", "kind": "form", "message": "How much?", "schema": FORM,
                      "timeout_s": None, "due_at": None}]
    with worker(redis_server), api(redis_server, registry) as url, Client(url) as client:
        assert [w["kind"] for w in client.waits(run_id)] == ["form"]  # the new API knows it waits
        with pytest.raises(ApiError) as bad:
            client.submit_form(run_id, "w", {"amount": "lots"})
        assert bad.value.status == 422 and bad.value.body["error"]["parameter"] == "data.amount"
        assert "amount" in bad.value.body["error"]["message"]
        client.submit_form(run_id, "w", {"amount": 12.5, "note": "ok"})
        with pytest.raises(ApiError) as again:
            client.submit_form(run_id, "w", {"amount": 1})
        assert again.value.status == 409 and "answered already" in str(again.value)
        run = status_becomes(url, run_id, {"succeeded", "failed"})
    assert run["status"] == "succeeded"
    assert outputs(run, "w") == {"output": {"amount": 12.5, "note": "ok"}}
    assert outputs(run, "after")["output"]["after"] is True
    assert run["nodes"]["late"]["status"] == "skipped"


def test_a_signed_resume_url_resumes_the_run_after_an_api_and_worker_restart(
        redis_server: EmbeddedRedis, registry: Registry) -> None:
    run_id, items, link = start_waiting(redis_server, registry, wait_graph(
        "wait-url", {"resume_on": "url", "message": "payment callback"}))
    assert items[0]["kind"] == "url" and link.startswith(f"/resume/{run_id}/w?exp=")
    with worker(redis_server), api(redis_server, registry) as url:
        forged = link.rsplit("sig=", 1)[0] + "sig=" + "0" * 64
        expired = f"/resume/{run_id}/w?exp=1000&sig={sign(SECRET, run_id, 'w', 1000)}"
        elsewhere = link.replace(f"/resume/{run_id}/w", f"/resume/{run_id}/after")
        refusals = [httpx.post(url + bad, json={"paid": True}) for bad in (forged, expired, elsewhere)]
        assert [r.status_code for r in refusals] == [403, 403, 403]
        assert len({r.text for r in refusals}) == 1  # the same answer, whatever was wrong
        big = httpx.post(url + link, content=b'{"x": "' + b"a" * 70_000 + b'"}',
                         headers={"content-type": "application/json"})
        assert big.status_code == 413
        assert httpx.post(url + link, json={"paid": True, "ref": "tx-9"}).status_code == 200
        assert httpx.post(url + link, json={"paid": False}).status_code == 409
        run = status_becomes(url, run_id, {"succeeded", "failed"})
    assert run["status"] == "succeeded"
    assert outputs(run, "w") == {"output": {"paid": True, "ref": "tx-9"}}


def test_a_duration_resumes_the_run_though_the_api_and_the_worker_were_down_when_it_passed(
        redis_server: EmbeddedRedis, registry: Registry) -> None:
    run_id, items, _ = start_waiting(redis_server, registry, wait_graph(
        "wait-time", {"resume_on": "time", "duration_s": 1.5}))
    assert items[0]["kind"] == "time" and items[0]["due_at"] is not None
    time.sleep(2.0)  # the time passes with no API, no sweeper and no worker up
    with worker(redis_server), api(redis_server, registry) as url:
        run = status_becomes(url, run_id, {"succeeded", "failed"})
    assert run["status"] == "succeeded"
    assert outputs(run, "w") == {"output": {"order": 7}}  # the input, passed through
    assert run["nodes"]["late"]["status"] == "skipped"


def test_a_form_nobody_answers_leaves_by_the_timeout_branch_and_refuses_a_late_answer(
        redis_server: EmbeddedRedis, registry: Registry) -> None:
    with worker(redis_server), api(redis_server, registry) as url, Client(url) as client:
        client.create_graph(wait_graph("wait-timeout", {"resume_on": "form", "form_schema": FORM,
                                                         "timeout_s": 1}))
        run_id = client.start_run("wait-timeout", {"order": 8})
        run = status_becomes(url, run_id, {"succeeded", "failed"})
        late = httpx.post(f"{url}/runs/{run_id}/waits/w/form", json={"amount": 1})
    assert run["status"] == "succeeded"
    assert outputs(run, "w") == {"timeout": {"order": 8}}
    assert outputs(run, "late")["output"]["late"] is True
    assert run["nodes"]["after"]["status"] == "skipped"
    assert late.status_code == 409
