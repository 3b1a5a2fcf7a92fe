"""Every Redis key this product writes, in one place. Each has a TTL (see Settings).

``{p}`` is ``Settings.key_prefix``. Per-run keys share the ``{p}:run:{run_id}`` stem so a
run's state can be listed and expired together.

=========================================  ==========  ==============================================
key                                        type        what, TTL
=========================================  ==========  ==============================================
{p}:run:{id}                               hash        run record (status, graph, times, error); retention
{p}:run:{id}:plan                          string      the compiled RunPlan JSON (graph snapshot); retention
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
{p}:run:{id}:adj                           hash        node id -> adjacency JSON for the Lua barrier; retention
{p}:run:{id}:suspend                       hash        node id -> suspend payload of a waiting node; retention
{p}:run:{id}:resume                        hash        node id -> {payload, input} of a resumed node; retention
{p}:run:{id}:events                        stream      the run's event log (SSE ids); capped; retention
{p}:run:{id}:notify                        pub/sub     wake-up hint after an XADD (no payload guarantee)
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
=========================================  ==========  ==============================================
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Keys:
    prefix: str = "orc"

    def run(self, run_id: str) -> str:
        return f"{self.prefix}:run:{run_id}"

    def plan(self, run_id: str) -> str:
        return f"{self.prefix}:run:{run_id}:plan"

    def nodes(self, run_id: str) -> str:
        return f"{self.prefix}:run:{run_id}:nodes"

    def pending(self, run_id: str) -> str:
        return f"{self.prefix}:run:{run_id}:pending"

    def live(self, run_id: str) -> str:
        return f"{self.prefix}:run:{run_id}:live"

    def outputs(self, run_id: str) -> str:
        return f"{self.prefix}:run:{run_id}:out"

    def claims(self, run_id: str) -> str:
        return f"{self.prefix}:run:{run_id}:claims"

    def lease(self, run_id: str, node_id: str) -> str:
        return f"{self.prefix}:run:{run_id}:lease:{node_id}"

    def ready(self, run_id: str) -> str:
        return f"{self.prefix}:run:{run_id}:ready"

    def dispatched(self, run_id: str) -> str:
        return f"{self.prefix}:run:{run_id}:dispatched"

    def queue(self, run_id: str) -> str:
        return f"{self.prefix}:run:{run_id}:queue"

    def sent(self, run_id: str) -> str:
        return f"{self.prefix}:run:{run_id}:sent"

    def adj(self, run_id: str) -> str:
        return f"{self.prefix}:run:{run_id}:adj"

    def suspend(self, run_id: str) -> str:
        return f"{self.prefix}:run:{run_id}:suspend"

    def resume(self, run_id: str) -> str:
        return f"{self.prefix}:run:{run_id}:resume"

    def events(self, run_id: str) -> str:
        return f"{self.prefix}:run:{run_id}:events"

    def notify(self, run_id: str) -> str:
        return f"{self.prefix}:run:{run_id}:notify"

    def active_runs(self) -> str:
        return f"{self.prefix}:runs:active"

    def queued_nodes(self) -> str:
        return f"{self.prefix}:runs:queued"

    def wait_timers(self) -> str:
        return f"{self.prefix}:waits:due"

    def graph(self, graph_id: str) -> str:
        return f"{self.prefix}:graph:{graph_id}"

    def graph_version(self, graph_id: str, version: int) -> str:
        return f"{self.prefix}:graph:{graph_id}:v:{version}"

    def graph_plans(self, graph_id: str) -> str:
        return f"{self.prefix}:graph:{graph_id}:plans"

    def graphs(self) -> str:
        return f"{self.prefix}:graphs"

    def workspace_graphs(self, workspace: str) -> str:
        return f"{self.prefix}:ws:{workspace}:graphs"

    def sweeper_lock(self) -> str:
        return f"{self.prefix}:sweeper:lock"

    def hooks(self) -> str:
        return f"{self.prefix}:hooks"

    def hook_signature(self, digest: str) -> str:
        return f"{self.prefix}:hooksig:{digest}"

    def graph_runs(self, graph_id: str) -> str:
        return f"{self.prefix}:graph:{graph_id}:runs"

    def credentials(self, workspace: str) -> str:
        return f"{self.prefix}:cred:{workspace}"

    def blob(self, workspace: str, blob_id: str) -> str:
        return f"{self.prefix}:blob:{workspace}:{blob_id}"

    def blob_part(self, workspace: str, blob_id: str) -> str:
        return f"{self.prefix}:blob:{workspace}:{blob_id}:part"

    def workspace_bytes(self, workspace: str, day: int) -> str:
        return f"{self.prefix}:wsbytes:{workspace}:{day}"

    def session(self, session_id: str) -> str:
        return f"{self.prefix}:session:{session_id}"

    def stream_grant(self, grant_id: str) -> str:
        return f"{self.prefix}:streamgrant:{grant_id}"

    def run_keys(self, run_id: str) -> list[str]:
        """Every fixed per-run key (lease keys carry their own short TTL)."""
        return [
            self.run(run_id), self.plan(run_id), self.nodes(run_id), self.pending(run_id),
            self.live(run_id), self.outputs(run_id), self.claims(run_id), self.ready(run_id),
            self.dispatched(run_id), self.events(run_id), self.adj(run_id), self.suspend(run_id),
            self.resume(run_id), self.queue(run_id), self.sent(run_id),
        ]

    def concurrency(self) -> str:
        """The stem of the concurrency-key state (``service/admission.py``, ``lua/concurrency.lua``)."""
        return f"{self.prefix}:cc"

    def limit(self, key: str) -> str:
        return f"{self.prefix}:limit:{key}"

    def children(self) -> str:
        return f"{self.prefix}:children"

    def run_children(self, run_id: str) -> str:
        return f"{self.prefix}:run:{run_id}:children"

    def draft(self, graph_id: str) -> str:
        return f"{self.prefix}:draft:{graph_id}"

    def workspace_drafts(self, workspace: str) -> str:
        return f"{self.prefix}:ws:{workspace}:drafts"

    def inflight(self, workspace: str) -> str:
        """The stem of a workspace's ceiling of nodes in flight (``store/ceiling.py``)."""
        return f"{self.prefix}:inflight:{workspace}"
