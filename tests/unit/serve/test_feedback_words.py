"""Issue 37, part 5 (the server's words): what `streamgrpo serve` tells clients about their feedback is what the loop
does with it. A `solve` opens a group of ONE rollout (serve.agent.served_request, the Task and request it records);
the real judge and the real streams window (streams.window_core, with the default [streams] settings and with a
review hold) close such a group without a training sample, whatever reward it gets and in whichever order the
judge's and the person's rewards come. When this stops being true (a served call becomes a group of N, or single
rollouts train), these tests fail, and the words in serve/agent.py (feedback_effect) and serve/server.py
(INSTRUCTIONS) must change with it.
"""

from __future__ import annotations

import dataclasses

import pytest

from streamgrpo.avro import records as R
from streamgrpo.judge.config import JudgeSettings
from streamgrpo.judge.decide import Reject, precheck
from streamgrpo.judge.scorers import build_scorer
from streamgrpo.rollout.config import RolloutConfig
from streamgrpo.serve.agent import feedback_effect, served_request
from streamgrpo.serve.server import INSTRUCTIONS
from streamgrpo.streams.advantages import build_estimator
from streamgrpo.streams.config import StreamsSettings
from streamgrpo.streams.window_core import (
    SERVED_SOURCE,
    GroupState,
    WindowPolicy,
    add_completed,
    add_reward,
    maybe_close,
    new_state,
)
from streamgrpo.topics.sdk import human_reward


def _served() -> tuple[R.Task, R.RolloutCompleted]:
    request, task = served_request(RolloutConfig(), "What is 2 plus 3?", "alice", 0)
    env = request.envelope
    done = R.RolloutCompleted(
        envelope=R.Envelope.new("mcp", task_id=env.task_id, group_id=env.group_id, rollout_id=env.rollout_id),
        question=task.question, source=task.source, final_answer="5", turns=1, status=R.RolloutStatus.ANSWERED,
        group_size=request.group_size, adapter_name="planner", adapter_version=0, duration_ms=1)
    return task, done


def _policy(review_hold_s: float | None = None) -> WindowPolicy:
    s = StreamsSettings()
    return WindowPolicy(s.estimator, build_estimator(s.estimator), s.group_timeout_s, s.partial_policy,
                        s.min_group_size, s.review_hold_s if review_hold_s is None else review_hold_s,
                        s.served_review_hold_s)


def _judge_reward(task: R.Task, done: R.RolloutCompleted, score: float | None) -> R.Reward:
    """The default judge's reward of the served rollout (``score`` None), or an OK reward of ``score`` (a judge
    that can score it, e.g. an LLM judge)."""
    settings = JudgeSettings()
    scorer = build_scorer(settings.default_judge, settings)
    outcome = precheck(task, done, scorer)
    if score is None:
        assert outcome is not None, "the default judge scored a call without ground truth: update the words"
        return outcome.reward if isinstance(outcome, Reject) else outcome
    env = done.envelope
    return R.Reward(envelope=R.Envelope.new("judge", task_id=env.task_id, group_id=env.group_id,
                                            rollout_id=env.rollout_id),
                    score=score, status=R.RewardStatus.OK, judge=R.JudgeInfo("llm", "h"), group_size=done.group_size,
                    adapter_name="planner", adapter_version=0, turns=1, rollout_status=R.RolloutStatus.ANSWERED)


def _close(state: GroupState, policy: WindowPolicy, rewards: list[R.Reward]) -> R.GroupClosed | None:
    """Feed ``rewards`` one a second, then wait past any review hold; the group's GroupClosed (None: still open)."""
    now, closed = 100.0, None
    for reward in rewards:
        state, _ = add_reward(state, reward)  # a reward after the group closed is not accepted (it changes nothing)
        state, just = maybe_close(state, policy, now)
        closed = closed or just
        now += 1.0
    for _ in range(3):
        now += max(policy.review_hold_s, policy.served_review_hold_s) + 1.0
        state, just = maybe_close(state, policy, now)
        closed = closed or just
    return closed


def test_a_served_call_is_a_group_of_one_that_the_fanout_does_not_run_again() -> None:
    request, task = served_request(RolloutConfig(), "What is 2 plus 3?", "alice", 3)
    assert (task.group_size, request.group_size, request.adapter_version) == (1, 1, 3)
    assert task.metadata["served_by"] == "mcp" and task.source == "mcp:alice" and not task.ground_truths
    assert task.source.startswith(SERVED_SOURCE)  # what the window holds open for review (served_review_hold_s)


@pytest.mark.parametrize("judge_score", [None, 1.0, 0.0])
@pytest.mark.parametrize("hold", [None, 30.0])
@pytest.mark.parametrize("human_first", [False, True])
def test_feedback_on_a_served_call_never_trains(judge_score: float | None, hold: float | None,
                                                human_first: bool) -> None:
    task, done = _served()
    judged = _judge_reward(task, done, judge_score)
    person = human_reward(done, 1.0, "mcp:alice")
    policy = _policy(hold)
    state = add_completed(new_state(done.envelope.group_id or "", done.envelope.task_id, done.group_size, 99.0, 0),
                          done)
    assert state.served
    closed = _close(state, policy, [person, judged] if human_first else [judged, person])
    assert closed is not None and closed.expected == 1
    assert not closed.trains and closed.samples == 0, dataclasses.asdict(closed)


def test_the_words_say_that_feedback_is_recorded_and_does_not_train() -> None:
    effect = feedback_effect("planner@v2")
    assert "does not train the planner" in effect and "group of one rollout" in effect
    assert "planner@v2" in effect and "--as-demo" in effect
    assert "it does not train the planner" in INSTRUCTIONS and "group of one" in INSTRUCTIONS
    for words in (effect, INSTRUCTIONS):
        assert "learns from it" not in words and "next version" not in words
