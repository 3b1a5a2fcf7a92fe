"""Every Redis the project ships (the embedded one, docker-compose's single Redis and
cluster nodes, the Kubernetes manifests) keeps a run's larger hashes as hash tables:
``hash-max-ziplist-entries`` is the same small number everywhere, and on a real server a
run of a 52-node graph has its per-node hashes encoded for O(1) reads, not scanned lists
(docs/deployment.md, "Redis settings")."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import redis
import yaml

from orchestrator.local.embedded_redis import HASH_MAX_ZIPLIST_ENTRIES, EmbeddedRedis

from .harness import ROOT, argv_of, load_compose

OPTION = "--hash-max-ziplist-entries"


def option(argv: list[str]) -> str | None:
    return argv[argv.index(OPTION) + 1] if OPTION in argv else None


def manifests(folder: str) -> list[dict[str, Any]]:
    return [doc for path in sorted(Path(ROOT, "deploy", folder).glob("*.yaml"))
            for doc in yaml.safe_load_all(path.read_text()) if doc]


def test_every_shipped_redis_has_the_same_hash_encoding_bound() -> None:
    expected = str(HASH_MAX_ZIPLIST_ENTRIES)
    compose = load_compose({"ORCH_API_KEYS": "k"})
    redis_services = {name: s for name, s in compose["services"].items()
                      if str(s.get("image", "")).startswith("redis:")}
    assert "redis" in redis_services and len(redis_services) > 1, "the single Redis and the cluster nodes"
    for name, service in redis_services.items():
        command = argv_of(service["command"]) if "command" in service else []
        if "redis-server" in command:
            assert option(command) == expected, name
    for folder in ("k8s", "k8s-cluster"):
        servers = [c for doc in manifests(folder) if doc.get("kind") == "StatefulSet"
                   for c in doc["spec"]["template"]["spec"]["containers"] if str(c["image"]).startswith("redis:")]
        assert servers, folder
        for container in servers:
            assert option([str(a) for a in container["args"]]) == expected, folder


def test_a_run_of_a_52_node_graph_keeps_its_node_hashes_as_hash_tables() -> None:
    from orchestrator.kernel.compile import compile_run
    from orchestrator.kernel.store import RunRecord, RunStatus
    from orchestrator.kernel.validation import validate_graph
    from orchestrator.service.plugins import load_registry
    from orchestrator.settings import Settings
    from orchestrator.store.redis_client import client
    from orchestrator.store.redis_store import RedisRunStore

    branches = [f"b{i}" for i in range(50)]
    graph = {"id": "wide", "nodes": [
        {"id": "t", "type": "manual_trigger", "name": "Start", "data": {}},
        *({"id": b, "type": "set_fields", "name": f"Branch {b}", "data": {}} for b in branches),
        {"id": "m", "type": "merge", "name": "Merge", "data": {}}],
        "edges": [*({"id": f"e{b}", "source": "t", "sourceHandle": "output", "target": b, "targetHandle": "input",
                     "data": {"channel": "flow"}} for b in branches),
                  *({"id": f"f{b}", "source": b, "sourceHandle": "output", "target": "m", "targetHandle": "inputs",
                     "data": {"channel": "flow"}} for b in branches)]}
    with EmbeddedRedis(unix_socket=False) as server:
        settings = Settings(redis_url=server.url)
        plan = compile_run(validate_graph(graph, load_registry(settings)), "r1")

        async def store_a_run_with_every_node_running() -> None:
            store = RedisRunStore(client(server.url, decode_responses=True), settings)
            await store.create_run(plan, RunRecord(run_id="r1", status=RunStatus.RUNNING, graph_id="wide"))
            await store.redis.hset(store.keys.nodes("r1"), mapping={n: "running" for n in ["t", *branches, "m"]})
            await store.close()

        asyncio.run(store_a_run_with_every_node_running())
        with redis.Redis.from_url(server.url) as r:
            assert r.config_get("hash-max-ziplist-entries")["hash-max-ziplist-entries"] == str(HASH_MAX_ZIPLIST_ENTRIES)
            key = next(iter(r.scan_iter("*run:r1:nodes")))
            assert r.hlen(key) >= 52 and r.object("encoding", key) == b"hashtable"
