"""Forged or broken AdapterPublished events change nothing in the registry fold (issue 24, finding 6).

One forged announcement (version 2147483647, sha256 of zeros) became PRIMARY and the fan-out asked
every new group for it; negative versions and a self-parent were accepted too.
"""

from __future__ import annotations

import pytest

from streamgrpo.avro import records as R
from streamgrpo.lifecycle.lineage_check import MAX_VERSION_GAP, refusal
from streamgrpo.lifecycle.registry import AdapterRegistry, Refused


def published(version: int, parent: int | None) -> R.AdapterPublished:
    return R.AdapterPublished(R.Envelope.new("trainer"), "planner", version, f"file:///a/{version}", "ab" * 32,
                              "base", version, [], parent_version=parent)


@pytest.mark.parametrize(
    ("version", "parent", "fragment"),
    [(2147483647, 2, "jumps more than"), (2147483647, None, "jumps more than"), (-1, None, "not a published"),
     (0, None, "not a published"), (3, 3, "itself"), (3, 9, "newer version"), (3, 0, None), (3, 2, None),
     (4, 3, "never announced"), (1, None, "not newer"), (2 + MAX_VERSION_GAP, 2, "skips v3"), (4, 2, "skips v3"),
     (3 + MAX_VERSION_GAP, 2, "jumps more than")],
)
def test_forged_announcements_never_serve(version: int, parent: int | None, fragment: str | None) -> None:
    for canary_share in (0.0, 0.5):
        reg = AdapterRegistry(canary_share)
        reg.apply(published(1, None))
        reg.apply(published(2, 1))
        before = reg.line("planner")
        reg.apply(published(version, parent))
        line = reg.line("planner")
        if fragment is None:  # follows the lineage: announced, and serves as the registry's policy says
            assert version in line.announced and version in (line.primary, line.canary)
            continue
        assert line == before, line  # nothing changed: not PRIMARY, not the canary the fan-out would request
        assert line.primary == (2 if canary_share == 0 else 0) and line.canary in (None, 2)


def test_refusal_reasons_name_the_problem() -> None:
    assert refusal(published(5, 4), {1, 2}, 2) == "v5 names v4 as its parent, which was never announced"
    assert refusal(published(3, 2), {1, 2}, 2) is None


def test_the_fold_says_why_it_refused_and_a_redelivery_is_no_refusal() -> None:
    """The fold returns a Refused change with the reason (the streams follower dead-letters it); an announced version
    again with another sha256 is refused too, the same announcement again is a redelivery and changes nothing."""
    reg = AdapterRegistry(0.0)
    reg.apply(published(1, None))
    assert reg.apply(published(3, 3)) == [Refused("planner", 3, "v3 names itself as its parent")]
    forged = reg.apply(published(2147483647, 1))
    assert [(r.version, "jumps more than" in r.reason) for r in forged if isinstance(r, Refused)] == [(2147483647, True)]
    before = reg.line("planner")
    assert reg.apply(published(1, None)) == []  # a new event id, the same content: a redelivery
    other = R.AdapterPublished(R.Envelope.new("trainer"), "planner", 1, "file:///a/1", "cd" * 32, "base", 1, [])
    (refused,) = reg.apply(other)
    assert isinstance(refused, Refused) and refused.version == 1 and "v1 was announced with sha256 abab" in refused.reason
    assert reg.line("planner") == before and reg.line("planner").primary == 1
