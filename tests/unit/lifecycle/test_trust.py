"""Lifecycle events are not trusted as they come (issue 38, findings 1-4), on the pure fold and the fan-out's view.

1. A forged announcement 64 versions past the newest was accepted; once rolled back it stayed the line's newest, so
   the real trainer's next versions were refused and their dequeued samples never counted: admission stalled.
2. A forged ``samples_dequeued = -10**12`` was counted into the fan-out's queue: admission waited for ever.
3. ``AdapterPromoted`` of a version never announced (v99999, v-1) became the primary.
4. ``AdapterRolledBack`` by any writer rolled the whole line back to v0.

Each test fails on the code before the fix (checked by running it there). What is not covered here: the dead
letters on the real broker (tests/integration/test_adapter_trust.py).
"""

from __future__ import annotations

import math

import pytest

from streamgrpo.avro import records as R
from streamgrpo.lifecycle import published, writers
from streamgrpo.lifecycle.actions import promote, rollback
from streamgrpo.lifecycle.pacing import Pacing, admit
from streamgrpo.lifecycle.registry import AdapterRegistry, Refused
from streamgrpo.streams.ab_controller import SERVICE, files_rollback
from streamgrpo.streams.follower import LoopView

LINEAGE = [R.OffsetRange("training-samples", 0, 0, 7)]  # 8 records


def pub(version: int, parent: int | None, sha: str = "ab" * 32, **facts: object) -> R.AdapterPublished:
    fields: dict[str, object] = {"drops": {}, "samples_dequeued": 8, "max_staleness": 1, "auto_promote": True, **facts}
    return R.AdapterPublished(R.Envelope.new("trainer"), "planner", version, f"file:///a/{version}", sha, "base",
                              version, list(LINEAGE), parent_version=parent, **fields)  # type: ignore[arg-type]


def line_of(n: int, canary_share: float = 0.0) -> AdapterRegistry:
    reg = AdapterRegistry(canary_share)
    for v in range(1, n + 1):
        assert not [c for c in reg.apply(pub(v, v - 1 or None, auto_promote=canary_share <= 0))
                    if isinstance(c, Refused)]
    return reg


def refusals(changes: list[object]) -> list[Refused]:
    return [c for c in changes if isinstance(c, Refused)]


# -- finding 1: a version that skips numbers is refused, and the real trainer's next one is not --------------------

@pytest.mark.parametrize("jump", [2, 64])
def test_a_version_past_the_next_is_refused_and_the_trainers_next_version_is_accepted(jump: int) -> None:
    view = LoopView(canary_share=0.0)
    for v in (1, 2):
        view.apply(pub(v, v - 1 or None))
    [refused] = view.apply(pub(2 + jump, 2, sha="0" * 64))
    assert refused.version == 2 + jump and "skips v3" in refused.reason
    line = view.adapters("planner")
    assert (line.latest, line.primary) == (2, 2) and 2 + jump not in line.announced
    assert view.apply(pub(3, 2)) == []  # the real trainer's next version
    line = view.adapters("planner")
    assert (line.latest, line.primary) == (3, 3) and view.consumed == 3 * 8  # its samples left the queue


def test_after_a_rollback_the_next_version_names_the_restored_parent() -> None:
    """The trainer keeps numbering after a rollback (v4 trained from the restored v2): not parent + 1, still accepted."""
    reg = line_of(3, canary_share=0.5)
    reg.apply(R.AdapterRolledBack(R.Envelope.new(SERVICE), "planner", 3, 2, "worse"))
    assert refusals(reg.apply(pub(4, 2, auto_promote=False))) == [] and 4 in reg.line("planner").announced
    assert "skips v5" in refusals(reg.apply(pub(6, 2)))[0].reason


# -- finding 2: typed facts out of their domain ---------------------------------------------------------------------

@pytest.mark.parametrize(("facts", "fragment"), [
    ({"samples_dequeued": -10**12}, "samples_dequeued -1000000000000 is negative"),
    ({"samples_dequeued": 9}, "exceeds the 8 records"),
    ({"max_staleness": -1}, "max_staleness -1 is negative"),
    ({"drops": {"stale": -5}}, "drops[stale] = -5"),
    ({"trainer_step": -1}, "trainer_step -1"),
    ({"drops": None, "samples_dequeued": None, "max_staleness": None, "metrics": {"dropped_duplicate": math.nan}},
     "dropped_duplicate = nan"),
    ({"drops": None, "samples_dequeued": None, "max_staleness": None, "metrics": {"max_staleness": -3.0}},
     "max_staleness = -3.0"),
])
def test_an_announcement_with_facts_out_of_their_domain_is_refused_and_never_counted(
        facts: dict[str, object], fragment: str) -> None:
    view = LoopView(canary_share=0.0)
    view.apply(pub(1, None))
    view.produced = 8  # one group's samples, dequeued by v1
    event = pub(2, 1, **{k: v for k, v in facts.items() if k != "trainer_step"})
    if "trainer_step" in facts:
        event = R.AdapterPublished(**{**event.__dict__, "trainer_step": facts["trainer_step"]})
    [refused] = view.apply(event)
    assert fragment in refused.reason, refused.reason
    assert 2 not in view.adapters("planner").announced and view.consumed == 8
    pacing = Pacing(max_staleness=1, samples_per_step=8)
    assert view.backlog().pending_samples == 0
    assert admit(view.backlog(), 4, pacing, max_groups_in_flight=4) is None  # admission starts the next group


def test_the_trainers_own_facts_are_in_their_domain() -> None:
    """The writer's half (``typed_fields``) always passes the reader's check, drops of every reason included."""
    facts = published.typed_fields({"duplicate": 2, "not_a_sample": 1, "stale": 3}, LINEAGE, 1, 0.0)
    assert facts["samples_dequeued"] == 5
    assert published.out_of_domain(pub(1, None, **facts)) is None  # type: ignore[arg-type]


def test_a_replay_refuses_the_forged_count_again() -> None:
    """After a restart the follower refolds the log: the forged count is refused again, never counted."""
    log = [pub(1, None), pub(2, 1, samples_dequeued=-10**12), pub(2, 1)]
    for _ in range(2):
        view = LoopView(canary_share=0.0)
        for event in log:
            view.apply(event)
        assert view.consumed == 16 and view.adapters("planner").latest == 2


# -- finding 3: promotions and rollbacks of versions never announced ------------------------------------------------

@pytest.mark.parametrize("version", [99999, -1, 0])
def test_a_promotion_of_a_version_never_announced_is_refused(version: int) -> None:
    reg = line_of(2, canary_share=0.5)
    [refused] = reg.apply(R.AdapterPromoted(R.Envelope.new(SERVICE), "planner", version, 0, "better"))
    assert refused.event_type == "AdapterPromoted" and "never announced" in refused.reason
    assert reg.primary("planner") == 0 and reg.line("planner").canary == 2 and reg.refused["AdapterPromoted"] == 1


@pytest.mark.parametrize(("version", "restored"), [(99999, 0), (-1, 0), (0, 0), (2, 77), (2, -4)])
def test_a_rollback_naming_a_version_never_announced_is_refused(version: int, restored: int) -> None:
    reg = line_of(2, canary_share=0.5)
    before = reg.line("planner")
    [refused] = reg.apply(R.AdapterRolledBack(R.Envelope.new(SERVICE), "planner", version, restored, "worse"))
    assert "never announced" in refused.reason and reg.line("planner") == before


def test_approvals_rejections_and_verdicts_of_versions_never_announced_are_refused() -> None:
    reg = line_of(1, canary_share=0.5)
    before = reg.line("planner")
    for event in (R.AdapterApproved(R.Envelope.new("adapters-cli"), "planner", 9, "human:ada", "ok"),
                  R.AdapterRejected(R.Envelope.new("adapters-cli"), "planner", 9, "human:ada", "bad"),
                  R.AdapterVerdict(R.Envelope.new(SERVICE), "planner", 9, 0, "better", "restart", "why")):
        [refused] = reg.apply(event)
        assert refused.event_type == type(event).__name__
    assert reg.line("planner") == before and 9 not in before.history


# -- finding 4: who may write a lifecycle action ----------------------------------------------------------------------

@pytest.mark.parametrize("service", ["forger", "streams", "adapters-cli"])
def test_a_rollback_by_a_writer_without_an_operator_identity_is_refused(service: str) -> None:
    reg = line_of(3)
    before = reg.line("planner")
    [refused] = reg.apply(R.AdapterRolledBack(R.Envelope.new(service), "planner", 1, 0, "forged"))
    assert f"written by {service!r}" in refused.reason and "operator identity" in refused.reason
    assert reg.line("planner") == before and reg.primary("planner") == 3


@pytest.mark.parametrize("by", ["", "human:", "human: ", "ada", "ab-controller"])
def test_manual_actions_need_an_operator_identity(by: str) -> None:
    reg = line_of(2, canary_share=0.5)
    def cli() -> R.Envelope:
        return R.Envelope.new("adapters-cli")

    for event in (R.AdapterPromoted(cli(), "planner", 2, 0, "x", {}, by), R.AdapterRejected(cli(), "planner", 2, by, "x"),
                  R.AdapterApproved(cli(), "planner", 2, by, "x"),
                  R.AdapterRolledBack(cli(), "planner", 2, 0, "x", {}, by)):
        assert [r.event_type for r in refusals(reg.apply(event))] == [type(event).__name__]
    assert reg.primary("planner") == 0 and reg.line("planner").canary == 2


def test_the_cli_the_controller_and_the_trainer_may_act() -> None:
    reg = line_of(3, canary_share=0.5)
    assert refusals(reg.apply(promote(reg.line("planner"), "planner", 2, "ada", "looks good"))) == []
    assert reg.primary("planner") == 2
    assert refusals(reg.apply(rollback(reg.line("planner"), "planner", 2, None, "bob", "regressed"))) == []
    assert reg.primary("planner") == 1 and reg.line("planner").history[2][-1].by == "human:bob"
    reg.apply(pub(4, 1, auto_promote=False))
    files = files_rollback(reg.line("planner"), "planner", 4, "missing adapter_config.json")
    assert files is not None and refusals(reg.apply(files)) == [] and reg.status("planner", 4) == R.AdapterStatus.ROLLED_BACK
    reg.apply(pub(5, 1, auto_promote=False))
    by_trainer = R.AdapterPromoted(R.Envelope.new(writers.TRAINER), "planner", 5, 1, "auto")
    assert refusals(reg.apply(by_trainer)) == [] and reg.primary("planner") == 5
    assert SERVICE == writers.AB_CONTROLLER and sum(reg.refused.values()) == 0
