"""JSON Schema validation whose regular expressions match within a time budget.

``jsonschema`` matches ``pattern``, ``patternProperties`` (and, through them,
``additionalProperties``) with Python's ``re``: a schema from a graph could freeze the
worker with one backtracking pattern. :func:`bounded_validator` is the validator the
schema asks for (its ``$schema``, default 2020-12) with those three keywords re-implemented
on :class:`~nodes._shared.patterns.PatternClock`, so every match shares one node
execution's budget and releases the GIL.

``unevaluatedProperties`` also consults ``patternProperties``, deep inside ``jsonschema``
and with ``re``; a schema using both is refused (:func:`check_patterns`) rather than
matched unbounded. ``format`` is not asserted (as before: no format checker).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import jsonschema
from jsonschema import ValidationError
from jsonschema.protocols import Validator

from nodes._shared.patterns import PatternClock

Keyword = Callable[[Any, Any, Any, dict[str, Any]], Iterator[ValidationError]]


def _keys(schema: Any) -> Iterator[str]:
    if isinstance(schema, dict):
        for key, value in schema.items():
            yield key
            yield from _keys(value)
    elif isinstance(schema, list):
        for value in schema:
            yield from _keys(value)


def check_patterns(schema: Any) -> None:
    """ValueError when ``schema`` combines ``unevaluatedProperties`` with ``patternProperties``."""
    keys = set(_keys(schema))
    if {"unevaluatedProperties", "patternProperties"} <= keys:
        raise ValueError("a schema may not combine unevaluatedProperties with patternProperties "
                         "(their patterns would be matched without a time budget); use "
                         "additionalProperties")


def _keywords(clock: PatternClock) -> dict[str, Keyword]:
    def matches(pattern: str, text: str) -> bool:
        return clock.search(pattern, text, what=f"schema pattern {pattern[:80]!r}")

    def pattern(validator: Any, patrn: str, instance: Any, schema: dict[str, Any]) -> Iterator[ValidationError]:
        if validator.is_type(instance, "string") and not matches(patrn, instance):
            yield ValidationError(f"{instance!r} does not match {patrn!r}")

    def pattern_properties(validator: Any, patterns: dict[str, Any], instance: Any,
                           schema: dict[str, Any]) -> Iterator[ValidationError]:
        if not validator.is_type(instance, "object"):
            return
        for patrn, subschema in patterns.items():
            for key, value in instance.items():
                if matches(patrn, key):
                    yield from validator.descend(value, subschema, path=key, schema_path=patrn)

    def additional_properties(validator: Any, extra: Any, instance: Any,
                              schema: dict[str, Any]) -> Iterator[ValidationError]:
        if not validator.is_type(instance, "object"):
            return
        properties = schema.get("properties", {})
        patterns = list(schema.get("patternProperties", {}))
        extras = [key for key in instance
                  if key not in properties and not any(matches(p, key) for p in patterns)]
        if validator.is_type(extra, "object"):
            for key in extras:
                yield from validator.descend(instance[key], extra, path=key)
        elif not extra and extras:
            listed = ", ".join(repr(key) for key in sorted(extras))
            if patterns:  # jsonschema's own wording
                verb = "does" if len(extras) == 1 else "do"
                yield ValidationError(f"{listed} {verb} not match any of the regexes: "
                                      f"{', '.join(repr(p) for p in sorted(patterns))}")
            else:
                were = "was" if len(extras) == 1 else "were"
                yield ValidationError(f"Additional properties are not allowed ({listed} {were} unexpected)")

    return {"pattern": pattern, "patternProperties": pattern_properties,
            "additionalProperties": additional_properties}


def bounded_validator(schema: dict[str, Any], clock: PatternClock, **options: Any) -> Validator:
    """A validator for ``schema`` whose pattern keywords match on ``clock``; ``options`` go
    to the validator class (e.g. ``registry``)."""
    check_patterns(schema)
    base = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    cls = jsonschema.validators.extend(base, validators=_keywords(clock))  # type: ignore[no-untyped-call]
    validator: Validator = cls(schema, **options)
    return validator
