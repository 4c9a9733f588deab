"""What an adapter trained on: consumed offset ranges per topic-partition (pure bookkeeping).

:class:`Lineage` collects the offsets consumed since the parent adapter and turns them into the
``OffsetRange`` list of ``AdapterPublished`` and the next offsets to read (the manifest's
``committed`` map, ``"topic:partition" -> next offset``). :func:`already_trained` says whether a
redelivered record was covered by the stored adapter (a crash between storing an adapter and
committing its offsets): resuming skips it, so nothing is trained twice.

Not covered: gaps inside a partition (offsets are assumed contiguous, true without compaction
and transactions); a range is [first, last] consumed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from streamgrpo.avro.records import OffsetRange


def tp_key(topic: str, partition: int) -> str:
    return f"{topic}:{partition}"


def parse_tp_key(key: str) -> tuple[str, int]:
    """The (topic, partition) of a :func:`tp_key`."""
    topic, _, partition = key.rpartition(":")
    return topic, int(partition)


@dataclass
class Lineage:
    """Offset ranges consumed since the last published adapter."""

    ranges: dict[tuple[str, int], list[int]] = field(default_factory=dict)

    def add(self, topic: str, partition: int, offset: int) -> None:
        r = self.ranges.setdefault((topic, partition), [offset, offset])
        r[0] = min(r[0], offset)
        r[1] = max(r[1], offset)

    def offset_ranges(self) -> list[OffsetRange]:
        return [OffsetRange(topic=t, partition=p, start=s, end=e) for (t, p), (s, e) in sorted(self.ranges.items())]

    def next_offsets(self, previous: dict[str, int]) -> dict[str, int]:
        """``previous`` committed map advanced past every consumed offset."""
        out = dict(previous)
        for (t, p), (_, end) in self.ranges.items():
            out[tp_key(t, p)] = max(out.get(tp_key(t, p), 0), end + 1)
        return out

    def __bool__(self) -> bool:
        return bool(self.ranges)


def already_trained(committed: dict[str, int], topic: str, partition: int, offset: int) -> bool:
    """True when the stored adapter's lineage already covers ``offset``."""
    return offset < committed.get(tp_key(topic, partition), 0)
