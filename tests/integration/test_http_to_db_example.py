"""``examples/http_to_db.json`` end to end: the shipped items server, HTTP Request, SQLite."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.test_cli_run import ROOT, run_cli

pytestmark = pytest.mark.integration


@pytest.mark.timeout(300)
def test_http_to_db_example_stores_fetched_rows_and_queries_them_back(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen([sys.executable, str(ROOT / "examples" / "items_server.py"), str(port)],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None and "serving" in server.stdout.readline()
        monkeypatch.setitem(os.environ, "ORCH_DATABASE_SQLITE_PATH", str(tmp_path / "db.sqlite3"))
        monkeypatch.setitem(os.environ, "ORCH_EGRESS_ALLOW", "127.0.0.1")
        done = run_cli("run", "examples/http_to_db.json", "--json", "--workers", "1",
                       "--input", json.dumps({"url": f"http://127.0.0.1:{port}/items"}))
        assert done.returncode == 0, done.stderr[-3000:]
        *events, summary = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
        assert summary["status"] == "succeeded"
        outputs = {e["node_name"]: e["data"]["outputs"]["output"]["value"] for e in events
                   if e["event_type"] == "completed"}
        assert outputs["Insert rows"]["rowcount"] == 3
        assert outputs["Query back"]["rows"] == [{"name": "anvil", "price": 12.5}, {"name": "lantern", "price": 7.25}]
    finally:
        server.terminate()
        server.wait(timeout=10)
        if server.stdout is not None:
            server.stdout.close()
