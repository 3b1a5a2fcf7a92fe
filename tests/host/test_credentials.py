"""The credentials CLI's local parts: key generation and value parsing."""

from __future__ import annotations

import io

import pytest
from cryptography.fernet import Fernet

from orchestrator.cli import main
from orchestrator.cli.credentials_cmd import parse_values
from orchestrator.host.credentials import mask


def test_keygen_prints_a_usable_fernet_key(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["credentials", "keygen"]) == 0
    key = capsys.readouterr().out.strip()
    assert Fernet(key.encode()).decrypt(Fernet(key.encode()).encrypt(b"x")) == b"x"


def test_values_parse_and_dash_reads_stdin(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO("s3cr3t-from-stdin\n"))
    assert parse_values(["username=ada", "password=-"]) == {"username": "ada", "password": "s3cr3t-from-stdin"}
    with pytest.raises(ValueError, match="KEY=VALUE"):
        parse_values(["novalue"])


def test_mask_replaces_every_secret_in_nested_values() -> None:
    value = {"error": "token abc123 refused", "items": ["abc123", {"u": "x-abc123-y"}]}
    assert mask(value, ["abc123"]) == {"error": "token *** refused", "items": ["***", {"u": "x-***-y"}]}


def test_set_sends_origins_and_origins_replaces_them(monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    sent: list[tuple[str, str, object]] = []

    class FakeApi:
        def __enter__(self) -> FakeApi:
            return self

        def __exit__(self, *exc: object) -> None:
            pass

        def _request(self, method: str, url: str, json: object = None) -> object:
            sent.append((method, url, json))
            return {}

    monkeypatch.setattr("orchestrator.cli.credentials_cmd.client", lambda args: FakeApi())
    assert main(["credentials", "set", "partner", "--type", "bearer", "--value", "token=t-1",
                 "--origin", "https://api.example.com", "--origin", "https://*.example.com"]) == 0
    assert main(["credentials", "origins", "partner", "https://api.example.com"]) == 0
    capsys.readouterr()
    assert sent == [
        ("POST", "/credentials", {"name": "partner", "type": "bearer", "values": {"token": "t-1"},
                                  "origins": ["https://api.example.com", "https://*.example.com"]}),
        ("PATCH", "/credentials/partner", {"origins": ["https://api.example.com"]}),
    ]
