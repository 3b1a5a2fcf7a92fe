"""Recursive text splitting by separators, with size and overlap, by characters or tokens.

Contract: :func:`split_text` returns :class:`Span` s whose ``text`` is exactly
``source[start:end]``, in order, each at most ``size`` long (measured by ``length``)
unless one indivisible piece (a single token) is longer. Consecutive spans share up to
``overlap`` of length. Separators are tried in order: the first that occurs splits the
text, and pieces still too long are split again with the next separators ("" means
single characters), the way LangChain's ``RecursiveCharacterTextSplitter`` does.

Token length counts word and punctuation tokens with a regular expression
(:data:`TOKEN`): a tokenizer file would have to be downloaded at run time, which this
product never does, and a word/punctuation count is within a few percent of BPE counts
for English prose; ``tokens`` is an estimate and documented as one.

Why hand-written: LangChain's splitter would bring langchain-core and its dependencies
for ~100 lines, and it reports no end positions.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

TOKEN = re.compile(r"\w+|[^\w\s]")
DEFAULT_SEPARATORS = ("\n\n", "\n", ". ", " ", "")

Length = Callable[[str], int]


def char_length(text: str) -> int:
    return len(text)


def token_length(text: str) -> int:
    """Word and punctuation tokens in ``text`` (an offline estimate of model tokens)."""
    return len(TOKEN.findall(text))


@dataclass(frozen=True)
class Span:
    start: int
    end: int
    text: str


def _pieces(text: str, start: int, separator: str) -> list[Span]:
    """``text`` (at offset ``start``) cut after each ``separator`` (kept on the left piece)."""
    if separator == "":
        return [Span(start + i, start + i + 1, ch) for i, ch in enumerate(text)]
    out: list[Span] = []
    pos = 0
    while pos < len(text):
        found = text.find(separator, pos)
        end = len(text) if found < 0 else found + len(separator)
        out.append(Span(start + pos, start + end, text[pos:end]))
        pos = end
    return out


def _atoms(text: str, start: int, size: int, length: Length, separators: tuple[str, ...]) -> list[Span]:
    """Pieces no longer than ``size`` (recursing through the separators)."""
    if length(text) <= size or not separators:
        return [Span(start, start + len(text), text)]
    separator, rest = separators[0], separators[1:]
    if separator and separator not in text:
        return _atoms(text, start, size, length, rest)
    out: list[Span] = []
    for piece in _pieces(text, start, separator):
        if length(piece.text) <= size:
            out.append(piece)
        else:
            out.extend(_atoms(piece.text, piece.start, size, length, rest))
    return out


def split_text(source: str, *, size: int, overlap: int, length: Length = char_length,
               separators: tuple[str, ...] = DEFAULT_SEPARATORS) -> list[Span]:
    """Spans of ``source`` (see the module contract). ``0 <= overlap < size``."""
    if size < 1:
        raise ValueError(f"parameter 'chunk_size' must be at least 1; got {size}")
    if not 0 <= overlap < size:
        raise ValueError(f"parameter 'chunk_overlap' must be >= 0 and below chunk_size ({size}); got {overlap}")
    atoms = _atoms(source, 0, size, length, separators)
    spans: list[Span] = []
    window: list[Span] = []
    for atom in atoms:
        while window and length(source[window[0].start:atom.end]) > size:
            if not spans or spans[-1].end < window[-1].end:
                spans.append(_span(source, window))
            # Drop from the left until what remains fits the overlap and leaves room.
            window.pop(0)
            while window and (length(source[window[0].start:window[-1].end]) > overlap
                              or length(source[window[0].start:atom.end]) > size):
                window.pop(0)
        window.append(atom)
    if window and (not spans or spans[-1].end < window[-1].end):
        spans.append(_span(source, window))
    return [s for s in spans if s.text.strip()]


def _span(source: str, window: list[Span]) -> Span:
    start, end = window[0].start, window[-1].end
    return Span(start, end, source[start:end])
