"""Suite-wide settings: hermetic environment, hypothesis profiles."""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

os.environ["AGNO_TELEMETRY"] = "false"
# Never pick up a developer's Redis or keys: fixtures start their own servers.
for name in ("REDIS_URL", "ORCH_REDIS_URL", "ORCH_API_KEYS", "OPENAI_API_KEY", "ORCH_OFFLINE_MODELS"):
    os.environ.pop(name, None)

# The embedded stores (vectors, database) of every test process and its workers live in
# a fresh temporary folder, never in the developer's home.
_STATE_DIR = tempfile.mkdtemp(prefix="orch-test-state-")
atexit.register(shutil.rmtree, _STATE_DIR, True)
os.environ["ORCH_VECTOR_SQLITE_PATH"] = os.path.join(_STATE_DIR, "vectors.sqlite3")
os.environ["ORCH_DATABASE_SQLITE_PATH"] = os.path.join(_STATE_DIR, "database.sqlite3")


def _share_bytecode() -> None:
    """Where no bytecode may be written (PYTHONDONTWRITEBYTECODE; uv installs none either),
    every Python process the suite starts (test processes, Celery workers, CLI runs, API
    servers: hundreds) would compile each module it imports again, several seconds of CPU
    per start. Then the suite writes bytecode under the environment, never beside the
    sources: a module is compiled by the first process that imports it and read by the
    rest. An explicit PYTHONPYCACHEPREFIX, or writing allowed, is left as it is."""
    if not sys.dont_write_bytecode or sys.pycache_prefix:
        return
    cache = Path(sys.prefix) / "pycache"  # the venv's, kept for the next run
    try:
        if sys.prefix == sys.base_prefix:
            raise PermissionError("not a virtual environment")
        cache.mkdir(exist_ok=True)
    except OSError:  # one cache for this run's processes
        cache = Path(_STATE_DIR) / "pycache"
    sys.pycache_prefix = str(cache)
    sys.dont_write_bytecode = False
    os.environ["PYTHONPYCACHEPREFIX"] = str(cache)  # the processes the tests start
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)


_share_bytecode()

# Modules whose tests are slow (each starts and kills processes, or drives a browser): marked
# here, in one place, so `./dev test -m "not slow"` is a fast subset for a developer; CI and
# `./dev test` run them all.
SLOW_MODULES = frozenset({
    "tests/integration/test_faults.py",
    "tests/integration/test_host_faults.py",
    "tests/integration/test_retention.py",
    "tests/integration/test_cli_run.py",
    "tests/cli/test_shutdown.py",
    "tests/ui/test_console.py",
    "tests/deploy/test_compose.py",
})


@pytest.fixture(scope="session")
def cluster_server() -> Iterator[Any]:
    """A 3-primary Redis Cluster per test process, started on first use
    (``tests/support/redis_cluster.py``); skipped without the packaged binaries."""
    from tests.support import redis_cluster

    if not redis_cluster.available():
        pytest.skip(f"no {redis_cluster.SERVER} / {redis_cluster.CLI} (Debian's redis-server, redis-tools)")
    with redis_cluster.redis_cluster(primaries=3) as cluster:
        yield cluster


# The longest modules, longest first (summed test times of a whole-suite run): they are
# handed out first, so in `./dev test` (modules spread over processes, in collection order:
# --no-loadscope-reorder) no process is left running one long module at the end while the
# others idle. The rest follow in their usual order.
LONGEST_MODULES = (
    "tests/integration/test_cli_run.py",
    "tests/cli/test_shutdown.py",
    "tests/integration/test_concurrency.py",
    "tests/integration/test_host_faults.py",
    "tests/agents/test_mcp_stdio_confinement.py",
    "tests/ui/test_console.py",
    "tests/integration/test_cluster_faults.py",
    "tests/ui/test_editor.py",
    "tests/integration/test_rabbitmq.py",
    "tests/integration/test_wait_node.py",
    "tests/integration/test_faults.py",
    "tests/deploy/test_compose.py",
    "tests/cli/test_cli_pipes.py",
    "tests/integration/test_cluster_runs.py",
    "tests/integration/test_tracing.py",
    "tests/integration/test_api_http.py",
    "tests/integration/test_child_runs.py",
    "tests/integration/test_lanes.py",
    "tests/integration/test_worker_metrics.py",
    "tests/integration/test_schedules.py",
    "tests/integration/test_backpressure.py",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    root = Path(str(config.rootpath))
    rank = {module: i for i, module in enumerate(LONGEST_MODULES)}
    order: dict[pytest.Item, int] = {}
    for item in items:
        try:
            relative = Path(str(item.path)).relative_to(root).as_posix()
        except ValueError:
            continue
        order[item] = rank.get(relative, len(rank))
        if relative in SLOW_MODULES or relative.startswith("tests/ui/test_editor"):
            item.add_marker(pytest.mark.slow)
    items.sort(key=lambda item: order.get(item, len(rank)))  # stable: a module's tests stay in order


settings.register_profile(
    "default", max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "ci", max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile("ci" if os.environ.get("CI") else "default")
