"""What counts as an operator secret, and masking it (orchestrator/host/redaction.py)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.host.redaction import mask_also, operator_secrets, redact
from orchestrator.settings import get_settings


@pytest.fixture
def configured(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    keys_file = tmp_path / "keys.json"
    keys_file.write_text(json.dumps([{"key": "ka-file-editor-key-1111", "workspace": "a", "role": "editor"},
                                     {"sha256": "0" * 64, "workspace": "b", "role": "viewer"}]))
    monkeypatch.setenv("ORCH_API_KEYS", "admin-key-2222,admin-key-3333")
    monkeypatch.setenv("ORCH_API_KEYS_FILE", str(keys_file))
    monkeypatch.setenv("ORCH_CREDENTIALS_KEY", "fernet-new-4444,fernet-old-5555")
    monkeypatch.setenv("ORCH_S3_SECRET_ACCESS_KEY", "s3-secret-6666")
    monkeypatch.setenv("REDIS_URL", "redis://:redis-pw-7777@db:6379/0")
    get_settings.cache_clear()
    yield
    get_settings.cache_clear()


def test_every_configured_api_key_and_operator_secret_is_masked(configured: None) -> None:
    text = ("ka-file-editor-key-1111 admin-key-2222 admin-key-3333 fernet-old-5555 s3-secret-6666 "
            "redis-pw-7777")
    assert redact({"error": [text]}, get_settings()) == {"error": [" ".join(["***"] * 6)]}
    assert "0" * 64 not in operator_secrets(get_settings())  # a hash in the keys file is not a key


async def test_values_registered_by_a_node_execution_are_masked_in_it_only() -> None:
    import asyncio

    async def uses_a_credential() -> str:
        mask_also(["cred-value-8888"])
        return str(redact("sent cred-value-8888", get_settings()))

    assert await asyncio.create_task(uses_a_credential()) == "sent ***"
    assert redact("sent cred-value-8888", get_settings()) == "sent cred-value-8888"
