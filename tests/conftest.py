"""Suite-wide settings: hermetic environment, hypothesis profiles."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

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

settings.register_profile(
    "default", max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "ci", max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile("ci" if os.environ.get("CI") else "default")
