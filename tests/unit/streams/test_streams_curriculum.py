"""The curriculum's pure core: requeue tasks whose groups carry signal, park the rest, retire spent ones."""

from __future__ import annotations

from streamgrpo.avro import ids
from streamgrpo.avro import records as R
from streamgrpo.streams.curriculum import Curriculum, CurriculumPolicy


def task(task_id: str, **meta: str) -> R.Task:
    return R.Task(envelope=R.Envelope.new("test", task_id=task_id), question=f"q {task_id}", source="builtin",
                  group_size=4, ground_truths=["1"], metadata={"kind": "arithmetic", **meta})


def closed(t: R.Task, attempt: int, mean: float, trains: bool) -> R.GroupClosed:
    gid = ids.group_id(t.envelope.task_id or "", attempt)
    return R.GroupClosed(envelope=R.Envelope.new("test", task_id=t.envelope.task_id, group_id=gid),
                         status=R.GroupStatus.COMPLETE, expected=4, received=4, reward_mean=mean,
                         reward_std=0.5 if trains else 0.0, estimator="grpo", trains=trains, reason="",
                         adapter_version=0)


def test_a_task_with_signal_is_requeued_ahead_until_its_budget_then_retired() -> None:
    cur = Curriculum(CurriculumPolicy(requeue_max=3, park_after=100))
    t = task("a")
    cur.remember(t, 0)
    assert cur.next_due() is None  # nothing closed yet
    decision = cur.closed(closed(t, 0, 0.5, True))
    assert decision is not None and decision.action == "requeue" and decision.groups == 1
    again = cur.next_due()
    assert again is not None and ids.attempt_of(again.metadata) == 1
    assert again.metadata["curriculum"] == "requeue" and again.metadata["pass_rate"] == "0.500"
    assert again.metadata["kind"] == "arithmetic" and again.question == t.question
    assert cur.next_due() is None  # taken once
    cur.remember(again, 1)
    assert cur.closed(closed(t, 1, 0.25, True)).action == "requeue"
    third = cur.next_due()
    assert ids.attempt_of(third.metadata) == 2
    cur.remember(third, 2)
    assert cur.closed(closed(t, 2, 0.75, True)).action == "retire"  # 3 groups: the budget is spent
    assert cur.next_due() is None and cur.pending == 0


def test_a_task_without_signal_is_parked_and_retried_after_other_groups() -> None:
    cur = Curriculum(CurriculumPolicy(park_after=3, park_retries=1))
    t = task("z")
    cur.remember(t, 0)
    assert cur.closed(closed(t, 0, 0.0, False)).action == "park"
    others = [task(f"o{i}") for i in range(3)]
    for i, o in enumerate(others[:2]):
        cur.remember(o, 0)
        assert cur.next_due() is None, i  # not due before park_after more admissions
    cur.remember(others[2], 0)
    retry = cur.next_due()
    assert retry is not None and retry.envelope.task_id == "z" and retry.metadata["curriculum"] == "retry"
    assert ids.attempt_of(retry.metadata) == 1
    cur.remember(retry, 1)
    assert cur.closed(closed(t, 1, 1.0, False)).action == "retire"  # one retry only


def test_requeues_come_before_due_retries_and_in_closing_order() -> None:
    cur = Curriculum(CurriculumPolicy(park_after=0))
    a, b, c = task("a"), task("b"), task("c")
    for t in (a, b, c):
        cur.remember(t, 0)
    cur.closed(closed(c, 0, 0.0, False))  # parked, due at once
    cur.closed(closed(b, 0, 0.5, True))
    cur.closed(closed(a, 0, 0.25, True))
    order = [cur.next_due().envelope.task_id for _ in range(3)]
    assert order == ["b", "a", "c"] and cur.next_due() is None


def test_groups_it_did_not_fan_out_or_duplicates_are_ignored() -> None:
    cur = Curriculum()
    t = task("a")
    assert cur.closed(closed(t, 0, 0.5, True)) is None  # not remembered: another worker's task
    cur.remember(t, 0)
    assert cur.closed(closed(t, 3, 0.5, True)) is None  # not its open group
    assert cur.closed(closed(t, 0, 0.5, True)) is not None
    assert cur.closed(closed(t, 0, 0.5, True)) is None  # the same group again


def test_disabled_it_decides_nothing_and_memory_is_bounded() -> None:
    off = Curriculum(CurriculumPolicy(enabled=False))
    t = task("a")
    off.remember(t, 0)
    assert off.closed(closed(t, 0, 0.5, True)) is None and off.next_due() is None
    small = Curriculum(CurriculumPolicy(max_tasks=2))
    for i in range(5):
        small.remember(task(f"t{i}"), 0)
    assert small.closed(closed(task("t0"), 0, 0.5, True)) is None  # forgotten
    assert small.closed(closed(task("t4"), 0, 0.5, True)).action == "requeue"


def test_when_no_new_task_arrives_parked_tasks_are_retried_at_once() -> None:
    """A task source that ran dry (a small task file): the park_after clock counts admissions and would
    never advance, so an idle fan-out retries the parked tasks now."""
    cur = Curriculum(CurriculumPolicy(park_after=48))
    t = task("z")
    cur.remember(t, 0)
    assert cur.closed(closed(t, 0, 0.0, False)).action == "park"
    assert cur.next_due() is None  # 47 more admissions to go
    retry = cur.next_due(idle=True)
    assert retry is not None and retry.metadata["curriculum"] == "retry" and ids.attempt_of(retry.metadata) == 1
    assert cur.next_due(idle=True) is None and cur.pending == 0


def test_a_kind_without_signal_in_its_last_groups_runs_probe_groups_until_one_has_signal() -> None:
    """Three cold lookups in a row make the kind cold (cold_kind_groups=3): its next task runs as a probe group of
    2 (recorded in metadata), arithmetic keeps its full group; a probe with signal warms the kind up again."""
    cur = Curriculum(CurriculumPolicy(cold_kind_groups=3, probe_group_size=2, park_after=100))
    lookups = [task(f"l{i}", kind="lookup") for i in range(5)]
    for t in lookups[:3]:
        assert cur.sized(t) is t  # not cold yet: full groups
        cur.remember(t, 0)
        assert cur.closed(closed(t, 0, 0.0, False)).action == "park"
    probe = cur.sized(lookups[3])
    assert probe.group_size == 2 and probe.metadata["probe"] == "lookup" and cur.cold(lookups[3]) == "lookup"
    assert probe.envelope.task_id == "l3" and probe.question == lookups[3].question
    arithmetic = task("a0")
    assert cur.sized(arithmetic) is arithmetic and arithmetic.group_size == 4  # another kind keeps its group
    cur.remember(lookups[3], 0)  # the fan-out remembers the task as submitted (full group for its requeues)
    assert cur.closed(closed(lookups[3], 0, 0.5, True)).action == "requeue"
    assert cur.sized(lookups[4]) is lookups[4]  # one group with signal among the last 3: warm again
    again = cur.next_due()
    assert again is not None and again.group_size == 4 and "probe" not in again.metadata


def test_cold_kinds_off_and_small_groups_are_left_alone() -> None:
    off = Curriculum(CurriculumPolicy(cold_kind_groups=0))
    small = Curriculum(CurriculumPolicy(cold_kind_groups=1, probe_group_size=4))
    for cur in (off, small):
        t = task("x", kind="history")
        cur.remember(t, 0)
        cur.closed(closed(t, 0, 0.0, False))
        assert cur.sized(task("y", kind="history")).group_size == 4 and "probe" not in cur.sized(task("y")).metadata
    assert small.cold(task("y", kind="history")) == "history" and off.cold(task("y", kind="history")) is None


def fold(cur: Curriculum, t: R.Task, signal: bool) -> None:
    cur.remember(t, 0)
    cur.closed(closed(t, 0, 0.5 if signal else 0.0, signal))


def test_when_every_kind_is_cold_the_kind_with_the_latest_signal_keeps_full_groups() -> None:
    """Arithmetic had signal after lookup did; both then go cold. Without the setting both probe; with it,
    arithmetic (latest signal) runs its full group marked all_cold while lookup keeps probing, and as soon as
    another kind is warm again the kept kind probes like any cold kind."""
    for keep in (False, True):
        cur = Curriculum(CurriculumPolicy(cold_kind_groups=2, probe_group_size=2, park_after=100,
                                          all_cold_keeps_last=keep))
        fold(cur, task("l0", kind="lookup"), True)
        fold(cur, task("a0"), True)
        for i in (1, 2):
            fold(cur, task(f"l{i}", kind="lookup"), False)
            fold(cur, task(f"a{i}"), False)
        assert cur.cold(task("l9", kind="lookup")) == "lookup"
        lookup, arithmetic = cur.sized(task("l9", kind="lookup")), cur.sized(task("a9"))
        assert lookup.group_size == 2 and lookup.metadata["probe"] == "lookup"
        if keep:
            assert cur.kept() == "arithmetic" and cur.cold(task("a9")) is None
            assert arithmetic.group_size == 4 and arithmetic.metadata["all_cold"] == "arithmetic"
            assert "probe" not in arithmetic.metadata
        else:
            assert cur.kept() is None and cur.cold(task("a9")) == "arithmetic"
            assert arithmetic.group_size == 2 and "all_cold" not in arithmetic.metadata
        fold(cur, task("h0", kind="history"), False)  # a kind with too short a history counts as warm
        assert cur.kept() is None and cur.sized(task("a8")).group_size == 2


def test_a_kind_that_never_had_signal_is_never_kept() -> None:
    cur = Curriculum(CurriculumPolicy(cold_kind_groups=1, probe_group_size=2, all_cold_keeps_last=True))
    fold(cur, task("l0", kind="lookup"), False)
    fold(cur, task("a0"), False)
    assert cur.kept() is None and cur.sized(task("a1")).group_size == 2
    fold(cur, task("l1", kind="lookup"), True)  # lookup warm: nothing is kept, arithmetic probes
    assert cur.kept() is None and cur.sized(task("a2")).metadata["probe"] == "arithmetic"
    fold(cur, task("l2", kind="lookup"), False)  # all cold again: lookup had the latest signal
    assert cur.kept() == "lookup" and cur.sized(task("l3", kind="lookup")).group_size == 4


def test_an_absent_or_unreadable_attempt_is_the_first() -> None:
    """The fan-out's group id and the rollout's sampling seed both read the attempt through ``ids.attempt_of``."""
    assert ids.attempt_of({}) == 0
    assert ids.attempt_of({"attempt": "not a number"}) == 0
    assert ids.attempt_of({"attempt": "3", "curriculum": "retry"}) == 3


def test_kinds_are_capped_and_the_least_recently_seen_is_forgotten_first() -> None:
    """Issue 38, finding 16: tasks were capped (max_tasks), kinds were not: 200,000 tasks each with a kind of its
    own kept 200,000 kinds (182 MB). Kinds are capped at max_kinds; a kind is seen when a task of it is fanned out
    or a group of it closes, and the least recently seen is forgotten (it is warm again: full groups)."""
    cur = Curriculum(CurriculumPolicy(cold_kind_groups=1, probe_group_size=2, max_kinds=3))
    for kind in ("a", "b", "c"):
        fold(cur, task(f"{kind}0", kind=kind), False)
    assert [cur.cold(task("x", kind=k)) for k in "abc"] == ["a", "b", "c"] and cur.kinds == 3
    cur.remember(task("a1", kind="a"), 0)  # a task of kind a fanned out: a is the most recently seen now
    fold(cur, task("d0", kind="d"), False)  # a fourth kind: b, the least recently seen, is forgotten
    assert cur.kinds == 3
    assert [cur.cold(task("x", kind=k)) for k in "abcd"] == ["a", None, "c", "d"]
    assert cur.sized(task("b9", kind="b")).group_size == 4  # forgotten: warm again, its full group
    many = Curriculum(CurriculumPolicy(cold_kind_groups=1))
    for i in range(5_000):
        fold(many, task(f"t{i}", kind=f"k{i}"), False)
    assert many.kinds == CurriculumPolicy().max_kinds == 1_000
    assert many.cold(task("x", kind="k4999")) == "k4999" and many.cold(task("x", kind="k0")) is None


def test_a_forgotten_kind_loses_its_last_signal_too() -> None:
    """The kind kept when every kind is cold is forgotten with its signals: it is not kept afterwards."""
    cur = Curriculum(CurriculumPolicy(cold_kind_groups=1, probe_group_size=2, all_cold_keeps_last=True, max_kinds=2))
    fold(cur, task("l0", kind="lookup"), True)
    fold(cur, task("l1", kind="lookup"), False)
    fold(cur, task("a0"), False)
    assert cur.kept() == "lookup"
    fold(cur, task("h0", kind="history"), False)  # lookup, the least recently seen, is forgotten
    assert cur.kinds == 2 and cur.kept() is None and cur.cold(task("l2", kind="lookup")) is None
