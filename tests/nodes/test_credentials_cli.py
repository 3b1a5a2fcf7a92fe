"""The credentials CLI's local parts: key generation and value parsing."""

from __future__ import annotations

import io

import pytest
from cryptography.fernet import Fernet

from orchestrator.cli import main
from orchestrator.cli.credentials_cmd import parse_values
from orchestrator.credentials import mask


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
