"""The run's progress reducer: loop closure (publication -> first rollout served), held-out curve."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

from streamgrpo.avro import records as R
from streamgrpo.cli.progress import Progress, plot_heldout

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


def env(seconds: float, service: str = "test", **ids: str) -> R.Envelope:
    e = R.Envelope.new(service, **ids)
    return R.Envelope(e.event_id, T0 + timedelta(seconds=seconds), e.producer, e.task_id, e.group_id, e.rollout_id)


def published(v: int, at: float, stale: float = 0.0, rollouts: float = 8.0, **drops: float) -> R.AdapterPublished:
    """v trained ``rollouts`` samples of a lineage that also holds the ``stale`` and other dropped records."""
    records = int(rollouts + stale + sum(drops.values()))
    lineage = [R.OffsetRange("training-samples", 0, 100 * v, 100 * v + records - 1)] if records else []
    return R.AdapterPublished(env(at), "planner", v, f"file:///s/v{v}", "0" * 64, "base", v, lineage,
                              metrics={"dropped_stale": stale, "rollouts": rollouts,
                                       **{f"dropped_{k}": n for k, n in drops.items()}})


def completed(v: int, at: float) -> R.RolloutCompleted:
    return R.RolloutCompleted(env(at, group_id="g", rollout_id=f"r{at}"), "q", "builtin", "a", 1,
                              R.RolloutStatus.ANSWERED, 4, "planner", v, 10)


def evaluation(v: int, acc: float, trigger: str = "run-evaluator") -> R.EvaluationCompleted:
    return R.EvaluationCompleted(env(100 + v), "planner", v, "builtin:heldout", "h", 32, 1, 0.0, acc, acc - 0.1,
                                 acc + 0.1, 0.5, 0.1, 1.0, 2.0, 30.0, 10.0, R.JudgeInfo("correctness", "x"),
                                 trigger=trigger)


def test_loop_closure_measures_delay_and_trainer_steps_until_a_version_serves() -> None:
    p = Progress()
    for e in [published(1, 10), completed(0, 12), completed(1, 25), published(2, 30), published(3, 50),
              completed(2, 55), completed(3, 70), published(4, 80, stale=2.0, duplicate=3.0)]:
        p.apply(e)
    loop = p.loop_closure()
    assert loop["versions_published"] == 4 and loop["versions_served"] == 3 and loop["never_served"] == [4]
    # v1: 15 s, 0 steps; v2: 25 s, 1 step in between (v3 published at 50 < 55); v3: 20 s, 0 steps
    assert loop["publish_to_first_rollout_s"] == {"p50": 20.0, "p95": 25.0, "n": 3}
    assert loop["trainer_steps_to_first_rollout"]["max"] == 1
    assert loop["samples_dropped_stale"] == 2.0 and loop["stale_share"] == 2.0 / 34.0
    assert loop["samples_dropped"] == {"stale": 2.0, "duplicate": 3.0}


def test_heldout_line_and_plot(tmp_path: Path) -> None:
    p = Progress()
    assert p.heldout_line() == "-"
    for e in [evaluation(0, 0.2), evaluation(2, 0.35), evaluation(2, 0.4, trigger="run-final")]:
        p.apply(e)
    assert p.heldout_line() == "v0 0.20 v2 0.35"
    assert "held-out v0 0.20 v2 0.35" in p.line()
    assert plot_heldout(p.evaluations, p.started, tmp_path / "h.png") and (tmp_path / "h.png").stat().st_size > 0
    assert not plot_heldout([], p.started, tmp_path / "none.png")
    summary = p.summary()
    assert [e["trigger"] for e in summary["evaluations"]] == ["run-evaluator", "run-evaluator", "run-final"]


def test_lifecycle_decisions_and_human_rewards_in_the_report() -> None:
    from streamgrpo.cli.progress import lifecycle_lines

    p = Progress(canary_share=0.5)
    judge = R.Reward(env(20, group_id="g", rollout_id="r1"), 1.0, R.RewardStatus.OK, R.JudgeInfo("math", "h"), 4,
                     "planner", 1, 1, R.RolloutStatus.ANSWERED)
    person = R.Reward(env(21, group_id="g", rollout_id="r1"), 0.0, R.RewardStatus.OK, R.JudgeInfo("human:ada", "h"),
                      4, "planner", 1, 1, R.RolloutStatus.ANSWERED)
    for e in [published(1, 10), published(2, 30), judge, person,
              R.AdapterPromoted(env(40, "ab-controller"), "planner", 1, 0, "better: p 0.01", {"canary_groups": 9.0, "p_value": 0.01}),
              R.AdapterRolledBack(env(50), "planner", 2, 1, "worse", decided_by="human:bob")]:
        p.apply(e)
    life = p.summary()["lifecycle"]
    assert (life["primary"], life["canary"], life["human_rewards"]) == (1, None, 1)
    assert life["statuses"] == {"0": "RETIRED", "1": "PRIMARY", "2": "ROLLED_BACK"}
    assert [(d["version"], d["kind"], d["by"]) for d in life["decisions"]] == [
        (1, "promoted", "ab-controller"), (0, "superseded", "ab-controller"), (2, "rolled_back", "human:bob")]
    assert p.per_version[1].count == 1 and p.per_version[1].mean == 1.0  # the human's 0.0 is kept apart
    assert "primary v1, canary -" in p.line()
    text = "\n".join(lifecycle_lines(life))
    assert "| v2 | rolled_back | human:bob | worse |" in text and "human rewards 1" in text


def test_collapse_alarm_reaches_the_progress_line_and_the_report() -> None:
    """Early versions use tools and sometimes answer right; late ones answer at once and never right."""
    p = Progress()
    n = 0
    for v, status, calls, score, trains in [(0, R.RolloutStatus.MAX_TURNS, 3, 1.0, True),
                                            (0, R.RolloutStatus.ANSWERED, 3, 0.0, True),
                                            (6, R.RolloutStatus.ANSWERED, 0, 0.0, False),
                                            (6, R.RolloutStatus.ANSWERED, 0, 0.0, False)]:
        for _ in range(16):
            n += 1
            rid = f"r{n}"
            p.apply(R.RolloutCompleted(env(n, group_id=f"g{n // 4}", rollout_id=rid), "q", "builtin", "a", calls + 1,
                                       status, 4, "planner", v, 10, tool_calls={"calculator": calls} if calls else {}))
            p.apply(R.Reward(env(n, group_id=f"g{n // 4}", rollout_id=rid), score, R.RewardStatus.OK,
                             R.JudgeInfo("correct", "h"), 4, "planner", v, calls + 1, status))
        for g in range(4):
            p.apply(R.GroupClosed(env(n + g, group_id=f"c{v}{g}{n}"), R.GroupStatus.COMPLETE, 4, 4, score, 0.0,
                                  "grpo", trains, "complete", v))
    alarms = p.summary()["health"]["alarms"]
    assert len(alarms) == 3 and "answered rate up 0.50 -> 1.00" in alarms[0], alarms
    assert "ALARM: answered rate up" in p.line()
    assert p.summary()["health"]["per_version"]["6"]["zero_variance_share"] == 1.0


def test_the_report_states_the_heldout_change_with_its_ci_overall_and_per_kind() -> None:
    from streamgrpo.cli.report import heldout_change
    from streamgrpo.evaluation.core import Outcome

    def outcomes(correct: list[bool]) -> list[Outcome]:
        return [Outcome(i, "arithmetic" if i < 4 else "lookup", c, True, 2, 1, 10, 2, 0) for i, c in enumerate(correct)]

    base = outcomes([True, False, False, False, False, False])
    last = outcomes([True, True, True, False, False, False])
    change = heldout_change(base, last)
    assert change["tasks"] == 6 and change["mean"] == 2 / 6 and change["ci_low"] < change["mean"] < change["ci_high"]
    assert change["per_kind"]["arithmetic"]["mean"] == 0.5 and change["per_kind"]["lookup"]["mean"] == 0.0
    assert change["line"].startswith("+33.3 points [") and "arithmetic +50.0, lookup +0.0" in change["line"]
