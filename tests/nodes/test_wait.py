"""The Wait node's executor: what it suspends with, and what each answer outputs."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from orchestrator.kernel.errors import ParameterError, SuspendRequested
from tests.nodes.node_harness import run_node, values

FORM = {"type": "object", "properties": {"amount": {"type": "number"}}, "required": ["amount"]}


async def suspended(data: dict[str, Any]) -> dict[str, Any]:
    with pytest.raises(SuspendRequested) as paused:
        await run_node("wait", data, {"input": {"order": 1}})
    json.dumps(paused.value.payload)  # the store keeps it as JSON
    return paused.value.payload


async def test_a_form_wait_suspends_with_its_schema_and_message() -> None:
    payload = await suspended({"resume_on": "form", "form_schema": FORM, "message": "How much?"})
    assert payload == {"wait": {"kind": "form", "message": "How much?", "schema": FORM}}


async def test_a_timeout_asks_for_a_timer_that_answers_timeout() -> None:
    payload = await suspended({"resume_on": "url", "timeout_s": 30})
    assert payload["wait"] == {"kind": "url", "message": "", "timeout_s": 30.0}
    assert payload["wake"] == {"after_s": 30.0, "input": {"via": "timeout"}}


async def test_a_deadline_asks_for_a_timer_at_that_moment() -> None:
    payload = await suspended({"resume_on": "form", "deadline": "2030-01-02T03:04:05+00:00"})
    assert payload["wait"]["deadline"] == "2030-01-02T03:04:05+00:00"
    expected = datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC).timestamp()
    assert payload["wake"] == {"at": expected, "input": {"via": "timeout"}}


async def test_a_time_wait_asks_for_a_timer_by_duration_or_by_datetime() -> None:
    by_duration = await suspended({"resume_on": "time", "duration_s": 5})
    assert by_duration["wake"] == {"after_s": 5.0, "input": {"via": "time"}}
    by_date = await suspended({"resume_on": "time", "until": "2030-01-02T03:04:05+01:00"})
    expected = datetime(2030, 1, 2, 2, 4, 5, tzinfo=UTC).timestamp()
    assert by_date["wake"] == {"at": expected, "input": {"via": "time"}}


async def test_a_zero_duration_passes_the_input_straight_through() -> None:
    result = await run_node("wait", {"resume_on": "time", "duration_s": 0}, {"input": {"order": 1}})
    assert values(result) == {"output": {"order": 1}}


@pytest.mark.parametrize(("answer", "expected"), [
    ({"via": "form", "data": {"amount": 3}}, {"output": {"amount": 3}}),
    ({"via": "url", "data": {"paid": True}}, {"output": {"paid": True}}),
    ({"via": "time", "at": 1.0}, {"output": {"order": 1}}),
    ({"via": "timeout", "at": 1.0}, {"timeout": {"order": 1}}),
])
async def test_each_answer_goes_out_on_its_port(answer: dict[str, Any], expected: dict[str, Any]) -> None:
    payload = {"wait": {"kind": "form", "message": "", "schema": FORM}}
    result = await run_node("wait", {"resume_on": "form", "form_schema": FORM}, {"input": {"order": 1}},
                            resume={"payload": payload, "input": answer})
    assert values(result) == expected


async def test_resumed_form_data_is_checked_against_the_schema_again() -> None:
    payload = {"wait": {"kind": "form", "message": "", "schema": FORM}}
    with pytest.raises(ParameterError, match="does not match form_schema"):
        await run_node("wait", {"resume_on": "form", "form_schema": FORM}, {},
                       resume={"payload": payload, "input": {"via": "form", "data": {"amount": "x"}}})


@pytest.mark.parametrize(("data", "parameter", "words"), [
    ({"resume_on": "sms"}, "resume_on", "one of form, url, time"),
    ({"resume_on": "time"}, "duration_s", "exactly one of duration_s and until"),
    ({"resume_on": "time", "duration_s": 1, "until": "2030-01-01T00:00:00+00:00"}, "duration_s", "exactly one"),
    ({"resume_on": "time", "duration_s": -1}, "duration_s", "0 or more"),
    ({"resume_on": "time", "until": "2030-01-01T00:00:00"}, "until", "UTC offset"),
    ({"resume_on": "time", "until": "next tuesday"}, "until", "ISO 8601"),
    ({"resume_on": "form", "form_schema": {"type": "array"}}, "form_schema", "of an object"),
    ({"resume_on": "form", "form_schema": {"type": "object", "properties": {
        "code": {"type": "string", "pattern": "^(a+)+$"}}}}, "form_schema", "pattern"),
    ({"resume_on": "form", "form_schema": {"type": "object", "properties": {"n": {"type": 5}}}},
     "form_schema", "not a valid JSON Schema"),
    ({"resume_on": "url", "timeout_s": "soon"}, "timeout_s", "number of seconds"),
    ({"resume_on": "url", "timeout_s": 5, "deadline": "2030-01-01T00:00:00+00:00"}, "deadline", "not both"),
    ({"resume_on": "form", "deadline": "2030-01-01"}, "deadline", "UTC offset"),
])
async def test_bad_parameters_are_errors_naming_the_parameter(data: dict[str, Any], parameter: str,
                                                              words: str) -> None:
    with pytest.raises(ParameterError, match=words) as err:
        await run_node("wait", data, {})
    assert err.value.parameter == parameter
