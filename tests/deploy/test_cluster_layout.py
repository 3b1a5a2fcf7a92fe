"""The Redis Cluster + RabbitMQ layout: compose's ``cluster`` profile and ``deploy/k8s-cluster``.

The shape is read as compose and kustomize read it; then the compose nodes' own commands
start six local redis-servers (ports and data folders replaced, the announced hostname
made ``localhost``) and the one-shot job's script (``deploy/redis-cluster/create-cluster.sh``)
joins them into three primaries with a replica each, and does nothing when run again.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.redis_cluster import available as cluster_available
from tests.support.redis_cluster import free_cluster_port

from .harness import API_KEY, K8S_DIR, ROOT, load_compose, load_k8s

CREATE_SCRIPT = ROOT / "deploy" / "redis-cluster" / "create-cluster.sh"
CLUSTER_DIR = K8S_DIR.parent / "k8s-cluster"
RABBIT_DIR = K8S_DIR.parent / "k8s-rabbitmq"
APP_SERVICES = ("api", "worker", "beat", "sweeper", "flower")
NODE_COUNT = 6
SCRIPT_TIMEOUT_S = 60.0
CLUSTER_URL = "redis+cluster://redis-node-0:6379,redis-node-1:6379,redis-node-2:6379"
BROKER_URL = "amqp://orchestrator:s3cret@rabbitmq:5672//"


CONTROL_URL = "redis://redis:6379/0"


def cluster_compose() -> dict[str, Any]:
    """docker-compose.yml with the variables the cluster layout's instructions export."""
    return load_compose({"ORCH_API_KEYS": API_KEY, "ORCH_BROKER_URL": BROKER_URL, "RABBITMQ_PASSWORD": "s3cret",
                         "ORCH_REDIS_URL": CLUSTER_URL, "ORCH_CONTROL_REDIS_URL": CONTROL_URL,
                         "ORCH_REDIS_WAIT_REPLICAS": "1"})


def nodes_of(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {name: s for name, s in compose["services"].items() if name.startswith("redis-node-")}


def option(argv: list[str], name: str) -> str:
    assert name in argv, f"{name} missing from {argv}"
    return argv[argv.index(name) + 1]


# -- compose: shape ---------------------------------------------------------------------


def test_the_cluster_profile_has_six_durable_cluster_nodes_that_announce_their_service_names() -> None:
    compose = cluster_compose()
    nodes = nodes_of(compose)
    assert len(nodes) == NODE_COUNT
    for name, node in nodes.items():
        argv = [str(a) for a in node["command"]]
        assert node["profiles"] == ["cluster"], name
        assert node["image"].startswith("redis:7"), name
        assert option(argv, "--cluster-enabled") == "yes", name
        assert option(argv, "--cluster-announce-hostname") == name, "clients must reach it by that name"
        assert option(argv, "--cluster-preferred-endpoint-type") == "hostname", name
        assert option(argv, "--appendonly") == "yes" and option(argv, "--maxmemory-policy") == "noeviction", name
        assert int(option(argv, "--cluster-node-timeout")) <= 15000, name
        volume = node["volumes"][0].split(":")[0]
        assert volume in compose["volumes"] and node["volumes"][0].endswith(":/data"), name
        assert "ports" not in node, f"{name} is not published outside the network"
    volumes = [n["volumes"][0].split(":")[0] for n in nodes.values()]
    assert len(set(volumes)) == NODE_COUNT, "each node keeps its own nodes.conf and AOF"


def test_the_init_job_joins_exactly_the_node_services_once_they_are_healthy() -> None:
    compose = cluster_compose()
    init = compose["services"]["redis-cluster-init"]
    nodes = nodes_of(compose)
    listed = init["environment"]["REDIS_CLUSTER_NODES"].split()
    assert listed == [f"{name}:6379" for name in sorted(nodes)]
    replicas = int(init["environment"]["REDIS_CLUSTER_REPLICAS"])
    assert replicas >= 1, "a primary must have a replica to fail over to"
    assert len(listed) // (1 + replicas) >= 3, "a Redis Cluster needs three primaries"
    assert init["depends_on"] == {n: {"condition": "service_healthy"} for n in nodes}
    script, target = init["volumes"][0].split(":")[:2]
    assert (ROOT / script).resolve() == CREATE_SCRIPT
    assert init["command"] == ["sh", target]
    assert init["profiles"] == ["cluster"] and init["restart"] == "no"


def test_every_app_service_follows_the_cluster_profile_and_the_default_stays_single_redis() -> None:
    from orchestrator.settings import Settings

    both = cluster_compose()
    single = load_compose({"ORCH_API_KEYS": API_KEY})
    assert set(both["services"]["rabbitmq"]["profiles"]) == {"rabbitmq", "cluster"}
    for name in APP_SERVICES:
        service = both["services"][name]
        assert service["environment"]["REDIS_URL"] == CLUSTER_URL, name
        assert service["environment"]["ORCH_BROKER_URL"] == BROKER_URL, name
        assert service["depends_on"]["redis-cluster-init"] == {
            "condition": "service_completed_successfully", "required": False}, name
        assert service["environment"]["ORCH_CONTROL_REDIS_URL"] == CONTROL_URL, name
        plain = single["services"][name]["environment"]
        assert plain["REDIS_URL"] == "redis://redis:6379/0" and plain["ORCH_BROKER_URL"] == "", name
        assert plain["ORCH_CONTROL_REDIS_URL"] == "", name
        assert plain["ORCH_REDIS_WAIT_REPLICAS"] == "0", "the single redis has no replica to wait for"
        assert service["environment"]["ORCH_REDIS_WAIT_REPLICAS"] == "1", name
        assert not Settings(control_redis_url=plain["ORCH_CONTROL_REDIS_URL"]).control_redis_url
    assert "redis" in both["services"] and "profiles" not in both["services"]["redis"], \
        "the single redis stays, as the control Redis"
    seeds = [hostport.split(":")[0] for hostport in CLUSTER_URL.split("://", 1)[1].split(",")]
    assert set(seeds) <= set(nodes_of(both)), "the documented REDIS_URL names the node services"
    header = (ROOT / "docker-compose.yml").read_text()
    assert f"export ORCH_REDIS_URL={CLUSTER_URL}" in header, "the compose header shows the cluster URL"
    assert f"export ORCH_CONTROL_REDIS_URL={CONTROL_URL}" in header
    assert "export ORCH_REDIS_WAIT_REPLICAS=1" in header


@pytest.mark.parametrize("name", APP_SERVICES[:4])
def test_each_role_starts_with_the_cluster_layout_s_settings_and_refuses_it_without_a_broker(
    name: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What an entry point checks at start (``load_settings``) with the service's environment."""
    from orchestrator.kernel.errors import ConfigurationError
    from orchestrator.settings import load_settings

    environment = cluster_compose()["services"][name]["environment"]
    for key in [k for k in os.environ if k.startswith("ORCH_") or k == "REDIS_URL"]:
        monkeypatch.delenv(key)
    for key, value in environment.items():
        monkeypatch.setenv(key, str(value))
    load_settings.cache_clear()  # read once per process: read this environment
    try:
        settings = load_settings()
        assert settings.redis_url == CLUSTER_URL and settings.broker_url == BROKER_URL
        assert settings.control_redis_url == CONTROL_URL and settings.redis_wait_replicas == 1
        monkeypatch.setenv("ORCH_BROKER_URL", "")
        load_settings.cache_clear()
        with pytest.raises(ConfigurationError, match="ORCH_BROKER_URL"):
            load_settings()
    finally:
        load_settings.cache_clear()


def test_the_cluster_layout_documents_the_same_url_in_compose_and_the_deployment_guide() -> None:
    guide = (ROOT / "docs" / "deployment.md").read_text()
    assert CLUSTER_URL in guide and "--profile cluster" in guide
    assert "deploy/k8s-cluster" in guide


# -- k8s: the overlay ---------------------------------------------------------------------


def overlay() -> dict[str, list[dict[str, Any]]]:
    return {path.name: [d for d in yaml.safe_load_all(path.read_text()) if d]
            for path in sorted(CLUSTER_DIR.glob("*.yaml"))}


def test_the_cluster_overlay_builds_on_the_rabbitmq_layout_and_lists_its_files() -> None:
    docs = overlay()
    (kustomization,) = docs.pop("kustomization.yaml")
    assert "../k8s-rabbitmq" in kustomization["resources"], "the broker stays on RabbitMQ"
    listed = set(kustomization["resources"]) | {p["path"] for p in kustomization["patches"]}
    assert set(docs) <= listed, f"files the overlay does not apply: {set(docs) - listed}"
    base = {(doc["kind"], doc["metadata"]["name"]) for _, doc in load_k8s() if "metadata" in doc}
    for patch in kustomization["patches"]:
        (doc,) = docs[patch["path"]]
        assert (doc["kind"], doc["metadata"]["name"]) in base, f"{patch['path']} patches nothing in the base"


def test_every_role_reads_a_cluster_url_naming_the_statefulset_s_pods() -> None:
    from orchestrator.settings import Settings

    docs = overlay()
    (config,) = docs["state.yaml"]
    url = config["data"]["REDIS_URL"]
    assert url.startswith("redis+cluster://")
    assert Settings(redis_url=url).redis_url == url
    assert Settings(redis_wait_replicas=config["data"]["ORCH_REDIS_WAIT_REPLICAS"]).redis_wait_replicas == 1
    (job,) = [d for d in docs["redis-cluster.yaml"] if d["kind"] == "Job"]
    replicas = next(e["value"] for e in job["spec"]["template"]["spec"]["containers"][0]["env"]
                    if e["name"] == "REDIS_CLUSTER_REPLICAS")
    assert int(replicas) >= 1, "a start waits for a replica: the cluster must have one per primary"
    control = config["data"]["ORCH_CONTROL_REDIS_URL"]
    assert control.startswith("redis://") and control.split("//")[1].split(":")[0] in {
        d["metadata"]["name"] for _, d in load_k8s() if d.get("kind") == "Service"}, "the base's single Redis"
    (service,) = [d for d in docs["redis-cluster.yaml"] if d["kind"] == "Service"]
    (stateful,) = [d for d in docs["redis-cluster.yaml"] if d["kind"] == "StatefulSet"]
    pods = {f"{stateful['metadata']['name']}-{i}.{service['metadata']['name']}"
            for i in range(stateful["spec"]["replicas"])}
    for seed in url.split("://", 1)[1].split(","):
        host, port = seed.rsplit(":", 1)
        assert host in pods and int(port) == service["spec"]["ports"][0]["port"], seed
    assert service["spec"]["clusterIP"] == "None", "per-pod DNS names need a headless service"
    assert stateful["spec"]["serviceName"] == service["metadata"]["name"]


def test_the_cluster_statefulset_is_durable_and_announces_each_pod_s_dns_name() -> None:
    docs = overlay()["redis-cluster.yaml"]
    (stateful,) = [d for d in docs if d["kind"] == "StatefulSet"]
    assert stateful["spec"]["replicas"] == NODE_COUNT
    (container,) = stateful["spec"]["template"]["spec"]["containers"]
    args = container["args"]
    assert option(args, "--cluster-enabled") == "yes"
    assert option(args, "--cluster-config-file").startswith("/data/"), "nodes.conf survives a restart"
    assert option(args, "--cluster-announce-hostname") == "$(POD_NAME).redis-cluster"
    assert {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}} in container["env"]
    assert option(args, "--appendonly") == "yes" and option(args, "--maxmemory-policy") == "noeviction"
    maxmemory, limit = option(args, "--maxmemory"), container["resources"]["limits"]["memory"]
    assert int(maxmemory[:-2]) < int(limit[:-2]) * 1024
    claim = stateful["spec"]["volumeClaimTemplates"][0]["metadata"]["name"]
    assert any(m["name"] == claim and m["mountPath"] == "/data" for m in container["volumeMounts"])


def test_the_init_job_runs_the_same_script_as_compose_on_every_pod() -> None:
    docs = overlay()["redis-cluster.yaml"]
    (scripts,) = [d for d in docs if d["kind"] == "ConfigMap"]
    assert scripts["data"]["create-cluster.sh"] == CREATE_SCRIPT.read_text()
    (job,) = [d for d in docs if d["kind"] == "Job"]
    (container,) = job["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e["value"] for e in container["env"]}
    (stateful,) = [d for d in docs if d["kind"] == "StatefulSet"]
    assert env["REDIS_CLUSTER_NODES"].split() == [
        f"redis-cluster-{i}.redis-cluster:6379" for i in range(stateful["spec"]["replicas"])]
    assert int(env["REDIS_CLUSTER_REPLICAS"]) == 1
    mount = container["volumeMounts"][0]["mountPath"]
    assert container["command"] == ["sh", f"{mount}/create-cluster.sh"]


# -- compose: the nodes and the init job, started locally --------------------------------------


@pytest.fixture
def local_nodes(tmp_path: Path) -> Iterator[list[int]]:
    """The six compose nodes' commands as local redis-servers; their ports."""
    if not cluster_available() or shutil.which("getent") is None:
        pytest.skip("needs /usr/bin/redis-server, /usr/bin/redis-cli and getent")
    procs: list[subprocess.Popen[bytes]] = []
    ports: list[int] = []
    try:
        for name, node in sorted(nodes_of(cluster_compose()).items()):
            port = free_cluster_port(set(ports) | {p + 10000 for p in ports})
            folder = tmp_path / name
            folder.mkdir()
            argv = ["/usr/bin/redis-server" if a == "redis-server" else str(a) for a in node["command"]]
            argv[argv.index("--cluster-announce-hostname") + 1] = "localhost"
            argv[argv.index("--maxmemory") + 1] = "64mb"
            argv += ["--port", str(port), "--bind", "127.0.0.1", "--dir", str(folder),
                     "--logfile", str(folder / "server.log")]
            procs.append(subprocess.Popen(argv, cwd=folder, stdin=subprocess.DEVNULL,
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                          start_new_session=True))
            ports.append(port)
        yield ports
    finally:
        for proc in procs:
            proc.kill()
        for proc in procs:
            proc.wait(timeout=10)


def create(ports: list[int]) -> subprocess.CompletedProcess[str]:
    init = cluster_compose()["services"]["redis-cluster-init"]
    env = {**os.environ, **init["environment"],
           "REDIS_CLUSTER_NODES": " ".join(f"localhost:{p}" for p in ports), "REDIS_CLUSTER_WAIT_S": "30"}
    return subprocess.run(["sh", str(CREATE_SCRIPT)], env=env, capture_output=True, text=True,
                          timeout=SCRIPT_TIMEOUT_S, check=False)


def test_the_init_job_forms_three_primaries_with_a_replica_each_and_a_second_run_changes_nothing(
    local_nodes: list[int],
) -> None:
    import redis

    first = create(local_nodes)
    assert first.returncode == 0, first.stdout + first.stderr
    client = redis.RedisCluster(host="localhost", port=local_nodes[0], decode_responses=True)
    try:
        deadline = time.monotonic() + 15  # a replica shows in its shard once gossip reached the node
        while True:
            shards = client.execute_command("CLUSTER SHARDS", target_nodes=client.get_random_node())
            primaries = [s for s in shards if s["slots"]]
            if all(len(s["nodes"]) == 2 for s in primaries) or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert len(primaries) == 3 and all(len(s["nodes"]) == 2 for s in primaries), shards
        assert {n["hostname"] for s in shards for n in s["nodes"]} == {"localhost"}
        client.set("k", "v")  # a write through the hostnames the nodes announce
        assert client.get("k") == "v"
    finally:
        client.close()
    again = create(local_nodes)
    assert again.returncode == 0 and "nothing to do" in again.stdout, again.stdout + again.stderr


def test_the_init_job_fails_naming_the_node_that_never_answers(tmp_path: Path) -> None:
    if not cluster_available():
        pytest.skip("needs /usr/bin/redis-cli")
    port = free_cluster_port(set())
    env = {**os.environ, "REDIS_CLUSTER_NODES": f"127.0.0.1:{port}", "REDIS_CLUSTER_WAIT_S": "1"}
    done = subprocess.run(["sh", str(CREATE_SCRIPT)], env=env, capture_output=True, text=True,
                          timeout=SCRIPT_TIMEOUT_S, check=False)
    assert done.returncode != 0
    assert f"127.0.0.1:{port} did not answer" in done.stderr
