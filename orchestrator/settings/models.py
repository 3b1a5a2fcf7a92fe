"""Model endpoints of agent and embedding nodes, dry-run scripts, the secrets file.

Read by ``orchestrator/host/endpoint.py``, ``orchestrator/host/redaction.py``,
``nodes/_ai/``. One group of :class:`orchestrator.settings.Settings`, which every entry
point builds once; a subsystem takes the group it reads (a ``Settings`` is each of them).
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

from orchestrator.settings.base import SettingsGroup


class ModelSettings(SettingsGroup):
    # The OpenAI-compatible server models and embeddings use unless a graph picks another
    # (Ollama, vLLM, a proxy); unset: OPENAI_BASE_URL, else https://api.openai.com/v1.
    openai_base_url: str | None = None
    # Comma-separated further base URLs a graph may pick for a model or an embedding
    # ("base_url"), matched exactly. These, and openai_base_url, receive the operator's
    # OPENAI_API_KEY / ORCH_OPENAI_API_KEY and are reachable despite the egress policy;
    # any other base URL from a graph is refused (a workspace's own endpoint comes with
    # an api_key credential, which carries its base_url and key).
    model_base_urls: str = ""
    # Provider limits of the operator's endpoints, shared by every node and workspace that
    # calls them through the operator's key: a JSON object of base URL -> {"rpm": n,
    # "tpm": n} (requests and tokens per minute), e.g. '{"https://api.openai.com/v1":
    # {"rpm": 500, "tpm": 200000}}'. An endpoint not listed learns a rate from its 429s.
    model_limits: str = ""
    # A folder of dry-run scripts (JSON lists of steps) that a "dryrun:<name>.json" model
    # may name, relative to it; unset: scripts come only from a node's "script" parameter.
    dryrun_scripts_dir: str = ""
    # A JSON object of secret names to values (e.g. {"OPENAI_API_KEY": "..."}), for hosts
    # that mount secrets as a file (Kubernetes, Docker secrets) rather than environment
    # variables. Read when first used; values are masked in events and errors.
    secrets_file: str | None = None


    @property
    def secrets(self) -> dict[str, str]:
        """The secrets of ``secrets_file`` ({} without one); a bad file is an error naming it."""
        if not self.secrets_file:
            return {}
        return _read_secrets(self.secrets_file)


@lru_cache(maxsize=8)
def _read_secrets(path: str) -> dict[str, str]:
    try:
        raw = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"ORCH_SECRETS_FILE {path}: cannot read a JSON object of secrets ({exc})") from None
    if not isinstance(raw, dict) or not all(isinstance(v, str) for v in raw.values()):
        raise ValueError(f"ORCH_SECRETS_FILE {path}: must hold a JSON object of names to strings")
    return {str(k): v for k, v in raw.items()}
