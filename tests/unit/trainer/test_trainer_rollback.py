"""Rollback rules of the trainer (pure): what to continue from, lineage staleness, samples of discarded versions."""

from __future__ import annotations

from support.samples import make_samples
from support.tiny_model import tiny_model

from streamgrpo.avro import records as R
from streamgrpo.lifecycle.registry import AdapterRegistry
from streamgrpo.trainer.rollback import drop_reason_for, restore_target, versions_behind


def pub(v: int, parent: int | None) -> R.AdapterPublished:
    return R.AdapterPublished(R.Envelope.new("trainer"), "planner", v, f"file:///a/{v}", "0" * 64, "b", v, [],
                              parent_version=parent)


def registry() -> AdapterRegistry:
    """v1 <- v2 <- v3 promoted to v2, v3 rolled back, then v4 trained from v2."""
    reg = AdapterRegistry(0.5)
    for v, parent in ((1, None), (2, 1), (3, 2)):
        reg.apply(pub(v, parent))
    reg.apply(R.AdapterPromoted(R.Envelope.new("ab-controller"), "planner", 2, 0, "better"))
    reg.apply(R.AdapterRolledBack(R.Envelope.new("ab-controller"), "planner", 3, 2, "worse"))
    return reg


def test_restore_target_is_the_primary_only_when_the_weights_were_discarded() -> None:
    line = registry().line("planner")
    assert restore_target(line, 3) == 2
    assert restore_target(line, 2) is None and restore_target(line, 0) is None


def test_staleness_is_counted_along_the_lineage_after_a_rollback() -> None:
    reg = registry()
    reg.apply(pub(4, 2))
    line = reg.line("planner")
    assert versions_behind(line, 4, 2) == 1  # not 4 - 2
    assert versions_behind(line, 4, 1) == 2 and versions_behind(line, 4, 4) == 0
    assert versions_behind(line, 4, 0) == 3  # the base model is every chain's root


def test_samples_of_rolled_back_versions_are_dropped_and_others_checked_by_lineage() -> None:
    reg = registry()
    reg.apply(pub(4, 2))
    line = reg.line("planner")
    _, tok = tiny_model(0)
    of = {v: make_samples(tok, 1, seed=v, behaviour_version=v)[0] for v in (0, 2, 3)}
    assert drop_reason_for(of[3], line, 4, max_staleness=1) == "rolled_back"
    assert drop_reason_for(of[2], line, 4, max_staleness=1) is None
    assert drop_reason_for(of[0], line, 4, max_staleness=1) == "stale"
    assert drop_reason_for(of[3], None, 4, max_staleness=1) is None  # no registry: the number check elsewhere
