"""Every Redis key this product writes, in one place. Each has a TTL (see Settings).

``{p}`` is ``Settings.key_prefix``. Per-run keys share the ``{p}:run:{run_id}`` stem so a
run's state can be listed and expired together.

The table is the layout on one Redis (``Keys.of`` with a ``redis://`` URL: untagged, one
bucket). On a Redis Cluster (``redis+cluster://``) every name gets a hash tag after
``{p}`` so each Lua script touches one slot (docs/architecture.md, "Run state on a Redis
Cluster"):

* a run's keys and its bucket's sets: ``{p}:{<bucket tag>}:...`` where the bucket is
  ``crc32(run_id) % state_buckets`` (``runs:active``, ``runs:queued``, ``waits:due``,
  ``children`` and ``wsbytes:*`` are then one per bucket, summed where a global view is
  needed: ``orchestrator/store/fanin.py``, the sweeper);
* control keys (graphs, hooks, credentials, sessions, drafts, limits, ``cc:*``, lanes, the
  sweeper lock): ``{p}:{c}:...``, one slot;
* a file: ``{p}:blob:{ws}:{<id>}`` (its own id as tag, with its ``:part``).

=========================================  ==========  ==============================================
key                                        type        what, TTL
=========================================  ==========  ==============================================
{p}:run:{id}                               hash        run record (status, graph, times, error, bytes
                                                       stored, renew_at: when an active run's keys get
                                                       their TTL again); retention
{p}:run:{id}:plan                          string      the compiled RunPlan JSON (graph snapshot), or for a
                                                       stored graph's run its id, labels and plan data key
                                                       (the rest is in {p}:plan:{digest}); retention
{p}:run:{id}:nodes                         hash        node id -> status; retention
{p}:run:{id}:pending                       hash        node id -> flow in-edges not yet resolved; retention
{p}:run:{id}:live                          hash        "node|port" -> live in-edges; retention
{p}:run:{id}:out                           hash        node id -> outputs JSON {port: DataValue}; retention
{p}:run:{id}:claims                        hash        node id -> times claimed; "token:<node>" -> fencing
                                                       token of its latest claim; "attempt:<node>",
                                                       "retry_at:<node>" (Redis clock); ":stale" ->
                                                       refused stale completions/renewals/appends;
                                                       retention
{p}:run:{id}:lease:{node}                  string      fencing token of the claim running the node;
                                                       node_lease_s
{p}:run:{id}:ready                         set         nodes that became ready; retention
{p}:run:{id}:dispatched                    set         nodes whose task was sent, queued or claimed; retention
{p}:run:{id}:queue                         list        ready nodes waiting for a free slot (FIFO); retention
{p}:run:{id}:sent                          hash        node id -> when its task was sent (Redis clock),
                                                       until claimed (the sweeper re-sends lost ones);
                                                       retention
{p}:run:{id}:adj                           hash        node id -> adjacency JSON for the Lua barrier, and on
                                                       a second line what a completion claims the node with
                                                       (its started event's ids, what it reads); retention
{p}:plan:{digest}                          hash        what every run of one compiled plan (a stored graph's
                                                       version) shares, in the runs' bucket: node id ->
                                                       adjacency JSON (as in adj; each out edge with its
                                                       target's flow in-edges), ":plan" -> the plan
                                                       JSON without run id and labels (digest: of the data
                                                       format and that JSON). Its runs' records name it
                                                       (field "shared"): they keep no copy of it and count
                                                       arrivals in their own pending hash. Its TTL is
                                                       extended (never shortened) with every TTL its runs' keys
                                                       get, so it outlives each of them
{p}:run:{id}:suspend                       hash        node id -> suspend payload of a waiting node; retention
{p}:run:{id}:resume                        hash        node id -> {payload, input} of a resumed node; retention
{p}:run:{id}:events                        stream      the run's event log (SSE ids); capped; retention
{p}:run:{id}:notify                        pub/sub     wake-up hint after a call's XADDs: the last id (no
                                                       payload guarantee)
{p}:runs:active                            zset        run id -> deadline (epoch s, Redis clock), for the sweeper
{p}:waits:due                              zset        "run\nnode" -> when a waiting node's timer is due
                                                       (epoch s, Redis clock; orchestrator/store/waits.py);
                                                       active TTL, refreshed at each entry
{p}:runs:queued                            string      nodes on every run's queue (back-pressure); kept
                                                       exact by the scripts, re-counted by the sweeper;
                                                       active TTL, deleted at 0
{p}:graph:{gid}                            hash        graph record (latest version, name, created); graph_ttl_s
{p}:graph:{gid}:v:{n}                      string      graph JSON of version n; graph_ttl_s
{p}:graph:{gid}:plans                      hash        "{n}:{registry fingerprint}:{start}" -> the version's
                                                       validated, compiled plan JSON (no run id), so a
                                                       start neither validates nor compiles; graph_ttl_s,
                                                       deleted with the graph
{p}:graphs                                 zset        graph id -> updated_at (every workspace)
{p}:ws:{ws}:graphs                         zset        graph id -> updated_at, graphs of one workspace
{p}:sweeper:lock                           string      one sweeper pass at a time; PX of the pass
{p}:beat:*                                 (redbeat)   schedule entries of Schedule Trigger nodes; kept in
                                                       step with stored graphs (stale entries deleted)
{p}:agno:*                                 (agno)      agent sessions and runs (history) of workspace
                                                       default; another workspace's under
                                                       {p}:agno:ws:{ws}:*; retention
                                                       (table in nodes/_ai/storage.py)
{p}:limit:{key}                            hash        a rate limit's state (GCRA time, 429 block, learned
                                                       rate, grants of the last 60 s); 1 day idle
{p}:limit:{key}:r                          zset        holder -> reserved slot time of a refused acquire;
                                                       1 day idle (entries dropped after 10 min)
{p}:limit:{key}:g                          zset        holder -> when it was granted (a re-run of the same
                                                       execution is not charged again); 1 day idle
                                                       (entries dropped after 10 min)
{p}:limit:{key}:p                          zset        holder -> the grant slot promised to a late holder the
                                                       spacing refused (it goes out then, unchecked); 1 day
                                                       idle (entries dropped after 10 min)
{p}:cc:{ws}:{gid}:run:{key}                zset        runs of a concurrency key in progress; 1 day idle
{p}:cc:{ws}:{gid}:q:{key}                  zset        runs waiting for a place under that key (FIFO); 1 day idle
{p}:cc:{ws}:{gid}:all / :rr / :seq         zset/list/  every key's runs in progress (round_robin), the keys
                                           string      with waiting runs in turn order, the order counter;
                                                       1 day idle
{p}:hooks                                  hash        webhook path -> graph id (kept with the graphs)
{p}:graph:{gid}:runs                       zset        run id -> created_at; trimmed with retention
{p}:hooksig:{sha256}                       string      an accepted webhook signature; 2 x webhook_tolerance_s
{p}:cred:{ws}                              hash        credential name -> Fernet token of {type, values}; no TTL
                                                       (kept until deleted, like graphs); workspace ws
{p}:blob:{ws}:{id}                         hash        uploaded/produced file: data, mime, size, name;
                                                       retention_s (the run's retention)
{p}:blob:{ws}:{id}:part                    string      an upload's bytes while they arrive (APPENDed chunk by
                                                       chunk, then moved into the file's hash); 1 h
{p}:wsbytes:{ws}:{day}                     string      bytes of outputs, events and files a workspace stored
                                                       on UTC day {day} (storage budgets); until the end of
                                                       that day + retention_s + active_ttl_s
{p}:session:{sid}                          string      a console session: {k: its key's SHA-256, c: CSRF
                                                       token}; the cookie holds only the signed sid;
                                                       session_ttl_s (deleted at sign-out)
{p}:streamgrant:{gid}                      string      the key's SHA-256 behind one stream token (the
                                                       token names gid); stream_token_ttl_s
{p}:draft:{gid}                            hash        the console's draft of a graph (JSON, workspace,
                                                       saved_at): may be incomplete; graph_ttl_s
{p}:ws:{ws}:drafts                         zset        graph id -> saved_at, drafts of one workspace;
                                                       graph_ttl_s (refreshed at each draft save)
{p}:children                               hash        child run id -> {run, node} of the parent node waiting
                                           for it, until settled (orchestrator/service/children.py);
                                           no TTL (entries removed when settled)
{p}:run:{id}:children                      set         every child run the run started; active TTL + retention
{p}:inflight:{ws}                          zset        a workspace's units of its ceiling of nodes in flight:
                                                       holder -> lease expiry (ms); 1 day idle
{p}:inflight:{ws}:w / :s                   zset / hash the nodes refused a unit (-> when), start times and the
                                                       average hold (store/ceiling.py); 1 day idle
{p}:lanes                                  hash        workspace -> "<lanes>:<its lanes>" ("8:3", "8:1,4,6";
                                                       store/lanes.py); 2 x lane_idle_s idle (an entry
                                                       goes when its workspace is idle lane_idle_s)
{p}:lanes:seen                             zset        workspace -> when it last started a run (ms, Redis
                                                       clock; touched at most every 30 s a process);
                                                       2 x lane_idle_s idle
=========================================  ==========  ==============================================
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from functools import cache

from redis.crc import REDIS_CLUSTER_HASH_SLOTS, key_slot

from orchestrator.settings.store import StoreSettings

CONTROL_TAG = "c"


@cache
def bucket_tags(buckets: int) -> tuple[str, ...]:
    """One hash tag per bucket, chosen so bucket ``b`` hashes near the middle of the
    ``b``-th of ``buckets`` equal slot ranges: buckets spread evenly over whatever
    primaries own the slots (an even split of 16384 puts 6 or 7 of 64 on each of 10).
    Tags ``b<k>`` are tried in order until every bucket has one (deterministic)."""
    width = REDIS_CLUSTER_HASH_SLOTS / buckets
    near = max(0, min(8, int(width / 2) - 1))
    windows = [range(max(0, int((b + 0.5) * width) - near), int((b + 0.5) * width) + near + 1)
               for b in range(buckets)]
    by_slot: dict[int, str] = {}
    tags: dict[int, str] = {}
    k = 0
    while len(tags) < buckets:
        for _ in range(4096):
            tag = f"b{k}"
            by_slot.setdefault(key_slot(tag.encode()), tag)
            k += 1
        for b, window in enumerate(windows):
            if b not in tags:
                found = sorted((abs(s - window[len(window) // 2]), s) for s in window if s in by_slot)
                if found:
                    tags[b] = by_slot[found[0][1]]
    return tuple(tags[b] for b in range(buckets))


# run_keys after the run's own key: plan, nodes, pending, live, out, claims, ready,
# dispatched, events, adj, suspend, resume, queue, sent (lua/prelude.lua's KEYS order)
_RUN_KEY_SUFFIXES = (":plan", ":nodes", ":pending", ":live", ":out", ":claims", ":ready", ":dispatched",
                     ":events", ":adj", ":suspend", ":resume", ":queue", ":sent")


@dataclass(frozen=True)
class Keys:
    prefix: str = "orc"
    buckets: int = 1
    tagged: bool = False  # hash tags on every key (a Redis Cluster); see the module docstring

    @classmethod
    def of(cls, settings: StoreSettings) -> Keys:
        """The layout of ``settings``: untagged on one Redis, bucketed on a cluster."""
        if settings.redis_cluster:
            return cls(settings.key_prefix, settings.state_buckets, True)
        return cls(settings.key_prefix)

    def bucket(self, run_id: str) -> int:
        """The run's bucket (stable: CRC32 of its id modulo ``buckets``)."""
        return 0 if self.buckets <= 1 else zlib.crc32(run_id.encode()) % self.buckets

    def bucket_stem(self, bucket: int) -> str:
        """``{p}`` untagged, else ``{p}:{<bucket tag>}`` (every key of the bucket's runs)."""
        if not self.tagged:
            return self.prefix
        return f"{self.prefix}:{{{bucket_tags(self.buckets)[bucket]}}}"

    def _r(self, run_id: str) -> str:
        return self.bucket_stem(self.bucket(run_id))

    @property
    def _c(self) -> str:
        """Control keys (graphs, credentials, hooks, sessions, limits...): one slot on a cluster."""
        return f"{self.prefix}:{{{CONTROL_TAG}}}" if self.tagged else self.prefix

    def _own(self, entity_id: str) -> str:
        """An entity id as its own hash tag on a cluster (its keys share one slot)."""
        return f"{{{entity_id}}}" if self.tagged else entity_id

    def run(self, run_id: str) -> str:
        return f"{self._r(run_id)}:run:{run_id}"

    def plan(self, run_id: str) -> str:
        return f"{self._r(run_id)}:run:{run_id}:plan"

    def nodes(self, run_id: str) -> str:
        return f"{self._r(run_id)}:run:{run_id}:nodes"

    def pending(self, run_id: str) -> str:
        return f"{self._r(run_id)}:run:{run_id}:pending"

    def live(self, run_id: str) -> str:
        return f"{self._r(run_id)}:run:{run_id}:live"

    def outputs(self, run_id: str) -> str:
        return f"{self._r(run_id)}:run:{run_id}:out"

    def claims(self, run_id: str) -> str:
        return f"{self._r(run_id)}:run:{run_id}:claims"

    def lease(self, run_id: str, node_id: str) -> str:
        return f"{self._r(run_id)}:run:{run_id}:lease:{node_id}"

    def ready(self, run_id: str) -> str:
        return f"{self._r(run_id)}:run:{run_id}:ready"

    def dispatched(self, run_id: str) -> str:
        return f"{self._r(run_id)}:run:{run_id}:dispatched"

    def queue(self, run_id: str) -> str:
        return f"{self._r(run_id)}:run:{run_id}:queue"

    def sent(self, run_id: str) -> str:
        return f"{self._r(run_id)}:run:{run_id}:sent"

    def adj(self, run_id: str) -> str:
        return f"{self._r(run_id)}:run:{run_id}:adj"

    def plan_data(self, run_id: str, digest: str) -> str:
        """The plan data runs of one compiled plan share, in ``run_id``'s bucket (its slot on a cluster)."""
        return f"{self._r(run_id)}:plan:{digest}"

    def suspend(self, run_id: str) -> str:
        return f"{self._r(run_id)}:run:{run_id}:suspend"

    def resume(self, run_id: str) -> str:
        return f"{self._r(run_id)}:run:{run_id}:resume"

    def events(self, run_id: str) -> str:
        return f"{self._r(run_id)}:run:{run_id}:events"

    def notify(self, run_id: str) -> str:
        return f"{self._r(run_id)}:run:{run_id}:notify"

    def active_runs(self, bucket: int = 0) -> str:
        return f"{self.bucket_stem(bucket)}:runs:active"

    def queued_nodes(self, bucket: int = 0) -> str:
        return f"{self.bucket_stem(bucket)}:runs:queued"

    def wait_timers(self, bucket: int = 0) -> str:
        return f"{self.bucket_stem(bucket)}:waits:due"

    def graph(self, graph_id: str) -> str:
        return f"{self._c}:graph:{graph_id}"

    def graph_version(self, graph_id: str, version: int) -> str:
        return f"{self._c}:graph:{graph_id}:v:{version}"

    def graph_plans(self, graph_id: str) -> str:
        return f"{self._c}:graph:{graph_id}:plans"

    def graphs(self) -> str:
        return f"{self._c}:graphs"

    def workspace_graphs(self, workspace: str) -> str:
        return f"{self._c}:ws:{workspace}:graphs"

    def sweeper_lock(self) -> str:
        return f"{self._c}:sweeper:lock"

    def hooks(self) -> str:
        return f"{self._c}:hooks"

    def hook_signature(self, digest: str) -> str:
        return f"{self._c}:hooksig:{digest}"

    def graph_runs(self, graph_id: str) -> str:
        return f"{self._c}:graph:{graph_id}:runs"

    def credentials(self, workspace: str) -> str:
        return f"{self._c}:cred:{workspace}"

    def blob(self, workspace: str, blob_id: str) -> str:
        return f"{self.prefix}:blob:{workspace}:{self._own(blob_id)}"

    def blob_part(self, workspace: str, blob_id: str) -> str:
        return f"{self.prefix}:blob:{workspace}:{self._own(blob_id)}:part"

    def workspace_bytes(self, workspace: str, day: int, bucket: int = 0) -> str:
        return f"{self.bucket_stem(bucket)}:wsbytes:{workspace}:{day}"

    def session(self, session_id: str) -> str:
        return f"{self._c}:session:{session_id}"

    def stream_grant(self, grant_id: str) -> str:
        return f"{self._c}:streamgrant:{grant_id}"

    def run_keys(self, run_id: str) -> list[str]:
        """Every fixed per-run key (lease keys carry their own short TTL), in the order of
        the methods above: ``run`` first, then its suffixes (the run's stem found once)."""
        run = self.run(run_id)
        return [run, *(run + suffix for suffix in _RUN_KEY_SUFFIXES)]

    def concurrency(self) -> str:
        """The stem of the concurrency-key state (``service/admission.py``, ``lua/concurrency.lua``)."""
        return f"{self._c}:cc"

    def limit(self, key: str) -> str:
        return f"{self._c}:limit:{key}"

    def children(self, bucket: int = 0) -> str:
        """Child run id -> its parent's link, in the child's bucket (``bucket(child id)``)."""
        return f"{self.bucket_stem(bucket)}:children"

    def run_children(self, run_id: str) -> str:
        return f"{self._r(run_id)}:run:{run_id}:children"

    def draft(self, graph_id: str) -> str:
        return f"{self._c}:draft:{graph_id}"

    def workspace_drafts(self, workspace: str) -> str:
        return f"{self._c}:ws:{workspace}:drafts"

    def inflight(self, workspace: str) -> str:
        """The stem of a workspace's ceiling of nodes in flight (``store/ceiling.py``)."""
        return f"{self._c}:inflight:{workspace}"

    def lanes(self) -> str:
        """Workspace -> its assigned lanes (``store/lanes.py``, ``lua/lanes.lua``)."""
        return f"{self._c}:lanes"

    def lanes_seen(self) -> str:
        return f"{self._c}:lanes:seen"
