"""Document Loader: a file, a URL, a path or text -> ``{"documents": [...], "count": n}``.

Sources: ``file`` reads a ``BinaryRef`` through the file store (any worker can, see
``orchestrator/store/blobs.py``); ``url`` downloads through the HTTP Request node's client
(``orchestrator/host/http.py``: the egress policy, a size limit, a credential); ``path`` reads
a file inside the shipped ``examples/`` folder or a folder in ``ORCH_LOADER_PATHS`` (never
elsewhere); ``text`` is the ``text`` parameter, or the input's text.
"""

from __future__ import annotations

from typing import Any

from nodes._rag.documents import parse
from nodes._rag.services import as_text
from nodes._shared.values import input_value, result
from orchestrator.host.files import as_binary_ref
from orchestrator.host.node_host import node_host
from orchestrator.kernel.errors import ParameterError
from orchestrator.kernel.protocol import DataValue, ExecutionResult, FlowContext


def _choose(data: dict[str, Any], value: Any) -> str:
    source = str(data.get("source") or "auto")
    if source != "auto":
        return source
    if data.get("file") is not None or (isinstance(value, dict) and as_binary_ref(value.get("file"))):
        return "file"
    for name in ("url", "path"):
        if data.get(name):
            return name
    return "text"


class DocumentLoader:
    node_type = "document_loader"

    async def execute(self, data: dict[str, Any], inputs: dict[str, DataValue], ctx: FlowContext) -> ExecutionResult:
        value = input_value(inputs)
        fmt = str(data.get("format") or "auto")
        text_field = as_text(data.get("text_field"))
        source = _choose(data, value)
        if source == "file":
            raw = data.get("file")
            if raw is None and isinstance(value, dict):
                raw = value.get("file")
            ref = as_binary_ref(raw)
            if ref is None:
                raise ParameterError("parameter 'file' must be a file reference ({\"$binary\": {\"ref\": ...}}); "
                                     f"got {type(raw).__name__}", parameter="file")
            async with node_host(ctx).blobs(ctx.run_id) as blobs:
                blob = await blobs.get(ref)
            docs = parse(blob.data, fmt, source=blob.name or ref.ref, mime=blob.mime or ref.mime,
                         text_field=text_field)
        elif source == "url":
            from orchestrator.host.http import HttpCall, fetch  # with httpx, not at node discovery

            url = as_text(data.get("url"))
            call = HttpCall(method="GET", url=url, timeout_s=float(data.get("timeout_s") or 30),
                            max_bytes=int(data.get("max_bytes") or 32 << 20),
                            credential=as_text(data.get("credential")))
            response = await fetch(ctx, call)
            docs = parse(response.content, fmt, source=url, mime=response.headers.get("content-type", ""),
                         text_field=text_field)
        elif source == "path":
            raw_path = as_text(data.get("path"))
            path = node_host(ctx).readable_path(raw_path)
            try:
                content = path.read_bytes()
            except OSError as exc:  # its message holds the resolved host path: name the graph's
                raise ParameterError(f"parameter 'path': cannot read {raw_path!r} ({exc.strerror})",
                                     parameter="path") from None
            docs = parse(content, fmt, source=path.name, text_field=text_field)
        elif source == "text":
            text = as_text(data.get("text"))
            if not text:
                text = value if isinstance(value, str) else as_text((value or {}).get("text")) \
                    if isinstance(value, dict) else ""
            if not text:
                raise ParameterError("source 'text' needs parameter 'text' or an input with text", parameter="text")
            docs = parse(text.encode(), fmt if fmt != "auto" else "text", source="inline", text_field=text_field)
        else:
            raise ParameterError(f"parameter 'source' must be auto, text, file, url or path; got {source!r}",
                                 parameter="source")
        return result({"output": {"documents": docs, "count": len(docs)}})


executor = DocumentLoader()
