"""Binary content that every process can read: the store behind ``BinaryRef``.

A ``BinaryRef.ref`` is ``"<backend>:<workspace>:<id>"``; the backend named in the ref
serves reads, so a file written by an API process is read by a worker on another
machine through the same Redis or S3-compatible store.

=========  ===============================================================================
backend    where
=========  ===============================================================================
``redis``  one hash per file (``Keys.blob``: data, mime, size, name), expiring with the
           run retention (``retention_s``); for files up to ``blob_redis_max_bytes``.
``s3``     one object per file (``<workspace>/<id>``, MIME type as ContentType) in
           ``s3_bucket`` of an S3-compatible store (MinIO, AWS); expiry is the bucket's
           lifecycle rule (see README). Through boto3, in a thread.
=========  ===============================================================================

:class:`Blobs` is the one interface: ``put(data, mime=, name=) -> BinaryRef``,
``get(ref) -> Blob``, ``delete(ref)``, within one workspace (a ref of another workspace is
unknown: 404). New files go to ``blob_backend`` (``redis`` by
default); a file over ``blob_redis_max_bytes`` goes to S3 when it is configured, else the
put fails naming the limit. Missing refs raise :class:`ResourceNotFoundError`.
"""

from __future__ import annotations

import asyncio
import re
import secrets
from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis

from orchestrator import redis_client
from orchestrator.kernel.errors import PayloadTooLargeError, RequestError, ResourceNotFoundError
from orchestrator.kernel.protocol import BinaryRef
from orchestrator.keys import Keys
from orchestrator.settings import Settings

_REF = re.compile(r"^(redis|s3):([A-Za-z0-9_-]{1,64}):([a-f0-9]{32})$")
DEFAULT_WORKSPACE = "default"


@dataclass(frozen=True)
class Blob:
    data: bytes
    mime: str
    name: str

    @property
    def size(self) -> int:
        return len(self.data)


def parse_ref(ref: str) -> tuple[str, str, str]:
    """``(backend, workspace, id)`` of a ref; a malformed one is a RequestError naming it."""
    match = _REF.match(ref or "")
    if not match:
        raise RequestError(f"not a file reference: {ref!r} (expected '<redis|s3>:<workspace>:<32 hex>')",
                           parameter="ref")
    return match.group(1), match.group(2), match.group(3)


def as_binary_ref(value: Any) -> BinaryRef | None:
    """A BinaryRef from a ``BinaryRef``, ``{"$binary": {...}}`` or ``{"ref": ...}`` value."""
    if isinstance(value, BinaryRef):
        return value
    if isinstance(value, dict):
        raw = value.get("$binary", value)
        if isinstance(raw, dict) and isinstance(raw.get("ref"), str):
            return BinaryRef(ref=raw["ref"], mime=str(raw.get("mime") or "application/octet-stream"),
                             size=int(raw.get("size") or 0))
    return None


class _S3:
    """The S3-compatible backend (boto3 in a thread: its client is thread-safe)."""

    def __init__(self, settings: Settings) -> None:
        import boto3
        from botocore.config import Config

        self.bucket = settings.s3_bucket
        self.client = boto3.client(
            "s3", endpoint_url=settings.s3_endpoint_url, region_name=settings.s3_region,
            aws_access_key_id=settings.s3_access_key_id, aws_secret_access_key=settings.s3_secret_access_key,
            config=Config(retries={"max_attempts": 3, "mode": "standard"}, s3={"addressing_style": "path"}))

    def _put(self, key: str, data: bytes, mime: str, name: str) -> None:
        from botocore.exceptions import ClientError

        def put() -> None:
            self.client.put_object(Bucket=self.bucket, Key=key, Body=data, ContentType=mime,
                                   Metadata={"name": name.encode("ascii", "replace").decode()})

        try:
            put()
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "NoSuchBucket":
                raise RequestError(f"S3 write of {key!r} failed: {exc.response.get('Error', {}).get('Code')}") \
                    from None
            self.client.create_bucket(Bucket=self.bucket)  # first file of a fresh deployment
            put()

    def _get(self, key: str) -> Blob:
        from botocore.exceptions import ClientError

        try:
            obj = self.client.get_object(Bucket=self.bucket, Key=key)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("NoSuchKey", "404", "NoSuchBucket"):
                raise ResourceNotFoundError(f"no file {key!r} in bucket {self.bucket!r}", parameter="ref") from None
            raise RequestError(f"S3 read of {key!r} failed: {exc.response.get('Error', {}).get('Code')}") from None
        return Blob(obj["Body"].read(), obj.get("ContentType") or "application/octet-stream",
                    (obj.get("Metadata") or {}).get("name", ""))

    def _delete(self, key: str) -> None:
        self.client.delete_object(Bucket=self.bucket, Key=key)

    async def put(self, key: str, data: bytes, mime: str, name: str) -> None:
        await asyncio.to_thread(self._put, key, data, mime, name)

    async def get(self, key: str) -> Blob:
        return await asyncio.to_thread(self._get, key)

    async def delete(self, key: str) -> None:
        await asyncio.to_thread(self._delete, key)


class Blobs:
    """Read and write binary content (see the module docstring). ``redis`` must not decode
    responses; build one with :meth:`from_settings` and close it with :meth:`aclose`."""

    def __init__(self, redis: Redis, settings: Settings, *, workspace: str = DEFAULT_WORKSPACE) -> None:
        self.redis = redis
        self.settings = settings
        self.keys = Keys(settings.key_prefix)
        self.workspace = workspace
        self._s3: _S3 | None = None

    @classmethod
    def from_settings(cls, settings: Settings, redis_url: str | None = None, *,
                      workspace: str = DEFAULT_WORKSPACE) -> Blobs:
        url = redis_url or settings.redis_url
        if not url:
            raise RequestError("files need Redis: set REDIS_URL")
        return cls(redis_client.client(url, decode_responses=False), settings, workspace=workspace)

    async def aclose(self) -> None:
        await self.redis.aclose()

    def _s3_backend(self) -> _S3:
        if self._s3 is None:
            self._s3 = _S3(self.settings)
        return self._s3

    def _s3_configured(self) -> bool:
        return bool(self.settings.s3_endpoint_url or self.settings.s3_access_key_id)

    async def put(self, data: bytes, *, mime: str = "application/octet-stream", name: str = "") -> BinaryRef:
        backend = self.settings.blob_backend
        if backend not in ("redis", "s3"):
            raise RequestError(f"ORCH_BLOB_BACKEND must be redis or s3; got {backend!r}")
        if backend == "redis" and len(data) > self.settings.blob_redis_max_bytes:
            if not self._s3_configured():
                raise PayloadTooLargeError(
                    f"file of {len(data)} bytes exceeds blob_redis_max_bytes ({self.settings.blob_redis_max_bytes}); "
                    "configure an S3-compatible store (ORCH_S3_ENDPOINT_URL) for large files", parameter="file")
            backend = "s3"
        blob_id = secrets.token_hex(16)
        ref = f"{backend}:{self.workspace}:{blob_id}"
        if backend == "s3":
            await self._s3_backend().put(f"{self.workspace}/{blob_id}", data, mime, name)
        else:
            key = self.keys.blob(self.workspace, blob_id)
            async with self.redis.pipeline(transaction=True) as pipe:
                pipe.hset(key, mapping={"data": data, "mime": mime, "size": len(data), "name": name})
                pipe.expire(key, self.settings.retention_s)
                await pipe.execute()
        return BinaryRef(ref=ref, mime=mime, size=len(data))

    def _own(self, ref: str) -> tuple[str, str, str]:
        """The parts of ``ref``; a file of another workspace is unknown here (404)."""
        backend, workspace, blob_id = parse_ref(ref)
        if workspace != self.workspace:
            raise ResourceNotFoundError(f"no file {ref} in workspace {self.workspace!r}", parameter="ref")
        return backend, workspace, blob_id

    async def get(self, ref: str | BinaryRef) -> Blob:
        backend, workspace, blob_id = self._own(ref.ref if isinstance(ref, BinaryRef) else ref)
        if backend == "s3":
            return await self._s3_backend().get(f"{workspace}/{blob_id}")
        raw: dict[bytes, bytes] = await self.redis.hgetall(self.keys.blob(workspace, blob_id))  # type: ignore[assignment]
        if not raw:
            raise ResourceNotFoundError(f"no file {backend}:{workspace}:{blob_id} (never stored, or expired)",
                                        parameter="ref")
        return Blob(raw[b"data"], raw.get(b"mime", b"").decode() or "application/octet-stream",
                    raw.get(b"name", b"").decode())

    async def delete(self, ref: str) -> None:
        backend, workspace, blob_id = self._own(ref)
        if backend == "s3":
            await self._s3_backend().delete(f"{workspace}/{blob_id}")
        else:
            await self.redis.delete(self.keys.blob(workspace, blob_id))
