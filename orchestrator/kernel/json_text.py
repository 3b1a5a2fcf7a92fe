"""JSON text of values, from an encoder built once; values of JSON text, from the decoder's
scanner called directly.

``json.JSONEncoder.encode`` builds its C encoder anew on every call (about 1 µs, as long
as encoding a small object takes), and a node step encodes several values (its events,
its outputs, the store's script arguments): :func:`json_encoder` builds it once. The text
is the one ``json.JSONEncoder(separators=..., default=..., check_circular=False).encode``
gives; without the circular check, a value that contains itself fails with
``RecursionError`` instead of ``ValueError`` (the values encoded here are plain data, and
a node's outputs are held to a nesting depth before they are encoded).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from json import encoder as _encoder
from json import scanner as _scanner
from typing import Any


def json_encoder(*, default: Callable[[Any], Any] | None = None, compact: bool = False) -> Callable[[Any], str]:
    """A function from a value to its JSON text (ASCII only, NaN allowed, keys in their
    order): ``compact`` without spaces after ``,`` and ``:``; ``default`` turns what JSON
    cannot carry into what it can (without it such a value raises ``TypeError``)."""
    separators = (",", ":") if compact else (", ", ": ")
    fallback = json.JSONEncoder(separators=separators, default=default, check_circular=False)
    make = getattr(_encoder, "c_make_encoder", None)
    if make is None:  # no C accelerator (another Python): the standard path
        return fallback.encode
    chunks = make(None, fallback.default, _encoder.encode_basestring_ascii, None, separators[1], separators[0],
                  False, False, True)

    def encode(value: Any) -> str:
        return "".join(chunks(value, 0))

    return encode


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


__all__ = ["json_encoder", "json_value"]
