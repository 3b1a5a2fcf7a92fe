"""Suite-wide settings: hermetic environment, hypothesis profiles."""

from __future__ import annotations

import os
import tempfile

from hypothesis import HealthCheck, settings

os.environ["AGNO_TELEMETRY"] = "false"
# Never pick up a developer's Redis or keys: fixtures start their own servers.
for name in ("REDIS_URL", "ORCH_REDIS_URL", "ORCH_API_KEYS", "OPENAI_API_KEY", "ORCH_OFFLINE_MODELS"):
    os.environ.pop(name, None)

# The embedded vector store of every test process (and the workers it starts) lives in
# a fresh temporary folder, never in the developer's home.
os.environ["ORCH_VECTOR_SQLITE_PATH"] = os.path.join(
    tempfile.mkdtemp(prefix="orch-vectors-"), "vectors.sqlite3")

settings.register_profile(
    "default", max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "ci", max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile("ci" if os.environ.get("CI") else "default")
