"""Helpers for the RAG and integration node tests: run a node with services, egress, a PDF."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from orchestrator.kernel.protocol import DataValue, ExecutionResult
from orchestrator.settings import Settings, get_settings
from tests.nodes.node_harness import make_ctx, registry


async def run_with(node_type: str, data: dict[str, Any], inputs: dict[str, Any] | None = None,
                   services: dict[str, Any] | None = None, **ctx_kw: Any) -> Any:
    """The node's ``output`` value, run with declared defaults on the host ``services``
    describes (``tests.support.host_from``)."""
    entry = registry().get(node_type)
    resolved = {p.id: p.default for p in entry.definition.parameters}
    resolved.update(data)
    ctx = make_ctx(node_type=node_type, services=services, **ctx_kw)
    wrapped = {port: DataValue(type="data", value=v) for port, v in (inputs or {}).items()}
    result: ExecutionResult = await entry.executor.execute(resolved, wrapped, ctx)  # type: ignore[attr-defined]
    return result.outputs["output"].value


@pytest.fixture
def allow_loopback(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The egress policy lets nodes reach 127.0.0.1 (local test servers) for one test."""
    monkeypatch.setenv("ORCH_EGRESS_ALLOW", "127.0.0.1")
    get_settings.cache_clear()
    yield
    monkeypatch.delenv("ORCH_EGRESS_ALLOW")
    get_settings.cache_clear()


def settings(**kw: Any) -> Settings:
    return Settings(**kw)


def pdf_bytes(pages: list[str], title: str = "") -> bytes:
    """A minimal valid PDF with one line of text per page (Helvetica)."""
    objects: list[bytes] = []
    kids = " ".join(f"{3 + 2 * i} 0 R" for i in range(len(pages)))
    objects.append(b"<< /Type /Catalog /Pages 2 0 R >>")
    objects.append(f"<< /Type /Pages /Kids [{kids}] /Count {len(pages)} >>".encode())
    font_id = 3 + 2 * len(pages)
    for i, text in enumerate(pages):
        stream = f"BT /F1 12 Tf 72 720 Td ({text}) Tj ET".encode()
        objects.append(f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents {4 + 2 * i} 0 R "
                       f"/Resources << /Font << /F1 {font_id} 0 R >> >> >>".encode())
        objects.append(b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream")
    objects.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    info_id = len(objects) + 1
    objects.append(f"<< /Title ({title}) >>".encode())
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for n, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += f"{n} 0 obj\n".encode() + body + b"\nendobj\n"
    xref = len(out)
    out += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode()
    for off in offsets:
        out += f"{off:010d} 00000 n \n".encode()
    out += (f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R /Info {info_id} 0 R >>\n"
            f"startxref\n{xref}\n%%EOF\n").encode()
    return bytes(out)


@pytest.fixture(scope="session")
def node_redis() -> Iterator[Any]:
    """A real redis-server on a free port for nodes that read credentials and files."""
    from orchestrator.local.embedded_redis import EmbeddedRedis

    with EmbeddedRedis(unix_socket=False) as server:
        yield server


CREDENTIALS_KEY = "kS3i5vyfYd4YJ0k7oC2x6M9yM8p0PZp8w3r9T3eT4mU="


def redis_services(server: Any, **overrides: Any) -> dict[str, Any]:
    """``services`` as a worker passes them, on ``server`` with a fresh key prefix."""
    import secrets

    base: dict[str, Any] = {"redis_url": server.url, "key_prefix": "t" + secrets.token_hex(4),
                            "credentials_key": CREDENTIALS_KEY}
    return {"redis_url": server.url, "settings": Settings(**{**base, **overrides})}


async def store_credential(services: dict[str, Any], name: str, type_: str, values: dict[str, str],
                           origins: list[str] | None = None, limits: dict[str, int] | None = None) -> None:
    """Store a credential as an admin would, allowed to ``origins`` (None: none, as a
    credential stored before origins existed)."""
    from redis.asyncio import Redis

    from orchestrator.host.credentials import CredentialStore, validate

    redis = Redis.from_url(services["redis_url"], decode_responses=True)
    try:
        await CredentialStore(redis, services["settings"]).put(validate(name, type_, values, origins, limits))
    finally:
        await redis.aclose()


async def set_origins(services: dict[str, Any], name: str, origins: list[str]) -> None:
    from redis.asyncio import Redis

    from orchestrator.host.credentials import CredentialStore

    redis = Redis.from_url(services["redis_url"], decode_responses=True)
    try:
        await CredentialStore(redis, services["settings"]).set_origins(name, origins)
    finally:
        await redis.aclose()


@pytest.fixture(scope="session")
def pg_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real PostgreSQL (with pgvector) from the ``pgserver`` wheel, on a Unix socket in a
    fresh data folder; stopped at the end of the session. Never the machine's own server."""
    pgserver = pytest.importorskip("pgserver", reason="the pgserver wheel is not installed")
    import os
    import shutil
    import tempfile

    # Its own folder, not pytest's shared tmp tree (which other pytest sessions prune).
    data = tempfile.mkdtemp(prefix="orch-pg-")
    os.chmod(data, 0o777)  # as root, pgserver runs postgres as its own unprivileged user
    server = pgserver.get_server(str(data), cleanup_mode="stop")
    try:
        yield str(server.get_uri())
    finally:
        server.cleanup()
        shutil.rmtree(data, ignore_errors=True)


@pytest.fixture(scope="session")
def s3_url() -> Iterator[str]:
    """An S3-compatible server (moto's, in a subprocess on a free port), stopped by pid."""
    pytest.importorskip("moto.server", reason="moto[server] is not installed")
    proc, url = _start_moto()
    try:
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def _start_moto(attempts: int = 5) -> tuple[subprocess.Popen[bytes], str]:
    """moto's server on a free port, once it answers as moto: a port found free can be taken
    by another process before moto binds it (moto then exits, and a connect alone would have
    reached the other process), so a server that exits is started again on another port."""
    for _ in range(attempts):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        url = f"http://127.0.0.1:{port}"
        proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while proc.poll() is None and time.monotonic() < deadline:
            try:  # moto's own API answers: this port is moto's
                with urllib.request.urlopen(f"{url}/moto-api/data.json", timeout=1) as reply:
                    if reply.status == 200:
                        return proc, url
            except OSError:
                time.sleep(0.1)
        proc.kill()
        proc.wait(timeout=10)
    raise RuntimeError(f"the moto S3 server did not start in {attempts} attempts")


def s3_settings(s3_url: str, server: Any, **overrides: Any) -> dict[str, Any]:
    """``services`` whose file store writes to the S3 server ``s3_url``."""
    import secrets

    base: dict[str, Any] = {"blob_backend": "s3", "s3_endpoint_url": s3_url, "s3_bucket": "b" + secrets.token_hex(4),
                            "s3_access_key_id": "test", "s3_secret_access_key": "test"}
    return redis_services(server, **{**base, **overrides})
