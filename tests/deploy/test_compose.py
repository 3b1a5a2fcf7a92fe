"""docker-compose.yml: its shape, then each service's command started locally.

The local launches use the compose environment with ``REDIS_URL`` pointed at a Redis
this module owns and published ports replaced by free ones (see ``conftest.py``).
"""

from __future__ import annotations

import importlib.util
import re
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from orchestrator.local.embedded_redis import free_port

from .harness import API_KEY, ROOT, Launcher, argv_of, load_compose, replace_option, require_cli, wait_until

DATA_SERVICES = {"redis", "rabbitmq", "pgvector", "minio"}  # third-party images beside the app's
STARTUP_TIMEOUT_S = 60.0
STAY_UP_S = 3.0
ERROR_LINE = re.compile(r"Traceback|\bERROR\b|\bCRITICAL\b|^error:", re.MULTILINE)


def app_services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The services of the app's image (not the data stores, nor the Redis Cluster's nodes
    and its init job: tests/deploy/test_cluster_layout.py)."""
    return {name: s for name, s in compose["services"].items()
            if name not in DATA_SERVICES and not name.startswith("redis-")}


def command_of(service: dict[str, Any]) -> list[str]:
    command = service["command"]
    return command.split() if isinstance(command, str) else [str(a) for a in command]


# -- shape ------------------------------------------------------------------------------


def test_redis_keeps_an_append_only_file_on_a_named_volume(compose: dict[str, Any]) -> None:
    redis = compose["services"]["redis"]
    command = command_of(redis)
    assert redis["image"].startswith("redis:7")
    assert command[command.index("--appendonly") + 1] == "yes"
    volume = redis["volumes"][0].split(":")[0]
    assert volume in compose["volumes"], f"redis stores /data on {volume!r}, not a named volume"
    assert "redis-cli" in " ".join(redis["healthcheck"]["test"])


def test_the_rabbitmq_layout_is_a_profile_that_every_app_service_follows() -> None:
    """`docker compose --profile rabbitmq up` with ORCH_BROKER_URL set moves the broker;
    without them the single-Redis layout is unchanged (the broker URL is empty)."""
    from orchestrator.settings import Settings

    url = "amqp://orchestrator:s3cret@rabbitmq:5672//"
    both = load_compose({"ORCH_API_KEYS": API_KEY, "ORCH_BROKER_URL": url, "RABBITMQ_PASSWORD": "s3cret"})
    single = load_compose({"ORCH_API_KEYS": API_KEY})
    rabbit = both["services"]["rabbitmq"]
    assert "rabbitmq" in rabbit["profiles"]  # and "cluster" (test_cluster_layout.py)
    assert rabbit["environment"]["RABBITMQ_DEFAULT_PASS"] == "s3cret"
    assert "ports" not in rabbit, "the broker is not published outside the network"
    data, conf = rabbit["volumes"][0].split(":")[0], rabbit["volumes"][1].split(":")[0]
    assert data in both["volumes"]
    timeout_ms = int(re.search(r"^consumer_timeout = (\d+)", (ROOT / conf).read_text(), re.MULTILINE)[1])
    assert timeout_ms > Settings().run_deadline_s * 1000, "a node of a run within its deadline outlives the timeout"
    for name, service in app_services(both).items():
        assert service["environment"]["ORCH_BROKER_URL"] == url, name
        assert service["depends_on"]["rabbitmq"] == {"condition": "service_healthy", "required": False}, name
    for name, service in app_services(single).items():
        assert service["environment"]["ORCH_BROKER_URL"] == "", name
        assert not Settings(broker_url=service["environment"]["ORCH_BROKER_URL"]).broker_url


def test_redis_never_evicts_queued_tasks(compose: dict[str, Any]) -> None:
    command = command_of(compose["services"]["redis"])
    assert command[command.index("--maxmemory-policy") + 1] == "noeviction"


def test_redis_has_a_memory_limit_and_refuses_writes_past_it_rather_than_evict(compose: dict[str, Any]) -> None:
    command = command_of(compose["services"]["redis"])
    assert "--maxmemory" in command, "without maxmemory Redis grows until the host kills it"
    limit = command[command.index("--maxmemory") + 1]
    assert limit == "2gb"  # ORCH_REDIS_MAXMEMORY unset: the shipped default
    assert command[command.index("--maxmemory-policy") + 1] == "noeviction"


def test_worker_has_no_fixed_name_or_port_so_it_scales(compose: dict[str, Any]) -> None:
    worker = compose["services"]["worker"]
    assert "container_name" not in worker
    assert "ports" not in worker


def test_every_application_service_runs_the_same_image(compose: dict[str, Any]) -> None:
    services = app_services(compose)
    assert {"api", "worker", "beat", "sweeper", "flower"} <= set(services)
    builds = {repr(s.get("build")) for s in services.values()}
    images = {s.get("image") for s in services.values()}
    assert len(builds) == 1 and len(images) == 1, f"builds {builds}, images {images}"
    assert None not in images


@pytest.mark.parametrize("name", ["api", "worker", "beat", "sweeper", "flower"])
def test_service_reaches_redis_by_its_service_name(compose: dict[str, Any], name: str) -> None:
    service = compose["services"][name]
    env = service["environment"]
    assert env["REDIS_URL"] == "redis://redis:6379/0"
    assert env["AGNO_TELEMETRY"] == "false"
    assert env["ORCH_API_KEYS"] == API_KEY, "ORCH_API_KEYS must come from the environment"
    assert service["depends_on"]["redis"]["condition"] == "service_healthy"


def test_api_is_published_on_port_8000(compose: dict[str, Any]) -> None:
    api = compose["services"]["api"]
    assert any(str(p).endswith("8000:8000") for p in api["ports"])
    command = command_of(api)
    assert command[:2] == ["orchestrator", "serve"]
    assert command[command.index("--host") + 1] == "0.0.0.0"


@pytest.mark.parametrize("name", ["api", "worker", "beat", "sweeper"])
def test_service_command_is_a_real_cli_sub_command(compose: dict[str, Any], name: str) -> None:
    command = command_of(compose["services"][name])
    assert command[0] == "orchestrator"
    require_cli(command[1])


# -- the services, started locally -----------------------------------------------------


def test_api_answers_health_and_requires_the_compose_api_key(
    compose: dict[str, Any], launcher: Launcher
) -> None:
    service = compose["services"]["api"]
    port = free_port()
    argv = replace_option(argv_of(service["command"]), "--port", str(port))
    argv = replace_option(argv, "--host", "127.0.0.1")
    api = launcher.start("api", service, argv)
    base = f"http://127.0.0.1:{port}"

    def health() -> bool:
        try:
            return httpx.get(f"{base}/health", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    wait_until(health, STARTUP_TIMEOUT_S, api, "answer on /health")
    assert httpx.get(f"{base}/ready", timeout=5).json()["redis"] == "ok"
    assert httpx.get(f"{base}/nodes", timeout=5).status_code == 401
    nodes = httpx.get(f"{base}/nodes", headers={"Authorization": f"Bearer {API_KEY}"}, timeout=10)
    assert nodes.status_code == 200


def test_worker_answers_a_celery_ping(compose: dict[str, Any], launcher: Launcher) -> None:
    from orchestrator.queue.app import make_celery
    from orchestrator.settings import Settings

    service = compose["services"]["worker"]
    worker = launcher.start("worker", service, argv_of(service["command"]))
    app = make_celery(launcher.redis_url, Settings())
    try:
        replies = wait_until(lambda: app.control.ping(timeout=1.0), STARTUP_TIMEOUT_S,
                             worker, "reply to a Celery ping")
    finally:
        app.close()
    names = [name for reply in replies for name in reply]
    assert any(name.startswith("w@") for name in names), names


@pytest.mark.parametrize("name", ["beat", "sweeper"])
def test_background_service_stays_up_without_errors(
    compose: dict[str, Any], launcher: Launcher, name: str
) -> None:
    service = compose["services"][name]
    require_cli(command_of(service)[1])
    started = launcher.start(name, service, argv_of(service["command"]))
    time.sleep(STAY_UP_S)
    assert started.alive(), f"{name} exited with {started.proc.returncode}:\n{started.output()[-3000:]}"
    errors = ERROR_LINE.findall(started.output())
    assert not errors, f"{name} logged errors:\n{started.output()[-3000:]}"


def test_flower_answers_http(compose: dict[str, Any], launcher: Launcher) -> None:
    if importlib.util.find_spec("flower") is None:
        pytest.skip("flower is not installed (the optional 'ops' dependency group)")
    service = compose["services"]["flower"]
    port = free_port()
    flower = launcher.start("flower", service,
                            replace_option(argv_of(service["command"]), "--port", str(port)))

    def answers() -> bool:
        try:
            return httpx.get(f"http://127.0.0.1:{port}/", timeout=2).status_code < 500
        except httpx.HTTPError:
            return False

    wait_until(answers, STARTUP_TIMEOUT_S, flower, "answer over HTTP")


def test_compose_refuses_to_start_without_api_keys() -> None:
    with pytest.raises(AssertionError, match="ORCH_API_KEYS"):
        load_compose({})


def test_api_is_published_on_loopback_unless_the_operator_says_otherwise(compose: dict[str, Any]) -> None:
    ports = [str(p) for p in compose["services"]["api"]["ports"]]
    assert ports == ["127.0.0.1:8000:8000"]
    exposed = load_compose({"ORCH_API_KEYS": API_KEY, "ORCH_PUBLISH_HOST": "0.0.0.0"})
    assert [str(p) for p in exposed["services"]["api"]["ports"]] == ["0.0.0.0:8000:8000"]


def test_the_image_runs_every_role_under_an_init_that_reaps_orphans() -> None:
    """Each sandbox's bubblewrap init exits as an orphan (nodes/flow/code/SANDBOX.md): a
    worker that were PID 1 of its container would keep one zombie per Code node."""
    dockerfile = (Path(__file__).parents[2] / "Dockerfile").read_text()
    runtime = dockerfile.rsplit("\nFROM ", 1)[1]
    assert "tini" in runtime.split("ENTRYPOINT", 1)[0], "the runtime stage installs tini"
    entrypoint = [line for line in runtime.splitlines() if line.startswith("ENTRYPOINT")]
    assert entrypoint == ['ENTRYPOINT ["/usr/bin/tini", "--"]']


def test_the_image_holds_the_examples_and_points_the_settings_at_them() -> None:
    """The console's gallery is not empty in the container: the wheel has no examples/
    beside the package, so the image copies them and sets ORCH_EXAMPLES_DIR."""
    root = Path(__file__).parents[2]
    runtime = (root / "Dockerfile").read_text().rsplit("\nFROM ", 1)[1]
    assert "COPY examples /opt/orchestrator/examples" in runtime
    assert "ORCH_EXAMPLES_DIR=/opt/orchestrator/examples" in runtime
    ignored = {line.strip() for line in (root / ".dockerignore").read_text().splitlines()}
    assert "examples" not in ignored and "examples/" not in ignored
