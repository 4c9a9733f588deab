"""The one fold of adapter-events (pure): announcements, primary, canary, rollbacks; one meaning of primary."""

from __future__ import annotations

from streamgrpo.avro import records as R
from streamgrpo.models.registry import AdapterRegistry, Announced, PrimaryChanged, RegistryState, apply


def published(version: int, name: str = "planner") -> R.AdapterPublished:
    return R.AdapterPublished(R.Envelope.new("trainer"), name, version, f"file:///a/{version}", "0" * 64, "base",
                              version, [R.OffsetRange("training-samples", 0, 8 * version - 8, 8 * version - 1)])


def promoted(version: int) -> R.AdapterPromoted:
    return R.AdapterPromoted(R.Envelope.new("ab"), "planner", version, 0, "better")


def rolled_back(version: int, restored: int) -> R.AdapterRolledBack:
    return R.AdapterRolledBack(R.Envelope.new("ab"), "planner", version, restored, "worse")


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


def test_with_a_canary_promotion_and_rollback() -> None:
    reg = AdapterRegistry(canary_share=0.25)
    reg.apply(published(1))
    assert (reg.line("planner").primary, reg.line("planner").canary) == (0, 1)
    assert reg.apply(rolled_back(1, 0)) == []
    assert reg.line("planner").canary is None and 1 in reg.line("planner").rolled_back
    reg.apply(published(1))  # a rolled-back version never comes back as canary
    assert reg.line("planner").canary is None
    reg.apply(published(2))
    assert reg.apply(promoted(2)) == [PrimaryChanged("planner", 2)]
    assert (reg.line("planner").primary, reg.line("planner").canary) == (2, None)
    assert reg.apply(rolled_back(2, restored=0)) == [PrimaryChanged("planner", 0)]  # a primary rolled back


def test_names_are_separate_and_other_events_are_ignored() -> None:
    state, changes = apply(RegistryState(), published(3, name="other"), 0.0)
    assert state.line("other").primary == 3 and state.line("planner").primary == 0
    same, none = apply(state, R.Task(R.Envelope.new("t"), "q", "s", 2), 0.0)
    assert same is state and none == []


def test_the_fold_is_pure() -> None:
    s0 = RegistryState()
    s1, _ = apply(s0, published(1), 0.0)
    assert s0.lines == {} and s1.line("planner").primary == 1
