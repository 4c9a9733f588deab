"""``--from`` / ``--to`` bounds: offsets per partition, times, adapter versions' lineage (pure)."""

from __future__ import annotations

import pytest

from streamgrpo.avro import records as R
from streamgrpo.replay.errors import ReplayError
from streamgrpo.replay.ranges import OffsetsBound, SampleRange, TimeBound, VersionBound, parse_bound, resolve


def published(version: int, *ranges: tuple[int, int, int]) -> R.AdapterPublished:
    return R.AdapterPublished(R.Envelope.new("trainer"), "planner", version, "file:///x", "0" * 64, "base", version,
                              [R.OffsetRange("training-samples", p, s, e) for p, s, e in ranges],
                              parent_version=version - 1 or None)


# v1 read p0 0..3 and p1 0..1; v2 p0 4..7; v3 p1 2..5 and p2 0..1 (a version's lineage is [start, end])
HISTORY = [published(1, (0, 0, 3), (1, 0, 1)), published(2, (0, 4, 7)), published(3, (1, 2, 5), (2, 0, 1))]


def test_parse_bounds() -> None:
    assert parse_bound("0:10,2:5") == OffsetsBound({0: 10, 2: 5})
    assert parse_bound("v12") == VersionBound(12)
    assert parse_bound("2026-01-02T00:00:01Z") == TimeBound(1_767_312_001_000)
    assert parse_bound("2026-01-02") == TimeBound(1_767_312_000_000)  # naive = UTC
    with pytest.raises(ReplayError, match="offsets per partition"):
        parse_bound("yesterday")


def test_offsets_and_times() -> None:
    rng = resolve(OffsetsBound({0: 5}), OffsetsBound({0: 8, 1: 2}))
    assert [o for o in range(12) if rng.contains(0, o, None)] == [5, 6, 7]
    assert [o for o in range(12) if rng.contains(1, o, None)] == [0, 1]
    assert rng.contains(2, 99, None)  # an unnamed partition is unbounded
    t = resolve(TimeBound(1000), TimeBound(2000))
    assert [t.contains(0, 0, ts) for ts in (999, 1000, 1999, 2000, None)] == [False, True, True, False, False]


def test_a_versions_lineage_is_exactly_what_it_consumed() -> None:
    rng = resolve(VersionBound(2), VersionBound(2), HISTORY)
    assert rng == SampleRange(start={0: 4, 1: 2, 2: 0}, end={0: 8, 1: 2, 2: 0})
    members = {(p, o) for p in range(3) for o in range(10) if rng.contains(p, o, None)}
    assert members == {(0, o) for o in range(4, 8)}
    both = resolve(VersionBound(1), VersionBound(3), HISTORY)
    assert {(p, o) for p in range(3) for o in range(10) if both.contains(p, o, None)} == \
        {(0, o) for o in range(8)} | {(1, o) for o in range(6)} | {(2, 0), (2, 1)}
    from_v3 = resolve(VersionBound(3), None, HISTORY)  # p0: after what v1..v2 read; p1, p2: where v3 starts
    assert from_v3.start == {0: 8, 1: 2, 2: 0} and from_v3.end == {}


def test_an_unknown_version_is_refused_with_the_known_ones() -> None:
    with pytest.raises(ReplayError, match=r"v9 was never published \(published: v1, v2, v3\)"):
        resolve(VersionBound(9), None, HISTORY)
