"""The announcement of a stored version carries the manifest's typed facts (contract v4), and a manifest written
before v4 (no such keys) still announces, with the facts left to the readers' fallback."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from streamgrpo.avro import records as R
from streamgrpo.lifecycle import published
from streamgrpo.models import adapter_store as store
from streamgrpo.trainer.loop import adapter_event

LINEAGE = [R.OffsetRange("training-samples", 1, 0, 9)]


def manifest(**facts: object) -> store.Manifest:
    return store.Manifest("planner", 3, 2, "base", 30, list(LINEAGE), {"loss": 0.5, "dropped_stale": 2.0,
                                                                        "max_staleness": 1.0}, {}, **facts)  # type: ignore[arg-type]


def test_the_announcement_carries_the_typed_facts_through_the_stored_manifest(tmp_path: Path) -> None:
    facts = published.typed_fields({"stale": 2, "duplicate": 1}, LINEAGE, 1, canary_share=0.0)
    (tmp_path / store.MANIFEST).write_text(json.dumps(asdict(manifest(**facts))))
    event = adapter_event(store.Manifest.read(tmp_path), "file:///s/planner/v3", "0" * 64)
    assert (event.drops, event.samples_dequeued, event.max_staleness, event.auto_promote) == (
        {"stale": 2, "duplicate": 1}, 9, 1, True)


def test_a_manifest_written_before_v4_announces_and_reads_by_its_metric_keys(tmp_path: Path) -> None:
    data = asdict(manifest())
    for key in ("drops", "samples_dequeued", "max_staleness", "auto_promote"):
        del data[key]
    (tmp_path / store.MANIFEST).write_text(json.dumps(data))
    event = adapter_event(store.Manifest.read(tmp_path), "file:///s/planner/v3", "0" * 64)
    assert (event.drops, event.samples_dequeued, event.max_staleness, event.auto_promote) == (None, None, None, None)
    assert published.drops(event) == {"stale": 2} and published.max_staleness(event) == 1
    assert published.samples_dequeued(event) == 10
