"""Re-judging a group: the judge's own decisions, the window's own advantages, new ids beside the old ones."""

from __future__ import annotations

from dataclasses import replace

import pytest
from support.streams import synthetic_group

from streamgrpo.avro import ids
from streamgrpo.avro import records as R
from streamgrpo.judge.scorers import build_scorer
from streamgrpo.replay.rejudge import GroupHistory, rejudge_group
from streamgrpo.streams.advantages import build_estimator


def history(answers: list[str], ground_truth: str | None = "4") -> GroupHistory:
    g = synthetic_group("rj", [0.0] * len(answers), turns=[1, 2, 1, 2][:len(answers)])
    rollouts = [replace(c, final_answer=a, source="math") for c, a in zip(g.completions, answers, strict=True)]
    task = None if ground_truth is None else R.Task(
        R.Envelope.new("submit", task_id="rj"), "What is 2+2?", "math", len(answers), [ground_truth])
    actions: dict[str, list[R.PlannerAction]] = {}
    for a in g.actions:
        actions.setdefault(a.envelope.rollout_id or "", []).append(a)
    return GroupHistory(g.group_id, "grpo", task, rollouts, actions)


def test_rescored_rewards_advantages_and_samples() -> None:
    group = history(["4", "5", "4", "seven"])
    scorer = build_scorer("math")
    out = rejudge_group(group, scorer)
    by_id = {r.envelope.rollout_id: r for r in out.rewards}
    scores = [by_id[c.envelope.rollout_id].score for c in group.rollouts]
    assert scores == [1.0, 0.0, 1.0, 0.0] and {r.judge.name for r in out.rewards} == {"math"}
    assert {r.event_id for r in out.rewards} == {ids.rejudged_reward_id(c.envelope.rollout_id or "", "math",
                                                                        scorer.rubric_hash) for c in group.rollouts}
    assert all(r.event_id != ids.reward_id(r.envelope.rollout_id) for r in out.rewards)  # beside the original
    assert out.closed is not None and out.closed.status == R.GroupStatus.COMPLETE and out.closed.trains
    expected = build_estimator("grpo")(scores).advantages
    by_rollout = {s.envelope.rollout_id: s for s in out.samples}
    for c, adv in zip(group.rollouts, expected, strict=True):
        sample = by_rollout[c.envelope.rollout_id]
        assert sample.advantage == pytest.approx(adv)
        assert sample.event_id == ids.rejudged_sample_id(c.envelope.rollout_id or "", "math", scorer.rubric_hash)
        assert [t.turn for t in sample.turns] == list(range(1, c.turns + 1))


def test_zero_variance_under_the_new_judge_trains_nothing() -> None:
    out = rejudge_group(history(["4", "4", "4", "4"]), build_scorer("math"))
    assert out.closed is not None and out.closed.reason == "zero_variance" and out.samples == []


def test_unknown_task_gives_error_rewards_and_no_samples() -> None:
    out = rejudge_group(history(["4", "5"], ground_truth=None), build_scorer("math"))
    assert {r.status for r in out.rewards} == {R.RewardStatus.ERROR} and out.samples == []


def test_a_group_missing_rollouts_closes_like_the_window_timeout() -> None:
    group = history(["4", "5", "4", "5"])
    group.rollouts = group.rollouts[:3]  # the history lost one completion
    out = rejudge_group(group, build_scorer("math"))
    assert out.closed is not None and out.closed.status == R.GroupStatus.TIMED_OUT
    assert len(out.samples) == 3 and out.closed.missing_rollout_ids == [ids.rollout_id(group.group_id, 3)]
