"""Agno's real OpenAIChat / OpenAILike against a local OpenAI-compatible stub server."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from orchestrator.settings import Settings
from tests.agents.conftest import agno_events, data_in, drain, load_executor, make_ctx
from tests.agents.openai_stub import StubServer

agent = load_executor("agents/agent")
toolset = load_executor("tools/toolset")
SECRET = "sk-stub-secret-abcdef123456"


@pytest.fixture
def stub(monkeypatch: pytest.MonkeyPatch) -> Iterator[StubServer]:
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    with StubServer() as server:
        yield server


def services(server: StubServer) -> dict[str, object]:
    """The operator configured the stub as the model endpoint (ORCH_OPENAI_BASE_URL)."""
    return {"settings": Settings(openai_base_url=server.base_url, retention_s=60, key_prefix="orc")}


@pytest.mark.parametrize("provider", ["openai-like", "openai-chat"])
async def test_agent_runs_a_tool_loop_through_an_openai_compatible_server(
        stub: StubServer, provider: str) -> None:
    kits = await toolset.materialize({"toolkits": ["calculator"]}, "tools", make_ctx("t1"))
    ctx = make_ctx(links={("a1", "tools"): [kits]}, services=services(stub),
                   session_id=f"stub-{provider}")
    events, result = await drain(agent.execute(
        {"model": f"{provider}:stub-model", "prompt": "add two and two",
         "instructions": "Be brief."}, data_in({}), ctx))
    names = agno_events(events)
    assert "ToolCallCompleted" in names and names[-1] == "RunCompleted"
    tool = next(e.data["tool"] for e in events if e.data.get("event") == "ToolCallCompleted")
    assert tool["tool_name"] == "add" and tool["tool_args"] == {"a": 2, "b": 2}
    out = result.outputs["output"].value
    assert out["response"].strip() == f"Stub says: {2.0 + 2.0}"
    assert out["tokens_used"] > 0
    assert len(stub.requests) == 2
    # the server's own counts (5 prompt, 3 completion per request), by provider and model
    [(key, numbers)] = ctx.usage.to_json().items()
    assert key.endswith(":stub-model") and numbers["calls"] == 2
    assert (numbers["input_tokens"], numbers["output_tokens"]) == (10, 6)
    assert stub.requests[0]["headers"]["authorization"] == f"Bearer {SECRET}"
    system_role = "system" if provider == "openai-like" else "developer"
    assert stub.requests[0]["body"]["messages"][0]["role"] == system_role
    assert SECRET not in json.dumps([e.to_json() for e in events])


async def test_a_server_error_becomes_a_node_error_without_the_key(stub: StubServer) -> None:
    stub.fail_status = 500
    with pytest.raises(RuntimeError) as failed:
        await drain(agent.execute({"model": "openai-like:stub-model", "prompt": "hi"},
                                  data_in({}), make_ctx(services=services(stub))))
    assert "Helper" in str(failed.value) and SECRET not in str(failed.value)


async def test_api_keys_in_a_model_spec_are_rejected() -> None:
    with pytest.raises(Exception, match="never read from graph JSON"):
        await drain(agent.execute(
            {"model": {"provider": "openai-like", "id": "m", "api_key": "sk-x"}, "prompt": "hi"},
            data_in({}), make_ctx()))


async def test_a_key_from_the_secrets_file_reaches_the_server_and_no_event(
        tmp_path: object, monkeypatch: pytest.MonkeyPatch) -> None:
    from pathlib import Path

    from orchestrator.settings import get_settings

    secret = "sk-from-file-0123456789"
    path = Path(str(tmp_path)) / "secrets.json"
    path.write_text(json.dumps({"OPENAI_API_KEY": secret}))
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.setenv("ORCH_SECRETS_FILE", str(path))
    get_settings.cache_clear()
    try:
        with StubServer() as server:
            settings = Settings(openai_base_url=server.base_url)
            ctx = make_ctx(services={"settings": settings}, session_id="secrets-file")
            events, _ = await drain(agent.execute(
                {"model": "openai-like:stub-model", "prompt": "hello", "history": False},
                data_in({}), ctx))
            assert server.requests[0]["headers"]["authorization"] == f"Bearer {secret}"
        assert secret not in json.dumps([e.to_json() for e in events])
    finally:
        get_settings.cache_clear()
