"""Dotted paths into JSON values: ``a.b.0.c`` reads, writes and deletes nested keys.

A segment that is a decimal integer indexes a list; every other segment is a dict key.
Reading a missing path yields ``default`` (like the expression engine's missing keys);
writing creates intermediate dicts; deleting a missing path is a no-op.
"""

from __future__ import annotations

import copy
from typing import Any

_MISSING = object()


def split_path(path: str) -> list[str]:
    """``"a.b.0"`` -> ``["a", "b", "0"]``; an empty path or empty segment is a ValueError."""
    parts = path.split(".")
    if not path or any(p == "" for p in parts):
        raise ValueError(f"bad dotted path {path!r}: empty segment")
    return parts


def get_path(value: Any, path: str, default: Any = None) -> Any:
    current = value
    for part in split_path(path):
        if isinstance(current, dict) and part in current:
            current = current[part]
        elif isinstance(current, list) and _index_in(current, part):
            current = current[int(part)]
        else:
            return default
    return current


def has_path(value: Any, path: str) -> bool:
    return get_path(value, path, _MISSING) is not _MISSING


def set_path(target: dict[str, Any], path: str, new: Any) -> None:
    """Set ``path`` in ``target`` in place, creating dicts on the way.

    A segment that meets a non-container is replaced by a dict: the later value wins, as
    in n8n's Set node. An index segment into an existing list replaces that element.
    """
    parts = split_path(path)
    current: Any = target
    for part in parts[:-1]:
        if isinstance(current, list) and _index_in(current, part):
            nxt = current[int(part)]
            if not isinstance(nxt, (dict, list)):
                nxt = current[int(part)] = {}
        elif isinstance(current, dict):
            nxt = current.get(part)
            if not isinstance(nxt, (dict, list)):
                nxt = current[part] = {}
        else:
            raise ValueError(f"cannot set {path!r}: {part!r} is not an index of the list there")
        current = nxt
    last = parts[-1]
    if isinstance(current, list) and _index_in(current, last):
        current[int(last)] = new
    elif isinstance(current, dict):
        current[last] = new
    else:
        raise ValueError(f"cannot set {path!r}: {last!r} is not an index of the list there")


def _index_in(items: list[Any], part: str) -> bool:
    return part.isdigit() and int(part) < len(items)


def delete_path(target: Any, path: str) -> None:
    parts = split_path(path)
    parent = get_path(target, ".".join(parts[:-1])) if len(parts) > 1 else target
    last = parts[-1]
    if isinstance(parent, dict):
        parent.pop(last, None)
    elif isinstance(parent, list) and _index_in(parent, last):
        del parent[int(last)]


_IMMUTABLE = (str, int, float, bool, type(None))


def copy_json(value: Any) -> Any:
    """A deep copy, so a node never mutates a value another node also holds. Plain dicts,
    lists and scalars (what a JSON value is made of) are copied here, several times faster
    than ``copy.deepcopy``, which copies anything else."""
    kind = type(value)
    if kind is dict:
        return {k: v if type(v) in _IMMUTABLE else copy_json(v) for k, v in value.items()}
    if kind is list:
        return [v if type(v) in _IMMUTABLE else copy_json(v) for v in value]
    if kind in _IMMUTABLE:
        return value
    return copy.deepcopy(value)
