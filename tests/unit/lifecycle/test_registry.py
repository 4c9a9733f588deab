"""The one fold of adapter-events (pure): announcements, primary, canary, the whole lifecycle, one meaning of primary."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from streamgrpo.avro import records as R
from streamgrpo.lifecycle.registry import (
    AdapterRegistry,
    Announced,
    PrimaryChanged,
    RegistryState,
    RolledBack,
    ancestors,
    apply,
)

S = R.AdapterStatus
T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


def env(service: str = "ab-controller", at: int = 0) -> R.Envelope:
    e = R.Envelope.new(service)
    return R.Envelope(e.event_id, T0 + timedelta(seconds=at), e.producer)


def published(version: int, name: str = "planner", parent: int | None = -1, at: int = 0) -> R.AdapterPublished:
    parent = version - 1 if parent == -1 else parent
    return R.AdapterPublished(env("trainer", at), name, version, f"file:///a/{version}", "0" * 64, "base",
                              version, [R.OffsetRange("training-samples", 0, 8 * version - 8, 8 * version - 1)],
                              parent_version=parent or None)


def promoted(version: int, at: int = 0) -> R.AdapterPromoted:
    return R.AdapterPromoted(env(at=at), "planner", version, 0, "better")


def rolled_back(version: int, restored: int, at: int = 0) -> R.AdapterRolledBack:
    return R.AdapterRolledBack(env(at=at), "planner", version, restored, "worse")


def verdict(version: int, primary: int, action: str, at: int = 0) -> R.AdapterVerdict:
    return R.AdapterVerdict(env(at=at), "planner", version, primary, "better", action, "why")


def statuses(reg: AdapterRegistry) -> dict[int, S]:
    line = reg.line("planner")
    return {v: reg.status("planner", v) for v in sorted({0, *line.announced})}


def test_without_canary_every_published_version_is_primary_at_once() -> None:
    reg = AdapterRegistry(canary_share=0.0)
    assert reg.primary("planner") == 0
    first = reg.apply(published(1))
    assert first == [Announced(reg.state.announcement("planner", 1)), PrimaryChanged("planner", 1)]
    reg.apply(published(2))
    line = reg.line("planner")
    assert (line.primary, line.canary, line.latest) == (2, None, 2)
    assert reg.apply(published(2)) == []  # a redelivery changes nothing
    assert reg.state.announcement("planner", 2).lineage[0].end == 15
    assert statuses(reg) == {0: S.RETIRED, 1: S.RETIRED, 2: S.PRIMARY}


def test_newest_version_is_the_canary_and_older_candidates_stay_in_the_test() -> None:
    reg = AdapterRegistry(canary_share=0.5)
    reg.apply(published(1, at=10))
    line = reg.line("planner")
    assert (line.primary, line.canary, line.candidates, line.test_since) == (0, 1, [1], T0 + timedelta(seconds=10))
    reg.apply(published(2, at=20))
    line = reg.line("planner")
    assert (line.canary, line.candidates) == (2, [1, 2])
    assert line.test_since == T0 + timedelta(seconds=10)  # the test of the line goes on: evidence pooled
    assert statuses(reg) == {0: S.PRIMARY, 1: S.CANDIDATE, 2: S.CANARY}


def test_promotion_retires_older_versions_and_ends_the_test() -> None:
    reg = AdapterRegistry(canary_share=0.5)
    reg.apply(published(1))
    reg.apply(published(2))
    assert reg.apply(promoted(2, at=30)) == [PrimaryChanged("planner", 2)]
    line = reg.line("planner")
    assert (line.primary, line.canary, line.test_since) == (2, None, None)
    assert statuses(reg) == {0: S.RETIRED, 1: S.RETIRED, 2: S.PRIMARY}
    assert [d.kind for d in line.history[0]] == ["superseded"]
    reg.apply(published(3, at=40))  # the next publication starts the next test
    assert reg.line("planner").test_since == T0 + timedelta(seconds=40)


def test_rollback_of_a_candidate_discards_the_whole_line_and_keeps_the_primary() -> None:
    reg = AdapterRegistry(canary_share=0.5)
    for v in (1, 2, 3):
        reg.apply(published(v))
    reg.apply(promoted(1))
    changes = reg.apply(rolled_back(3, restored=1))
    assert changes == [RolledBack("planner", frozenset({2, 3}), 1)]
    line = reg.line("planner")
    assert (line.primary, line.canary, line.candidates) == (1, None, [])
    assert statuses(reg) == {0: S.RETIRED, 1: S.PRIMARY, 2: S.ROLLED_BACK, 3: S.ROLLED_BACK}
    assert not line.serves(3) and line.serves(1)
    assert line.history[2][-1].reason.startswith("with v3")


def test_rollback_of_the_primary_restores_an_older_version_and_discards_everything_above_it() -> None:
    reg = AdapterRegistry(canary_share=0.5)
    for v in (1, 2, 3, 4):
        reg.apply(published(v))
    reg.apply(promoted(3))
    assert reg.apply(rolled_back(3, restored=1)) == [RolledBack("planner", frozenset({2, 3, 4}), 1),
                                                     PrimaryChanged("planner", 1)]
    assert statuses(reg) == {0: S.RETIRED, 1: S.PRIMARY, 2: S.ROLLED_BACK, 3: S.ROLLED_BACK, 4: S.ROLLED_BACK}
    reg.apply(rolled_back(1, restored=0))
    assert reg.primary("planner") == 0


def test_a_version_trained_from_a_rolled_back_parent_is_born_rolled_back() -> None:
    reg = AdapterRegistry(canary_share=0.5)
    reg.apply(published(1))
    reg.apply(rolled_back(1, restored=0))
    changes = reg.apply(published(2, parent=1))  # the trainer published before it saw the rollback
    assert RolledBack("planner", frozenset({2}), 0) in changes
    assert reg.line("planner").canary is None and reg.status("planner", 2) == S.ROLLED_BACK
    assert reg.line("planner").history[2][-1].by == "registry"
    reg.apply(published(3, parent=None))  # the trainer continued from the primary (the base model)
    assert reg.line("planner").canary == 3
    assert reg.apply(published(1)) == []  # a rolled-back version never comes back


def test_approval_gate_rejection_and_restart() -> None:
    reg = AdapterRegistry(canary_share=0.5)
    reg.apply(published(1))
    reg.apply(published(2))
    approve = R.AdapterApproved(env(), "planner", 2, "human:ada", "ok")
    assert reg.apply(approve) == []  # not awaiting approval: only history
    assert reg.line("planner").history[2][-1].kind == "ignored"
    reg.apply(verdict(2, 0, "await_approval", at=50))
    assert statuses(reg) == {0: S.PRIMARY, 1: S.RETIRED, 2: S.AWAITING_APPROVAL}
    assert reg.line("planner").canary == 2  # it keeps serving the canary share while it waits
    reg.apply(published(3, at=60))
    assert reg.line("planner").candidates == [3] and reg.line("planner").test_since == T0 + timedelta(seconds=60)
    assert reg.apply(R.AdapterApproved(env(), "planner", 2, "human:ada", "ok")) == [PrimaryChanged("planner", 2)]
    assert statuses(reg)[2] == S.PRIMARY and reg.line("planner").canary == 3
    reg.apply(verdict(3, 2, "restart", at=70))  # a fresh test of v3, nothing retired (it is the only candidate)
    assert reg.line("planner").test_since == T0 + timedelta(seconds=70) and reg.status("planner", 3) == S.CANARY
    reg.apply(published(4))
    assert reg.apply(R.AdapterRejected(env(), "planner", 4, "human:bob", "bad")) == [
        RolledBack("planner", frozenset({3, 4}), 2)]
    assert statuses(reg) == {0: S.RETIRED, 1: S.RETIRED, 2: S.PRIMARY, 3: S.ROLLED_BACK, 4: S.REJECTED}
    assert reg.apply(R.AdapterRejected(env(), "planner", 2, "human:bob", "no")) == []  # the primary: history only
    assert reg.primary("planner") == 2


def test_stale_verdicts_and_promotions_of_discarded_versions_are_ignored() -> None:
    reg = AdapterRegistry(canary_share=0.5)
    reg.apply(published(1))
    reg.apply(rolled_back(1, 0))
    reg.apply(promoted(1))
    assert reg.primary("planner") == 0 and reg.line("planner").history[1][-1].kind == "ignored"
    reg.apply(published(2, parent=None))
    reg.apply(verdict(2, primary=7, action="await_approval"))
    assert reg.status("planner", 2) == S.CANARY


def test_redelivered_decisions_are_folded_once() -> None:
    reg = AdapterRegistry(canary_share=0.5)
    reg.apply(published(1))
    event = promoted(1)
    reg.apply(event)
    assert reg.apply(event) == [] and [d.kind for d in reg.line("planner").history[1]] == ["published", "promoted"]


def test_names_are_separate_and_other_events_are_ignored() -> None:
    state, changes = apply(RegistryState(), published(1, name="other", parent=None), 0.0)
    assert state.line("other").primary == 1 and state.line("planner").primary == 0
    same, none = apply(state, R.Task(R.Envelope.new("t"), "q", "s", 2), 0.0)
    assert same is state and none == []


def test_the_fold_is_pure_and_ancestors_follow_parents() -> None:
    s0 = RegistryState()
    s1, _ = apply(s0, published(1), 0.0)
    assert s0.lines == {} and s1.line("planner").primary == 1
    reg = AdapterRegistry(0.5)
    for event in (published(1), published(2), published(3, parent=1)):
        reg.apply(event)
    assert ancestors(reg.line("planner"), 3) == [1, 0] and ancestors(reg.line("planner"), 2) == [1, 0]
