"""Model Selector: materializes its model spec for a ``model`` socket.

A ``provider:model_id`` string, or an object ``{provider, id, base_url, credential}``
passed on whole: the node that runs the model decides whether the endpoint and key are
allowed (``orchestrator/host/endpoint.py``), as for a spec written on that node itself.
"""

from __future__ import annotations

from typing import Any

from orchestrator.kernel.errors import ParameterError
from orchestrator.kernel.protocol import FlowContext


class ModelSelectorExecutor:
    node_type = "model_selector"

    async def materialize(self, data: dict[str, Any], output_handle: str,
                          ctx: FlowContext) -> str | dict[str, Any]:
        model = data.get("model")
        if isinstance(model, dict) and model.get("provider") and model.get("id"):
            return dict(model)
        if not isinstance(model, str) or ":" not in model:
            raise ParameterError(f"model must be 'provider:model_id', got {model!r}",
                                 node_id=ctx.node_id, node_name=ctx.node_name, parameter="model")
        return model


executor = ModelSelectorExecutor()
