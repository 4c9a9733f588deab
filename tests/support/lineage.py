"""The trainer's exactly-once check: the lineages of the announced versions cover every ``training-samples`` offset
once (no gap, no overlap), the versions form one chain, and every announced adapter verifies in the store.

Shared by the resume tests (``test_trainer_resume.py``) and the broker outage test (``test_trainer_broker_outage.py``).
What is not covered: rollbacks (a rolled-back version's lineage is not the chain's).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection
from pathlib import Path

from streamgrpo.avro import records as R
from streamgrpo.config import KafkaSettings
from streamgrpo.models import adapter_store as store
from streamgrpo.topics.catalog import TRAINING_SAMPLES
from streamgrpo.topics.follow import read_topic


def assert_trained_exactly_once(kafka: KafkaSettings, store_root: Path, adapter_name: str = "planner",
                                allowed_drops: Collection[str] = ("already_trained",)) -> list[int]:
    """Union of the lineages of the announced versions == every offset of training-samples, once; the versions are
    1..n, each the parent of the next, and stored; no drop but ``allowed_drops``. Returns the versions."""
    events: dict[int, R.AdapterPublished] = {}
    for r in read_topic(kafka, "adapter-events"):
        ev = r.event
        if isinstance(ev, R.AdapterPublished):
            assert events.setdefault(ev.version, ev).sha256 == ev.sha256  # a re-announcement is identical
    versions = sorted(events)
    assert versions == list(range(1, len(versions) + 1))
    assert [events[v].parent_version for v in versions] == [None] + versions[:-1]
    trained: Counter[tuple[int, int]] = Counter()
    allowed = {f"dropped_{d}" for d in allowed_drops}
    for ev in events.values():
        store.verify_and_load_path(ev.uri, ev.sha256)
        assert [k for k in ev.metrics if k.startswith("dropped_") and k not in allowed] == []
        for rng in ev.lineage:
            trained.update((rng.partition, o) for o in range(rng.start, rng.end + 1))
    expected = Counter((r.partition, r.offset) for r in read_topic(kafka, TRAINING_SAMPLES))
    assert [k for k, n in trained.items() if n > 1] == []  # no overlap
    assert sorted(set(expected) - set(trained)) == []  # no gap
    assert trained == expected
    assert store.versions(store_root, adapter_name) == versions
    return versions
