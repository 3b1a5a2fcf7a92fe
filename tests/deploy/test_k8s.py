"""deploy/k8s: the manifests parse, run real CLI sub-commands, and agree with each other."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from .harness import K8S_DIR, load_k8s, require_cli

WORKLOADS = {"Deployment", "StatefulSet"}


def documents() -> list[tuple[Path, dict[str, Any]]]:
    return load_k8s()


def by_kind(kind: str) -> dict[str, dict[str, Any]]:
    return {doc.get("metadata", {}).get("name", path.stem): doc
            for path, doc in documents() if doc.get("kind") == kind}


def containers(doc: dict[str, Any]) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = doc["spec"]["template"]["spec"]["containers"]
    return found


def orchestrator_commands() -> list[tuple[str, str]]:
    """(deployment name, sub-command) of every container that runs ``orchestrator``."""
    found = []
    for name, doc in sorted(by_kind("Deployment").items()):
        for container in containers(doc):
            command = container.get("command", []) + container.get("args", [])
            if command and command[0] == "orchestrator":
                found.append((name, command[1]))
    return found


def test_every_manifest_parses_and_names_its_kind() -> None:
    docs = documents()
    assert docs, f"no manifests in {K8S_DIR}"
    for path, doc in docs:
        assert doc.get("apiVersion") and doc.get("kind"), f"{path.name}: a document without apiVersion/kind"


def test_kustomization_lists_every_manifest() -> None:
    kustomization = by_kind("Kustomization")["kustomization"]
    files = {p.name for p in K8S_DIR.glob("*.yaml")} - {"kustomization.yaml"}
    assert set(kustomization["resources"]) == files


def test_every_deployment_runs_the_orchestrator_image() -> None:
    for name, doc in by_kind("Deployment").items():
        for container in containers(doc):
            assert container["image"] == "agentflow-orchestrator", f"deployment {name}"
            refs = {next(iter(ref.values()))["name"] for ref in container["envFrom"]}
            assert refs == {"orchestrator-config", "orchestrator-secrets"}, f"deployment {name}"


@pytest.mark.parametrize(("deployment", "command"), orchestrator_commands())
def test_deployment_command_is_a_real_cli_sub_command(deployment: str, command: str) -> None:
    require_cli(command)


def test_api_worker_beat_and_sweeper_are_all_deployed() -> None:
    assert {cmd for _, cmd in orchestrator_commands()} >= {"serve", "worker", "beat", "sweeper"}


def test_beat_runs_a_single_replica() -> None:
    beat = by_kind("Deployment")["beat"]
    assert beat["spec"]["replicas"] == 1
    assert beat["spec"]["strategy"]["type"] == "Recreate"


def test_redis_keeps_an_append_only_file_on_a_persistent_volume() -> None:
    redis = by_kind("StatefulSet")["redis"]
    (container,) = containers(redis)
    args = container["args"]
    assert args[args.index("--appendonly") + 1] == "yes"
    assert args[args.index("--maxmemory-policy") + 1] == "noeviction"
    claim = redis["spec"]["volumeClaimTemplates"][0]["metadata"]["name"]
    assert any(m["name"] == claim and m["mountPath"] == "/data" for m in container["volumeMounts"])


def test_redis_refuses_writes_below_its_container_memory_limit_rather_than_evict_or_die() -> None:
    (container,) = containers(by_kind("StatefulSet")["redis"])
    args = container["args"]
    maxmemory = args[args.index("--maxmemory") + 1]
    assert maxmemory.endswith("mb") and args[args.index("--maxmemory-policy") + 1] == "noeviction"
    limit = container["resources"]["limits"]["memory"]
    assert limit.endswith("Gi") and int(maxmemory[:-2]) < int(limit[:-2]) * 1024


def test_settings_point_every_role_at_the_redis_service() -> None:
    config = by_kind("ConfigMap")["orchestrator-config"]["data"]
    assert config["REDIS_URL"] == "redis://redis:6379/0"
    assert "redis" in by_kind("Service")
    assert config["AGNO_TELEMETRY"] == "false"


def lane_depth_query(triggers: list[dict[str, Any]]) -> str:
    """The one Prometheus query that sums the node queues' depths over the lanes."""
    (query,) = [t["metadata"]["query"] for t in triggers
                if t["type"] == "prometheus" and "orchestrator_queue_depth{queue=~" in t["metadata"]["query"]]
    return str(query)


def assert_sums_every_lane(query: str) -> None:
    from orchestrator.queue.lanes import lane_queues

    assert query.startswith("sum(")
    pattern = re.search(r'queue=~"([^"]+)"', query)
    assert pattern is not None
    regex = pattern.group(1).replace("\\\\", "\\")  # the PromQL string's escape
    assert all(re.fullmatch(regex, lane) for lane in lane_queues(8)), "every lane counts"
    assert not re.fullmatch(regex, "runs"), "the runs' queues are a trigger of their own"


def test_workers_scale_on_the_length_of_the_node_queues_summed_over_lanes() -> None:
    scaled = by_kind("ScaledObject")["worker"]
    assert scaled["spec"]["scaleTargetRef"]["name"] in by_kind("Deployment")
    triggers = scaled["spec"]["triggers"]
    queries = [t["metadata"]["query"] for t in triggers if t["type"] == "prometheus"]
    assert_sums_every_lane(lane_depth_query(triggers))
    # and on the nodes in flight, a metric the workers export, and the nodes waiting on
    # runs' queues, which the API exports
    assert any("orchestrator_nodes_in_flight" in q for q in queries)
    assert any('orchestrator_queue_depth{queue="runs"}' in q for q in queries)


def test_the_shipped_placeholder_secret_is_refused_at_api_start() -> None:
    from orchestrator.api.principal import key_ring
    from orchestrator.kernel.errors import ConfigurationError
    from orchestrator.settings import Settings

    secret = by_kind("Secret")["orchestrator-secrets"]
    keys = secret["stringData"]["ORCH_API_KEYS"]
    with pytest.raises(ConfigurationError, match="placeholder"):
        key_ring(Settings(api_keys=keys))


# -- the RabbitMQ layout (deploy/k8s-rabbitmq: the base plus RabbitMQ as the broker) ----------

RABBIT_DIR = K8S_DIR.parent / "k8s-rabbitmq"


def overlay() -> dict[str, list[dict[str, Any]]]:
    import yaml

    return {path.name: [d for d in yaml.safe_load_all(path.read_text()) if d]
            for path in sorted(RABBIT_DIR.glob("*.yaml"))}


def test_the_rabbitmq_overlay_builds_on_the_base_and_lists_its_files() -> None:
    docs = overlay()
    (kustomization,) = docs.pop("kustomization.yaml")
    assert "../k8s" in kustomization["resources"]
    listed = set(kustomization["resources"]) | {p["path"] for p in kustomization["patches"]}
    assert set(docs) <= listed, f"files the overlay does not apply: {set(docs) - listed}"
    base = {(doc["kind"], doc["metadata"]["name"]) for _, doc in documents() if "metadata" in doc}
    for patch in kustomization["patches"]:
        (doc,) = docs[patch["path"]]
        assert (doc["kind"], doc["metadata"]["name"]) in base, f"{patch['path']} patches nothing in the base"


def test_every_role_gets_a_broker_url_on_the_rabbitmq_service() -> None:
    from urllib.parse import urlsplit

    from orchestrator.queue.app import is_amqp

    docs = overlay()
    (secret,) = docs["broker.yaml"]
    url = secret["stringData"]["ORCH_BROKER_URL"]
    assert is_amqp(url)
    services = {d["metadata"]["name"]: d for d in docs["rabbitmq.yaml"] if d["kind"] == "Service"}
    assert urlsplit(url).hostname in services
    assert urlsplit(url).port == services["rabbitmq"]["spec"]["ports"][0]["port"]
    for name in ("api", "worker", "beat", "sweeper"):  # each loads the patched secret
        sources = [s for c in containers(by_kind("Deployment")[name]) for s in c.get("envFrom", [])]
        assert {"secretRef": {"name": secret["metadata"]["name"]}} in sources, name


def test_rabbitmq_keeps_the_deployment_s_consumer_timeout() -> None:
    conf = (K8S_DIR.parent / "rabbitmq" / "rabbitmq.conf").read_text()
    wanted = next(line for line in conf.splitlines() if line.startswith("consumer_timeout"))
    (config,) = [d for d in overlay()["rabbitmq.yaml"] if d["kind"] == "ConfigMap"]
    assert wanted in config["data"]["90-orchestrator.conf"].splitlines()


def test_workers_scale_on_the_rabbitmq_queues_backlog_summed_over_lanes() -> None:
    (scaled,) = overlay()["scaledobject.yaml"]
    triggers = {t["type"]: t for t in scaled["spec"]["triggers"]}
    assert "redis" not in triggers, "the node queues are not Redis lists on this layout"
    assert_sums_every_lane(lane_depth_query(scaled["spec"]["triggers"]))
