"""Lineage bookkeeping: offset ranges, next offsets, redelivery skip."""

from __future__ import annotations

from streamgrpo.trainer.lineage import Lineage, already_trained


def test_lineage_helpers_are_consistent():
    lin = Lineage()
    for off in (5, 3, 4):
        lin.add("training-samples", 1, off)
    lin.add("training-samples", 0, 9)
    assert [(r.partition, r.start, r.end) for r in lin.offset_ranges()] == [(0, 9, 9), (1, 3, 5)]
    nxt = lin.next_offsets({"training-samples:2": 7})
    assert nxt == {"training-samples:0": 10, "training-samples:1": 6, "training-samples:2": 7}
    assert already_trained(nxt, "training-samples", 1, 5) and not already_trained(nxt, "training-samples", 1, 6)
