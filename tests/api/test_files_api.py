"""``/files`` over the API: upload returns a BinaryRef, download streams it back."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from orchestrator.local.embedded_redis import EmbeddedRedis
from tests.api.conftest import Api, open_api


@pytest.fixture
async def fapi(redis_server: EmbeddedRedis) -> AsyncIterator[Api]:
    api = await open_api(redis_server, files_max_bytes=4096, max_body_bytes=1024)
    yield api
    await api.close()


async def test_upload_then_download_round_trips_bytes_and_type(fapi: Api) -> None:
    data = bytes(range(256)) * 10  # above the JSON body limit, below the file limit
    r = await fapi.client.post("/files", files={"file": ("blob.bin", data, "application/x-thing")})
    assert r.status_code == 201, r.text
    ref = r.json()["$binary"]
    assert ref["size"] == len(data) and ref["mime"] == "application/x-thing"
    assert ref["ref"].startswith("redis:default:")
    got = await fapi.client.get(f"/files/{ref['ref']}")
    assert got.status_code == 200 and got.content == data
    assert got.headers["content-type"] == "application/x-thing"
    assert got.headers["content-disposition"] == 'attachment; filename="blob.bin"'
    ttl = await fapi.redis.ttl(f"{fapi.settings.key_prefix}:blob:default:{ref['ref'].rsplit(':', 1)[1]}")
    assert 0 < ttl <= fapi.settings.retention_s


async def test_upload_over_the_limit_is_a_413_and_stores_nothing(fapi: Api) -> None:
    r = await fapi.client.post("/files", files={"file": ("big.bin", b"x" * 5000, "application/octet-stream")})
    assert r.status_code == 413
    assert await fapi.redis.keys(f"{fapi.settings.key_prefix}:blob:*") == []


async def test_unknown_and_malformed_refs(fapi: Api) -> None:
    missing = await fapi.client.get("/files/redis:default:" + "0" * 32)
    assert missing.status_code == 404
    bad = await fapi.client.get("/files/not-a-ref")
    assert bad.status_code == 400 and bad.json()["error"]["parameter"] == "ref"


async def test_delete_removes_a_file(fapi: Api) -> None:
    ref = (await fapi.client.post("/files", files={"file": ("a.txt", b"hi", "text/plain")})).json()["$binary"]["ref"]
    assert (await fapi.client.delete(f"/files/{ref}")).status_code == 204
    assert (await fapi.client.get(f"/files/{ref}")).status_code == 404


async def test_files_need_the_api_key_like_every_endpoint(redis_server: EmbeddedRedis) -> None:
    api = await open_api(redis_server, api_keys="k-1")
    try:
        assert (await api.client.post("/files", files={"file": ("a", b"x", "text/plain")})).status_code == 401
        assert (await api.client.get("/files/redis:default:" + "0" * 32)).status_code == 401
    finally:
        await api.close()


# -- downloads never render (stored XSS through /files, red-team finding 9) -----------------

XSS = b"<script>fetch('/auth/session').then(r => r.json()).then(s => document.title = s.csrf)</script>"


@pytest.fixture
async def keyed_files(redis_server: EmbeddedRedis, tmp_path: Path) -> AsyncIterator[Api]:
    keys = [{"key": "a-runner", "workspace": "alpha", "role": "runner"},
            {"key": "a-editor", "workspace": "alpha", "role": "editor"}]
    keys_file = tmp_path / "keys.json"
    keys_file.write_text(json.dumps(keys))
    api = await open_api(redis_server, api_keys_file=str(keys_file))
    yield api
    await api.close()


@pytest.mark.parametrize("mime", ["text/html", "TEXT/HTML; charset=utf-8", "application/xhtml+xml", "image/svg+xml",
                                  "text/xml", "application/javascript", "text/xsl", "multipart/x-mixed-replace"])
async def test_a_runners_html_upload_downloads_as_an_attachment_and_never_renders(
        keyed_files: Api, mime: str) -> None:
    uploaded = await keyed_files.client.post("/files", files={"file": ("q3\treport.html", XSS, mime)},
                                             headers={"Authorization": "Bearer a-runner"})
    assert uploaded.status_code == 201, uploaded.text
    ref = uploaded.json()["$binary"]["ref"]
    signed = await keyed_files.client.post("/auth/session", json={"api_key": "a-editor"})  # the console's cookie
    assert signed.status_code == 200
    got = await keyed_files.client.get(f"/files/{ref}")
    assert got.status_code == 200 and got.content == XSS
    assert got.headers["content-disposition"].startswith('attachment; filename="q3')  # httpx sent the tab as %09
    assert got.headers["x-content-type-options"] == "nosniff"
    assert got.headers["content-security-policy"] == "sandbox; default-src 'none'"
    assert got.headers["content-type"] == "application/octet-stream"


@pytest.mark.parametrize(("mime", "served"), [
    ("application/pdf", "application/pdf"),
    ("image/png", "image/png"),
    ("text/plain; charset=latin-1", "text/plain; charset=utf-8"),  # starlette's charset for text/*
    ("application/vnd.ms-htmlhelp", "application/octet-stream"),
    ("text/x-sh", "application/octet-stream"),
    ("not a type", "application/octet-stream"),
    ("", "application/octet-stream"),
])
def test_only_passive_well_formed_types_are_served_as_themselves(mime: str, served: str) -> None:
    from starlette.responses import Response

    from orchestrator.api.files import served_mime

    assert Response(b"", media_type=served_mime(mime)).headers["content-type"] == served


@pytest.mark.parametrize(("name", "header"), [
    ("blob.bin", 'attachment; filename="blob.bin"'),
    ("résumé 2027.pdf", "attachment; filename=\"r_sum_ 2027.pdf\"; filename*=UTF-8''r%C3%A9sum%C3%A9%202027.pdf"),
    ('say "hi".txt', "attachment; filename=\"say _hi_.txt\"; filename*=UTF-8''say%20%22hi%22.txt"),
    ("../../etc/passwd", "attachment; filename=\"etcpasswd\""),
    ("報告.html", "attachment; filename=\"__.html\"; filename*=UTF-8''%E5%A0%B1%E5%91%8A.html"),
    ("\r\n", 'attachment; filename="download"'),
    ("", 'attachment; filename="download"'),
])
def test_the_download_name_is_always_an_attachment_with_a_safe_fallback(name: str, header: str) -> None:
    from orchestrator.api.files import content_disposition

    assert content_disposition(name) == header
    header.encode("latin-1")  # a header value Starlette can send


def console_link_pattern() -> re.Pattern[str]:
    """The regular expression the console uses to decide that a file ref is already a link."""
    source = (Path(__file__).parents[2] / "orchestrator" / "api" / "ui" / "js" / "dom.js").read_text()
    found = re.search(r"const LINK = /(.+)/i;", source)
    assert found, "js/dom.js no longer decides links with one regular expression"
    return re.compile(found[1], re.IGNORECASE)


@pytest.mark.parametrize(("ref", "is_link"), [
    ("https://files.example/a.pdf", True),
    ("/files/redis:default:0123", True),
    ("redis:default:0123456789abcdef0123456789abcdef", False),
    ("//evil.example/x.html", False),
    ("/\\evil.example/x.html", False),
    ("/\t/evil.example/x.html", False),
    ("javascript:alert(1)", False),
])
def test_the_console_links_only_http_urls_and_paths_of_its_own_site(ref: str, is_link: bool) -> None:
    assert bool(console_link_pattern().match(ref)) is is_link
