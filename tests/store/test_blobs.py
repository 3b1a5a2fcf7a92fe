"""The file store: Redis by default, an S3-compatible server for large files and deployments."""

from __future__ import annotations

from typing import Any

import pytest

from orchestrator.errors import PayloadTooLargeError, ResourceNotFoundError
from orchestrator.store.blobs import Blobs
from tests.nodes.rag_support import node_redis, pdf_bytes, redis_services, run_with, s3_settings, s3_url

__all__ = ["node_redis", "s3_url"]


async def test_redis_backend_round_trips_and_expires_with_retention(node_redis: Any) -> None:
    services = redis_services(node_redis, retention_s=600)
    blobs = Blobs.from_settings(services["settings"])
    try:
        ref = await blobs.put(b"hello", mime="text/plain", name="a.txt")
        assert ref.ref.startswith("redis:default:") and ref.size == 5
        blob = await blobs.get(ref)
        assert (blob.data, blob.mime, blob.name) == (b"hello", "text/plain", "a.txt")
        _, ws, blob_id = ref.ref.split(":")
        assert 0 < await blobs.redis.ttl(f"{services['settings'].key_prefix}:blob:{ws}:{blob_id}") <= 600
    finally:
        await blobs.aclose()


async def test_a_file_too_large_for_redis_without_s3_is_refused(node_redis: Any) -> None:
    services = redis_services(node_redis, blob_redis_max_bytes=10)
    blobs = Blobs.from_settings(services["settings"])
    try:
        with pytest.raises(PayloadTooLargeError, match="blob_redis_max_bytes"):
            await blobs.put(b"x" * 11)
    finally:
        await blobs.aclose()


async def test_s3_backend_round_trips_through_a_real_s3_server(node_redis: Any, s3_url: str) -> None:
    services = s3_settings(s3_url, node_redis)
    blobs = Blobs.from_settings(services["settings"])
    try:
        ref = await blobs.put(b"\x00large\xff", mime="application/x-thing", name="big.bin")
        assert ref.ref.startswith("s3:default:")
        blob = await blobs.get(ref.ref)
        assert (blob.data, blob.mime, blob.name) == (b"\x00large\xff", "application/x-thing", "big.bin")
        await blobs.delete(ref.ref)
        with pytest.raises(ResourceNotFoundError):
            await blobs.get(ref.ref)
    finally:
        await blobs.aclose()


async def test_large_files_overflow_from_redis_to_s3(node_redis: Any, s3_url: str) -> None:
    services = s3_settings(s3_url, node_redis, blob_backend="redis", blob_redis_max_bytes=100)
    blobs = Blobs.from_settings(services["settings"])
    try:
        small, large = await blobs.put(b"s" * 100), await blobs.put(b"L" * 101)
        assert small.ref.startswith("redis:") and large.ref.startswith("s3:")
        assert (await blobs.get(large)).data == b"L" * 101
    finally:
        await blobs.aclose()


async def test_document_loader_reads_a_pdf_from_s3(node_redis: Any, s3_url: str) -> None:
    services = s3_settings(s3_url, node_redis)
    blobs = Blobs.from_settings(services["settings"])
    try:
        ref = await blobs.put(pdf_bytes(["Quarterly report", "Revenue grew"]), mime="application/pdf",
                              name="report.pdf")
    finally:
        await blobs.aclose()
    out = await run_with("document_loader", {}, {"input": {"file": ref.to_json()}}, services)
    assert [(d["metadata"]["source"], d["metadata"]["page"]) for d in out["documents"]] == [
        ("report.pdf", 1), ("report.pdf", 2)]
    assert "Revenue grew" in out["documents"][1]["text"]


async def test_a_file_of_another_workspace_is_unknown(node_redis: Any) -> None:
    settings = redis_services(node_redis)["settings"]
    mine = Blobs.from_settings(settings, workspace="team-a")
    other = Blobs.from_settings(settings, workspace="team-b")
    try:
        ref = await mine.put(b"private", mime="text/plain")
        assert ref.ref.startswith("redis:team-a:")
        with pytest.raises(ResourceNotFoundError, match="workspace 'team-b'"):
            await other.get(ref)
        with pytest.raises(ResourceNotFoundError):
            await other.delete(ref.ref)
        assert (await mine.get(ref)).data == b"private"
    finally:
        await mine.aclose()
        await other.aclose()


async def test_nodes_read_credentials_and_files_of_the_runs_workspace(node_redis: Any) -> None:
    from tests.nodes.rag_support import store_credential

    services = redis_services(node_redis)
    team = {**services, "workspace": "team-a"}
    blobs = Blobs.from_settings(services["settings"], workspace="team-a")
    try:
        ref = await blobs.put(b"team notes", mime="text/plain", name="notes.txt")
    finally:
        await blobs.aclose()
    out = await run_with("document_loader", {}, {"input": {"file": ref.to_json()}}, team)
    assert out["documents"][0]["text"] == "team notes"
    with pytest.raises(ResourceNotFoundError):  # a run of the default workspace cannot read it
        await run_with("document_loader", {}, {"input": {"file": ref.to_json()}}, services)
    await store_credential(services, "db", "database_url", {"url": "sqlite:///:memory:"})
    from orchestrator.kernel.errors import ParameterError

    with pytest.raises(ParameterError, match="workspace 'team-a'"):
        await run_with("database_query", {"query": "SELECT 1", "credential": "db"}, services=team)


async def _stream(blobs: Blobs, data: bytes, name: str) -> Any:
    import io

    file = io.BytesIO(data)

    async def read(n: int) -> bytes:
        return file.read(n)

    return await blobs.put_stream(read, file, len(data), mime="application/x-thing", name=name)


async def test_an_upload_streams_into_redis_chunk_by_chunk_and_reads_back_whole(node_redis: Any) -> None:
    services = redis_services(node_redis)
    blobs = Blobs.from_settings(services["settings"], services["redis_url"])
    data = bytes(range(256)) * (3 * 4096 + 7)  # three 1 MiB chunks and a bit
    try:
        ref = await _stream(blobs, data, "three.bin")
        assert ref.ref.startswith("redis:") and ref.size == len(data)
        blob = await blobs.get(ref)
        assert (blob.data, blob.mime, blob.name) == (data, "application/x-thing", "three.bin")
        assert await blobs.redis.keys("*:part") == []  # the part key was moved into the file
    finally:
        await blobs.aclose()


async def test_an_upload_streams_to_s3(node_redis: Any, s3_url: str) -> None:
    services = s3_settings(s3_url, node_redis)
    blobs = Blobs.from_settings(services["settings"])
    data = b"\x00s3\xff" * 300_000
    try:
        ref = await _stream(blobs, data, "s3.bin")
        assert ref.ref.startswith("s3:default:")
        assert (await blobs.get(ref.ref)).data == data
    finally:
        await blobs.aclose()
