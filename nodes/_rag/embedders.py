"""Embedders: text -> vectors, online (any OpenAI-compatible ``/embeddings``) or offline.

A model spec is ``"<provider>:<model>"``:

``openai:<model>``  POST ``{base_url}/embeddings`` in batches (OpenAI, Ollama's and vLLM's
                    OpenAI-compatible servers). Base URL and key: ``orchestrator/host/endpoint.py``
                    (a credential's, or the operator's endpoints and key).
``dryrun:<name>``   :class:`HashEmbedder`, offline and deterministic (alias ``dry-run``).

With ``ORCH_OFFLINE_MODELS=1`` every spec resolves to the dry-run embedder, as models do.

The dry-run embedder hashes words into ``dimensions`` buckets (feature hashing): each
lower-cased word (``\\w+``) adds ``1 + log(count)`` to the bucket ``blake2b(word) mod
dimensions`` with the sign of one more hash bit, and the vector is L2-normalised. The same
text always gives the same vector on every machine, and texts sharing words have a high
cosine similarity, so offline retrieval finds the chunk that shares the question's words.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from nodes._ai.models import offline
from orchestrator.kernel.errors import NodeExecutionError, ParameterError

if TYPE_CHECKING:
    import httpx

_WORD = re.compile(r"\w+", re.UNICODE)
DEFAULT_DIMENSIONS = 256
DRYRUN_PROVIDERS = frozenset({"dryrun", "dry-run"})


class Embedder(Protocol):
    name: str

    async def embed(self, texts: list[str]) -> list[list[float]]: ...


@dataclass
class HashEmbedder:
    """The dry-run embedder (see the module docstring). Its usage, deterministic: one
    input token per word (``\\w+``) embedded."""

    name: str = "dryrun:hash"
    dimensions: int = DEFAULT_DIMENSIONS

    def vector(self, text: str) -> list[float]:
        counts = Counter(w.lower() for w in _WORD.findall(text))
        vec = [0.0] * self.dimensions
        for word, count in counts.items():
            digest = hashlib.blake2b(word.encode(), digest_size=8).digest()
            bucket = int.from_bytes(digest[:7], "big") % self.dimensions
            sign = 1.0 if digest[7] & 1 else -1.0
            vec[bucket] += sign * (1.0 + math.log(count))
        norm = math.sqrt(sum(v * v for v in vec))
        return [v / norm for v in vec] if norm else vec

    async def embed(self, texts: list[str]) -> list[list[float]]:
        return [self.vector(t) for t in texts]


@dataclass
class OpenAIEmbedder:
    """``POST {base_url}/embeddings`` with ``{"model", "input": [...]}`` per batch."""

    name: str
    model: str
    base_url: str
    api_key: str
    client: httpx.AsyncClient
    batch_size: int = 64
    dimensions: int | None = None
    input_tokens: int = 0  # what the endpoint reported using (``usage.prompt_tokens``), summed

    async def embed(self, texts: list[str]) -> list[list[float]]:
        out: list[list[float]] = []
        for i in range(0, len(texts), self.batch_size):
            out.extend(await self._batch(texts[i:i + self.batch_size]))
        return out

    async def _batch(self, texts: list[str]) -> list[list[float]]:
        body: dict[str, Any] = {"model": self.model, "input": texts}
        if self.dimensions:
            body["dimensions"] = self.dimensions
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        url = self.base_url.rstrip("/") + "/embeddings"
        import httpx

        try:
            response = await self.client.post(url, json=body, headers=headers)
        except httpx.HTTPError as exc:
            raise NodeExecutionError(f"embeddings request to {url} failed: {type(exc).__name__}") from None
        if response.status_code >= 400:
            raise NodeExecutionError(
                f"embeddings endpoint {url} answered {response.status_code}: {response.text[:300]}")
        try:
            body = response.json()
            items = sorted(body["data"], key=lambda d: d.get("index", 0))
            vectors = [[float(x) for x in item["embedding"]] for item in items]
        except (ValueError, KeyError, TypeError) as exc:
            raise NodeExecutionError(f"embeddings endpoint {url} sent an unexpected body ({exc})") from None
        usage = body.get("usage")
        if isinstance(usage, dict) and isinstance(usage.get("prompt_tokens"), int):
            self.input_tokens += usage["prompt_tokens"]
        if len(vectors) != len(texts):
            raise NodeExecutionError(
                f"embeddings endpoint {url} returned {len(vectors)} vectors for {len(texts)} texts")
        return vectors


def word_tokens(texts: list[str]) -> int:
    """The dry-run embedder's token count of ``texts``: their words."""
    return sum(len(_WORD.findall(t)) for t in texts)


def split_spec(spec: str) -> tuple[str, str]:
    provider, sep, model = spec.partition(":")
    if not sep or not provider or not model:
        raise ParameterError(f"parameter 'model' must be 'provider:model' (e.g. openai:text-embedding-3-small, "
                             f"dryrun:hash); got {spec!r}", parameter="model")
    return provider.lower(), model


def is_offline(spec: str) -> bool:
    return offline() or split_spec(spec)[0] in DRYRUN_PROVIDERS
