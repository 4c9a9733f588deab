"""Role prompts, hashes and modes (rule/passthrough and model with a scripted TextModel), with real tools."""

from __future__ import annotations

import re

import pytest

from streamgrpo.avro.records import ParseStatus
from streamgrpo.rollout.roles import analyser, executor, planner, synthesiser, verifier
from streamgrpo.rollout.roles.types import NextStep, Observation, QueryAnalysis, TurnRecord
from streamgrpo.rollout.tools.calculator import Calculator


class ScriptedText:
    """A real TextModel (protocol) returning fixed replies in order; records the messages it saw."""

    def __init__(self, *replies: str) -> None:
        self.replies = list(replies)
        self.seen: list[list[dict[str, str]]] = []

    def complete(self, messages, *, max_tokens, temperature):
        self.seen.append(messages)
        return self.replies.pop(0)


def record(turn: int, step: NextStep | None, obs: Observation | None = None, text: str = "") -> TurnRecord:
    return TurnRecord(turn, text, ParseStatus.STRICT if step else ParseStatus.FAILED, step, None, obs)


def test_prompt_hashes_are_12_hex_and_distinct():
    hashes = [planner.PROMPT_HASH, executor.PROMPT_HASH, verifier.PROMPT_HASH, synthesiser.PROMPT_HASH,
              analyser.PROMPT_HASH]
    assert all(re.fullmatch(r"[0-9a-f]{12}", h) for h in hashes)
    assert len(set(hashes)) == len(hashes)


def test_planner_prompt_is_short_and_shows_state():
    calc = Calculator()
    lines = [planner.tool_line("calculator", calc.spec.description, executor.tool_example(calc))]
    obs = Observation("calculator", "12**2", "144")
    history = [record(1, NextStep(tool="calculator", input="12**2"), obs), record(2, None, text="blah")]
    msgs = planner.build_messages("What is 12 squared?", lines, QueryAnalysis(("arithmetic",), ("calculator",)),
                                  history)
    text = "\n".join(m["content"] for m in msgs)
    assert "What is 12 squared?" in text and "Useful tools: calculator" in text
    assert "Step 1:" in text and "Result: 144" in text and "invalid reply" in text
    assert len(text) < 1600  # ~400-500 tokens for SmolLM2's tokenizer
    only_last = planner.build_messages("q", lines, None, history, max_steps=1)
    assert "Step 1:" not in only_last[1]["content"] and "Step 2:" in only_last[1]["content"]


def test_planner_example_follows_the_analysis_only_when_asked():
    lines = [planner.tool_line("calculator", Calculator().spec.description)]
    facts = QueryAnalysis(("facts",), ("knowledge_search",))
    both = QueryAnalysis(("arithmetic", "facts"), ("calculator", "knowledge_search"))
    assert [planner.example_for(a) for a in (facts, both, None)] == ["calculator"] * 3  # mode "fixed"
    keys = [planner.example_for(a, "analysis") for a in (facts, both, QueryAnalysis(("arithmetic",), ("calculator",)),
                                                          None)]
    assert keys == ["knowledge_search", "calculator+knowledge_search", "calculator", "calculator"]
    fixed = planner.build_messages("q", lines, facts, [])[0]["content"]
    assert fixed == planner.SYSTEM_TEMPLATE.format(schema=planner.NextStep.SCHEMA, tools=lines[0])  # unchanged
    archive = planner.build_messages("q", lines, facts, [], example="knowledge_search")[0]["content"]
    assert '{"tool": "knowledge_search", "input": "capital of the Kingdom of Velmora"}' in archive
    assert '"6*7"' not in archive and archive.startswith(fixed[:fixed.index("Example:")])
    assert planner.EXAMPLE_HASHES["calculator"] == planner.PROMPT_HASH
    assert len(set(planner.EXAMPLE_HASHES.values())) == len(planner.EXAMPLES)


def test_the_examples_entities_are_in_no_task_and_no_passage():
    from streamgrpo.tasks.builtin import builtin_corpus, builtin_tasks

    text = " ".join([p.text for p in builtin_corpus()] + [t.question + " ".join(t.ground_truths)
                                                         for t in builtin_tasks()])
    for name in ("Velmora", "Tolmere", "Brennick", "1234"):
        assert name not in text


def test_rule_analysis_maps_cues_to_enabled_tools():
    a = analyser.build_analyser("rule").analyse("Calculate 12 squared, and then find a major historical event in "
                                                "that year", ["calculator", "knowledge_search", "python"])
    assert a.skills == ("arithmetic", "facts") and a.tools == ("calculator", "knowledge_search") and a.mode == "rule"
    assert analyser.rule_analysis("Who wrote Hamlet?", ["calculator"]).tools == ()


def test_model_analysis_drops_unknown_tools_and_falls_back():
    tm = ScriptedText('{"skills": ["math"], "tools": ["calculator", "spaceship"]}', "no idea")
    a = analyser.build_analyser("model", tm)
    first = a.analyse("What is 2+2?", ["calculator"])
    assert first.tools == ("calculator",) and first.mode == "model"
    second = a.analyse("What is 2+2?", ["calculator"])
    assert second.mode == "model-fallback" and second.tools == ("calculator",)


def test_executor_passthrough_and_model_modes_run_the_real_tool():
    calc = Calculator()
    step = NextStep(tool="calculator", input="12**2")
    obs = executor.build_executor("passthrough").execute("q", step, calc)
    assert obs.output.strip() == "144" and obs.executor_mode == "passthrough" and obs.prompt_hash == ""
    tm = ScriptedText('```json\n{"input": "12*12+1"}\n```', "I cannot")
    model_exec = executor.build_executor("model", tm)
    obs2 = model_exec.execute("q", step, calc)
    assert obs2.output.strip() == "145" and obs2.command == "12*12+1" and obs2.executor_mode == "model"
    assert obs2.prompt_hash == executor.PROMPT_HASH and "calculator" in tm.seen[0][0]["content"]
    obs3 = model_exec.execute("q", step, calc)
    assert obs3.executor_mode == "model-fallback" and obs3.output.strip() == "144"


def test_verifier_rule_and_model():
    tool_rec = record(1, NextStep(tool="calculator", input="1+1"), Observation("calculator", "1+1", "2"))
    answered = record(2, NextStep(answer="2"))
    rule = verifier.build_verifier("rule")
    assert not rule.decide("q", [tool_rec]).stop and rule.decide("q", [tool_rec, answered]).stop
    assert not rule.decide("q", [record(1, None)]).stop
    tm = ScriptedText('{"stop": true, "reason": "have 2"}', "???")
    model = verifier.build_verifier("model", tm)
    d = model.decide("q", [tool_rec])
    assert d.stop and d.mode == "model" and d.analysis == "have 2" and d.prompt_hash == verifier.PROMPT_HASH
    d2 = model.decide("q", [tool_rec])
    assert not d2.stop and d2.mode == "model-fallback"
    assert model.decide("q", [tool_rec, answered]).stop and len(tm.seen) == 2  # answer: no model call


def test_synthesiser_modes():
    tool_rec = record(1, NextStep(tool="calculator", input="1+1"), Observation("calculator", "1+1", "2"))
    err_rec = record(2, NextStep(tool="calculator", input="1/0"), Observation("calculator", "1/0", "", "div by 0"))
    passthrough = synthesiser.build_synthesiser("passthrough")
    assert passthrough.answer("q", [tool_rec, err_rec]) == ""  # never answered: no tool output handed in
    assert passthrough.answer("q", [tool_rec, record(2, NextStep(answer="two"))]) == "two"
    assert passthrough.answer("q", [record(1, None)]) == ""
    tm = ScriptedText("  The answer is 2.  ", "")
    model = synthesiser.build_synthesiser("model", tm)
    assert model.answer("q", [tool_rec]) == "The answer is 2."
    assert model.answer("q", [tool_rec, record(2, NextStep(answer="two"))]) == "two"  # empty reply -> passthrough


@pytest.mark.parametrize("build", [analyser.build_analyser, executor.build_executor, verifier.build_verifier,
                                   synthesiser.build_synthesiser])
def test_registries_reject_unknown_modes_and_model_modes_need_a_model(build):
    with pytest.raises(ValueError, match="choose one of"):
        build("telepathy")
    with pytest.raises(ValueError, match="needs a text model"):
        build("model", None)
