"""Which training-samples records a replay trains on (pure): ``--from`` / ``--to`` bounds -> a :class:`SampleRange`.

A bound is one of:

- offsets per partition, ``"0:120,1:80,2:95"`` (``--from`` inclusive, ``--to`` exclusive; a partition
  not named is unbounded on that side);
- a time, ISO 8601 (``2026-01-02``, ``2026-01-02T03:04:05Z``; naive times are UTC), compared with the
  record timestamp (``--from`` inclusive, ``--to`` exclusive);
- an adapter version, ``"v3"``: the lineage of published versions (AdapterPublished ranges on
  ``training-samples``). ``--from v3`` starts each partition where the lineage of v3 and later versions
  starts (or, on a partition none of them read, right after what earlier versions read);
  ``--to v7`` ends each partition after the lineage of v7 and earlier versions (a partition none of them
  read contributes nothing). ``--from v3 --to v7`` is exactly what v3..v7 consumed.

What is not covered: bounds on topics other than ``training-samples`` (lineage of other topics is ignored).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone

from streamgrpo.avro.records import AdapterPublished
from streamgrpo.replay.errors import ReplayError
from streamgrpo.topics import catalog
from streamgrpo.topics.catalog import spec

SAMPLES_TOPIC = catalog.TRAINING_SAMPLES
_OFFSETS = re.compile(r"^\d+:\d+(,\d+:\d+)*$")
_VERSION = re.compile(r"^v(\d+)$")


@dataclass(frozen=True)
class OffsetsBound:
    offsets: dict[int, int]


@dataclass(frozen=True)
class TimeBound:
    ms: int


@dataclass(frozen=True)
class VersionBound:
    version: int


Bound = OffsetsBound | TimeBound | VersionBound


def parse_bound(text: str) -> Bound:
    """``"0:10,1:5"``, ``"v3"`` or an ISO 8601 time -> a bound; raises :class:`ReplayError` saying what is accepted."""
    text = text.strip()
    if _OFFSETS.match(text):
        pairs = [p.split(":") for p in text.split(",")]
        return OffsetsBound({int(p): int(o) for p, o in pairs})
    m = _VERSION.match(text)
    if m:
        return VersionBound(int(m.group(1)))
    try:
        t = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ReplayError(f"cannot read the bound {text!r}: give offsets per partition ('0:120,1:80'), an adapter "
                          "version ('v3') or an ISO 8601 time ('2026-01-02T03:04:05Z')") from None
    if t.tzinfo is None:
        t = t.replace(tzinfo=timezone.utc)
    return TimeBound(int(t.timestamp() * 1000))


@dataclass(frozen=True)
class SampleRange:
    """Records of training-samples to replay: per-partition offset bounds and a record-time window."""

    start: dict[int, int] = field(default_factory=dict)  # partition -> first offset (inclusive)
    end: dict[int, int] = field(default_factory=dict)  # partition -> end offset (exclusive)
    since_ms: int | None = None
    until_ms: int | None = None

    def contains(self, partition: int, offset: int, timestamp_ms: int | None) -> bool:
        if offset < self.start.get(partition, 0) or (partition in self.end and offset >= self.end[partition]):
            return False
        if self.since_ms is not None and (timestamp_ms is None or timestamp_ms < self.since_ms):
            return False
        return not (self.until_ms is not None and (timestamp_ms is None or timestamp_ms >= self.until_ms))

    def describe(self) -> str:
        parts = []
        if self.start:
            parts.append("from " + ",".join(f"{p}:{o}" for p, o in sorted(self.start.items())))
        if self.end:
            parts.append("to " + ",".join(f"{p}:{o}" for p, o in sorted(self.end.items())))
        if self.since_ms is not None:
            parts.append(f"since {datetime.fromtimestamp(self.since_ms / 1000, timezone.utc).isoformat()}")
        if self.until_ms is not None:
            parts.append(f"until {datetime.fromtimestamp(self.until_ms / 1000, timezone.utc).isoformat()}")
        return ", ".join(parts) or "every record"


def _ranges(published: Sequence[AdapterPublished], keep: Callable[[int], bool]) -> dict[int, list[tuple[int, int]]]:
    out: dict[int, list[tuple[int, int]]] = {}
    for ev in published:
        if not keep(ev.version):
            continue
        for r in ev.lineage:
            if r.topic == SAMPLES_TOPIC:
                out.setdefault(r.partition, []).append((r.start, r.end))
    return out


def _check_version(version: int, published: Sequence[AdapterPublished]) -> None:
    known = sorted(e.version for e in published)
    if version not in known:
        raise ReplayError(f"adapter version v{version} was never published (published: "
                          f"{', '.join(f'v{v}' for v in known) or 'none'})")


def resolve(lower: Bound | None, upper: Bound | None, published: Sequence[AdapterPublished] = ()) -> SampleRange:
    """The range between two bounds; ``published``: the AdapterPublished events of the source adapter."""
    start: dict[int, int] = {}
    end: dict[int, int] = {}
    since = until = None
    if isinstance(lower, OffsetsBound):
        start = dict(lower.offsets)
    elif isinstance(lower, TimeBound):
        since = lower.ms
    elif isinstance(lower, VersionBound):
        _check_version(lower.version, published)
        later = _ranges(published, lambda v: v >= lower.version)
        earlier = _ranges(published, lambda v: v < lower.version)
        for p in set(later) | set(earlier):
            start[p] = min(s for s, _ in later[p]) if p in later else max(e for _, e in earlier[p]) + 1
    if isinstance(upper, OffsetsBound):
        end = dict(upper.offsets)
    elif isinstance(upper, TimeBound):
        until = upper.ms
    elif isinstance(upper, VersionBound):
        _check_version(upper.version, published)
        upto = _ranges(published, lambda v: v <= upper.version)
        partitions = set(range(spec(SAMPLES_TOPIC).partitions)) | set(upto)
        for p in partitions:
            end[p] = max(e for _, e in upto[p]) + 1 if p in upto else 0
    return SampleRange(start, end, since, until)
