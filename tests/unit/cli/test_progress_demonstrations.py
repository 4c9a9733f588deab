"""The run's progress line and report tell the warm start apart: demonstrations requested, executed, trained on and
dead-lettered by reason, the warm-start versions; and none of a demonstration's facts enters a version's figures."""

from __future__ import annotations

import json
from pathlib import Path

from streamgrpo.avro import records as R
from streamgrpo.cli.progress import Progress
from streamgrpo.cli.report import write_report
from streamgrpo.lifecycle.stats import Stats

SOURCE = "builtin-expert"
DEMO = R.Demonstration(['{"tool": "calculator", "input": "6*7"}', '{"answer": "42"}'], SOURCE)
SAMPLING = R.SamplingParams(0.7, 1.0, 48)


def env(**ids: str) -> R.Envelope:
    return R.Envelope.new("test", **ids)


def demo_events(i: int, correct: bool) -> list[R.Event]:
    g, r = f"dg{i}", f"dg{i}-0"
    return [
        R.Task(env(task_id=f"dt{i}"), "What is 6 times 7?", "builtin", 1, ["42"], demonstration=DEMO),
        R.RolloutRequest(env(task_id=f"dt{i}", group_id=g, rollout_id=r), "What is 6 times 7?", "builtin", 0, 1,
                         "planner", 0, 3, SAMPLING, demonstration=DEMO),
        R.RolloutCompleted(env(task_id=f"dt{i}", group_id=g, rollout_id=r), "q", "builtin", "42" if correct else "4",
                           2, R.RolloutStatus.ANSWERED, 1, "planner", 0, 5, demo_source=SOURCE),
        R.Reward(env(task_id=f"dt{i}", group_id=g, rollout_id=r), 1.0 if correct else 0.0, R.RewardStatus.OK,
                 R.JudgeInfo("correct", "h"), 1, "planner", 0, 2, R.RolloutStatus.ANSWERED, demo_source=SOURCE),
        R.GroupClosed(env(task_id=f"dt{i}", group_id=g), R.GroupStatus.COMPLETE, 1, 1, 1.0 if correct else 0.0, 0.0,
                      "grpo", correct, "demonstration" if correct else "demonstration_rejected", 0),
    ] + ([R.TrainingSample(env(group_id=g, rollout_id=r), [R.SampleTurn(1, [1], [2], [0.0])], 1.0, 1.0, 1.0, 0.0, 1,
                           "grpo", "planner", 0, SAMPLING, demo_source=SOURCE)] if correct else
         [R.DeadLetter(env(), "rollouts", 0, i, "demonstration_wrong", "answer '4' scored 0.0", "judge")])


def policy_events() -> list[R.Event]:
    return [
        R.Task(env(task_id="t"), "What is 2+2?", "builtin", 2, ["4"]),
        R.RolloutCompleted(env(task_id="t", group_id="g", rollout_id="g-0"), "q", "builtin", "4", 1,
                           R.RolloutStatus.ANSWERED, 2, "planner", 1, 5),
        R.Reward(env(task_id="t", group_id="g", rollout_id="g-0"), 0.0, R.RewardStatus.OK, R.JudgeInfo("correct", "h"),
                 2, "planner", 1, 1, R.RolloutStatus.ANSWERED),
        R.AdapterPublished(env(), "planner", 1, "file:///s/v1", "0" * 64, "base", 1, [],
                           metrics={"warm_start": 1.0, "demonstrations": 8.0}),
        R.AdapterPublished(env(), "planner", 2, "file:///s/v2", "0" * 64, "base", 2, [], parent_version=1,
                           metrics={"warm_start": 0.0, "rollouts": 8.0}),
    ]


def test_the_warm_start_is_shown_apart_and_never_in_a_versions_figures(tmp_path: Path) -> None:
    p = Progress()
    stats = Stats()
    for e in demo_events(0, True) + demo_events(1, False) + policy_events():
        p.apply(e)
        stats.apply(e)
    line = p.line()
    assert line.startswith("demos 2/2 executed, 1 trained, 1 rejected (demonstration_wrong 1) | warm start v1-v1 | ")
    assert "tasks 1 | rollouts 1 | groups 0 (0 trained)" in line and "samples 0" in line
    assert set(p.per_version) == {1} and p.per_version[1].count == 1  # v0 served only demonstrations
    assert stats.of("planner", 0).rewards == 0 and stats.of("planner", 0).rollouts == 0
    assert stats.of("planner", 1).rewards == 1
    write_report(p, tmp_path, [])
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["demonstrations"] == {"requested": 2, "executed": 2, "trained": 1,
                                         "rejected": {"demonstration_wrong": 1}, "warm_start_versions": [1]}


def test_warm_start_versions_are_not_counted_as_never_served(tmp_path: Path) -> None:
    """A warm-start version is published while only demonstrations run: no policy rollout is owed to it."""
    p = Progress()
    for v in (1, 2):
        p.apply(R.AdapterPublished(env(), "planner", v, f"file:///s/v{v}", "0" * 64, "base", v, [],
                                   parent_version=v - 1 or None, metrics={"warm_start": 1.0, "demonstrations": 8.0}))
    for v in (3, 4):
        p.apply(R.AdapterPublished(env(), "planner", v, f"file:///s/v{v}", "0" * 64, "base", v, [], parent_version=v - 1,
                                   metrics={"warm_start": 0.0, "rollouts": 8.0}))
    p.apply(R.RolloutCompleted(env(task_id="t", group_id="g", rollout_id="g-0"), "q", "builtin", "4", 1,
                               R.RolloutStatus.ANSWERED, 2, "planner", 3, 5))
    loop = p.loop_closure()
    assert loop["never_served"] == [4] and loop["warm_start_versions"] == 2 and loop["versions_served"] == 1
    write_report(p, tmp_path, [])
    assert ("(never served: [4]; 2 warm-start versions, trained on demonstrations, not counted)"
            in (tmp_path / "summary.md").read_text())
