"""Documents and the parsers that turn bytes into them.

A document is plain JSON: ``{"text": str, "metadata": {...}}``. Metadata always has
``source`` (where it came from) and, when known, ``title`` and ``page`` (1-based, PDF).

:func:`parse` picks the parser from the format (``text``, ``markdown``, ``html``, ``pdf``,
``json``, ``csv``) or, for ``auto``, from the MIME type and the name's extension. Every
parser is a well-kept library or the standard library: pypdf, BeautifulSoup (stdlib
``html.parser`` backend), ``json``, ``csv``.
"""

from __future__ import annotations

import csv
import io
import json
from typing import Any

from nodes._shared.paths import get_path
from orchestrator.kernel.errors import ParameterError

FORMATS = ("auto", "text", "markdown", "html", "pdf", "json", "csv")
_BY_EXTENSION = {".txt": "text", ".md": "markdown", ".markdown": "markdown", ".html": "html",
                 ".htm": "html", ".pdf": "pdf", ".json": "json", ".csv": "csv"}
_BY_MIME = {"text/plain": "text", "text/markdown": "markdown", "text/html": "html",
            "application/xhtml+xml": "html", "application/pdf": "pdf", "application/json": "json",
            "text/csv": "csv"}
_NOISE_TAGS = ("script", "style", "noscript", "template", "nav", "header", "footer", "aside", "form")


def document(text: str, **metadata: Any) -> dict[str, Any]:
    return {"text": text, "metadata": {k: v for k, v in metadata.items() if v is not None}}


def detect_format(fmt: str, *, mime: str = "", name: str = "") -> str:
    """The parser for ``fmt`` ("auto": by MIME type, then extension, else text)."""
    if fmt != "auto":
        if fmt not in FORMATS:
            raise ParameterError(f"parameter 'format' must be one of {', '.join(FORMATS)}; got {fmt!r}",
                                 parameter="format")
        return fmt
    base = mime.split(";")[0].strip().lower()
    if base in _BY_MIME:
        return _BY_MIME[base]
    lowered = name.lower().split("?")[0]
    for ext, found in _BY_EXTENSION.items():
        if lowered.endswith(ext):
            return found
    return "text"


def _decode(data: bytes) -> str:
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        return data.decode("latin-1")


def _markdown_title(text: str) -> str | None:
    r"""The first level-1 heading's text (``# Title`` or ``# Title #``). Read line by line:
    the former pattern ``^#\s+(.+?)\s*#*\s*$`` backtracked in cubic time on a heading
    followed by many spaces (2,000 took 15 s), and documents come from anywhere."""
    for line in text.splitlines():
        if line.startswith("#") and line[1:2].isspace():
            title = line[1:].strip().rstrip("#").rstrip()
            if title:
                return title
    return None


def _html(data: bytes, source: str) -> list[dict[str, Any]]:
    from bs4 import BeautifulSoup

    soup = BeautifulSoup(_decode(data), "html.parser")
    title = soup.title.get_text(strip=True) if soup.title else None
    for tag in soup(list(_NOISE_TAGS)):
        tag.decompose()
    main = soup.find("main") or soup.find("article") or soup.body or soup
    lines = [line.strip() for line in main.get_text("\n").splitlines()]
    text = "\n".join(line for line in lines if line)
    return [document(text, source=source, title=title, format="html")]


def _pdf(data: bytes, source: str) -> list[dict[str, Any]]:
    from pypdf import PdfReader
    from pypdf.errors import PdfReadError

    try:
        reader = PdfReader(io.BytesIO(data))
        title = reader.metadata.title if reader.metadata else None
        pages = [page.extract_text() or "" for page in reader.pages]
    except (PdfReadError, ValueError, KeyError) as exc:
        raise ParameterError(f"{source}: not a readable PDF ({exc})", parameter="source") from None
    return [document(text, source=source, title=title, page=i + 1, format="pdf")
            for i, text in enumerate(pages) if text.strip()]


def _json(data: bytes, source: str, text_field: str) -> list[dict[str, Any]]:
    try:
        value = json.loads(_decode(data))
    except ValueError as exc:
        raise ParameterError(f"{source}: not valid JSON ({exc})", parameter="source") from None
    items = value if isinstance(value, list) else [value]
    docs = []
    for i, item in enumerate(items):
        if text_field and isinstance(item, dict) and isinstance(item.get(text_field), str):
            meta = {k: v for k, v in item.items() if k != text_field and isinstance(v, str | int | float | bool)}
            docs.append(document(item[text_field], source=source, row=i, format="json", **meta))
        else:
            text = item if isinstance(item, str) else json.dumps(item, ensure_ascii=False)
            docs.append(document(text, source=source, row=i, format="json"))
    return docs


def _csv(data: bytes, source: str, text_field: str) -> list[dict[str, Any]]:
    rows = csv.DictReader(io.StringIO(_decode(data)))
    docs = []
    for i, row in enumerate(rows):
        if text_field and text_field in row:
            meta = {k: v for k, v in row.items() if k != text_field and k}
            docs.append(document(row[text_field] or "", source=source, row=i, format="csv", **meta))
        else:
            docs.append(document("\n".join(f"{k}: {v}" for k, v in row.items() if k), source=source,
                                 row=i, format="csv"))
    return docs


def parse(data: bytes, fmt: str, *, source: str, mime: str = "", text_field: str = "") -> list[dict[str, Any]]:
    """Documents from ``data`` (see the module docstring)."""
    kind = detect_format(fmt, mime=mime, name=source)
    if kind == "pdf":
        return _pdf(data, source)
    if kind == "html":
        return _html(data, source)
    if kind == "json":
        return _json(data, source, text_field)
    if kind == "csv":
        return _csv(data, source, text_field)
    text = _decode(data)
    title = _markdown_title(text) if kind == "markdown" else None
    return [document(text, source=source, title=title, format=kind)]


def documents_in(value: Any, field: str) -> list[dict[str, Any]]:
    """Documents from an input: a list of documents or strings, ``{documents}``, ``{text}`` or a string."""
    found = get_path(value, field) if field else value
    if field and found is None:
        raise ParameterError(f"parameter 'field': nothing at {field!r} in the input", parameter="field")
    if isinstance(found, dict) and not field:
        found = found.get("documents", found.get("text", found))
    items = found if isinstance(found, list) else [found]
    docs = []
    for i, item in enumerate(items):
        if isinstance(item, str):
            docs.append(document(item))
        elif isinstance(item, dict) and isinstance(item.get("text"), str):
            docs.append({"text": item["text"], "metadata": dict(item.get("metadata") or {})})
        else:
            raise ParameterError(f"input item {i} is not a document ({{text, metadata}}) or a string; set "
                                 "parameter 'field' to where the documents are", parameter="field")
    return docs
