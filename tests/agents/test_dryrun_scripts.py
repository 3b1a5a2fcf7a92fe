"""Dry-run script files come only from the operator's folder, and errors never echo them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from orchestrator.kernel.errors import ParameterError
from orchestrator.settings import Settings
from tests.agents.conftest import data_in, drain, load_executor, make_ctx

agent = load_executor("agents/agent")
KEYS_FILE = [{"key": "ka-editor-canary-0123456789", "workspace": "team-a", "role": "editor"}]


def _ctx(**settings: Any) -> Any:
    return make_ctx(services={"settings": Settings(**settings)})


@pytest.fixture
def host_files(tmp_path: Path) -> dict[str, Path]:
    """A scripts folder, and a JSON file of secrets beside it (as ORCH_API_KEYS_FILE is)."""
    scripts = tmp_path / "scripts"
    scripts.mkdir()
    (scripts / "hello.json").write_text(json.dumps([{"say": "scripted hello"}]))
    secrets = tmp_path / "keys.json"
    secrets.write_text(json.dumps(KEYS_FILE))
    (scripts / "escape.json").symlink_to(secrets)
    return {"scripts": scripts, "secrets": secrets}


async def _agent(model: str, ctx: Any) -> Any:
    return await drain(agent.execute({"model": model, "prompt": "hi", "history": False}, data_in({}), ctx))


async def test_a_host_path_is_never_read_and_no_error_shows_the_file(host_files: dict[str, Path]) -> None:
    for settings in ({}, {"dryrun_scripts_dir": str(host_files["scripts"])}):
        for name in (str(host_files["secrets"]), "../keys.json", "escape.json", "/no/such/file.json"):
            with pytest.raises(ParameterError) as caught:
                await _agent(f"dryrun:{name}", _ctx(**settings))
            assert caught.value.parameter == "model"
            assert "ka-editor-canary" not in str(caught.value) and "team-a" not in str(caught.value)
    with pytest.raises(ParameterError, match="ORCH_DRYRUN_SCRIPTS_DIR is not set"):
        await _agent("dryrun:hello.json", _ctx())


async def test_a_script_in_the_operators_folder_runs(host_files: dict[str, Path]) -> None:
    _, result = await _agent("dryrun:hello.json", _ctx(dryrun_scripts_dir=str(host_files["scripts"])))
    assert result.outputs["output"].value["response"] == "scripted hello"


async def test_a_bad_step_is_named_by_its_index_not_its_content(host_files: dict[str, Path]) -> None:
    (host_files["scripts"] / "bad.json").write_text(json.dumps([{"say": "ok"}, {"token": "sk-in-a-step-0000"}]))
    with pytest.raises(RuntimeError, match="step 1 has none of") as caught:
        await _agent("dryrun:bad.json", _ctx(dryrun_scripts_dir=str(host_files["scripts"])))
    assert "sk-in-a-step" not in str(caught.value)
    (host_files["scripts"] / "not-steps.json").write_text(json.dumps({"key": "sk-in-an-object-0000"}))
    with pytest.raises(ParameterError, match="must hold a JSON list") as refused:
        await _agent("dryrun:not-steps.json", _ctx(dryrun_scripts_dir=str(host_files["scripts"])))
    assert "sk-in-an-object" not in str(refused.value)
