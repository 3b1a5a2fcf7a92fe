"""The state a run keeps, behind an interface the kernel defines.

The step function reads and writes a run only through :class:`RunStore`. Two
implementations fulfil it: ``memory.MemoryStore`` (in-process: unit tests, nested
sub-graphs) and the Redis store in ``workers/`` (the distributed barrier: one Lua script
per node completion). Both apply the same transition function (``scheduling.complete``),
and one conformance suite runs against both.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from .protocol import DataValue, NodeEvent
from .scheduling import RunPlan


class RunStatus:
    QUEUED = "queued"
    RUNNING = "running"
    WAITING = "waiting"  # paused (e.g. for an approval); holds no worker
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    TIMED_OUT = "timed_out"

    TERMINAL = frozenset({SUCCEEDED, FAILED, CANCELLED, TIMED_OUT})
    ACTIVE = frozenset({QUEUED, RUNNING, WAITING})


class NodeStatus:
    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    SKIPPED = "skipped"
    WAITING = "waiting"
    RETRYING = "retrying"  # failed an attempt; the next one is scheduled (no worker holds it)
    NOT_RUN = "not_run"  # the run ended (failed, cancelled, timed out) before the node ran
    # The run ended (failed, cancelled, timed out) while the node ran: it is over at once,
    # and the completion its worker sends later changes nothing.
    CANCELLED = "cancelled"

    FINISHED = frozenset({SUCCEEDED, FAILED, SKIPPED, NOT_RUN, CANCELLED})


@dataclass
class RunRecord:
    run_id: str
    status: str
    graph_id: str
    graph_version: int | None = None
    created_at: float = 0.0
    finished_at: float | None = None
    error: dict[str, Any] | None = None
    run_input: Any = None
    session_id: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass
class Claim:
    """The answer to "may I run this node now?".

    ``run``    you hold the node's lease under fencing ``token``: execute it.
    ``done``   it already finished (a redelivery): dispatch ``pending_dispatch`` and stop.
    ``busy``   a live lease is held (by any worker, this one too): stop without running.
    ``early``  its scheduled retry is not due yet by the store's clock: send it again
               after ``retry_in_s`` (nothing was claimed).
    ``closed`` the run is terminal or the node is not part of it: stop.
    """

    kind: Literal["run", "done", "busy", "early", "closed"]
    claims: int = 0  # how many times this node was claimed (> 1 after a worker died)
    pending_dispatch: list[str] = field(default_factory=list)
    # With kind "run": the run's fixed context, so the step reads no run record.
    run_input: Any = None
    session_id: str | None = None
    workspace: str | None = None  # the run's workspace (its record's), for the host of its nodes
    resume: dict[str, Any] | None = None  # {"payload", "input"} when the node was resumed
    outputs: dict[str, dict[str, DataValue]] = field(default_factory=dict)  # of the ``read`` nodes
    attempt: int = 1  # which attempt this claim runs (> 1 after a scheduled retry)
    # With kind "run": the claim's fencing token, larger than every earlier claim's of the
    # node. Completions, renewals and event appends carry it; a later claim makes it stale.
    token: int = 0
    retry_in_s: float | None = None  # with kind "early": how long until the retry is due


@dataclass
class NodeCompletion:
    """How a node ended. ``outputs`` keys are the live output ports."""

    status: str  # NodeStatus.SUCCEEDED | FAILED | WAITING | RETRYING
    # For WAITING: the suspend payload, stored so resume can hand it back to the executor.
    payload: dict[str, Any] | None = None
    outputs: dict[str, DataValue] = field(default_factory=dict)
    events: list[NodeEvent] = field(default_factory=list)  # appended atomically with the completion
    error: dict[str, Any] | None = None
    stop_run: bool = False  # a failure that ends the run as failed
    # For RETRYING: the attempt the next claim runs. The store releases the lease and
    # keeps the node claimable; the host sends the node again after the retry's delay.
    next_attempt: int = 0
    # For RETRYING: how long after this completion that attempt is due. The store turns it
    # into a due time on its own clock: a claim before it is answered ``early``, and a
    # sweeper sends a node whose retry is long overdue again (the delayed message died
    # with its worker).
    retry_delay_s: float | None = None
    # The length of the outputs' JSON text when the step measured it (its output checks);
    # 0 when not measured.
    output_chars: int = 0


@dataclass
class Ready:
    """What a completion hands its caller: ``nodes`` to run now (not dispatched yet: the
    caller claims or sends them), how many it ``queued`` on the run's queue instead, and
    the queue's ``backlog`` after it took its share."""

    nodes: list[str] = field(default_factory=list)
    queued: int = 0
    backlog: int = 0
    stale: bool = False  # refused: the completion's token was superseded by a later claim
    # The granted claims of ``nodes`` made in the same call (``take.claim_taken``; node
    # id -> claim; a node absent: the caller claims it itself).
    claims: dict[str, Claim] = field(default_factory=dict)
    applied: int = 0  # ``RunStore.complete_chain``: how many of its links were applied


@dataclass(frozen=True)
class ChainLink:
    """One link of ``RunStore.complete_chain``: a node and its completion."""

    node_id: str
    completion: NodeCompletion


@dataclass(frozen=True)
class ClaimRequest:
    """What a caller asks when it claims a node (``RunStore.claim_node``): the lease it
    wants, the ``started`` event to append, and the nodes whose stored outputs a granted
    claim carries (``read``)."""

    node_id: str
    lease_s: float
    started: NodeEvent
    read: Sequence[str] = ()


@dataclass(frozen=True)
class TakenClaims:
    """How a completing caller claims every node it takes, whichever they are (a fan-out's
    branches handed over, or older nodes taken from the run's queue): each as
    ``claim_node`` would with a request of ``lease_s``, the node's ``started`` event of
    attempt 1 with ``started_data`` as its data (which worker runs it), and as ``read`` the
    nodes whose outputs the node's step reads (its flow sources and the nodes its
    expressions name, ``lookahead.step_reads``). The store derives each node's part from the
    run's plan."""

    lease_s: float
    started_data: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class StartedNode:
    """A run's start node that its start completed (``kernel/start.py``), for
    ``RunStore.create_run`` to store with the run: its id and its completion (succeeded,
    its ``started`` and ``completed`` events)."""

    node_id: str
    completion: NodeCompletion


@dataclass(frozen=True)
class Take:
    """What a completing caller takes (``RunStore.complete_node``): the nodes that became
    ready join the tail of the run's queue, and the caller takes up to ``max_nodes`` from
    its head. With ``claim_taken``, every node it takes is claimed in the same call."""

    max_nodes: int
    claim_taken: TakenClaims | None = None


class RunQuery(ABC):
    """What the API and the CLI read of a run: its record, plan, outputs, node states and
    events. Implemented by every run store (the Redis store, ``MemoryStore``)."""

    @abstractmethod
    async def load_plan(self, run_id: str) -> RunPlan: ...

    @abstractmethod
    async def get_run(self, run_id: str) -> RunRecord:
        """Raises ``RunNotFoundError`` for an unknown id."""

    @abstractmethod
    async def read_outputs(self, run_id: str, node_ids: list[str]) -> dict[str, dict[str, DataValue]]:
        """Outputs of the given nodes that have completed (missing ids are absent)."""

    @abstractmethod
    async def node_states(self, run_id: str) -> dict[str, str]:
        """Every node's status (``NodeStatus``) by node id."""

    @abstractmethod
    async def read_events(
        self, run_id: str, after: str = "0-0", count: int = 1000, block_ms: int | None = None
    ) -> list[tuple[str, NodeEvent]]:
        """Events after event id ``after``, oldest first, at most ``count``; waits up to
        ``block_ms`` for one when there is none yet (None: does not wait)."""

    async def run_status(self, run_id: str) -> str:
        return (await self.get_run(run_id)).status


class RunStore(RunQuery):
    """Per-run state as a step and the run's starter change it (extends the read side,
    ``RunQuery``). Every method is safe to call twice (at-least-once delivery)."""

    @abstractmethod
    async def create_run(self, plan: RunPlan, record: RunRecord, *, deadline_s: float | None = None,
                         started: StartedNode | None = None) -> list[str]:
        """Store the plan and record, set status running, append ``run_started``, and mark
        the start nodes dispatched: the caller sends them next (a host sweeper sends
        again one whose message is lost on the way). Returns the nodes the caller sends.

        ``started``: the start node completed by the start itself (``kernel/start.py``),
        applied in the same atomic step as ``complete_node`` would apply it (outputs,
        events after ``run_started``, successors counted down, skips, the run's end);
        then the nodes returned are the ones its completion made ready (none when the run
        ended with it). A store that cannot count its bytes within the storage budgets
        does not apply it and returns the start nodes (their step fails as usual).

        A run that already exists is left as it is, and its start nodes are returned:
        sending them again is harmless (a finished node's claim hands over the nodes it
        made ready that nobody sent).

        ``deadline_s`` (default: the host's setting) bounds the run's wall time; a host
        sweeper ends runs past it ``timed_out``."""

    @abstractmethod
    async def seed_outputs(self, run_id: str, outputs: dict[str, dict[str, DataValue]]) -> None:
        """Store outputs of nodes that will not run in this run (a re-run reusing an
        earlier run's results), so inputs and expressions can read them."""

    @abstractmethod
    async def claim_node(self, run_id: str, request: ClaimRequest, *, worker_id: str) -> Claim:
        """Atomically take the lease of ``request.node_id`` under a new fencing token and
        mark it dispatched; append ``request.started`` (``data.reclaimed`` / ``data.resumed`` on a reclaim or
        a resume, ``attempt`` set after a scheduled retry). A granted claim carries the
        stored outputs of ``request.read``.

        A live lease makes the claim ``busy``, whoever holds it; a retry not yet due by the
        store's clock makes it ``early`` (nothing changes)."""

    @abstractmethod
    async def renew_leases(self, run_id: str, tokens: Mapping[str, int], *, lease_s: float) -> list[str]:
        """Extend by ``lease_s`` the leases of ``tokens`` (node -> the fencing token of its
        claim), in one round trip. A lease that lapsed is taken again while its token is
        still the node's latest (nobody claimed it since). Returns the nodes whose token a
        later claim superseded: refused and counted; their execution should stop."""

    @abstractmethod
    async def append_event(self, event: NodeEvent, *, token: int | None = None) -> str:
        """Append to the run's event log; returns the event id (ordered).

        With ``token`` (a running node's own events) the event is refused, returning "",
        unless ``token`` is the node's latest claim and the node is still running; a
        superseded token is counted as stale."""

    async def append_events(self, events: Sequence[NodeEvent], *, token: int | None = None) -> list[str]:
        """``append_event`` for each of ``events`` (one run's, one node's), in order: their
        ids. A store may append them in one call (the Redis store does); a refusal then
        refuses them all ("" for each)."""
        return [await self.append_event(event, token=token) for event in events]

    @abstractmethod
    async def complete_node(self, run_id: str, node_id: str, completion: NodeCompletion, *,
                            take: Take | None = None, token: int | None = None) -> Ready:
        """Apply a completion once: store outputs, count down successors, propagate
        skips, append events, finish the run when nothing remains.

        ``take.claim_taken``: each of ``Ready.nodes`` is claimed at once with the request
        it describes (the same answer ``claim_node`` would give, in the same atomic step);
        granted claims come back in ``Ready.claims``, any other answer is dropped (the
        caller's own ``claim_node`` gets it again). A store that cannot derive a node's
        request leaves that node to the caller's own claim.

        ``token`` is the fencing token of the claim that ran the node: when a later claim
        superseded it, nothing is applied, no event is appended, the refusal is counted,
        and ``Ready.stale`` is set. A claim whose lease merely lapsed, with nobody claiming
        since, still completes. ``None`` (a host acting on the node itself) is not fenced.

        ``take=None``: ``Ready.nodes`` are all the nodes that became ready and are not yet
        dispatched. ``take=Take(n)``: those nodes join the tail of the run's queue (which counts as
        dispatched: the queue answers for them), and the caller takes up to ``n`` from its
        head, the oldest first (also after a ``retrying`` or ``waiting`` completion, whose
        slot is free too). A second call for the same node applies nothing and returns the
        nodes still undispatched."""

    async def complete_chain(self, run_id: str, links: Sequence[ChainLink], *, take: Take,
                             token: int | None = None) -> Ready:
        """Apply the completions of a chain's links as one atomic step: the first under
        ``token`` (as ``complete_node`` with ``take``), then each next link under the claim
        the previous completion made for it (``take.claim_taken``) when that completion
        handed it over and nothing else. The state changes and events are those of one
        ``complete_node`` per link, in order; a host that ran the links one after the other
        without storing anything between (``kernel/fusion.py``) stores them this way.

        The chain stops at the first link that was not handed over alone with a granted
        claim, or whose completion is refused (stale, or over a storage budget): the
        answer is then the previous link's ``Ready`` (which may hold that link's claim:
        the caller runs it as any node handed over). ``Ready.applied`` says how many links
        were applied (0: the first was refused, ``Ready.stale`` set). This default applies
        them one call at a time; a store may do it in one."""
        ready = await self.complete_node(run_id, links[0].node_id, links[0].completion, take=take, token=token)
        applied = 0 if ready.stale else 1
        for link in links[1:]:
            claim = ready.claims.get(link.node_id)
            if applied == 0 or claim is None or ready.nodes != [link.node_id] or len(ready.claims) != 1:
                break
            following = await self.complete_node(run_id, link.node_id, link.completion, take=take, token=claim.token)
            if following.stale:
                break
            ready, applied = following, applied + 1
        ready.applied = applied
        return ready

    @abstractmethod
    async def take_queued(self, run_id: str, max_nodes: int) -> list[str]:
        """Take up to ``max_nodes`` from the head of the run's queue (none once the run
        ended); they are undispatched again until claimed or sent."""

    async def take_claimed(self, run_id: str, max_nodes: int, claim_taken: TakenClaims) -> Ready:
        """``take_queued``, and each node taken claimed in the same atomic step with the
        request ``claim_taken`` describes (as ``complete_node``'s ``Take.claim_taken``):
        ``Ready.nodes`` the nodes taken, ``Ready.claims`` the claims granted (a node absent:
        the caller claims it itself). This default claims none."""
        return Ready(await self.take_queued(run_id, max_nodes))

    @abstractmethod
    async def queue_length(self, run_id: str) -> int: ...

    @abstractmethod
    async def mark_dispatched(self, run_id: str, node_ids: list[str]) -> None:
        """The nodes' tasks are (about to be) sent: their sent time is kept until each is
        claimed, so a host sweeper can send a message lost on the way again. Call it
        before sending."""

    @abstractmethod
    async def finish_run(self, run_id: str, status: str, error: dict[str, Any] | None = None) -> bool:
        """Force a terminal status (cancel, timeout, sweeper). False if already terminal.

        Nodes that had not started (pending, retrying, waiting) become ``not_run``, each
        with a ``not_run`` event, and nodes still running become ``cancelled``, each with a
        ``cancelled`` event (``data.reason``: the run's status), in plan order: a finished
        run shows no pending or running node, and the completion a running node's worker
        sends later changes nothing. A failure that stops the run (``complete_node`` with
        ``stop_run``) does the same."""

    @abstractmethod
    async def resume_node(self, run_id: str, node_id: str, resume_input: Any) -> bool:
        """Resume a ``waiting`` node: store ``resume_input``, set the node back to pending
        and the run to running, append ``run_resumed``. False if the node is not waiting.
        The caller then dispatches the node."""

    @abstractmethod
    async def get_resume(self, run_id: str, node_id: str) -> dict[str, Any] | None:
        """``{"payload": <suspend payload>, "input": <resume input>}`` for a resumed node."""
