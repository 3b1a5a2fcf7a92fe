"""Cycles and ancestry over a directed graph given as adjacency lists of ids.

Pure functions, linear in nodes + edges. Ancestor sets are the exception by nature (on a
chain of n nodes they hold n^2/2 ids in all), so :class:`Ancestry` computes one only
when asked for it: validating a graph asks only for the nodes whose expressions name
other nodes. The validator uses these for flow edges and link edges alike.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator, Mapping, Sequence


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


class Ancestry(Mapping[str, set[str]]):
    """node -> the set of its ancestors (nodes with a path to it), each computed on first
    access by one walk over the predecessors (linear in nodes + edges) and kept."""

    def __init__(self, order: Sequence[str], successors: Mapping[str, Sequence[str]]) -> None:
        self._order = list(order)
        self._parents: dict[str, list[str]] = {n: [] for n in order}
        for node in order:
            for nxt in successors.get(node, ()):
                self._parents.setdefault(nxt, []).append(node)
        self._known: dict[str, set[str]] = {}

    def __getitem__(self, node: str) -> set[str]:
        if node not in self._parents:
            raise KeyError(node)
        found = self._known.get(node)
        if found is None:
            found = set()
            stack = list(self._parents[node])
            while stack:
                current = stack.pop()
                if current in found:
                    continue
                found.add(current)
                known = self._known.get(current)
                if known is not None:  # reuse a set already walked
                    found |= known
                    continue
                stack.extend(self._parents[current])
            self._known[node] = found
        return found

    def __iter__(self) -> Iterator[str]:
        return iter(self._order)

    def __len__(self) -> int:
        return len(self._order)


def ancestors(order: Sequence[str], successors: Mapping[str, Sequence[str]]) -> Ancestry:
    """Every node's set of ancestors (computed per node on first access)."""
    return Ancestry(order, successors)


class Visible:
    """The nodes whose outputs one node's expressions may read: its flow ancestors, plus
    (for a link source) what each node it is linked into may read. Computed on the first
    membership test, so a node whose expressions name no node costs nothing."""

    def __init__(self, node: str, upstream: Mapping[str, set[str]], link_succ: Mapping[str, Sequence[str]]) -> None:
        self.node, self.upstream, self.link_succ = node, upstream, link_succ
        self._set: set[str] | None = None

    def __contains__(self, item: object) -> bool:
        if self._set is None:
            seen: set[str] = set()
            found: set[str] = set()
            stack = [self.node]
            while stack:  # this node, then every node it is (transitively) linked into
                current = stack.pop()
                if current not in seen:
                    seen.add(current)
                    found |= self.upstream[current]
                    stack.extend(self.link_succ.get(current, ()))
            self._set = found
        return item in self._set
