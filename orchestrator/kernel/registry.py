"""The registry: node type id -> (definition, executor). Filled by a loader outside the kernel."""

from __future__ import annotations

import difflib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from .definition import NodeDefinition
from .errors import UnknownNodeTypeError
from .protocol import can_execute, can_materialize


@dataclass(frozen=True)
class NodeType:
    definition: NodeDefinition
    executor: object
    source: str = ""  # where it was loaded from (folder, entry point), for diagnostics

    @property
    def id(self) -> str:
        return self.definition.id

    @property
    def can_execute(self) -> bool:
        return can_execute(self.executor)

    @property
    def can_materialize(self) -> bool:
        return can_materialize(self.executor)


class Registry:
    def __init__(self) -> None:
        self._types: dict[str, NodeType] = {}

    def register(self, definition: NodeDefinition, executor: object, source: str = "") -> NodeType:
        node_type = getattr(executor, "node_type", None)
        if node_type != definition.id:
            raise ValueError(
                f"executor.node_type {node_type!r} does not match definition id {definition.id!r} ({source})"
            )
        if not (can_execute(executor) or can_materialize(executor)):
            raise ValueError(f"executor for {definition.id!r} has neither execute nor materialize ({source})")
        if definition.id in self._types:
            raise ValueError(
                f"node type {definition.id!r} from {source} is already registered "
                f"from {self._types[definition.id].source}"
            )
        entry = NodeType(definition=definition, executor=executor, source=source)
        self._types[definition.id] = entry
        return entry

    def get(self, type_id: str, **context: Any) -> NodeType:
        try:
            return self._types[type_id]
        except KeyError:
            close = difflib.get_close_matches(type_id, list(self._types), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise UnknownNodeTypeError(f"unknown node type {type_id!r}{hint}", **context) from None

    def __contains__(self, type_id: object) -> bool:
        return type_id in self._types

    def __iter__(self) -> Iterator[NodeType]:
        return iter(sorted(self._types.values(), key=lambda t: t.id))

    def __len__(self) -> int:
        return len(self._types)

    def definitions(self) -> list[NodeDefinition]:
        return [t.definition for t in self]
