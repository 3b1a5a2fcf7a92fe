"""Request bodies. Responses are plain JSON documented in each route's docstring."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import Path
from pydantic import BaseModel, ConfigDict, Field

from orchestrator.kernel.graph import ID_PATTERN

_ID_DOC = "letters, digits, '.', '_' or '-' (at most 128, starting with a letter or digit)"
GraphId = Annotated[str, Path(pattern=ID_PATTERN, description=f"graph id: {_ID_DOC}")]
ChatId = Annotated[str, Path(pattern=ID_PATTERN, description=f"chat id: {_ID_DOC}")]


class StartRun(BaseModel):
    model_config = ConfigDict(extra="forbid")
    input: Any = None
    trigger: str | None = Field(default=None, max_length=200, description="id or name of the trigger node to start at")
    session_id: str | None = Field(default=None, pattern=ID_PATTERN)
    version: int | None = Field(default=None, ge=1, description="graph version (latest by default)")


class Rerun(BaseModel):
    model_config = ConfigDict(extra="forbid")
    from_node: str = Field(min_length=1, max_length=200)


class Approval(BaseModel):
    model_config = ConfigDict(extra="forbid")
    node_id: str | None = Field(default=None, max_length=200)
    decision: Literal["approve", "reject"]
    arguments: dict[str, Any] | None = None
    note: str | None = Field(default=None, max_length=10_000)


class WebhookSecret(BaseModel):
    model_config = ConfigDict(extra="forbid")
    secret: str = Field(min_length=16, max_length=512)


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="forbid")
    message: str = Field(max_length=1_000_000)
    graph_id: str = Field(pattern=ID_PATTERN)
