"""LLM Completion, Structured Output and Classifier with the dry-run model."""

from __future__ import annotations

import json
import time

import jsonschema
import pytest

from nodes._shared.json_schemas import bounded_validator, check_patterns
from nodes._shared.patterns import PatternClock, PatternTimeout
from orchestrator.kernel.protocol import NodeEvent
from tests.agents.conftest import data_in, drain, load_executor, make_ctx

llm = load_executor("ai/llm_completion")
structured = load_executor("ai/structured_output")
classifier = load_executor("ai/classifier")
selector = load_executor("ai/model_selector")

SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}


async def test_llm_completion_streams_tokens_as_progress_and_returns_the_text() -> None:
    events, result = await drain(llm.execute(
        {"model": "dryrun:x", "prompt": "hi", "script": [{"say": "one two three"}]},
        data_in({}), make_ctx(node_type="llm_completion")))
    tokens = [e.data["token"] for e in events if e.event_type == "progress"]
    assert "".join(tokens) == "one two three" and len(tokens) == 3
    out = result.outputs["output"].value
    assert out["text"] == "one two three" and out["usage"]["total_tokens"] > 0


async def test_structured_output_retries_with_the_error_then_succeeds() -> None:
    script = [{"say": "not json"}, {"say": '{"city": "Paris"}'}]
    events, result = await drain(structured.execute(
        {"model": "dryrun:x", "prompt": "where?", "schema": SCHEMA, "max_attempts": 2,
         "script": script}, data_in({}), make_ctx(node_type="structured_output")))
    assert result.outputs["output"].value == {"data": {"city": "Paris"}}
    retries = [e.data for e in events if e.event_type == "progress" and "invalid" in e.data]
    assert len(retries) == 1 and "not JSON" in retries[0]["invalid"]


async def test_structured_output_feeds_the_violation_back_then_fails_naming_it() -> None:
    script = [{"say": '{"town": "Paris"}'}, {"say": "{input}"}]
    tokens: list[str] = []
    with pytest.raises(ValueError, match="after 2 attempts: the answer is not JSON"):
        async for item in structured.execute(
                {"model": "dryrun:x", "prompt": "where?", "schema": SCHEMA, "max_attempts": 2,
                 "script": script}, data_in({}), make_ctx(node_type="structured_output")):
            if isinstance(item, NodeEvent) and "token" in (item.data or {}):
                tokens.append(item.data["token"])
    # the second attempt's prompt (echoed by the script) carried the first violation
    assert "'city' is a required property" in "".join(tokens)


async def test_structured_output_rejects_an_invalid_schema() -> None:
    with pytest.raises(Exception, match="not a valid JSON Schema"):
        await drain(structured.execute(
            {"model": "dryrun:x", "prompt": "x", "schema": {"type": 12}},
            data_in({}), make_ctx(node_type="structured_output")))


@pytest.mark.parametrize(("answer", "port"), [
    ("technical", "label_1"), ("Billing.", "label_0"), ("I think it is technical", "label_1"),
    ("no idea", "unmatched"),
])
async def test_classifier_routes_the_input_to_exactly_one_port(answer: str, port: str) -> None:
    _, result = await drain(classifier.execute(
        {"model": "dryrun:x", "text": "my app crashes", "labels": ["billing", "technical"],
         "script": [{"say": answer}]},
        data_in({"message": "my app crashes", "id": 7}), make_ctx(node_type="classifier")))
    assert list(result.outputs) == [port]
    routed = result.outputs[port].value
    assert routed["id"] == 7
    assert routed["label"] == (None if port == "unmatched" else
                               ["billing", "technical"][int(port[-1])])


async def test_classifier_rejects_more_than_eight_labels() -> None:
    with pytest.raises(Exception, match="1 to 8"):
        await drain(classifier.execute(
            {"model": "dryrun:x", "labels": [f"l{i}" for i in range(9)]},
            data_in({}), make_ctx(node_type="classifier")))


async def test_model_selector_materializes_its_spec_string() -> None:
    spec = await selector.materialize({"model": "openai-chat:gpt-4o-mini"}, "model",
                                      make_ctx(node_type="model_selector"))
    assert spec == "openai-chat:gpt-4o-mini"


async def test_structured_output_never_fetches_a_remote_ref_and_names_the_parameter() -> None:
    """jsonschema's default resolver would GET the URL with urllib, outside the egress policy."""
    from orchestrator.kernel.errors import ParameterError
    from tests.nodes.local_http import LocalHttp

    with LocalHttp() as server:
        for ref in (f"{server.url}/latest/meta-data/#/path", f"{server.url}/items", "other.json#/x"):
            schema = {"properties": {"a": {"$ref": ref}}}
            with pytest.raises(ParameterError, match="does not resolve inside the schema") as caught:
                await drain(structured.execute(
                    {"model": "dryrun:x", "prompt": "x", "schema": schema, "script": [{"say": '{"a": 1}'}]},
                    data_in({}), make_ctx(node_type="structured_output")))
            assert caught.value.parameter == "schema"
        assert server.requests == []


async def test_structured_output_resolves_local_refs() -> None:
    schema = {"$defs": {"city": {"type": "string", "minLength": 2}},
              "type": "object", "properties": {"city": {"$ref": "#/$defs/city"}}, "required": ["city"]}
    script = [{"say": '{"city": "P"}'}, {"say": '{"city": "Paris"}'}]
    events, result = await drain(structured.execute(
        {"model": "dryrun:x", "prompt": "where?", "schema": schema, "max_attempts": 2, "script": script},
        data_in({}), make_ctx(node_type="structured_output")))
    assert result.outputs["output"].value == {"data": {"city": "Paris"}}
    assert any("too short" in str(e.data.get("invalid")) for e in events if e.event_type == "progress")


# -- a schema's patterns match within the node execution's budget ----------------------


async def test_structured_output_stops_a_backtracking_schema_pattern_naming_the_setting() -> None:
    schema = {"type": "object", "properties": {"code": {"type": "string", "pattern": "^(a|aa)+$"}}}
    # unguarded, matching this takes ~fib(60) steps (days); the pattern clock stops it in
    # about ORCH_PATTERN_TIMEOUT_S (the bound below leaves room for a loaded host's first
    # import of the model library, which happens inside the step)
    script = [{"say": json.dumps({"code": "a" * 60 + "!"})}]
    began = time.monotonic()
    with pytest.raises(PatternTimeout, match=r"schema pattern '\^\(a\|aa\)\+\$'.*ORCH_PATTERN_TIMEOUT_S"):
        await drain(structured.execute(
            {"model": "dryrun:x", "prompt": "x", "schema": schema, "max_attempts": 1, "script": script},
            data_in({}), make_ctx(node_type="structured_output")))
    assert time.monotonic() - began < 60


@pytest.mark.parametrize(("answer", "problem"), [
    ({"code": "AB-12", "extra_1": 1}, None),
    ({"code": "ab-12"}, "'ab-12' does not match"),
    ({"code": "AB-12", "other": 1}, "'other' does not match any of the regexes"),
    ({"code": "AB-12", "extra_x": "x"}, "'x' is not of type 'integer'"),
])
def test_schema_patterns_keep_their_meaning(answer: dict[str, object], problem: str | None) -> None:
    schema = {"type": "object", "properties": {"code": {"type": "string", "pattern": "^[A-Z]{2}-\\d+$"}},
              "patternProperties": {"^extra_": {"type": "integer"}}, "additionalProperties": False}
    errors = [e.message for e in bounded_validator(schema, PatternClock()).iter_errors(answer)]
    assert errors == [] if problem is None else any(problem in e for e in errors), errors
    assert errors == [e.message for e in jsonschema.Draft202012Validator(schema).iter_errors(answer)]


def test_a_schema_combining_unevaluated_and_pattern_properties_is_refused() -> None:
    schema = {"patternProperties": {"^a": {}}, "unevaluatedProperties": False}
    with pytest.raises(ValueError, match="unevaluatedProperties with patternProperties"):
        check_patterns(schema)
    check_patterns({"patternProperties": {"^a": {}}, "additionalProperties": False})
