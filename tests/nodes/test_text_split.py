"""Text Split splits text into chunks and joins lists into text."""

from __future__ import annotations

import itertools

import pytest

from tests.nodes.node_harness import run_node, values

TEXT = "alpha,beta,,gamma"


async def test_text_split_splits_on_the_separator_dropping_empty_pieces() -> None:
    out = values(await run_node("text_split", {"mode": "separator", "separator": ","},
                                {"input": TEXT}))["output"]
    assert out == {"chunks": [p for p in TEXT.split(",") if p], "count": 3}


async def test_text_split_splits_lines_of_a_field_skipping_blank_lines() -> None:
    doc = {"body": {"text": "one\n\ntwo\r\nthree\n"}}
    out = values(await run_node("text_split", {"mode": "lines", "field": "body.text"},
                                {"input": doc}))["output"]
    assert out["chunks"] == ["one", "two", "three"]


async def test_text_split_chunks_overlap_and_cover_the_whole_text() -> None:
    text = "".join(chr(ord("a") + i % 26) for i in range(53))
    size, overlap = 10, 3
    data = {"mode": "chunk", "chunk_size": size, "chunk_overlap": overlap}
    out = values(await run_node("text_split", data, {"input": {"text": text}}))
    chunks = out["output"]["chunks"]
    assert all(len(c) <= size for c in chunks)
    assert all(a[-overlap:] == b[:overlap] for a, b in itertools.pairwise(chunks))
    rebuilt = chunks[0] + "".join(c[overlap:] for c in chunks[1:])
    assert rebuilt == text and out["output"]["count"] == len(chunks)


async def test_text_split_joins_a_list_with_the_separator() -> None:
    parts = ["a", "b", {"c": 1}]
    out = values(await run_node("text_split", {"mode": "join", "separator": " | "},
                                {"input": parts}))["output"]
    assert out == {"text": 'a | b | {"c": 1}'}


async def test_text_split_rejects_an_overlap_as_large_as_the_chunk() -> None:
    with pytest.raises(ValueError, match="'chunk_overlap'"):
        await run_node("text_split", {"mode": "chunk", "chunk_size": 4, "chunk_overlap": 4},
                       {"input": "abcdefgh"})


async def test_text_split_asks_for_a_field_when_the_input_has_no_text() -> None:
    with pytest.raises(ValueError, match="'field'"):
        await run_node("text_split", {}, {"input": {"body": "x"}})
