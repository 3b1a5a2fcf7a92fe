"""Cycles and ancestry over a directed graph given as adjacency lists of ids.

Pure functions, linear in nodes + edges (ancestor sets aside, whose total size is what
it is). The validator uses them for flow edges and link edges alike.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence


def find_cycle(order: Sequence[str], successors: Mapping[str, Sequence[str]]) -> list[str] | None:
    """One cycle as a closed path ``[a, b, ..., a]``, or None when the graph is acyclic.

    Deterministic: nodes are visited in ``order`` and successors in list order.
    Iterative, so a 10,000-node chain does not hit the recursion limit.
    """
    white, grey, black = 0, 1, 2
    colour = dict.fromkeys(order, white)
    for root in order:
        if colour[root] != white:
            continue
        colour[root] = grey
        stack: list[tuple[str, int]] = [(root, 0)]
        while stack:
            node, index = stack[-1]
            succ = successors.get(node, ())
            if index >= len(succ):
                colour[node] = black
                stack.pop()
                continue
            stack[-1] = (node, index + 1)
            nxt = succ[index]
            state = colour.get(nxt, black)
            if state == grey:
                path = [n for n, _ in stack]
                return [*path[path.index(nxt):], nxt]
            if state == white:
                colour[nxt] = grey
                stack.append((nxt, 0))
    return None


def topological_order(order: Sequence[str], successors: Mapping[str, Sequence[str]]) -> list[str]:
    """Kahn's order (ties broken by ``order``); call only on an acyclic graph."""
    indegree = dict.fromkeys(order, 0)
    for node in order:
        for nxt in successors.get(node, ()):
            indegree[nxt] += 1
    queue = deque(n for n in order if indegree[n] == 0)
    out: list[str] = []
    while queue:
        node = queue.popleft()
        out.append(node)
        for nxt in successors.get(node, ()):
            indegree[nxt] -= 1
            if indegree[nxt] == 0:
                queue.append(nxt)
    return out


def ancestors(order: Sequence[str], successors: Mapping[str, Sequence[str]]) -> dict[str, set[str]]:
    """Every node's set of ancestors (nodes with a path to it); the graph must be acyclic."""
    result: dict[str, set[str]] = {n: set() for n in order}
    for node in topological_order(order, successors):
        mine = result[node]
        for nxt in successors.get(node, ()):
            theirs = result[nxt]
            theirs.add(node)
            theirs |= mine
    return result
