"""RAG through the engine vs the vector backend's client, same data, same run.

Ingest: 2,000 chunks (synthetic, deterministic text) go through graphs of
``manual_trigger -> embedding (dry-run) -> vector_store`` in runs of ``--batch`` chunks;
queries: 200 runs of ``manual_trigger -> embedding (text) -> vector_search (top 5)``.
Each run goes through the real path (start_run, the broker, worker processes, Redis
state) and is timed from ``start_run`` to its terminal event.

Baseline, in the same process against the same backend: the same embedder and the same
store called directly (``SqliteVectorStore`` over sqlite3 + numpy, or ``PgVectorStore``
over SQLAlchemy/asyncpg with a pooled connection, where the node opens one per
execution): that is what the engine adds around the backend's own client.

Prints chunks/s and query p50/p95 of both, and the ratios; writes bench/results/rag-*.json.

    .venv/bin/python bench/rag.py [--backend sqlite|pgvector] [--chunks 2000] [--queries 200]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from orchestrator.kernel.protocol import EventType  # noqa: E402
from orchestrator.local.embedded_redis import EmbeddedRedis  # noqa: E402
from orchestrator.local.embedded_workers import WorkerConfig, WorkerProcesses  # noqa: E402

RESULTS = ROOT / "bench" / "results"
WORDS = ("redis celery worker graph node edge run event stream lease sweeper retry vector chunk embed "
         "search query credential file bucket upload policy egress timeout schedule trigger agent model "
         "prompt token batch index cosine score metadata source page title table column row").split()
DIMENSIONS = 256
CHECKED_QUERIES = 10


def chunk_texts(n: int, seed: int = 7) -> list[str]:
    rng = random.Random(seed)
    return [f"chunk {i}: " + " ".join(rng.choice(WORDS) for _ in range(40)) for i in range(n)]


def edge(i: int, a: str, b: str) -> dict[str, Any]:
    return {"id": f"e{i}", "source": a, "sourceHandle": "output", "target": b, "targetHandle": "input",
            "data": {"channel": "flow"}}


def ingest_graph(collection: str) -> dict[str, Any]:
    return {"id": "bench-rag-ingest", "nodes": [
        {"id": "t", "type": "manual_trigger", "name": "Start", "data": {}},
        {"id": "emb", "type": "embedding", "name": "Embed", "data": {"model": "dryrun:bench",
                                                                      "dimensions": DIMENSIONS}},
        {"id": "up", "type": "vector_store", "name": "Upsert", "data": {"collection": collection}}],
        "edges": [edge(1, "t", "emb"), edge(2, "emb", "up")]}


def query_graph(collection: str) -> dict[str, Any]:
    return {"id": "bench-rag-query", "nodes": [
        {"id": "t", "type": "manual_trigger", "name": "Start", "data": {}},
        {"id": "emb", "type": "embedding", "name": "Embed", "data": {
            "model": "dryrun:bench", "dimensions": DIMENSIONS, "text": "{{ $run.input.q }}"}},
        {"id": "s", "type": "vector_search", "name": "Search", "data": {"collection": collection, "top_k": 5}}],
        "edges": [edge(1, "t", "emb"), edge(2, "emb", "s")]}


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))]


def summary(samples_s: list[float]) -> dict[str, float]:
    ms = [s * 1000 for s in samples_s]
    return {"p50_ms": round(percentile(ms, 50), 2), "p95_ms": round(percentile(ms, 95), 2),
            "mean_ms": round(statistics.fmean(ms), 2), "n": len(ms)}


async def bench(url: str, args: argparse.Namespace, pg_url: str | None) -> dict[str, Any]:
    from nodes._rag.embedders import HashEmbedder
    from nodes._rag.vectors import Record, SqliteVectorStore, VectorStore
    from orchestrator.queue.app import make_celery
    from orchestrator.queue.dispatch import make_dispatch
    from orchestrator.service.plugins import get_registry
    from orchestrator.service.runs import RunRequest, start_run
    from orchestrator.settings import Settings, load_settings
    from orchestrator.store.redis_store import RedisRunStore

    registry = get_registry(load_settings())
    store = RedisRunStore.from_url(url, Settings())
    app = make_celery(url, Settings())
    dispatch = make_dispatch(app)
    texts = chunk_texts(args.chunks)
    rng = random.Random(11)
    questions = [" ".join(rng.choice(texts).split()[2:9]) for _ in range(args.queries)]

    async def run_once(graph: dict[str, Any], run_input: Any) -> tuple[float, Any]:
        t0 = time.perf_counter()
        run_id = await start_run(store, registry, graph, RunRequest(run_input), dispatch=dispatch)
        after = "0-0"
        while True:
            for event_id, event in await store.read_events(run_id, after=after, block_ms=30_000):
                after = event_id
                if not event.node_id and event.event_type in EventType.TERMINAL:
                    if event.event_type != EventType.RUN_COMPLETED:
                        raise RuntimeError(f"bench run ended {event.event_type}: {event.data}")
                    return time.perf_counter() - t0, run_id

    def batches() -> list[list[str]]:
        return [texts[i:i + args.batch] for i in range(0, len(texts), args.batch)]

    # -- engine ------------------------------------------------------------------------
    engine_collection = f"bench_engine_{int(time.time())}"
    t0 = time.perf_counter()
    for batch in batches():
        docs = [{"text": t, "metadata": {"source": "bench", "chunk_index": i}} for i, t in enumerate(batch)]
        await run_once(ingest_graph(engine_collection), {"documents": docs})
    engine_ingest_s = time.perf_counter() - t0
    engine_queries = []
    engine_top: list[str] = []  # top hit of the first queries, compared with the direct client's
    for i, q in enumerate(questions):
        elapsed, run_id = await run_once(query_graph(engine_collection), {"q": q})
        engine_queries.append(elapsed)
        if i < CHECKED_QUERIES:
            out = (await store.read_outputs(run_id, ["s"]))["s"]["output"].value
            engine_top.append(out["hits"][0]["text"])
    # -- the backend's client directly ------------------------------------------------------
    embedder = HashEmbedder(dimensions=DIMENSIONS)
    direct: VectorStore
    if pg_url:
        from sqlalchemy.ext.asyncio import create_async_engine

        from nodes._rag.pgvector import PgVectorStore
        from orchestrator.host.database import async_url

        pooled = create_async_engine(async_url(pg_url), pool_size=2)  # a client keeps its connection
        direct = PgVectorStore(pg_url, engine=pooled)
    else:
        direct = SqliteVectorStore(os.environ["ORCH_VECTOR_SQLITE_PATH"])
    direct_collection = f"bench_direct_{int(time.time())}"
    t0 = time.perf_counter()
    for batch in batches():
        vectors = await embedder.embed(batch)
        await direct.upsert(direct_collection, [Record(f"{direct_collection}-{i}-{hash(t)}", v, t, {})
                                                 for i, (t, v) in enumerate(zip(batch, vectors, strict=True))])
    direct_ingest_s = time.perf_counter() - t0
    direct_queries = []
    direct_top: list[str] = []
    for i, q in enumerate(questions):
        t1 = time.perf_counter()
        hits = await direct.query(direct_collection, (await embedder.embed([q]))[0], 5)
        direct_queries.append(time.perf_counter() - t1)
        if i < CHECKED_QUERIES:
            direct_top.append(hits[0].text)
    if engine_top != direct_top:
        raise RuntimeError(f"the graph and the direct client disagree on top hits: {engine_top} vs {direct_top}")
    await direct.aclose()
    if pg_url:
        await pooled.dispose()
    await store.close()
    app.close()
    e, d = summary(engine_queries), summary(direct_queries)
    return {
        "engine": {"ingest_chunks_per_s": round(args.chunks / engine_ingest_s, 1), "query": e},
        "direct_client": {"ingest_chunks_per_s": round(args.chunks / direct_ingest_s, 1), "query": d},
        "ratio_ingest_rate": round((args.chunks / engine_ingest_s) / (args.chunks / direct_ingest_s), 3),
        "ratio_query_p50": round(e["p50_ms"] / d["p50_ms"], 2),
        "ratio_query_p95": round(e["p95_ms"] / d["p95_ms"], 2),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=["sqlite", "pgvector"], default="sqlite")
    parser.add_argument("--chunks", type=int, default=2000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--batch", type=int, default=250, help="chunks per ingest run")
    parser.add_argument("--concurrency", type=int, default=2, help="worker pool processes")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-rag-"))
    os.environ["ORCH_VECTOR_SQLITE_PATH"] = str(work / "vectors.sqlite3")
    env = {"ORCH_VECTOR_SQLITE_PATH": os.environ["ORCH_VECTOR_SQLITE_PATH"]}
    pg = None
    pg_url = None
    if args.backend == "pgvector":
        import pgserver  # the dev extra's wheel: a real PostgreSQL with pgvector

        os.chmod(work, 0o777)
        pg = pgserver.get_server(str(work / "pg"), cleanup_mode="stop")
        pg_url = str(pg.get_uri())
        env.update({"ORCH_VECTOR_BACKEND": "pgvector", "ORCH_VECTOR_DATABASE_URL": pg_url})
    try:
        with EmbeddedRedis() as server, WorkerProcesses(server.url, WorkerConfig(count=1, concurrency=args.concurrency,
                                                                                 env=env)):
            result = asyncio.run(bench(server.url, args, pg_url))
    finally:
        if pg is not None:
            pg.cleanup()
    result["config"] = {"backend": args.backend, "chunks": args.chunks, "queries": args.queries,
                        "batch": args.batch, "dimensions": DIMENSIONS, "embedder": "dry-run hash",
                        "worker_pool": f"prefork c{args.concurrency}", "python": platform.python_version(),
                        "at": time.strftime("%Y-%m-%dT%H:%M:%S")}
    text = json.dumps(result, indent=2)
    print(text)
    out = args.out or RESULTS / f"rag-{args.backend}-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text + "\n")
    e, d = result["engine"], result["direct_client"]
    print(f"ingest: engine {e['ingest_chunks_per_s']} chunks/s, direct client {d['ingest_chunks_per_s']} chunks/s",
          file=sys.stderr)
    print(f"query: engine p50 {e['query']['p50_ms']} ms p95 {e['query']['p95_ms']} ms; direct client "
          f"p50 {d['query']['p50_ms']} ms p95 {d['query']['p95_ms']} ms -> {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
