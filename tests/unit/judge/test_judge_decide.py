"""The pure decision (task, rollout, scorer, cache) -> Reward | Reject, the cache and the routing."""

from __future__ import annotations

from pathlib import Path

import pytest

from streamgrpo.avro import ids
from streamgrpo.avro import records as R
from streamgrpo.avro.codec import Codec
from streamgrpo.judge.cache import ScoreCache, cache_key
from streamgrpo.judge.config import CacheSettings, JudgeSettings
from streamgrpo.judge.decide import Reject, decide_group, decide_reward
from streamgrpo.judge.errors import UnknownJudgeError
from streamgrpo.judge.scorers import build_scorer
from streamgrpo.judge.scorers.base import Candidate, Score
from streamgrpo.judge.service import Router, TaskTable


def task(tid: str = "t1", truths: tuple[str, ...] = ("42",), source: str = "deepmath") -> R.Task:
    return R.Task(envelope=R.Envelope.new("test", task_id=tid), question="6*7?", source=source,
                  group_size=2, ground_truths=list(truths))


def rollout(rid: str = "r1", answer: str = r"\boxed{42}", tid: str = "t1",
            status: R.RolloutStatus = R.RolloutStatus.ANSWERED, source: str = "deepmath") -> R.RolloutCompleted:
    return R.RolloutCompleted(
        envelope=R.Envelope.new("test", task_id=tid, group_id="g1", rollout_id=rid),
        question="6*7?", source=source, final_answer=answer, turns=2, status=status, group_size=2,
        adapter_name="planner", adapter_version=3, duration_ms=10,
        error="boom" if status == R.RolloutStatus.ERROR else None, tool_calls={"calculator": 1},
    )


def test_ok_reward_ids_provenance_and_avro_round_trip() -> None:
    scorer = build_scorer("math")
    reward = decide_reward(task(), rollout(), scorer)
    assert isinstance(reward, R.Reward)
    assert reward.envelope.event_id == ids.derived_id("reward", "r1")
    assert (reward.envelope.task_id, reward.envelope.group_id, reward.envelope.rollout_id) == ("t1", "g1", "r1")
    assert reward.status == R.RewardStatus.OK and reward.score == 1.0
    assert reward.judge == R.JudgeInfo(name="math", rubric_hash=scorer.rubric_hash, model=None)
    assert (reward.group_size, reward.adapter_name, reward.adapter_version, reward.turns) == (2, "planner", 3, 2)
    assert reward.rollout_status == R.RolloutStatus.ANSWERED and reward.tool_calls == {"calculator": 1}
    assert reward.components[0] == R.RewardComponent("math_correct", 1.0, 1.0)
    codec = Codec()
    assert codec.decode(codec.encode(reward)) == reward


def test_wrong_answer_scores_zero() -> None:
    reward = decide_reward(task(), rollout(answer="41"), build_scorer("math"))
    assert isinstance(reward, R.Reward) and reward.score == 0.0 and reward.status == R.RewardStatus.OK


def test_rollout_error_gives_error_reward_without_dead_letter() -> None:
    reward = decide_reward(task(), rollout(status=R.RolloutStatus.ERROR), build_scorer("math"))
    assert isinstance(reward, R.Reward)
    assert reward.status == R.RewardStatus.ERROR and "boom" in (reward.error or "")
    assert reward.envelope.event_id == ids.derived_id("reward", "r1")


def test_unknown_task_is_rejected_with_error_reward() -> None:
    out = decide_reward(None, rollout(), build_scorer("math"))
    assert isinstance(out, Reject) and out.reason_code == "unknown_task"
    assert out.reward.status == R.RewardStatus.ERROR and out.reward.envelope.rollout_id == "r1"


def test_missing_ground_truth_is_rejected_for_judges_that_need_one() -> None:
    out = decide_reward(task(truths=()), rollout(), build_scorer("qa"))
    assert isinstance(out, Reject) and out.reason_code == "missing_ground_truth"
    assert "qa" in out.reason


def test_cache_hit_marks_reward_cached_and_keeps_score() -> None:
    cache, scorer = ScoreCache(), build_scorer("math")
    first = decide_reward(task(), rollout("r1"), scorer, cache)
    second = decide_reward(task(), rollout("r2"), scorer, cache)
    assert isinstance(first, R.Reward) and isinstance(second, R.Reward)
    assert (first.cached, second.cached) == (False, True)
    assert second.score == first.score and second.judge == first.judge
    assert second.envelope.event_id == ids.derived_id("reward", "r2")
    assert (cache.hits, cache.misses) == (1, 1)


def test_cache_key_separates_judges_rubrics_and_context() -> None:
    c1 = Candidate("q", "a", ("a",), "ANSWERED", 1, {})
    c2 = Candidate("q", "a", ("a",), "MAX_TURNS", 1, {})
    qa, hybrid = build_scorer("qa"), build_scorer("hybrid")
    assert cache_key(qa, c1) == cache_key(qa, c2)  # qa reads only question/answer/truths
    assert cache_key(hybrid, c1) != cache_key(hybrid, c2)  # hybrid reads the status
    assert cache_key(qa, c1) != cache_key(build_scorer("math"), c1)


def test_cache_is_bounded_lru_and_skips_fallbacks(tmp_path: Path) -> None:
    cache, qa = ScoreCache(CacheSettings(max_entries=2)), build_scorer("qa")
    for i in range(3):
        cache.put(qa, Candidate("q", str(i), ("x",)), Score(0.0, (), "qa", qa.rubric_hash))
    assert len(cache) == 2 and cache.get(qa, Candidate("q", "0", ("x",))) is None
    fb = Score(1.0, (("fallback:qa", 1.0, 1.0),), "llm", "h")
    cache.put(qa, Candidate("q", "fb", ("x",)), fb)
    assert cache.get(qa, Candidate("q", "fb", ("x",))) is None


def test_sqlite_cache_survives_restart(tmp_path: Path) -> None:
    settings = CacheSettings(sqlite_path=tmp_path / "c.sqlite")
    scorer = build_scorer("math")
    a = ScoreCache(settings)
    assert isinstance(decide_reward(task(), rollout(), scorer, a), R.Reward)
    a.close()
    b = ScoreCache(settings)
    reward = decide_reward(task(), rollout("r9"), scorer, b)
    assert isinstance(reward, R.Reward) and reward.cached and reward.score == 1.0
    b.close()


def test_decide_group_keeps_order_and_prechecks() -> None:
    scorer = build_scorer("math")  # a single scorer exercises decide_group's mapping
    outs = decide_group(task(), [rollout("a"), rollout("b", status=R.RolloutStatus.ERROR), rollout("c", "7")], scorer)
    assert [o.envelope.rollout_id for o in outs] == ["a", "b", "c"]  # type: ignore[union-attr]
    assert [o.status for o in outs] == [R.RewardStatus.OK, R.RewardStatus.ERROR, R.RewardStatus.OK]  # type: ignore[union-attr]
    assert [o.score for o in outs] == [1.0, 0.0, 0.0]  # type: ignore[union-attr]


def test_router_by_source_and_default() -> None:
    router = Router(JudgeSettings(routes={"nq": "qa"}, default_judge="math"))
    assert router.scorer_for("nq").name == "qa" and router.scorer_for("other").name == "math"
    assert router.scorer_for("nq") is router.scorer_for("nq")
    with pytest.raises(UnknownJudgeError):
        Router(JudgeSettings(routes={"nq": "nope"}))


def test_task_table_is_bounded() -> None:
    table = TaskTable(2)
    for i in range(3):
        table.add(task(f"t{i}"))
    assert table.get("t0") is None and table.get("t2") is not None and len(table) == 2
