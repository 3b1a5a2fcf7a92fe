"""``examples/rag.json`` end to end offline, as a user runs it on a fresh clone."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.integration.test_cli_run import run_cli

pytestmark = pytest.mark.integration


@pytest.mark.timeout(300)
def test_rag_example_runs_offline_and_answers_from_the_right_chunk(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(os.environ, "ORCH_VECTOR_SQLITE_PATH", str(tmp_path / "vectors.sqlite3"))
    done = run_cli("run", "examples/rag.json", "--offline", "--json", "--workers", "1",
                   "--input", '{"question": "How long are finished runs kept?"}')
    assert done.returncode == 0, done.stderr[-3000:]
    *events, summary = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    assert summary["status"] == "succeeded"
    outputs = {e["node_name"]: e["data"]["outputs"]["output"]["value"] for e in events
               if e["event_type"] == "completed"}
    hits = outputs["Search"]["hits"]
    assert "Finished runs are kept for seven days" in hits[0]["text"]
    assert hits[0]["metadata"]["source"] == "handbook.md"
    answer = outputs["Answer"]["response"]
    first_source = answer.index("[handbook.md, chunk")
    assert "Finished runs are kept for seven days" in answer[first_source:first_source + 200]
    assert outputs["Upsert"]["upserted"] == outputs["Chunk"]["count"] > 3
