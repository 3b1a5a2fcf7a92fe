"""Browser tests of the web console: Debian's Chromium driven by Playwright (the PyPI
package's bundled driver; no browser is downloaded) against a real API (uvicorn on a free
port, in a thread), a real redis-server and real Celery worker processes running offline
models (``ORCH_OFFLINE_MODELS=1``).

The API requires a key, so every page goes through the sign-in form and the session
cookie. A second tiny web server serves a page on another origin (``127.0.0.1:<port>``,
listed in ``ORCH_CORS_ORIGINS``; ``localhost:<port>`` is the same files on an unlisted
origin). Every server is module-scoped, so nothing of this suite outlives it in a
whole-suite run. Screenshots go to ``artifacts/screenshots/`` (git-ignored). Skipped when
``/usr/bin/chromium`` or the ``playwright`` package is missing (``.ci/system-deps``
installs Chromium).
"""

from __future__ import annotations

import functools
import http.server
import json
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from orchestrator.local.embedded_redis import EmbeddedRedis, free_port
from orchestrator.local.embedded_workers import WorkerConfig, WorkerProcesses

CHROMIUM = "/usr/bin/chromium"
KEY = "ui-test-key"
FAKE_PACK = Path(__file__).parent.parent / "integration" / "fake_pack"
SOCKET_PACK = Path(__file__).parent / "socket_pack"  # typed int/json sockets for the editor
NODE_PATHS = os.pathsep.join([str(FAKE_PACK), str(SOCKET_PACK)])
EXAMPLES = Path(__file__).parent.parent.parent / "examples"
SCREENSHOTS = Path(__file__).parent.parent.parent / "artifacts" / "screenshots"
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-dev-shm-usage",
]
START_TIMEOUT_S = 15.0

pytestmark = pytest.mark.integration

if not Path(CHROMIUM).exists():
    pytest.skip(f"{CHROMIUM} is not installed (see .ci/system-deps)", allow_module_level=True)
playwright_sync = pytest.importorskip("playwright.sync_api")


@dataclass
class Stack:
    api_url: str
    other_origin: str  # listed in ORCH_CORS_ORIGINS
    unlisted_origin: str  # the same page server under another host name
    settings: Any = None


@dataclass
class ApiServer:
    """An API process stand-in: uvicorn in a thread; ``stop`` ends it even with open streams."""

    server: Any
    thread: threading.Thread

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


def serve_api(settings: Any, port: int) -> ApiServer:
    import uvicorn

    from orchestrator.api import create_app
    from orchestrator.service.plugins import load_registry

    app = create_app(settings, registry=load_registry(settings))
    config = uvicorn.Config(
        app, host="127.0.0.1", port=port, log_level="warning", lifespan="on", timeout_graceful_shutdown=1,
        loop="asyncio",  # as `orchestrator serve`
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + START_TIMEOUT_S
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.02)
    return ApiServer(server, thread)


@pytest.fixture(scope="module")
def redis_server() -> Iterator[EmbeddedRedis]:
    with EmbeddedRedis(unix_socket=False) as server:
        yield server


@pytest.fixture(scope="module")
def workers(redis_server: EmbeddedRedis) -> Iterator[WorkerProcesses]:
    procs = WorkerProcesses(redis_server.url, WorkerConfig(
        count=1, concurrency=3, env={"ORCH_NODE_PATHS": NODE_PATHS, "ORCH_OFFLINE_MODELS": "1"},
    ))
    procs.start()
    try:
        yield procs
    finally:
        procs.stop()


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        return


def serve_thread(server: Any) -> threading.Thread:
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    return thread


@pytest.fixture(scope="module")
def stack(redis_server: EmbeddedRedis, workers: WorkerProcesses) -> Iterator[Stack]:
    from cryptography.fernet import Fernet

    from orchestrator.settings import Settings

    page_port = free_port()
    other = f"http://127.0.0.1:{page_port}"
    settings = Settings(
        redis_url=redis_server.url, api_keys=KEY, cors_origins=other, sse_ping_s=1.0,
        node_paths=NODE_PATHS, key_prefix="orc", credentials_key=Fernet.generate_key().decode(),
    )
    port = free_port()
    api = serve_api(settings, port)
    pages = Path(tempfile.mkdtemp(prefix="orch-ui-pages-"))
    (pages / "follow.html").write_text(FOLLOW_PAGE)
    page_server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", page_port), functools.partial(QuietHandler, directory=str(pages))
    )
    serve_thread(page_server)
    try:
        yield Stack(
            api_url=f"http://127.0.0.1:{port}", other_origin=other,
            unlisted_origin=f"http://localhost:{page_port}", settings=settings,
        )
    finally:
        page_server.shutdown()
        page_server.server_close()
        api.stop()
        shutil.rmtree(pages, ignore_errors=True)


# A page on another origin: asks for a stream token with the API key (CORS preflight
# with Authorization), then follows the run with the browser's own EventSource.
FOLLOW_PAGE = """<!doctype html><html lang="en"><title>follow</title><link rel="icon" href="data:,"><body><script>
window.follow = async (api, key, runId) => {
  const events = [];
  const grant = await fetch(api + "/auth/stream-token", {method: "POST",
    headers: {"Authorization": "Bearer " + key, "Content-Type": "application/json"},
    body: JSON.stringify({run_id: runId})}).then(r => r.json());
  return await new Promise((resolve, reject) => {
    const source = new EventSource(api + grant.events_url);
    const types = ["run_started", "started", "completed", "run_completed", "run_failed"];
    for (const t of types) source.addEventListener(t, (m) => {
      events.push([m.lastEventId, t]);
      if (t === "run_completed" || t === "run_failed") { source.close(); resolve(events); }
    });
    setTimeout(() => { source.close(); reject(new Error("no terminal event: " + JSON.stringify(events))); }, 20000);
  });
};
</script></body></html>"""


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    profile = tempfile.mkdtemp(prefix="orch-ui-chromium-")
    with playwright_sync.sync_playwright() as p:
        context = p.chromium.launch_persistent_context(
            profile, executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS,
            viewport={"width": 1280, "height": 720},
        )
        try:
            yield context
        finally:
            context.close()
            shutil.rmtree(profile, ignore_errors=True)


@dataclass
class Console:
    page: Any
    api_url: str
    errors: list[str]

    def go(self, route: str) -> None:
        """Open a page of the console afresh (a full load, as a user opening a link)."""
        self.page.goto("about:blank")
        self.page.goto(f"{self.api_url}/ui/#/{route}")

    def shot(self, name: str, sizes: tuple[tuple[int, int], ...] = ()) -> None:
        """A screenshot of the page as it is (artifacts/screenshots/NAME.png), and one at
        each of ``sizes`` (NAME-WxH.png; the viewport is put back after)."""
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        self.page.screenshot(path=str(SCREENSHOTS / f"{name}.png"))
        if not sizes:
            return
        before = self.page.viewport_size
        for width, height in sizes:
            self.page.set_viewport_size({"width": width, "height": height})
            self.frames()
            self.page.screenshot(path=str(SCREENSHOTS / f"{name}-{width}x{height}.png"))
        self.page.set_viewport_size(before)

    def frames(self, count: int = 2) -> None:
        """Wait until the page has drawn ``count`` frames (resize observers run before)."""
        self.page.evaluate(
            "n => new Promise(done => {"
            " const step = k => k ? requestAnimationFrame(() => step(k - 1)) : done(); step(n); })",
            count,
        )

    def api(self, method: str, path: str, body: Any = None) -> Any:
        """A direct API call with the key (test set-up, not through the console)."""
        import httpx

        response = httpx.request(method, self.api_url + path, json=body, headers={"Authorization": f"Bearer {KEY}"})
        response.raise_for_status()
        return response.json() if response.content else None


@pytest.fixture
def console(stack: Stack, browser: Any) -> Iterator[Console]:
    """A fresh tab, signed in through the form; fails the test on any page or console error."""
    page = browser.new_page()
    page.set_default_timeout(15_000)
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(f"{e} {e.stack}"))
    ui = Console(page=page, api_url=stack.api_url, errors=errors)
    ui.go("graphs")
    if page.locator("#signin").count() or page.wait_for_selector("#signin, h1", timeout=10_000):
        if page.locator("#signin").count():
            page.fill("#api-key", KEY)
            page.click("#signin button[type=submit]")
            page.wait_for_selector("h1:has-text('Graphs')")
    page.set_viewport_size({"width": 1280, "height": 720})
    try:
        yield ui
    finally:
        page.close()
    assert not errors, f"browser console errors: {errors}"


def example(name: str, graph_id: str) -> dict[str, Any]:
    raw: dict[str, Any] = json.loads((EXAMPLES / f"{name}.json").read_text())
    raw["id"] = graph_id
    return raw


# How much of the graph the canvas shows: nodes wholly inside it, the scale, the wires kept.
FITS = """() => {
    const gv = document.querySelector('#canvas').graphView;
    const r = gv.canvas.getBoundingClientRect();
    const inside = gv.nodes().filter(n => {
        const a = gv.screenPoint([n.pos[0], n.pos[1] - LiteGraph.NODE_TITLE_HEIGHT]);
        const b = gv.screenPoint([n.pos[0] + n.size[0], n.pos[1] + n.size[1]]);
        return a.x >= r.left && a.y >= r.top && b.x <= r.right && b.y <= r.bottom;
    });
    return {nodes: gv.nodes().length, inside: inside.length, scale: gv.view.ds.scale, wires: gv.toJSON().edges.length};
}"""
