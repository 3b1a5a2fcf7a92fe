"""``orchestrator serve`` refuses an unauthenticated API on a non-loopback address."""

from __future__ import annotations

import pytest

from orchestrator.cli import main
from orchestrator.cli.serve_cmd import is_loopback, open_api_refusal
from orchestrator.settings import Settings, get_settings


@pytest.fixture(autouse=True)
def _fresh_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("ORCH_API_KEYS", "ORCH_ALLOW_OPEN_API"):
        monkeypatch.delenv(name, raising=False)
    get_settings.cache_clear()
    yield
    get_settings.cache_clear()


def test_serve_without_keys_refuses_another_host_and_names_the_settings(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = main(["serve", "--host", "0.0.0.0", "--port", "1"])
    err = capsys.readouterr().err
    assert code == 2
    assert "ORCH_API_KEYS" in err and "ORCH_ALLOW_OPEN_API" in err and "0.0.0.0" in err


def test_serve_defaults_to_loopback() -> None:
    from orchestrator.cli import build_parser

    assert build_parser().parse_args(["serve"]).host == "127.0.0.1"


@pytest.mark.parametrize(("host", "env", "refused"), [
    ("0.0.0.0", {}, True),
    ("::", {}, True),
    ("10.0.0.5", {}, True),
    ("api.example.com", {}, True),
    ("127.0.0.1", {}, False),
    ("localhost", {}, False),
    ("::1", {}, False),
    ("0.0.0.0", {"api_keys": "k1"}, False),
    ("0.0.0.0", {"allow_open_api": True}, False),
])
def test_open_api_refusal(host: str, env: dict[str, object], refused: bool) -> None:
    assert (open_api_refusal(host, Settings(**env)) is not None) is refused  # type: ignore[arg-type]


def test_loopback_addresses() -> None:
    assert is_loopback("127.0.0.2") and is_loopback("[::1]") and not is_loopback("0.0.0.0")


def test_a_placeholder_key_stops_serve_with_a_message_not_a_traceback(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from orchestrator.cli import main
    from orchestrator.settings import get_settings

    monkeypatch.setenv("ORCH_API_KEYS", "change-me")
    get_settings.cache_clear()
    try:
        assert main(["serve", "--port", "1"]) == 2
    finally:
        get_settings.cache_clear()
    err = capsys.readouterr().err
    assert "placeholder" in err and "ORCH_API_KEYS" in err and "Traceback" not in err
