"""Classifier / Router: the model picks one of up to 8 labels; the input goes to its port.

Label ``i`` routes to ``label_i``; an answer matching no label routes to ``unmatched``.
Matching: the answer equals a label (case and surrounding punctuation ignored), else the
first label the answer contains as a word. The port carries the input (an object gets a
``label`` key; any other value becomes ``{"input": value, "label": ...}``).
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from typing import Any

from orchestrator.kernel.errors import ParameterError
from orchestrator.kernel.protocol import DataValue, ExecutionResult, FlowContext, NodeEvent

MAX_LABELS = 8
SYSTEM = ("Classify the user's text. Answer with exactly one of these labels and nothing "
          "else: {labels}.")


def match_label(answer: str, labels: list[str]) -> int | None:
    """The index of the label ``answer`` names, or None."""
    clean = answer.strip().strip(".!\"'`*").strip().lower()
    for i, label in enumerate(labels):
        if clean == label.lower():
            return i
    for i, label in enumerate(labels):
        if re.search(rf"(?<!\w){re.escape(label.lower())}(?!\w)", clean):
            return i
    return None


def _labels(raw: Any, ctx: FlowContext) -> list[str]:
    value = json.loads(raw) if isinstance(raw, str) else raw
    if (not isinstance(value, list) or not value or len(value) > MAX_LABELS
            or not all(isinstance(v, str) and v.strip() for v in value)):
        raise ParameterError(f"labels must be a list of 1 to {MAX_LABELS} non-empty strings",
                             node_id=ctx.node_id, node_name=ctx.node_name, parameter="labels")
    return [v.strip() for v in value]


class ClassifierExecutor:
    node_type = "classifier"

    async def execute(
        self, data: dict[str, Any], inputs: dict[str, DataValue], ctx: FlowContext
    ) -> AsyncIterator[NodeEvent | ExecutionResult]:
        # Agno loads with these, at the first execution, not at node discovery (nodes/_ai).
        from nodes._ai.builder import parse_script, user_message
        from nodes._ai.models import resolve_model
        from nodes._ai.runner import complete_text

        labels = _labels(data.get("labels"), ctx)
        model = await resolve_model(data.get("model"), ctx, script=parse_script(data.get("script")))
        system = SYSTEM.format(labels=", ".join(labels))
        if data.get("prompt"):
            system += "\n" + str(data["prompt"])
        text = user_message({"prompt": data.get("text")}, inputs)
        answer = ""
        async for item in complete_text(ctx, model, text, system=system, name=ctx.node_name):
            if isinstance(item, NodeEvent):
                yield item
            else:
                answer = item[0]
        index = match_label(answer, labels)
        label = labels[index] if index is not None else None
        port = f"label_{index}" if index is not None else "unmatched"
        value = inputs["input"].value if "input" in inputs else None
        routed = ({**value, "label": label} if isinstance(value, dict)
                  else {"input": value, "label": label})
        if label is None:
            routed["answer"] = answer
        yield ExecutionResult(outputs={port: DataValue("data", routed)})


executor = ClassifierExecutor()
