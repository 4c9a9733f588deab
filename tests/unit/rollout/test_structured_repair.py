"""Strict parsing, near-JSON repair and recorded failures of role outputs."""

from __future__ import annotations

import pytest

from streamgrpo.avro.records import ParseStatus
from streamgrpo.rollout.roles.types import NextStep, QueryAnalysis, ToolCommand, Verification
from streamgrpo.rollout.structured import extract_object, parse_into

STRICT = ParseStatus.STRICT
REPAIRED = ParseStatus.REPAIRED


@pytest.mark.parametrize(
    "text, expected, status",
    [
        ('{"tool": "calculator", "input": "12**2"}', {"tool": "calculator", "input": "12**2"}, STRICT),
        ('  {"answer": "144"}\n', {"answer": "144"}, STRICT),
        ('```json\n{"answer": "144"}\n```', {"answer": "144"}, REPAIRED),
        ('```\n{"answer": "144"}```', {"answer": "144"}, REPAIRED),
        ("{'tool': 'calculator', 'input': '12**2'}", {"tool": "calculator", "input": "12**2"}, REPAIRED),
        ('{"tool": "calculator", "input": "12**2",}', {"tool": "calculator", "input": "12**2"}, REPAIRED),
        ('{"a": [1, 2,], "b": 3,}', {"a": [1, 2], "b": 3}, REPAIRED),
        ('{tool: "calculator", input: "12**2"}', {"tool": "calculator", "input": "12**2"}, REPAIRED),
        ('Sure! Here it is: {"answer": "144"} Hope that helps.', {"answer": "144"}, REPAIRED),
        ('{"tool": "calculator", "input": "12**2"', {"tool": "calculator", "input": "12**2"}, REPAIRED),
        ('{"tool": "calculator", "input": "12**2', {"tool": "calculator", "input": "12**2"}, REPAIRED),
        ('{"tool": "knowledge_search", "input": {"query": "1944"', {"tool": "knowledge_search",
                                                                    "input": {"query": "1944"}}, REPAIRED),
        ('{"stop": True, "reason": None}', {"stop": True, "reason": None}, REPAIRED),
        ("{'a': 'say \"hi\"'}", {"a": 'say "hi"'}, REPAIRED),
        ('{"answer": "x {y} z"} trailing }', {"answer": "x {y} z"}, REPAIRED),
        ('{"answer": "a \\"quoted\\" word"}', {"answer": 'a "quoted" word'}, STRICT),
        ('{"tool": "calculator", "input": "12**2"} {"answer": "144"}', {"tool": "calculator", "input": "12**2"},
         REPAIRED),
        ("{'answer': \"it's 144\"}", {"answer": "it's 144"}, REPAIRED),
        ('{"tool": "calculator", "input": "12**2", ', {"tool": "calculator", "input": "12**2"}, REPAIRED),
    ],
)
def test_strict_and_repaired(text, expected, status):
    obj, got_status, error = extract_object(text)
    assert obj == expected
    assert got_status is status
    assert error is None


@pytest.mark.parametrize("text", ["", "no json at all", "[1, 2, 3]", '"just a string"', "{{{{", "{: :}", "null"])
def test_failures_are_recorded_not_raised(text):
    obj, status, error = extract_object(text)
    assert obj is None and status is ParseStatus.FAILED and error


def test_parse_into_validates_fields():
    ok = parse_into('{"tool": "Calculator", "input": 144}', NextStep)
    assert ok.value == NextStep(tool="calculator", input="144") and ok.status is STRICT
    answer = parse_into('{"answer": 144}', NextStep)
    assert answer.value is not None and answer.value.is_final and answer.value.answer == "144"
    alias = parse_into('{"tool": "calculator", "expression": "1+1"}', NextStep)
    assert alias.value == NextStep(tool="calculator", input="1+1")
    bad = parse_into('{"thought": "hmm"}', NextStep)
    assert bad.value is None and bad.status is ParseStatus.FAILED and "expected" in (bad.error or "")
    no_input = parse_into('{"tool": "calculator"}', NextStep)
    assert no_input.status is ParseStatus.FAILED and "without an input" in (no_input.error or "")


def test_other_role_models():
    assert parse_into('{"input": "2+2"}', ToolCommand).value == ToolCommand("2+2")
    v = parse_into("{'stop': 'yes', 'reason': 'enough'}", Verification)
    assert v.value == Verification(True, "enough") and v.status is REPAIRED
    assert parse_into('{"stop": "maybe"}', Verification).status is ParseStatus.FAILED
    a = parse_into('{"skills": "math", "tools": ["Calculator"]}', QueryAnalysis)
    assert a.value is not None and a.value.skills == ("math",) and a.value.tools == ("calculator",)


@pytest.mark.parametrize("text", ["{" * 100_000, "[" * 5000 + "{", '{"a": "' + "x" * 1_000_000, "{'a': " * 5000])
def test_hostile_outputs_fail_fast_with_a_reason(text):
    # json_repair is quadratic on these; the bounds refuse them before it runs (pytest-timeout guards a hang)
    obj, status, error = extract_object(text)
    assert obj is None and status is ParseStatus.FAILED and "too long or too nested" in (error or "")


def test_truncated_long_answer_is_still_repaired():
    text = '{"answer": "' + "word " * 2000  # ~10k chars: under the bound, cut off by max_new_tokens
    obj, status, _ = extract_object(text)
    assert status is REPAIRED and obj == {"answer": ("word " * 2000).rstrip()}
