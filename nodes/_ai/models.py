"""Model specs -> Agno models, and secret redaction.

A spec is a string ``"provider:model_id"`` (as Agno's ``get_model`` takes it) or a dict
``{"provider": ..., "id": ..., "base_url": ...}``. Special providers:

``openai-chat:<id>``  Agno ``OpenAIChat`` (Chat Completions), base URL from
                      ``Settings.openai_base_url`` (``ORCH_OPENAI_BASE_URL``) when set.
``openai-like:<id>``  Agno ``OpenAILike`` (any OpenAI-compatible server; sends ``system``).
``dryrun:<name>``     the offline :class:`~nodes._ai.dryrun.DryRunModel` (alias ``dry-run``);
                      ``<name>`` ending in ``.json`` is a script file.

With ``ORCH_OFFLINE_MODELS=1`` every spec resolves to the dry-run model.

API keys come only from the environment (``OPENAI_API_KEY``, ``ORCH_OPENAI_API_KEY``) or
the ``secrets`` mapping of the host's settings, never from graph JSON (a spec carrying
``api_key`` is rejected). :func:`redact` masks every known secret value in text and JSON
so keys never reach events or error messages.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from agno.models.base import Model
from agno.models.utils import get_model

from nodes._ai.dryrun import DryRunModel
from orchestrator.kernel.errors import ParameterError

OFFLINE_ENV = "ORCH_OFFLINE_MODELS"
DRYRUN_PROVIDERS = frozenset({"dryrun", "dry-run"})
_SECRET_SUFFIXES = ("_API_KEY", "_TOKEN", "_SECRET", "_PASSWORD")
_MASK = "***"


def offline() -> bool:
    return os.environ.get(OFFLINE_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def spec_label(spec: str | dict[str, Any] | None) -> str:
    """A printable ``provider:id`` for events and outputs (never carries secrets)."""
    if isinstance(spec, dict):
        return f"{spec.get('provider', '')}:{spec.get('id', '')}"
    return str(spec or "")


def _split(spec: str | dict[str, Any]) -> tuple[str, str, dict[str, Any]]:
    if isinstance(spec, dict):
        if any("key" in k.lower() or "secret" in k.lower() for k in spec):
            raise ParameterError("API keys are never read from graph JSON; set them in the "
                                 "environment (e.g. OPENAI_API_KEY)", parameter="model")
        provider, model_id = str(spec.get("provider", "")), str(spec.get("id", ""))
        extra = {k: v for k, v in spec.items() if k not in ("provider", "id")}
    else:
        provider, _, model_id = str(spec).partition(":")
        extra = {}
    provider, model_id = provider.strip().lower(), model_id.strip()
    if not provider or not model_id:
        raise ParameterError(f"model spec {spec_label(spec)!r} is not 'provider:model_id' "
                             "(e.g. 'openai-chat:gpt-4o-mini' or 'dryrun:default')",
                             parameter="model")
    return provider, model_id, extra


def _secret(settings: Any, *names: str) -> str | None:
    secrets = getattr(settings, "secrets", None) or {}
    for name in names:
        value = os.environ.get(name) or (secrets.get(name) if isinstance(secrets, dict) else None)
        if value:
            return str(value)
    return None


def load_script(name: str) -> list[dict[str, Any]]:
    """A dry-run script file (a JSON list of steps)."""
    steps = json.loads(Path(name).read_text())
    if not isinstance(steps, list):
        raise ParameterError(f"dry-run script {name!r} must hold a JSON list of steps",
                             parameter="script")
    return steps


def resolve_model(spec: str | dict[str, Any] | None, *, settings: Any = None,
                  script: list[dict[str, Any]] | None = None,
                  temperature: float | None = None) -> Model:
    """Build a fresh Agno model for ``spec`` (a new object per call: clients are loop-bound)."""
    if not spec:
        raise ParameterError("no model given", parameter="model")
    provider, model_id, extra = _split(spec)
    if offline() or provider in DRYRUN_PROVIDERS:
        steps = script
        if steps is None and provider in DRYRUN_PROVIDERS and model_id.endswith(".json"):
            steps = load_script(model_id)
        return DryRunModel(id=model_id, script=list(steps or []))
    base_url = extra.get("base_url") or getattr(settings, "openai_base_url", None)
    model: Model
    if provider in ("openai-chat", "openai-like"):
        from agno.models.openai import OpenAIChat
        from agno.models.openai.like import OpenAILike

        api_key = _secret(settings, "ORCH_OPENAI_API_KEY", "OPENAI_API_KEY")
        kwargs: dict[str, Any] = {"id": model_id, "max_retries": 0}
        if base_url:
            kwargs["base_url"] = base_url
        if provider == "openai-like":
            model = OpenAILike(api_key=api_key or "not-provided", **kwargs)
        else:
            model = OpenAIChat(api_key=api_key, **kwargs)
    else:
        try:
            resolved = get_model(f"{provider}:{model_id}")
        except (ValueError, ImportError) as exc:
            raise ParameterError(f"model spec {spec_label(spec)!r}: {redact(str(exc))}",
                                 parameter="model") from None
        assert resolved is not None
        model = resolved
    if temperature is not None and hasattr(model, "temperature"):
        model.temperature = temperature
    return model


def _secret_values() -> list[str]:
    from orchestrator.settings import get_settings

    named = {**os.environ, **get_settings().secrets}
    values = [v for k, v in named.items() if k.upper().endswith(_SECRET_SUFFIXES) and len(v) >= 6]
    return sorted(set(values), key=len, reverse=True)


def redact(value: Any) -> Any:
    """``value`` with every secret from the environment masked (walks str/list/dict)."""
    secrets = _secret_values()
    if not secrets:
        return value
    return _mask(value, secrets)


def _mask(value: Any, secrets: list[str]) -> Any:
    if isinstance(value, str):
        for secret in secrets:
            value = value.replace(secret, _MASK)
        return value
    if isinstance(value, dict):
        return {k: _mask(v, secrets) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_mask(v, secrets) for v in value]
    return value
