"""The RAG nodes on their own: chunking, loading, embedding, storing and searching vectors."""

from __future__ import annotations

import itertools
import json
import time
from pathlib import Path
from typing import Any

import pytest

from nodes._rag.chunking import split_text, token_length
from nodes._rag.embedders import HashEmbedder
from orchestrator.kernel.errors import EgressDeniedError, NodeExecutionError, ParameterError
from orchestrator.settings import get_settings
from tests.agents.openai_stub import OPERATOR_KEY, StubServer, attacker, operator_key, stub
from tests.nodes.rag_support import (
    allow_loopback,
    node_redis,
    pdf_bytes,
    redis_services,
    run_with,
    settings,
    store_credential,
)

__all__ = ["allow_loopback", "attacker", "node_redis", "operator_key", "stub"]

TEXT = ("Redis keeps the run state.\n\nCelery workers run one task per node. Each task claims its node.\n\n"
        "The sweeper finds lost nodes and gives them to another worker.")


# -- Text Chunker -------------------------------------------------------------------------


def test_chunks_are_exact_slices_within_size_and_overlap_neighbours() -> None:
    spans = split_text(TEXT, size=60, overlap=15)
    assert len(spans) > 2
    for s in spans:
        assert TEXT[s.start:s.end] == s.text and len(s.text) <= 60
    pairs = list(itertools.pairwise(spans))
    assert all(b.start <= a.end for a, b in pairs)  # no text lost between chunks
    assert any(0 < a.end - b.start <= 15 for a, b in pairs)  # neighbours share up to the overlap
    assert spans[0].start == 0 and spans[-1].end == len(TEXT)


def test_token_unit_counts_words_and_punctuation_offline() -> None:
    assert token_length("Hello, world!") == 4
    spans = split_text(TEXT, size=8, overlap=0, length=token_length)
    assert all(token_length(s.text) <= 8 for s in spans)


async def test_chunker_keeps_metadata_and_adds_positions() -> None:
    out = await run_with("text_chunker", {"chunk_size": 60, "chunk_overlap": 0},
                         {"input": {"documents": [{"text": TEXT, "metadata": {"source": "a.md", "page": 2}}]}})
    assert out["count"] == len(out["documents"]) > 1
    for i, chunk in enumerate(out["documents"]):
        meta = chunk["metadata"]
        assert meta["source"] == "a.md" and meta["page"] == 2 and meta["chunk_index"] == i
        assert TEXT[meta["start"]:meta["end"]] == chunk["text"]


async def test_chunker_rejects_overlap_not_below_size() -> None:
    with pytest.raises(ParameterError, match="chunk_overlap"):
        await run_with("text_chunker", {"chunk_size": 10, "chunk_overlap": 10}, {"input": "some text"})


# -- Document Loader ----------------------------------------------------------------------


async def test_loader_reads_markdown_with_title() -> None:
    out = await run_with("document_loader", {"source": "text", "text": "# Guide\n\nBody.", "format": "markdown"})
    assert out["documents"][0]["metadata"]["title"] == "Guide"
    assert out["documents"][0]["text"].endswith("Body.")


async def test_loader_extracts_main_text_of_html() -> None:
    html = ("<html><head><title>Page</title><script>var x = 'secret code';</script></head><body>"
            "<nav>Menu Home About</nav><main><h1>Heading</h1><p>Main paragraph.</p></main>"
            "<footer>Copyright</footer></body></html>")
    out = await run_with("document_loader", {"source": "text", "text": html, "format": "html"})
    doc = out["documents"][0]
    assert doc["metadata"]["title"] == "Page"
    assert "Main paragraph." in doc["text"] and "Heading" in doc["text"]
    assert "Menu" not in doc["text"] and "secret code" not in doc["text"] and "Copyright" not in doc["text"]


async def test_loader_splits_json_and_csv_rows_with_metadata() -> None:
    rows = json.dumps([{"body": "first", "lang": "en"}, {"body": "second", "lang": "fr"}])
    out = await run_with("document_loader", {"source": "text", "text": rows, "format": "json", "text_field": "body"})
    assert [d["text"] for d in out["documents"]] == ["first", "second"]
    assert out["documents"][1]["metadata"]["lang"] == "fr"
    out = await run_with("document_loader", {"source": "text", "text": "title,body\nA,alpha\nB,beta\n",
                                             "format": "csv", "text_field": "body"})
    assert [(d["text"], d["metadata"]["title"]) for d in out["documents"]] == [("alpha", "A"), ("beta", "B")]


async def test_loader_reads_a_shipped_example_file_by_path() -> None:
    out = await run_with("document_loader", {"source": "path", "path": "examples/docs/handbook.md"})
    doc = out["documents"][0]
    assert doc["metadata"]["source"] == "handbook.md" and "Retention" in doc["text"]


@pytest.mark.parametrize("path", ["/etc/passwd", "examples/../pyproject.toml", "../../etc/hostname"])
async def test_loader_refuses_paths_outside_the_readable_folders(path: str) -> None:
    with pytest.raises(ParameterError, match="not a file inside the readable folders"):
        await run_with("document_loader", {"source": "path", "path": path})


async def test_loader_errors_name_the_path_as_the_graph_gave_it_never_a_host_folder(tmp_path: Path) -> None:
    allowed = tmp_path / "operator-docs"
    allowed.mkdir()
    services = {"settings": settings(loader_paths=str(allowed))}
    checkout = str(Path(__file__).resolve().parents[2])
    for given in ("examples/docs/missing.md", "notes/missing.md", "/etc/passwd"):
        with pytest.raises(ParameterError) as caught:
            await run_with("document_loader", {"source": "path", "path": given}, services=services)
        assert repr(given) in caught.value.message and "ORCH_LOADER_PATHS" in caught.value.message
        assert checkout not in caught.value.message and str(tmp_path) not in caught.value.message


def test_pdf_parser_gives_one_document_per_page() -> None:
    from nodes._rag.documents import parse

    docs = parse(pdf_bytes(["Page one text", "Page two text"], title="Manual"), "auto",
                 source="manual.pdf", mime="application/pdf")
    assert [(d["metadata"]["page"], d["text"].strip()) for d in docs] == [(1, "Page one text"), (2, "Page two text")]
    assert docs[0]["metadata"]["title"] == "Manual"


async def test_loader_refuses_a_loopback_url_by_default() -> None:
    with pytest.raises(EgressDeniedError):
        await run_with("document_loader", {"source": "url", "url": "http://127.0.0.1:9/doc.md"})


# -- Embedding ------------------------------------------------------------------------------


def test_dry_run_vectors_are_stable_normalised_and_lexical() -> None:
    e = HashEmbedder(dimensions=128)
    a, b = e.vector("How long are runs kept?"), e.vector("How long are runs kept?")
    assert a == b and abs(sum(x * x for x in a) - 1.0) < 1e-9
    near = e.vector("Finished runs are kept for seven days")
    far = e.vector("Workers are Celery processes")
    dot = lambda u, v: sum(x * y for x, y in zip(u, v, strict=True))  # noqa: E731
    assert dot(a, near) > dot(a, far)


async def test_embedding_adds_a_vector_to_every_document_offline() -> None:
    out = await run_with("embedding", {"model": "dryrun:hash", "dimensions": 32},
                         {"input": {"documents": [{"text": "a", "metadata": {}}, {"text": "b", "metadata": {"k": 1}}]}})
    assert out["count"] == 2 and out["dimensions"] == 32
    assert all(len(d["vector"]) == 32 for d in out["documents"]) and out["documents"][1]["metadata"] == {"k": 1}


async def test_offline_flag_makes_any_model_dry_run(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORCH_OFFLINE_MODELS", "1")
    out = await run_with("embedding", {"model": "openai:text-embedding-3-small", "text": "question"})
    assert out["vector"] == HashEmbedder().vector("question")


CREDENTIAL_KEY = "sk-workspace-embed-9876"


async def test_embedding_calls_an_openai_compatible_endpoint_in_batches(stub: StubServer, operator_key: str,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """A base URL the operator lists may be chosen by the graph; it gets the operator's key
    and is reachable on loopback without ORCH_EGRESS_ALLOW (configured, so trusted)."""
    monkeypatch.setenv("ORCH_MODEL_BASE_URLS", stub.base_url)
    get_settings.cache_clear()
    texts = ["aa", "abcabc", "b", "aaaa a"]
    out = await run_with("embedding", {"model": "openai:nomic-embed", "base_url": stub.base_url, "batch_size": 3},
                         {"input": {"documents": [{"text": t, "metadata": {}} for t in texts]}})
    bodies = [r["body"] for r in stub.requests]
    assert [len(b["input"]) for b in bodies] == [3, 1] and bodies[0]["model"] == "nomic-embed"
    assert [d["vector"][:2] for d in out["documents"]] == [[len(t), t.count("a")] for t in texts]
    assert stub.requests[0]["headers"]["authorization"] == f"Bearer {OPERATOR_KEY}"


async def test_embedding_endpoint_failure_names_the_status(stub: StubServer, operator_key: str,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORCH_OPENAI_BASE_URL", stub.base_url)
    get_settings.cache_clear()
    stub.fail_status = 401
    with pytest.raises(NodeExecutionError, match="401") as caught:
        await run_with("embedding", {"model": "openai:m", "text": "x"})
    assert OPERATOR_KEY not in str(caught.value)


async def test_embedding_refuses_a_graph_chosen_base_url_and_sends_no_key(
        attacker: StubServer, operator_key: str, allow_loopback: None) -> None:
    with pytest.raises(ParameterError, match="ORCH_MODEL_BASE_URLS") as caught:
        await run_with("embedding", {"model": "openai:text-embedding-3-small", "base_url": attacker.base_url,
                                     "text": "hi"})
    assert caught.value.parameter == "base_url" and attacker.requests == []


async def test_embedding_with_a_credential_uses_its_base_url_and_key_only(
        node_redis: Any, stub: StubServer, attacker: StubServer, operator_key: str, allow_loopback: None) -> None:
    services = redis_services(node_redis)
    await store_credential(services, "emb", "api_key", {"key": CREDENTIAL_KEY, "base_url": stub.base_url})
    out = await run_with("embedding", {"model": "openai:m", "credential": "emb", "text": "hi"}, services=services)
    assert out["vector"][:2] == [2.0, 0.0]
    assert stub.requests[0]["headers"]["authorization"] == f"Bearer {CREDENTIAL_KEY}"
    with pytest.raises(ParameterError, match=r"credential 'emb' may be sent only to .*not to") as caught:
        await run_with("embedding", {"model": "openai:m", "credential": "emb", "base_url": attacker.base_url,
                                     "text": "hi"}, services=services)
    assert caught.value.parameter == "credential" and attacker.requests == []
    assert OPERATOR_KEY not in json.dumps(stub.requests)


async def test_an_api_key_credential_without_base_url_goes_to_the_operators_endpoint_only(
        node_redis: Any, stub: StubServer, attacker: StubServer, operator_key: str, allow_loopback: None) -> None:
    """As before origins existed: such a key went to the configured endpoint, and still may."""
    services = redis_services(node_redis, openai_base_url=stub.base_url)
    await store_credential(services, "old-emb", "api_key", {"key": CREDENTIAL_KEY})
    await run_with("embedding", {"model": "openai:m", "credential": "old-emb", "text": "hi"}, services=services)
    assert stub.requests[0]["headers"]["authorization"] == f"Bearer {CREDENTIAL_KEY}"
    with pytest.raises(ParameterError, match="'old-emb' may be sent only to"):
        await run_with("embedding", {"model": "openai:m", "credential": "old-emb", "base_url": attacker.base_url,
                                     "text": "hi"}, services=services)
    assert attacker.requests == []


# -- Vector Store / Search (embedded backend) ---------------------------------------------------


def _docs(*items: tuple[str, list[float], dict[str, Any]]) -> dict[str, Any]:
    return {"documents": [{"text": t, "vector": v, "metadata": m} for t, v, m in items]}


@pytest.fixture
def vec_services(tmp_path: Path) -> dict[str, Any]:
    return {"settings": settings(vector_sqlite_path=str(tmp_path / "v.sqlite3"))}


async def test_search_returns_top_k_by_cosine_with_scores(vec_services: dict[str, Any]) -> None:
    docs = _docs(("east", [1.0, 0.0], {"source": "e"}), ("north", [0.0, 1.0], {"source": "n"}),
                 ("north-east", [1.0, 1.0], {"source": "ne"}))
    stored = await run_with("vector_store", {"collection": "c1"}, {"input": docs}, vec_services)
    assert stored["upserted"] == 3
    out = await run_with("vector_search", {"collection": "c1", "top_k": 2}, {"input": {"vector": [0.9, 0.1]}},
                         vec_services)
    assert [h["text"] for h in out["hits"]] == ["east", "north-east"]
    assert out["hits"][0]["score"] == pytest.approx(0.9 / (0.81 + 0.01) ** 0.5, abs=1e-5)
    assert out["context"].startswith("[e]\neast")


async def test_upsert_replaces_records_with_the_same_id(vec_services: dict[str, Any]) -> None:
    docs = _docs(("same text", [1.0, 0.0], {"source": "s", "chunk_index": 0}))
    await run_with("vector_store", {"collection": "c2"}, {"input": docs}, vec_services)
    await run_with("vector_store", {"collection": "c2"}, {"input": docs}, vec_services)
    out = await run_with("vector_search", {"collection": "c2", "top_k": 10}, {"input": {"vector": [1, 0]}},
                         vec_services)
    assert out["count"] == 1


async def test_search_filters_on_metadata_and_delete_removes(vec_services: dict[str, Any]) -> None:
    docs = _docs(("en doc", [1.0, 0.0], {"lang": "en"}), ("fr doc", [1.0, 0.1], {"lang": "fr"}))
    await run_with("vector_store", {"collection": "c3"}, {"input": docs}, vec_services)
    out = await run_with("vector_search", {"collection": "c3", "where": {"lang": "fr"}},
                         {"input": {"vector": [1, 0]}}, vec_services)
    assert [h["text"] for h in out["hits"]] == ["fr doc"]
    deleted = await run_with("vector_store", {"collection": "c3", "operation": "delete", "where": {"lang": "fr"}},
                             {}, vec_services)
    assert deleted["deleted"] == 1
    out = await run_with("vector_search", {"collection": "c3"}, {"input": {"vector": [1, 0]}}, vec_services)
    assert [h["text"] for h in out["hits"]] == ["en doc"]


async def test_vectors_of_another_dimension_are_refused_naming_both(vec_services: dict[str, Any]) -> None:
    await run_with("vector_store", {"collection": "c4"}, {"input": _docs(("a", [1.0, 0.0], {}))}, vec_services)
    with pytest.raises(NodeExecutionError, match="2-dimensional vectors; got 3"):
        await run_with("vector_store", {"collection": "c4"}, {"input": _docs(("b", [1.0, 0.0, 0.0], {}))},
                       vec_services)


async def test_bad_collection_names_and_missing_vectors_are_parameter_errors(vec_services: dict[str, Any]) -> None:
    with pytest.raises(ParameterError, match="collection"):
        await run_with("vector_store", {"collection": "../x"}, {"input": _docs(("a", [1.0], {}))}, vec_services)
    with pytest.raises(ParameterError, match="Embedding node"):
        await run_with("vector_store", {"collection": "ok"}, {"input": {"documents": [{"text": "a"}]}}, vec_services)


async def test_loader_fetches_html_from_a_url_through_the_egress_policy(allow_loopback: None) -> None:
    from tests.nodes.local_http import LocalHttp

    with LocalHttp() as server:
        out = await run_with("document_loader", {"source": "url", "url": f"{server.url}/text"})
    assert out["documents"] == [{"text": "plain words", "metadata": {"source": f"{server.url}/text",
                                                                    "format": "text"}}]


async def test_a_heading_followed_by_many_spaces_is_read_in_linear_time() -> None:
    """The former title pattern backtracked in cubic time here (2,000 spaces: 15 s)."""
    from nodes._rag.documents import parse

    text = "# a" + " " * 50_000 + "b\nbody\n# Second #"
    began = time.monotonic()
    docs = parse(text.encode(), "markdown", source="x.md")
    assert time.monotonic() - began < 1.0
    assert docs[0]["metadata"]["title"] == "a" + " " * 50_000 + "b"
    assert parse(b"intro\n# Guide ##\n", "markdown", source="g.md")[0]["metadata"]["title"] == "Guide"
