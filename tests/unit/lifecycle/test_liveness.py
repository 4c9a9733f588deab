"""The liveness rule (issue 38): a run that admits no group while tasks wait, or completes no rollout while groups
are in flight, for the bound has stalled; one that is busy, idle with nothing to do, or waiting less than the bound
has not. Real records, times from their envelopes (a replay says what the live run said)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from streamgrpo.avro import records as R
from streamgrpo.cli.progress import Progress
from streamgrpo.lifecycle.liveness import Liveness

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
NOW0 = T0.timestamp()


def env(seconds: float, **ids: str) -> R.Envelope:
    e = R.Envelope.new("test", **ids)
    return R.Envelope(e.event_id, T0 + timedelta(seconds=seconds), e.producer, e.task_id, e.group_id, e.rollout_id)


def task(at: float, tid: str, **metadata: str) -> R.Task:
    return R.Task(env(at, task_id=tid), f"q {tid}", "builtin", 2, ["1"], dict(metadata))


def request(at: float, tid: str, group: str) -> R.RolloutRequest:
    return R.RolloutRequest(env(at, task_id=tid, group_id=group, rollout_id=f"{group}-{at}"), "q", "builtin", 0, 2,
                            "planner", 0, 3, R.SamplingParams())


def completed(at: float, group: str) -> R.RolloutCompleted:
    return R.RolloutCompleted(env(at, group_id=group, rollout_id=f"r{at}"), "q", "builtin", "a", 1,
                              R.RolloutStatus.ANSWERED, 4, "planner", 0, 10)


def closed(at: float, group: str) -> R.GroupClosed:
    return R.GroupClosed(env(at, group_id=group), R.GroupStatus.COMPLETE, 2, 2, 0.5, 0.5, "grpo", True, "trains", 0)


def dead_task(at: float) -> R.DeadLetter:
    return R.DeadLetter(env(at), "run1.tasks", 0, 7, "invalid_task", "empty question", "streams.fanout")


def fold(events: list[R.Event], bound: float = 60.0) -> Liveness:
    live = Liveness(bound)
    for e in events:
        live.apply(e)
    return live


def test_no_admission_while_tasks_wait_is_a_stall_after_the_bound_only() -> None:
    live = fold([task(0, "a"), task(1, "b"), request(5, "a", "g1"), completed(8, "g1"), closed(9, "g1")])
    assert live.waiting == 1
    assert live.stalls(NOW0 + 64) == []  # 59 s since the last admission
    (stall,) = live.stalls(NOW0 + 70)
    assert stall.startswith("no group admitted for 65 s while 1 task(s) wait (liveness bound 60 s)")
    assert live.seen == [stall]
    live.apply(request(71, "b", "g2"))  # admitted again: live (the stall stays in what was seen)
    assert live.stalls(NOW0 + 72) == [] and live.seen == [stall]


def test_no_rollout_while_groups_are_in_flight_is_a_stall() -> None:
    live = fold([task(0, "a"), request(2, "a", "g1"), completed(4, "g1")])  # g1 waits for its second rollout
    assert live.waiting == 0 and live.stalls(NOW0 + 63) == []
    (stall,) = live.stalls(NOW0 + 65)
    assert stall.startswith("no rollout completed for 61 s while 1 group(s) are in flight")
    live.apply(completed(66, "g1"))
    live.apply(closed(66, "g1"))
    assert live.stalls(NOW0 + 300) == []  # nothing waits, nothing in flight: idle, not stalled


def test_the_clock_of_a_late_task_starts_when_it_arrives_not_at_the_last_admission() -> None:
    live = fold([task(0, "a"), request(1, "a", "g1"), completed(2, "g1"), completed(3, "g1"), closed(3, "g1"),
                 task(500, "b")])
    assert live.stalls(NOW0 + 550) == []  # b has waited 50 s
    assert live.stalls(NOW0 + 561)[0].startswith("no group admitted for 61 s")


def test_refused_served_elsewhere_and_redelivered_tasks_do_not_wait() -> None:
    live = fold([task(0, "a"), task(0, "s", served_by="serve"), dead_task(1), task(0, "a2"),
                 request(2, "a", "g1"), request(2, "a", "g1"), completed(3, "g1"), completed(3, "g1"), closed(4, "g1")])
    live.apply(request(2, "a", "g1b"))  # the curriculum's second attempt of the same task
    live.apply(completed(5, "g1b"))
    live.apply(completed(5, "g1b"))
    live.apply(closed(5, "g1b"))
    assert live.submitted == 2 and live.refused == 1 and live.started == 1 and live.waiting == 0
    assert live.stalls(NOW0 + 10_000) == []


def test_the_progress_line_and_report_say_stalled() -> None:
    p = Progress(liveness=Liveness(60))
    for e in [task(0, "a"), request(1, "a", "g1")]:
        p.apply(e, t=NOW0)
    assert p.stalls(NOW0 + 30) == []
    assert p.stalls(NOW0 + 100)[0].startswith("no rollout completed for 99 s")
    assert "| STALLED: no rollout completed for" in p.line()  # the wall clock: long after 2026-01-01
    assert p.summary()["health"]["stalls"] == p.liveness.seen and len(p.liveness.seen) == 1
