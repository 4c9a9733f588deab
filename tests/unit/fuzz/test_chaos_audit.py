"""The chaos campaign's audit (tests/support/chaos.py) on hand-built topic contents: a clean history audits to
0 lost, and each way of losing or double-training something is caught (a lost group, a missing sample, a
lineage gap or overlap, a repeated sample the trainer did not drop, two different closures of one group)."""

from __future__ import annotations

from collections.abc import Iterable

from support.chaos import audit

from streamgrpo.avro import ids
from streamgrpo.avro import records as R
from streamgrpo.topics.received import Received

NOW_MS = 10_000_000
SP = R.SamplingParams()


def _rec(topic: str, events: Iterable[R.Event], ts_ms: int = NOW_MS, partition: int = 0) -> list[Received]:
    return [Received(e, topic, partition, i, None, b"", ts_ms) for i, e in enumerate(events)]


def _task(tid: str) -> R.Task:
    return R.Task(R.Envelope.new("t", task_id=tid), "q", "math", 2)


def _request(tid: str, i: int) -> R.RolloutRequest:
    gid = ids.group_id(tid)
    return R.RolloutRequest(R.Envelope.new("s", task_id=tid, group_id=gid, rollout_id=ids.rollout_id(gid, i)), "q",
                            "math", i, 2, "planner", 0, 4, SP)


def _closed(tid: str, trains: bool = True, event_id: str | None = None) -> R.GroupClosed:
    gid = ids.group_id(tid)
    return R.GroupClosed(R.Envelope.new("s", task_id=tid, group_id=gid, event_id=event_id or ids.group_closed_id(gid)),
                         R.GroupStatus.COMPLETE, 2, 2, 0.5, 0.5, "grpo", trains, "ok", 0, samples=2 if trains else 0)


def _sample(tid: str, i: int) -> R.TrainingSample:
    gid = ids.group_id(tid)
    rid = ids.rollout_id(gid, i)
    return R.TrainingSample(R.Envelope.new("s", task_id=tid, group_id=gid, rollout_id=rid, event_id=ids.sample_id(rid)),
                            [R.SampleTurn(1, [1], [2], [-0.5])], 1.0, 1.0, 0.5, 0.5, 2, "grpo", "planner", 0)


def _published(version: int, start: int, end: int, duplicates: int = 0) -> R.AdapterPublished:
    return R.AdapterPublished(R.Envelope.new("tr"), "planner", version, "file:///x", "0" * 64, "base", version,
                              [R.OffsetRange("training-samples", 0, start, end)],
                              metrics={"dropped_duplicate": float(duplicates)})


def _history(**override: list[Received]) -> dict[str, list[Received]]:
    records = {
        "tasks": _rec("tasks", [_task("a"), _task("b"), _task("c")]),
        "rollout-requests": _rec("rollout-requests", [_request("a", 0), _request("a", 1), _request("b", 0)]),
        "groups": _rec("groups", [_closed("a"), _closed("a"), _closed("b", trains=False)]),  # "a": a repeated copy
        "training-samples": _rec("training-samples", [_sample("a", 0), _sample("a", 1)]),
        "adapter-events": _rec("adapter-events", [_published(1, 0, 1)]),
    }
    return {**records, **override}


def test_a_clean_history_has_nothing_lost() -> None:
    a = audit(_history(), end_ms=NOW_MS, group_timeout_s=60)
    assert a.lost == 0, a
    assert (a.tasks, a.groups_closed, a.closure_repeats, a.queued, a.trained_groups) == (3, 2, 1, 1, 1)
    assert (a.samples, a.samples_in_lineage, a.samples_pending, a.versions) == (2, 2, 0, 1)


def test_an_old_requested_group_never_closed_is_lost_a_young_one_is_in_flight() -> None:
    requests = _rec("rollout-requests", [_request("a", 0), _request("c", 0)], ts_ms=NOW_MS - 200_000)
    old = audit(_history(**{"rollout-requests": requests}), end_ms=NOW_MS, group_timeout_s=60)
    assert old.lost_groups == [ids.group_id("c")] and old.lost == 1
    young = audit(_history(**{"rollout-requests": requests}), end_ms=NOW_MS - 150_000, group_timeout_s=60)
    assert young.lost == 0 and young.in_flight == 1


def test_a_missing_sample_of_a_training_group_is_lost() -> None:
    a = audit(_history(**{"training-samples": _rec("training-samples", [_sample("a", 0)]),
                          "adapter-events": _rec("adapter-events", [_published(1, 0, 0)])}),
              end_ms=NOW_MS, group_timeout_s=60)
    assert len(a.missing_samples) == 1 and a.lost == 1


def test_a_lineage_gap_and_a_lineage_overlap_are_caught() -> None:
    samples = _rec("training-samples", [_sample("a", 0), _sample("a", 1), _sample("b", 0)])
    gap = audit(_history(**{"training-samples": samples,
                            "adapter-events": _rec("adapter-events", [_published(1, 0, 0), _published(2, 2, 2)])}),
                end_ms=NOW_MS, group_timeout_s=60)
    assert gap.lineage_gaps == ["p0@1"]
    overlap = audit(_history(**{"adapter-events": _rec("adapter-events", [_published(1, 0, 1), _published(2, 1, 1)])}),
                    end_ms=NOW_MS, group_timeout_s=60)
    assert len(overlap.lineage_overlaps) == 1 and overlap.lost >= 1
    pending = audit(_history(**{"adapter-events": _rec("adapter-events", [_published(1, 0, 0)])}),
                    end_ms=NOW_MS, group_timeout_s=60)
    assert pending.lost == 0 and pending.samples_pending == 1


def test_a_repeated_sample_must_be_dropped_as_a_duplicate() -> None:
    samples = _rec("training-samples", [_sample("a", 0), _sample("a", 1), _sample("a", 1)])
    trained_twice = audit(_history(**{"training-samples": samples,
                                      "adapter-events": _rec("adapter-events", [_published(1, 0, 1),
                                                                                _published(2, 2, 2)])}),
                          end_ms=NOW_MS, group_timeout_s=60)
    assert trained_twice.repeats_consumed == 1 and trained_twice.undeduplicated_repeats == 1
    dropped = audit(_history(**{"training-samples": samples,
                                "adapter-events": _rec("adapter-events", [_published(1, 0, 2, duplicates=1)])}),
                    end_ms=NOW_MS, group_timeout_s=60)
    assert dropped.lost == 0 and dropped.sample_repeats == 1


def test_a_rollout_a_timed_out_group_missed_is_late_if_it_completed_else_lost() -> None:
    gid = ids.group_id("b")
    timed_out = R.GroupClosed(R.Envelope.new("s", task_id="b", group_id=gid, event_id=ids.group_closed_id(gid)),
                              R.GroupStatus.TIMED_OUT, 2, 0, 0.0, 0.0, "grpo", False, "timed_out", 0,
                              missing_rollout_ids=[ids.rollout_id(gid, 0), ids.rollout_id(gid, 1)], samples=0)
    completed = R.RolloutCompleted(R.Envelope.new("w", task_id="b", group_id=gid, rollout_id=ids.rollout_id(gid, 0)),
                                   "q", "math", "1", 1, R.RolloutStatus.ANSWERED, 2, "planner", 0, 5)
    a = audit(_history(groups=_rec("groups", [_closed("a"), timed_out]), rollouts=_rec("rollouts", [completed])),
              end_ms=NOW_MS, group_timeout_s=60)
    assert (a.timed_out_groups, a.late_rollouts, a.lost_rollouts, a.lost) == (1, 1, 1, 1)


def test_two_different_closures_of_one_group_conflict() -> None:
    groups = _rec("groups", [_closed("a"), _closed("a", event_id="other"), _closed("b", trains=False)])
    a = audit(_history(groups=groups), end_ms=NOW_MS, group_timeout_s=60)
    assert a.conflicting_closures == [ids.group_id("a")] and a.lost == 1
