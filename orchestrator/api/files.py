"""``/files``: upload binary content once, read it from any process by its reference.

``POST /files`` (multipart, field ``file``) stores the upload (``Settings.files_max_bytes``,
413 above it; the part's content type is kept) and answers ``{"$binary": {ref, mime,
size}}``, the JSON form of a ``BinaryRef`` that a run input may carry.
``GET /files/{ref}`` answers the bytes with their content type; ``DELETE`` removes them.
Storage: ``orchestrator/blobs.py`` (Redis by default, S3-compatible for large files).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import APIRouter, Depends, File, Response, UploadFile
from redis.asyncio import ConnectionPool, Redis

from orchestrator.blobs import DEFAULT_WORKSPACE, Blobs
from orchestrator.kernel.errors import PayloadTooLargeError

from .auth import Principal, role
from .services import Services, get_services

router = APIRouter(tags=["files"])
READ_CHUNK_BYTES = 1 << 20


@asynccontextmanager
async def blobs_of(services: Services, workspace: str = DEFAULT_WORKSPACE) -> AsyncIterator[Blobs]:
    """The caller's workspace's file store on the app's Redis server (a byte-level client
    of its own). Files of another workspace are unknown (404)."""
    pool = services.redis.connection_pool
    kwargs = {**pool.connection_kwargs, "decode_responses": False}
    client = Redis.from_pool(ConnectionPool(connection_class=pool.connection_class, **kwargs))
    blobs = Blobs(client, services.settings, workspace=workspace)
    try:
        yield blobs
    finally:
        await blobs.aclose()


@router.post("/files", status_code=201)
async def upload_file(file: UploadFile = File(...),  # noqa: B008
                      services: Services = Depends(get_services),  # noqa: B008
                      who: Principal = Depends(role("runner"))) -> dict[str, Any]:  # noqa: B008
    limit = services.settings.files_max_bytes
    parts: list[bytes] = []
    size = 0
    while chunk := await file.read(READ_CHUNK_BYTES):
        size += len(chunk)
        if size > limit:
            raise PayloadTooLargeError(f"file exceeds the limit of {limit} bytes", parameter="file")
        parts.append(chunk)
    mime = file.content_type or "application/octet-stream"
    async with blobs_of(services, who.workspace) as blobs:
        ref = await blobs.put(b"".join(parts), mime=mime, name=file.filename or "")
    return ref.to_json()


@router.get("/files/{ref}")
async def download_file(ref: str, services: Services = Depends(get_services),  # noqa: B008
                        who: Principal = Depends(role("viewer"))) -> Response:  # noqa: B008
    async with blobs_of(services, who.workspace) as blobs:
        blob = await blobs.get(ref)
    headers = {"Content-Disposition": f'attachment; filename="{blob.name}"'} if blob.name.isprintable() \
        and '"' not in blob.name and blob.name else {}
    return Response(blob.data, media_type=blob.mime, headers=headers)


@router.delete("/files/{ref}", status_code=204)
async def delete_file(ref: str, services: Services = Depends(get_services),  # noqa: B008
                      who: Principal = Depends(role("runner"))) -> Response:  # noqa: B008
    async with blobs_of(services, who.workspace) as blobs:
        await blobs.get(ref)  # 404 when unknown
        await blobs.delete(ref)
    return Response(status_code=204)
