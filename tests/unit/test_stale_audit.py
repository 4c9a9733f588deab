"""The e2e tiny loop's stale audit (tests/support/stale_audit.py) tells an overtaken group from one the trainer
should have trained: both drop as stale; only the second is ``early``."""

from __future__ import annotations

from support.stale_audit import stale_groups

from streamgrpo.avro import records as R

TOPIC = "training-samples"


def sample(group: str, behaviour: int) -> R.TrainingSample:
    return R.TrainingSample(R.Envelope.new("streams", group_id=group), [], 0.5, 1.0, 0.5, 0.5, 8, "grpo", "planner",
                            behaviour)


def published(version: int, *spans: tuple[int, int, int]) -> R.AdapterPublished:
    lineage = [R.OffsetRange(TOPIC, p, s, e) for p, s, e in spans]
    return R.AdapterPublished(R.Envelope.new("trainer"), "planner", version, f"file:///a/{version}", "0" * 64, "base",
                              version, lineage, version - 1 or None, max_staleness=1)


def run(late_closed_at: int) -> tuple[dict[str, int], list[str]]:
    """v1 trains group a (v0, partition 0); v2 trains b (v1); v3 trains c (v2) and finds x (v0, partition 1) two
    versions behind its weights v2: stale. x had to close before v1 (= 0 + max_staleness) was published at 1000."""
    samples = {(0, 0): sample("a", 0), (0, 1): sample("b", 1), (0, 2): sample("c", 2), (1, 0): sample("x", 0)}
    pubs = [(1000, published(1, (0, 0, 0))), (2000, published(2, (0, 1, 1))), (3000, published(3, (0, 2, 2), (1, 0, 0)))]
    audit = stale_groups(samples, pubs, {"a": 900, "b": 1900, "c": 2900, "x": late_closed_at})
    return audit.stale, audit.early


def test_a_group_closed_after_the_publication_it_had_to_beat_is_stale_and_overtaken() -> None:
    assert run(late_closed_at=2500) == ({"x": 1}, [])


def test_a_group_closed_in_time_and_still_dropped_is_early() -> None:
    assert run(late_closed_at=950) == ({"x": 1}, ["x"])


def test_nothing_stale_when_every_sample_trains_within_the_bound() -> None:
    samples = {(0, 0): sample("a", 0), (0, 1): sample("b", 0)}
    audit = stale_groups(samples, [(1000, published(1, (0, 0, 0))), (2000, published(2, (0, 1, 1)))], {})
    assert audit.stale == {} and audit.early == [] and audit.samples == 0
