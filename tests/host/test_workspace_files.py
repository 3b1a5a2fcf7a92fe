"""A workspace's files on the worker's disk, with root and non-root workers on one queue.

Whichever worker comes first creates the workspace's folder and SQLite files; the other
must still open them (the embedded database and vector store), and nobody else may.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.host.workspace import create_owned
from tests.nodes.rag_support import run_with, settings

ROOT = Path(__file__).resolve().parents[2]
NON_ROOT_UID = 4243
SYSTEM_PYTHON = f"/usr/bin/python{sys.version_info[0]}.{sys.version_info[1]}"
# The second worker: the same nodes, as an ordinary uid, in the same workspace.
NON_ROOT_WORKER = """
import asyncio, json, sys, types
# The system interpreter may be older than 3.11.3, where redis-py imports async_timeout,
# which this environment does not install: asyncio's own timeout is the same thing.
sys.modules.setdefault("async_timeout", types.SimpleNamespace(timeout=asyncio.timeout))
from tests.nodes.rag_support import run_with, settings
services = {"settings": settings(workspace_data_dir=sys.argv[1]), "workspace": "alpha"}
async def main():
    await run_with("database_query", {"query": "INSERT INTO t (v) VALUES ('non-root')", "read_only": False},
                   services=services)
    rows = await run_with("database_query", {"query": "SELECT v FROM t ORDER BY rowid"}, services=services)
    await run_with("vector_store", {"collection": "c"}, {"input": {"documents": [
        {"text": "from non-root", "vector": [0.0, 1.0], "metadata": {}}]}}, services)
    hits = await run_with("vector_search", {"collection": "c", "top_k": 5}, {"input": {"vector": [1.0, 1.0]}},
                          services)
    print(json.dumps({"rows": [r["v"] for r in rows["rows"]], "hits": sorted(h["text"] for h in hits["hits"])}))
asyncio.run(main())
"""

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="switches between root and a non-root uid"),
    pytest.mark.skipif(not os.path.exists(SYSTEM_PYTHON), reason="needs the system's interpreter of this version"),
]


@pytest.fixture
def data_dir() -> Iterator[Path]:
    """The data folder as the documented set-up makes it: owned by the non-root workers' user."""
    base = Path(tempfile.mkdtemp(prefix="orch-ws-"))  # under /tmp: the other uid can reach it
    os.chmod(base, 0o755)
    folder = base / "workspaces"
    folder.mkdir(mode=0o700)
    os.chown(folder, NON_ROOT_UID, NON_ROOT_UID)
    try:
        yield folder
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _as_non_root(data_dir: Path) -> subprocess.CompletedProcess[str]:
    site = next(p for p in sys.path if p.endswith("site-packages"))
    return subprocess.run(
        ["setpriv", f"--reuid={NON_ROOT_UID}", f"--regid={NON_ROOT_UID}", "--clear-groups", "--",
         SYSTEM_PYTHON, "-c", NON_ROOT_WORKER, str(data_dir)],
        cwd=ROOT, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": f"{ROOT}:{site}", "HOME": "/tmp"},
        capture_output=True, text=True, timeout=120)


async def test_a_workspace_a_root_worker_created_first_works_on_a_non_root_worker(data_dir: Path) -> None:
    services: dict[str, Any] = {"settings": settings(workspace_data_dir=str(data_dir)), "workspace": "alpha"}
    await run_with("database_query", {"query": "CREATE TABLE t (v TEXT)", "read_only": False}, services=services)
    await run_with("database_query", {"query": "INSERT INTO t (v) VALUES ('root')", "read_only": False},
                   services=services)
    await run_with("vector_store", {"collection": "c"}, {"input": {"documents": [
        {"text": "from root", "vector": [1.0, 0.0], "metadata": {}}]}}, services)

    done = _as_non_root(data_dir)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout) == {"rows": ["root", "non-root"], "hits": ["from non-root", "from root"]}
    # ... and nobody else: everything is the data folder's owner's alone.
    for path in [data_dir / "alpha", *(data_dir / "alpha").iterdir()]:
        info = path.stat()
        assert (info.st_uid, info.st_gid) == (NON_ROOT_UID, NON_ROOT_UID), path
        assert stat.S_IMODE(info.st_mode) & 0o077 == 0, (path, oct(info.st_mode))


def test_a_link_planted_where_a_file_is_created_is_never_followed(data_dir: Path, tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("root's")
    (data_dir / "alpha").mkdir()
    (data_dir / "alpha" / "database.sqlite3").symlink_to(victim)
    create_owned(data_dir, data_dir / "alpha" / "database.sqlite3")
    assert victim.stat().st_uid == 0 and victim.read_text() == "root's"
