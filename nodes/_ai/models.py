"""Model specs -> Agno models.

A spec is a string ``"provider:model_id"`` (as Agno's ``get_model`` takes it) or a dict
``{"provider": ..., "id": ..., "base_url": ..., "credential": ...}`` (``base_url`` and
``credential`` for the two OpenAI-compatible providers only). Special providers:

``openai-chat:<id>``  Agno ``OpenAIChat`` (Chat Completions).
``openai-like:<id>``  Agno ``OpenAILike`` (any OpenAI-compatible server; sends ``system``).
``dryrun:<name>``     the offline :class:`~nodes._ai.dryrun.DryRunModel` (alias ``dry-run``);
                      ``<name>`` ending in ``.json`` names a script file inside the
                      operator's ``ORCH_DRYRUN_SCRIPTS_DIR`` (never a path of the graph's
                      choosing: unset, there are no script files).

For the OpenAI-compatible providers, which server gets which key is
``orchestrator/host/endpoint.py``: the operator's key only to endpoints the operator
configured (``ORCH_OPENAI_BASE_URL``, ``ORCH_MODEL_BASE_URLS``), a credential's key only to
origins the credential allows, any other ``base_url`` refused with a ``ParameterError``.
Their client passes the egress policy at every connect (``openai_models.py``). Other
providers (``anthropic:...``, ``ollama:...``) are Agno's, with the provider's own endpoint
and keys from the environment: a graph chooses only the model id.

With ``ORCH_OFFLINE_MODELS=1`` every spec resolves to the dry-run model.

API keys are never read from graph JSON (a spec carrying ``api_key`` is rejected).
Agno is imported when a model is resolved, not with this module (``embedders`` imports it
at node discovery).
``orchestrator/host/redaction.py`` masks secrets in events and errors; the key of a
credential a model uses is registered there for the node execution.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from orchestrator.host.endpoint import resolve_endpoint
from orchestrator.host.flow import gate_for
from orchestrator.host.node_host import node_host
from orchestrator.host.redaction import mask_also
from orchestrator.kernel.errors import ParameterError
from orchestrator.kernel.protocol import FlowContext

if TYPE_CHECKING:
    from agno.models.base import Model

OFFLINE_ENV = "ORCH_OFFLINE_MODELS"
DRYRUN_PROVIDERS = frozenset({"dryrun", "dry-run"})
OPENAI_PROVIDERS = frozenset({"openai-chat", "openai-like"})
SPEC_KEYS = ("provider", "id", "base_url", "credential")
SCRIPTS_SETTING = "ORCH_DRYRUN_SCRIPTS_DIR"


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
            raise ParameterError("API keys are never read from graph JSON; name a credential "
                                 "(\"credential\": \"<name>\") or let the operator set the key",
                                 parameter="model")
        unknown = sorted(set(spec) - set(SPEC_KEYS))
        if unknown:
            raise ParameterError(f"model spec takes {', '.join(SPEC_KEYS)}; unknown: {', '.join(unknown)}",
                                 parameter="model")
        provider, model_id = str(spec.get("provider", "")), str(spec.get("id", ""))
        extra = {k: spec[k] for k in ("base_url", "credential") if spec.get(k) not in (None, "")}
    else:
        provider, _, model_id = str(spec).partition(":")
        extra = {}
    provider, model_id = provider.strip().lower(), model_id.strip()
    if not provider or not model_id:
        raise ParameterError(f"model spec {spec_label(spec)!r} is not 'provider:model_id' "
                             "(e.g. 'openai-chat:gpt-4o-mini' or 'dryrun:default')",
                             parameter="model")
    return provider, model_id, extra


def load_script(name: str, scripts_dir: str) -> list[dict[str, Any]]:
    """The dry-run script ``name`` (a JSON list of steps) inside the operator's scripts
    folder. Errors name the file as the graph gave it, never its contents."""
    if not scripts_dir:
        raise ParameterError(f"parameter 'model': dry-run script files are off ({SCRIPTS_SETTING} is not "
                             "set); give the steps in the node's 'script' parameter", parameter="model")
    root = Path(scripts_dir).expanduser().resolve()
    path = (root / name).resolve()
    if Path(name).is_absolute() or not path.is_relative_to(root) or not path.is_file():
        raise ParameterError(f"parameter 'model': dry-run script {name!r} is not a file inside "
                             f"{SCRIPTS_SETTING}", parameter="model")
    try:
        steps = json.loads(path.read_text())
    except (OSError, ValueError):
        raise ParameterError(f"parameter 'model': dry-run script {name!r} is not readable JSON",
                             parameter="model") from None
    if not isinstance(steps, list) or not all(isinstance(step, dict) for step in steps):
        raise ParameterError(f"parameter 'model': dry-run script {name!r} must hold a JSON list of "
                             "step objects", parameter="model")
    return steps


async def resolve_model(spec: str | dict[str, Any] | None, ctx: FlowContext, *,
                        script: list[dict[str, Any]] | None = None,
                        temperature: float | None = None) -> Model:
    """Build a fresh Agno model for ``spec`` (a new object per call: clients are loop-bound)."""
    if not spec:
        raise ParameterError("no model given", parameter="model")
    provider, model_id, extra = _split(spec)
    host = node_host(ctx)
    settings = host.settings
    if offline() or provider in DRYRUN_PROVIDERS:
        from nodes._ai.dryrun import DryRunModel

        steps = script
        if steps is None and provider in DRYRUN_PROVIDERS and model_id.endswith(".json"):
            steps = load_script(model_id, settings.dryrun_scripts_dir)
        return DryRunModel(id=model_id, script=list(steps or []))
    model: Model
    if provider in OPENAI_PROVIDERS:
        from nodes._ai.openai_models import EndpointAccess, openai_model

        endpoint = await resolve_endpoint(ctx, base_url=extra.get("base_url", ""),
                                          credential=extra.get("credential", ""), parameter="model")
        gate = gate_for(ctx)  # the model's requests hold it (one gate per execution)
        await gate.prepay(endpoint.limits)  # a node that must wait learns it before building anything
        mask_also(endpoint.secrets())
        access = EndpointAccess(endpoint, endpoint.policy(settings), host.operator_secrets, gate)
        model = openai_model(provider, model_id, access)
    else:
        if extra:
            raise ParameterError(f"model spec {spec_label(spec)!r}: base_url and credential apply to "
                                 f"{' and '.join(sorted(OPENAI_PROVIDERS))} only", parameter="model")
        from agno.models.utils import get_model

        try:
            resolved = get_model(f"{provider}:{model_id}")
        except (ValueError, ImportError) as exc:
            raise ParameterError(f"model spec {spec_label(spec)!r}: {host.redact(str(exc))}",
                                 parameter="model") from None
        assert resolved is not None
        model = resolved
    if temperature is not None and hasattr(model, "temperature"):
        model.temperature = temperature
    return model
