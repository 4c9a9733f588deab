"""``[rollout] constrain``: which policies get the planner grammar, and what the loop records."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.tiny_policy import build_tiny_model, build_tiny_tokenizer

from streamgrpo.avro import records as R
from streamgrpo.inference.base import Generation, PlannerPolicy
from streamgrpo.inference.local import LocalPolicy
from streamgrpo.models.grammar import ActionGrammar
from streamgrpo.rollout.config import RolloutConfig
from streamgrpo.rollout.loop import LoopContext, applied_sampling
from streamgrpo.rollout.runtime import build_constraint, build_context
from streamgrpo.rollout.tools.calculator import Calculator
from streamgrpo.rollout.tools.config import ToolsSettings


class RemotePolicy(PlannerPolicy):
    """A backend that cannot mask logits (like the vLLM policy)."""

    def chat_prompt(self, messages: list[dict[str, str]]) -> list[int]:
        return [1]

    def generate(self, prompts, sampling, *, adapter_name, adapter_version, stop=None,  # type: ignore[no-untyped-def]
                 logits_mask=None) -> list[Generation]:
        raise NotImplementedError

    def load_adapter(self, adapter_name: str, version: int, path: Path) -> None:
        raise NotImplementedError

    def unload_adapter(self, adapter_name: str, version: int) -> None:
        raise NotImplementedError

    def resident_versions(self, adapter_name: str) -> list[int]:
        return []


def test_auto_is_the_default_and_constrains_the_local_policy_with_its_tools_prefix_and_eos() -> None:
    assert RolloutConfig().constrain == "auto"
    policy = LocalPolicy.from_model(build_tiny_model(), build_tiny_tokenizer())
    try:
        ctx = build_context(RolloutConfig(tools=ToolsSettings(enabled=["calculator"])), policy)
        assert ctx.constraint is not None
        assert ctx.constraint.grammar == ActionGrammar(("calculator",), '{"', tuple(sorted(policy.eos_ids)))
        off = build_context(RolloutConfig(tools=ToolsSettings(enabled=["calculator"]), constrain="off"), policy)
        assert off.constraint is None
    finally:
        policy.close()


def test_a_policy_that_cannot_mask_samples_freely_on_auto_and_refuses_on() -> None:
    ctx = LoopContext(policy=RemotePolicy(), tools={"calculator": Calculator()}, response_prefix='{"')
    assert build_constraint("auto", ctx) is None
    assert build_constraint("off", ctx) is None
    with pytest.raises(ValueError, match="constrain = 'on' needs a policy that masks logits"):
        build_constraint("on", ctx)


def test_the_recorded_constraint_is_the_one_applied_never_the_requested_one() -> None:
    requested = R.SamplingParams(temperature=0.7, constraint="something-else@123")
    request = R.RolloutRequest(envelope=R.Envelope.new("t"), question="q", source="s", rollout_index=0, group_size=1,
                               adapter_name="planner", adapter_version=0, max_turns=1, sampling=requested)
    free = LoopContext(policy=RemotePolicy(), tools={})
    assert applied_sampling(request, free) == R.SamplingParams(temperature=0.7)


def test_a_prefix_that_cannot_start_a_reply_falls_back_on_auto_and_fails_on_on() -> None:
    policy = LocalPolicy.from_model(build_tiny_model(), build_tiny_tokenizer())
    try:
        ctx = LoopContext(policy=policy, tools={"calculator": Calculator()}, response_prefix="Answer:")
        assert build_constraint("auto", ctx) is None
        with pytest.raises(ValueError, match="does not start a planner reply"):
            build_constraint("on", ctx)
    finally:
        policy.close()
