"""JSON text of values, from an encoder built once; values of JSON text, from the decoder's
scanner called directly.

``json.JSONEncoder.encode`` builds its C encoder anew on every call (about 1 µs, as long
as encoding a small object takes), and a node step encodes several values (its events,
its outputs, the store's script arguments): :func:`json_encoder` builds it once.

The compact encoder (the store's texts: script arguments, stored outputs and events) is
orjson's, a well-kept C encoder made for this: 10-17x faster than the standard library's
on a node step's small objects (an event took ~5 µs; a chain node's step encodes seven,
~12 % of its instructions; bench/README.md, issue 22). Its text differs from
``json.dumps``'s in what JSON leaves open: characters past ASCII are written as UTF-8, not
escape sequences (so a text's length in bytes is :func:`utf8_len`, not ``len``), a
float's exponent has no leading zero (``1.5e-7``), and NaN and the infinities, which JSON
has no number for, are ``null``. What orjson refuses, the standard encoder writes as it did: an
integer past 64 bits, nesting past orjson's 254 levels (the standard encoder fails there
with ``RecursionError`` at the interpreter's limit, as before). The spaced encoder
(previews, output sizes) is the standard one: the text users read in events keeps its
``", "`` and ``": "``, which orjson does not write.

Without the circular check, a value that contains itself fails with ``RecursionError``
instead of ``ValueError`` (the values encoded here are plain data, and a node's outputs
are held to a nesting depth before they are encoded).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from json import encoder as _encoder
from json import scanner as _scanner
from typing import Any

import orjson

# datetimes and dataclasses go to ``default`` as they do with the standard encoder (orjson
# would write them its own way); dict keys that are not strings are written as it does.
_ORJSON_OPTIONS = orjson.OPT_NON_STR_KEYS | orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS


def json_encoder(*, default: Callable[[Any], Any] | None = None, compact: bool = False) -> Callable[[Any], str]:
    """A function from a value to its JSON text (keys in their order): ``compact``, orjson's
    text without spaces (see the module docstring); else the standard encoder's with ``", "``
    and ``": "`` (ASCII only, NaN as ``NaN``). ``default`` turns what JSON cannot carry into
    what it can (without it such a value raises ``TypeError``)."""
    separators = (",", ":") if compact else (", ", ": ")
    fallback = json.JSONEncoder(separators=separators, default=default, check_circular=False)
    standard: Callable[[Any], str] = fallback.encode
    make = getattr(_encoder, "c_make_encoder", None)
    if make is not None:  # the C accelerator, built once (else the standard path)
        chunks = make(None, fallback.default, _encoder.encode_basestring_ascii, None, separators[1], separators[0],
                      False, False, True)

        def standard(value: Any) -> str:
            return "".join(chunks(value, 0))

    if not compact:
        return standard
    dumps, refused = orjson.dumps, orjson.JSONEncodeError

    def encode(value: Any) -> str:
        try:
            return dumps(value, default, _ORJSON_OPTIONS).decode()
        except refused:  # past 64-bit integers or 254 levels, or what nothing here writes: as before
            return standard(value)

    return encode


def utf8_len(text: str) -> int:
    """The length in bytes of ``text`` written as UTF-8 (what Redis stores and budgets count):
    ``len(text)`` for ASCII text, known without a scan."""
    return len(text) if text.isascii() else len(text.encode())


_SCAN: Any = _scanner.make_scanner(json.JSONDecoder())  # type: ignore[arg-type]  # the C scanner, as json.loads uses


def json_value(text: str | bytes) -> Any:
    """``json.loads(text)``, the same value or error, without its Python layers (a whitespace
    match on each side and two calls: about as long as decoding a small object itself) for
    text that is one JSON value with nothing around it, as the store's texts are; any other
    text goes through ``json.loads``."""
    try:
        value, end = _SCAN(text, 0)
    except (StopIteration, TypeError, ValueError):  # whitespace first, bytes, or not JSON: json.loads says
        return json.loads(text)
    if end != len(text):  # whitespace after it, or more (an error): json.loads says
        return json.loads(text)
    return value


__all__ = ["json_encoder", "json_value", "utf8_len"]
