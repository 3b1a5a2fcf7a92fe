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
``put_stream(read, size, mime=, name=)`` (an upload, read chunk by chunk: a Redis file is
APPENDed to a part key and moved into its hash inside Redis, an S3 one streamed with
boto3's multipart upload, so the API never holds a whole file), ``get(ref) -> Blob``,
``delete(ref)``, within one workspace (a ref of another workspace is unknown: 404). New
files go to ``blob_backend`` (``redis`` by default); a file over ``blob_redis_max_bytes``
goes to S3 when it is configured, else the put fails naming the limit
(:func:`max_file_bytes` is the limit an upload is checked against as it arrives). Missing
refs raise :class:`ResourceNotFoundError`.

Files kept in Redis count against the storage budgets of their workspace and, when a
node stores them (``run_id``), of its run (``orchestrator/store/storage_budget.py``); a put
past one raises :class:`StorageBudgetError` before anything is stored, and deleting a
file gives its bytes back.
"""

from __future__ import annotations

import asyncio
import re
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import IO, Any

from redis.asyncio import Redis

from orchestrator.errors import PayloadTooLargeError, RequestError, ResourceNotFoundError
from orchestrator.kernel.protocol import BinaryRef
from orchestrator.settings import Settings
from orchestrator.store import redis_client
from orchestrator.store.keys import Keys
from orchestrator.store.storage_budget import StorageBudget, store_full_errors

PART_TTL_S = 3600  # an upload's part key outlives any upload still arriving
CHUNK_BYTES = 1 << 20
# Move an upload's bytes from its part key into the file's hash, inside Redis.
# KEYS: part, file. ARGV: mime, size, name, day counted in ('' if none), TTL s.
COMMIT_LUA = """
local data = redis.call('GET', KEYS[1])
if not data or #data ~= tonumber(ARGV[2]) then return 0 end
redis.call('HSET', KEYS[2], 'data', data, 'mime', ARGV[1], 'size', ARGV[2], 'name', ARGV[3], 'day', ARGV[4])
redis.call('EXPIRE', KEYS[2], ARGV[5])
redis.call('DEL', KEYS[1])
return 1
"""

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

    async def put_file(self, key: str, file: IO[bytes], mime: str, name: str) -> None:
        """Stream ``file`` (read in a thread, part by part: boto3's managed upload). A
        managed upload cannot be sent again from the same stream, so the bucket is made
        sure of first."""
        extra = {"ContentType": mime, "Metadata": {"name": name.encode("ascii", "replace").decode()}}

        def upload() -> None:
            from botocore.exceptions import ClientError

            try:
                self.client.head_bucket(Bucket=self.bucket)
            except ClientError:
                self.client.create_bucket(Bucket=self.bucket)  # first file of a fresh deployment
            try:
                self.client.upload_fileobj(file, self.bucket, key, ExtraArgs=extra)
            except ClientError as exc:
                raise RequestError(f"S3 write of {key!r} failed: {exc.response.get('Error', {}).get('Code')}") \
                    from None

        await asyncio.to_thread(upload)


def max_file_bytes(settings: Settings) -> int:
    """The largest file a put accepts: ``files_max_bytes``, and no more than
    ``blob_redis_max_bytes`` when files can only go to Redis (no S3 configured)."""
    if settings.blob_backend == "s3" or settings.s3_endpoint_url or settings.s3_access_key_id:
        return settings.files_max_bytes
    return min(settings.files_max_bytes, settings.blob_redis_max_bytes)


class Blobs:
    """Read and write binary content (see the module docstring). ``redis`` must not decode
    responses; build one with :meth:`from_settings` and close it with :meth:`aclose`."""

    def __init__(self, redis: Redis, settings: Settings, *, workspace: str = DEFAULT_WORKSPACE,
                 run_id: str | None = None) -> None:
        self.redis = redis
        self.settings = settings
        self.keys = Keys.of(settings)
        self.workspace = workspace
        self.run_id = run_id  # files a node stores count against its run's budget too
        self.budget = StorageBudget(redis, settings)
        self._commit = redis.register_script(COMMIT_LUA)
        self._s3: _S3 | None = None

    @classmethod
    def from_settings(cls, settings: Settings, redis_url: str | None = None, *,
                      workspace: str = DEFAULT_WORKSPACE, run_id: str | None = None) -> Blobs:
        url = redis_url or settings.redis_url
        if not url:
            raise RequestError("files need Redis: set REDIS_URL")
        return cls(redis_client.client(url, decode_responses=False), settings, workspace=workspace, run_id=run_id)

    async def aclose(self) -> None:
        await self.redis.aclose()

    def _s3_backend(self) -> _S3:
        if self._s3 is None:
            self._s3 = _S3(self.settings)
        return self._s3

    def _s3_configured(self) -> bool:
        return bool(self.settings.s3_endpoint_url or self.settings.s3_access_key_id)

    def _backend_for(self, size: int) -> str:
        backend = self.settings.blob_backend
        if backend not in ("redis", "s3"):
            raise RequestError(f"ORCH_BLOB_BACKEND must be redis or s3; got {backend!r}")
        if backend == "redis" and size > self.settings.blob_redis_max_bytes:
            if not self._s3_configured():
                raise PayloadTooLargeError(
                    f"file of {size} bytes exceeds blob_redis_max_bytes ({self.settings.blob_redis_max_bytes}); "
                    "configure an S3-compatible store (ORCH_S3_ENDPOINT_URL) for large files", parameter="file")
            backend = "s3"
        return backend

    async def _count(self, size: int) -> str:
        """Count a Redis file against the budgets: the day it is counted in ('' if not)."""
        with store_full_errors():
            day = await self.budget.reserve(size, workspace=self.workspace, run_id=self.run_id)
        return "" if day is None else str(day)

    async def put(self, data: bytes, *, mime: str = "application/octet-stream", name: str = "") -> BinaryRef:
        backend = self._backend_for(len(data))
        blob_id = secrets.token_hex(16)
        ref = f"{backend}:{self.workspace}:{blob_id}"
        if backend == "s3":
            await self._s3_backend().put(f"{self.workspace}/{blob_id}", data, mime, name)
        else:
            day = await self._count(len(data))
            key = self.keys.blob(self.workspace, blob_id)
            with store_full_errors():
                async with self.redis.pipeline(transaction=True) as pipe:
                    pipe.hset(key, mapping={"data": data, "mime": mime, "size": len(data), "name": name, "day": day})
                    pipe.expire(key, self.settings.retention_s)
                    await pipe.execute()
        return BinaryRef(ref=ref, mime=mime, size=len(data))

    async def put_stream(self, read: Callable[[int], Awaitable[bytes]], file: IO[bytes], size: int, *,
                         mime: str = "application/octet-stream", name: str = "") -> BinaryRef:
        """Store ``size`` bytes read from ``file`` chunk by chunk (``read(n)``: its async read,
        for Redis; the file itself goes to S3's managed upload). Never holds the file whole."""
        backend = self._backend_for(size)
        blob_id = secrets.token_hex(16)
        if backend == "s3":
            await self._s3_backend().put_file(f"{self.workspace}/{blob_id}", file, mime, name)
            return BinaryRef(ref=f"s3:{self.workspace}:{blob_id}", mime=mime, size=size)
        day = await self._count(size)
        part, key = self.keys.blob_part(self.workspace, blob_id), self.keys.blob(self.workspace, blob_id)
        try:
            with store_full_errors():
                while chunk := await read(CHUNK_BYTES):
                    async with self.redis.pipeline(transaction=True) as pipe:
                        pipe.append(part, chunk)
                        pipe.expire(part, PART_TTL_S)
                        await pipe.execute()
                stored = await self._commit(keys=[part, key], args=[mime, size, name, day, self.settings.retention_s])
        except BaseException:
            await self.redis.delete(part)
            if day:
                await self.budget.release(size, workspace=self.workspace, day=int(day))
            raise
        if not stored:
            raise RequestError(f"the upload of {name or 'a file'} changed size while it was stored; send it again",
                               parameter="file")
        return BinaryRef(ref=f"redis:{self.workspace}:{blob_id}", mime=mime, size=size)

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
        """Remove the file; a Redis file's bytes go back to its workspace's count."""
        backend, workspace, blob_id = self._own(ref)
        if backend == "s3":
            await self._s3_backend().delete(f"{workspace}/{blob_id}")
            return
        key = self.keys.blob(workspace, blob_id)
        size, day = await self.redis.hmget(key, ["size", "day"])  # type: ignore[misc]
        if await self.redis.delete(key) and size and day:
            await self.budget.release(int(size), workspace=workspace, day=int(day))
