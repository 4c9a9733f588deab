"""Executing a demonstration through the real loop: the planner's replies given, the grammar checked, the tools real."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from support.tiny_policy import build_tiny_model, build_tiny_tokenizer

from streamgrpo.avro import records as R
from streamgrpo.avro.codec import Codec
from streamgrpo.inference.local import LocalPolicy
from streamgrpo.rollout.config import RolloutConfig
from streamgrpo.rollout.loop import LoopContext, run_group
from streamgrpo.rollout.runtime import build_context
from streamgrpo.rollout.tools.config import ToolsSettings

SOURCE = "file:test.jsonl"


@pytest.fixture(scope="module")
def ctx() -> Iterator[LoopContext]:
    policy = LocalPolicy.from_model(build_tiny_model(), build_tiny_tokenizer())
    try:
        yield build_context(RolloutConfig(tools=ToolsSettings(enabled=["calculator", "knowledge_search"])), policy)
    finally:
        policy.close()


def demo_request(steps: list[str], max_turns: int = 3) -> R.RolloutRequest:
    env = R.Envelope.new("test", task_id="t", group_id="g", rollout_id="g-0")
    return R.RolloutRequest(envelope=env, question="What is 6 times 7?", source="builtin", rollout_index=0,
                            group_size=1, adapter_name="planner", adapter_version=3, max_turns=max_turns,
                            sampling=R.SamplingParams(0.7, 1.0, 48), demonstration=R.Demonstration(steps, SOURCE))


def run(ctx: LoopContext, steps: list[str], max_turns: int = 3) -> list[R.Event]:
    events: list[R.Event] = []
    run_group([demo_request(steps, max_turns)], ctx, events.append)
    codec = Codec()
    for e in events:  # every event survives the wire, its demo fields included
        assert codec.decode(codec.encode(e), type(e)) == e
    return events


def of(events: list[R.Event], kind: type) -> list:
    return [e for e in events if isinstance(e, kind)]


def test_a_demonstration_is_executed_with_given_tokens_real_tools_and_recorded_as_one(ctx: LoopContext) -> None:
    events = run(ctx, ['{"tool": "calculator", "input": "6*7"}', '{"answer": "42"}'])
    actions = of(events, R.PlannerAction)
    tok = ctx.policy.tokenizer  # type: ignore[attr-defined]
    assert [a.action_text for a in actions] == ['tool": "calculator", "input": "6*7"}', 'answer": "42"}']
    for a in actions:
        assert a.action_token_ids == tok.encode(a.action_text, add_special_tokens=False)
        assert a.behaviour_logprobs == [0.0] * len(a.action_token_ids)  # given, not sampled: probability 1
        assert (a.engine, a.demo_source, a.parse_status) == ("demonstration", SOURCE, R.ParseStatus.STRICT)
        assert a.sampling.constraint is not None  # the grammar the trainer replays on these tokens
        assert a.prompt_token_ids[-2:] == tok.encode('{"', add_special_tokens=False)
    (obs,) = of(events, R.ToolObservation)
    assert (obs.tool, obs.output.strip(), obs.error) == ("calculator", "42", None)
    (done,) = of(events, R.RolloutCompleted)
    assert (done.status, done.final_answer, done.turns, done.demo_source) == (R.RolloutStatus.ANSWERED, "42", 2, SOURCE)
    assert "6*7" in tok.decode(actions[0].action_token_ids)


def test_the_second_turn_prompt_shows_the_real_observation(ctx: LoopContext) -> None:
    events = run(ctx, ['{"tool": "knowledge_search", "input": "events of the year 64 AD"}',
                       '{"answer": "Great Fire of Rome"}'])
    second = of(events, R.PlannerAction)[1]
    prompt = ctx.policy.tokenizer.decode(second.prompt_token_ids)  # type: ignore[attr-defined]
    assert "Great Fire of Rome" in prompt and "Result:" in prompt


@pytest.mark.parametrize(("steps", "reason"), [
    (['{"tool": "teleport", "input": "x"}', '{"answer": "42"}'], "refused by the planner grammar"),
    (['{"tool": "calculator", "input": "6*/7"}', '{"answer": "42"}'], "the calculator call failed"),
    (['{"tool": "calculator", "input": "6*7"}', '{"tool": "calculator", "input": "42"}'], "without an answer"),
    (['{"tool": "calculator", "input": "6"}', '{"tool": "calculator", "input": "7"}',
      '{"tool": "calculator", "input": "6*7"}'], "refused by the planner grammar"),  # the last turn must answer
])
def test_a_broken_demonstration_ends_as_an_error_with_its_reason(ctx: LoopContext, steps: list[str],
                                                                 reason: str) -> None:
    (done,) = of(run(ctx, steps), R.RolloutCompleted)
    assert done.status == R.RolloutStatus.ERROR and done.demo_source == SOURCE
    assert reason in (done.error or ""), done.error
