"""``/files``: upload binary content once, read it from any process by its reference.

``POST /files`` (multipart, field ``file``) stores the upload and answers ``{"$binary":
{ref, mime, size}}``, the JSON form of a ``BinaryRef`` that a run input may carry (the
part's content type is kept). Its size is checked as the bytes arrive: the body limit of
``/files`` is the largest file the store takes (``blobs.max_file_bytes``:
``ORCH_FILES_MAX_BYTES``, and ``ORCH_BLOB_REDIS_MAX_BYTES`` without S3) plus the multipart
framing, so a larger upload gets 413 naming them once that much has arrived (at once when
its ``Content-Length`` says so), not after it was read whole. The multipart parser keeps a
part in memory up to 1 MiB and spools the rest to a temporary file; the handler streams
that to the store chunk by chunk. An upload that would pass its workspace's storage budget
gets 429 naming ``ORCH_WORKSPACE_MAX_BYTES``.
``GET /files/{ref}`` answers the bytes as a download; ``DELETE`` removes them.
Storage: ``orchestrator/store/blobs.py`` (Redis by default, S3-compatible for large files).

A file's bytes and type come from whoever uploaded it (a runner) or from a remote server
(a node that stored a response). Served on the API's origin, an HTML or SVG file would run
its script as whoever opens the link, with their session cookie. So a download is never
rendered (:func:`download_headers`): always ``Content-Disposition: attachment``,
``X-Content-Type-Options: nosniff``, ``Content-Security-Policy: sandbox; default-src
'none'``, and a type that can carry script (HTML, XML, SVG, JavaScript, XSL, multipart) or
is not a plain ``type/subtype`` is sent as ``application/octet-stream``.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import quote

from fastapi import APIRouter, Depends, File, Response, UploadFile

from orchestrator.errors import PayloadTooLargeError
from orchestrator.settings import Settings
from orchestrator.store import redis_client
from orchestrator.store.blobs import DEFAULT_WORKSPACE, Blobs, max_file_bytes

from .auth import role
from .principal import Principal
from .services import Services, get_services

router = APIRouter(tags=["files"])
MULTIPART_FRAMING_BYTES = 64 * 1024  # a part's headers and boundaries, on top of the file
OCTET_STREAM = "application/octet-stream"
DOWNLOAD_CSP = "sandbox; default-src 'none'"
_MIME = re.compile(r"[a-z0-9][a-z0-9!#$&^_.+-]{0,126}/[a-z0-9][a-z0-9!#$&^_.+-]{0,126}")
# Types a browser may run script in, hand to a plug-in, or re-render in place: octet-stream.
_ACTIVE_MIME = re.compile(r"html|xml|svg|script|xsl|flash|x-sh\b|x-csh|httpd|mhtml|cache-manifest|^multipart/")
_FALLBACK_NAME = re.compile(r"[^A-Za-z0-9._ ()+-]")
# RFC 5987 attr-char, besides letters and digits (what quote() may leave as is).
_ATTR_SAFE = "!#$&+-.^_`|~"


def served_mime(mime: str) -> str:
    """The Content-Type a stored file is sent with (see the module docstring)."""
    base = (mime or "").split(";", 1)[0].strip().lower()
    if not _MIME.fullmatch(base) or _ACTIVE_MIME.search(base):
        return OCTET_STREAM
    return base


def content_disposition(name: str) -> str:
    """``attachment`` with an ASCII ``filename`` (odd characters as ``_``; ``download`` when
    nothing is left) and, for a name that is not plain ASCII, RFC 5987 ``filename*``."""
    cleaned = "".join(c for c in name if c.isprintable() and c not in "/\\").strip(" .")
    fallback = _FALLBACK_NAME.sub("_", cleaned).strip(" .") or "download"
    header = f'attachment; filename="{fallback}"'
    if cleaned and cleaned != fallback:
        header += f"; filename*=UTF-8''{quote(cleaned, safe=_ATTR_SAFE)}"
    return header


def download_headers(name: str) -> dict[str, str]:
    return {"Content-Disposition": content_disposition(name), "X-Content-Type-Options": "nosniff",
            "Content-Security-Policy": DOWNLOAD_CSP}


@asynccontextmanager
async def blobs_of(services: Services, workspace: str = DEFAULT_WORKSPACE) -> AsyncIterator[Blobs]:
    """The caller's workspace's file store on the app's Redis server (a byte-level client
    of its own). Files of another workspace are unknown (404)."""
    client = redis_client.sibling(services.redis, decode_responses=False)
    blobs = Blobs(client, services.settings, workspace=workspace)
    try:
        yield blobs
    finally:
        await blobs.aclose()


@router.post("/files", status_code=201)
async def upload_file(file: UploadFile = File(...),  # noqa: B008
                      services: Services = Depends(get_services),  # noqa: B008
                      who: Principal = Depends(role("runner"))) -> dict[str, Any]:  # noqa: B008
    limit = max_file_bytes(services.settings)
    size = file.size if file.size is not None else file.file.seek(0, 2)
    if size > limit:  # the body limit let it in only if the multipart framing was small
        raise PayloadTooLargeError(file_limit_message(limit), parameter="file")
    await file.seek(0)
    mime = file.content_type or "application/octet-stream"
    async with blobs_of(services, who.workspace) as blobs:
        ref = await blobs.put_stream(file.read, file.file, size, mime=mime, name=file.filename or "")
    return ref.to_json()


def file_limit_message(limit_bytes: int) -> str:
    return (f"a file is at most {limit_bytes} bytes (ORCH_FILES_MAX_BYTES; without an S3 store also "
            "ORCH_BLOB_REDIS_MAX_BYTES)")


def upload_body_limit(settings: Settings) -> tuple[int, str]:
    """The body limit of ``POST /files`` and what its 413 says (see the module docstring)."""
    limit = max_file_bytes(settings)
    return limit + MULTIPART_FRAMING_BYTES, file_limit_message(limit)


@router.get("/files/{ref}")
async def download_file(ref: str, services: Services = Depends(get_services),  # noqa: B008
                        who: Principal = Depends(role("viewer"))) -> Response:  # noqa: B008
    """The file's bytes as a download, never rendered on the API's origin (see the module
    docstring)."""
    async with blobs_of(services, who.workspace) as blobs:
        blob = await blobs.get(ref)
    return Response(blob.data, media_type=served_mime(blob.mime), headers=download_headers(blob.name))


@router.delete("/files/{ref}", status_code=204)
async def delete_file(ref: str, services: Services = Depends(get_services),  # noqa: B008
                      who: Principal = Depends(role("runner"))) -> Response:  # noqa: B008
    async with blobs_of(services, who.workspace) as blobs:
        await blobs.get(ref)  # 404 when unknown
        await blobs.delete(ref)
    return Response(status_code=204)
