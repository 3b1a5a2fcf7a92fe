"""Starting a worker or a CLI run loads every node type; that must not import the heavy
libraries only some nodes use when they execute (Agno, SQLAlchemy, numpy, ...).

Each of them costs a worker and every ``orchestrator run`` a few hundred milliseconds of
CPU at start-up. A node executor imports them inside ``execute``/``materialize`` (see
``nodes/agents/agent/executor.py``); a failure names the project module that pulled one in.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# Imported by a node only when it executes; never at discovery or worker start.
HEAVY = ("agno", "openai", "fastmcp", "mcp", "httpx2", "httpx", "httpcore", "sqlalchemy", "asyncpg", "aiosqlite",
         "numpy", "jsonschema", "regex")

# A fresh interpreter: records, for each heavy package, the project frames that first
# imported it, then imports the worker's task module and loads the registry.
CHILD = """
import importlib.abc, json, sys, traceback
heavy, root = set(sys.argv[1].split(",")), sys.argv[2]
first = {}

class Spy(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        top = name.partition(".")[0]
        if top in heavy and top not in first:
            first[top] = [f"{f.filename[len(root) + 1:]}:{f.lineno}" for f in traceback.extract_stack()
                          if f.filename.startswith(root + "/") and "/.venv/" not in f.filename]
        return None

sys.meta_path.insert(0, Spy())
import workers.tasks
from orchestrator.service.plugins import get_registry
from orchestrator.settings import WorkerSettings
types = len(get_registry(WorkerSettings()))
print(json.dumps({"types": types, "loaded": {m: first.get(m, []) for m in sorted(heavy & set(sys.modules))}}))
"""


def test_loading_the_registry_in_a_worker_imports_no_heavy_node_library() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "ORCH_NODE_PATHS": "", "AGNO_TELEMETRY": "false"}
    done = subprocess.run([sys.executable, "-c", CHILD, ",".join(HEAVY), str(ROOT)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["types"] > 20  # the repo's node folders were loaded
    culprits = [f"{module}: imported by {' <- '.join(reversed(chain[-4:])) or 'a library'}"
                for module, chain in report["loaded"].items()]
    assert not culprits, "node discovery imported heavy libraries:\n" + "\n".join(culprits)
