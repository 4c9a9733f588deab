"""A demonstration's reward stands only when it answered correctly; otherwise it is dead-lettered with the reason."""

from __future__ import annotations

from dataclasses import replace

import pytest

from streamgrpo.avro import records as R
from streamgrpo.judge.decide import Reject, decide_group, decide_reward
from streamgrpo.judge.scorers import build_scorer

SOURCE = "builtin-expert"


def task() -> R.Task:
    return R.Task(envelope=R.Envelope.new("test", task_id="t1"), question="What is 6 times 7?", source="builtin",
                  group_size=1, ground_truths=["42"],
                  demonstration=R.Demonstration(['{"tool": "calculator", "input": "6*7"}', '{"answer": "42"}'], SOURCE))


def done(answer: str = "42", status: R.RolloutStatus = R.RolloutStatus.ANSWERED, demo: str | None = SOURCE,
         error: str | None = None) -> R.RolloutCompleted:
    return R.RolloutCompleted(
        envelope=R.Envelope.new("test", task_id="t1", group_id="g1", rollout_id="g1-0"), question="What is 6 times 7?",
        source="builtin", final_answer=answer, turns=2, status=status, group_size=1, adapter_name="planner",
        adapter_version=0, duration_ms=5, error=error, tool_calls={"calculator": 1}, demo_source=demo)


def test_a_correct_demonstration_is_rewarded_and_its_reward_names_its_source() -> None:
    out = decide_reward(task(), done(), build_scorer("correct"))
    assert isinstance(out, R.Reward)
    assert (out.score, out.status, out.demo_source) == (1.0, R.RewardStatus.OK, SOURCE)


@pytest.mark.parametrize(("rollout", "code", "words"), [
    (done(answer="41"), "demonstration_wrong", "scored 0.0"),
    (done(answer="", status=R.RolloutStatus.ERROR, error="demonstration step 1 is refused by the planner grammar"),
     "demonstration_failed", "refused by the planner grammar"),
    (done(status=R.RolloutStatus.MAX_TURNS), "demonstration_failed", "did not end with an answer"),
])
def test_a_broken_demonstration_is_rejected_with_its_reason(rollout: R.RolloutCompleted, code: str,
                                                            words: str) -> None:
    for out in (decide_reward(task(), rollout, build_scorer("correct")),
                decide_group(task(), [rollout], build_scorer("correct"))[0]):
        assert isinstance(out, Reject)
        assert out.reason_code == code and words in out.reason
        assert out.reward.demo_source == SOURCE  # the window still learns the rollout ended (and does not train it)


def test_a_policy_rollout_with_the_same_wrong_answer_is_an_ordinary_reward() -> None:
    out = decide_reward(replace(task(), demonstration=None), done(answer="41", demo=None), build_scorer("correct"))
    assert isinstance(out, R.Reward) and out.score == 0.0 and out.demo_source is None
