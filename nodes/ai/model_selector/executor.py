"""Model Selector: materializes its model spec string for a ``model`` socket."""

from __future__ import annotations

from typing import Any

from orchestrator.kernel.errors import ParameterError
from orchestrator.kernel.protocol import FlowContext


class ModelSelectorExecutor:
    node_type = "model_selector"

    async def materialize(self, data: dict[str, Any], output_handle: str, ctx: FlowContext) -> str:
        model = data.get("model")
        if isinstance(model, dict):
            model = f"{model.get('provider', '')}:{model.get('id', '')}"
        if not isinstance(model, str) or ":" not in model:
            raise ParameterError(f"model must be 'provider:model_id', got {model!r}",
                                 node_id=ctx.node_id, node_name=ctx.node_name, parameter="model")
        return model


executor = ModelSelectorExecutor()
