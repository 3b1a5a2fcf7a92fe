"""The node host: built once per run from the workspace the claim carries, never mixed up
between runs, and the one door nodes use (credentials, files, readable folders)."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.errors import RequestError
from orchestrator.host.node_host import MAX_CACHED_RUNS, HostFactory, NodeHost, node_host, standalone
from orchestrator.kernel.errors import ConfigurationError, ParameterError
from orchestrator.settings import Settings
from tests.agents.conftest import make_ctx


def test_each_run_gets_its_workspace_once_and_never_another_run_s() -> None:
    hosts = HostFactory(Settings(key_prefix="hostws"), "redis://x")
    a, b = hosts("ra", "team-a"), hosts("rb", "team-b")
    assert (a.workspace, b.workspace) == ("team-a", "team-b")
    assert hosts("ra", "team-a") is a  # built once per run
    assert hosts("rc", None).workspace == "default"  # a run with no workspace recorded
    assert a.redis_url == "redis://x" and a.settings.key_prefix == "hostws"


def test_a_workspace_that_is_no_id_is_refused_not_used_as_a_path() -> None:
    with pytest.raises(ConfigurationError, match="not a valid workspace id"):
        HostFactory(Settings(), None)("r1", "../etc")


def test_the_factory_keeps_only_recent_runs() -> None:
    hosts = HostFactory(Settings(), None)
    first = hosts("r0", "w")
    for i in range(1, MAX_CACHED_RUNS + 1):
        hosts(f"r{i}", "w")
    assert hosts("r0", "w") is not first  # evicted, built again


def test_node_host_reads_the_context_s_host_or_the_standalone_one() -> None:
    host = NodeHost(settings=Settings(), workspace="team-a")
    ctx = make_ctx()
    assert node_host(ctx) == standalone()  # no host passed: a local run
    ctx.host = host
    assert node_host(ctx) is host
    ctx.host = {"redis_url": "redis://x"}
    with pytest.raises(ConfigurationError, match="not a NodeHost"):
        node_host(ctx)


async def test_a_node_that_needs_redis_on_a_host_without_one_is_told_so() -> None:
    host = NodeHost(settings=Settings())
    with pytest.raises(RequestError, match="needs Redis"):
        await host.credential("db", ("database_url",))


def test_readable_paths_stay_inside_the_examples_and_loader_folders(tmp_path: Path) -> None:
    examples = tmp_path / "examples"
    (examples / "docs").mkdir(parents=True)
    (examples / "docs" / "a.txt").write_text("a")
    extra = tmp_path / "extra"
    extra.mkdir()
    (extra / "b.txt").write_text("b")
    (tmp_path / "secret.txt").write_text("s")
    host = NodeHost(settings=Settings(examples_dir=str(examples), loader_paths=str(extra)))
    assert host.readable_path("examples/docs/a.txt") == (examples / "docs" / "a.txt").resolve()
    assert host.readable_path("b.txt") == (extra / "b.txt").resolve()
    for outside in (str(tmp_path / "secret.txt"), "../secret.txt", "examples/../secret.txt"):
        with pytest.raises(ParameterError, match="not a file inside the readable folders") as caught:
            host.readable_path(outside)
        assert str(tmp_path) not in caught.value.message.replace(outside, "")
