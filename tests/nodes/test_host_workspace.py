"""The run's workspace as nodes read it: from the run record, once per run per process."""

from __future__ import annotations

import json
from typing import Any

from nodes._shared.host import run_workspace, workspace_of
from orchestrator.settings import Settings
from orchestrator.store.keys import Keys
from tests.agents.conftest import make_ctx


class CountingRedis:
    """Answers HGET of run records from a dict and counts the reads."""

    def __init__(self, metas: dict[str, Any]) -> None:
        self.metas = metas
        self.reads = 0

    async def hget(self, key: str, field: str) -> str | None:
        self.reads += 1
        meta = self.metas.get(key)
        return None if meta is None else json.dumps(meta)


async def test_each_run_s_workspace_is_read_once_and_never_mixed_up() -> None:
    settings = Settings(key_prefix="hostws")
    keys = Keys("hostws")
    redis = CountingRedis({keys.run("ra"): {"workspace": "team-a"}, keys.run("rb"): {"workspace": "team-b"}})

    def ctx(run_id: str) -> Any:
        return make_ctx(run_id=run_id, services={"redis_url": "redis://x", "settings": settings})

    for _ in range(3):
        assert await workspace_of(ctx("ra"), redis) == "team-a"  # type: ignore[arg-type]
        assert await workspace_of(ctx("rb"), redis) == "team-b"  # type: ignore[arg-type]
        assert await run_workspace(ctx("ra")) == "team-a"  # no connection: known
    assert redis.reads == 2
    # a run with no record yet is "default" and not remembered
    assert await workspace_of(ctx("rc"), redis) == "default"  # type: ignore[arg-type]
    redis.metas[keys.run("rc")] = {"workspace": "team-c"}
    assert await workspace_of(ctx("rc"), redis) == "team-c"  # type: ignore[arg-type]
