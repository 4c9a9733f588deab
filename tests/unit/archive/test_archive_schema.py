"""The archive's Parquet schema follows the Avro contract: every valid event fits, and comes back equal."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from fixtures.avro_events import events
from fixtures.fuzz import fuzz
from fixtures.sample_events import sample_events
from hypothesis import given
from hypothesis import strategies as st

from streamgrpo.archive.schema import ENVELOPE, SOURCE, Place, arrow_schema, from_row, table, to_row
from streamgrpo.archive.store import ArchiveWriter, read_events
from streamgrpo.avro import records as R
from streamgrpo.topics.catalog import topic_for

FUZZ = fuzz(60)


def place(event: R.Event, offset: int = 0, partition: int = 0) -> Place:
    return Place(topic_for(event).name, partition, offset, b"key", 1_767_322_245_678)


@pytest.mark.parametrize("event", sample_events(), ids=lambda e: type(e).__name__)
def test_every_event_type_round_trips_through_parquet(event: R.Event, tmp_path: Path) -> None:
    tbl = table([to_row(event, place(event, 7))], event.SCHEMA_NAME)
    pq.write_table(tbl, tmp_path / "x.parquet")
    back = pq.read_table(tmp_path / "x.parquet")
    assert back.schema.equals(arrow_schema(event.SCHEMA_NAME), check_metadata=False)
    assert from_row(back.to_pylist()[0], arrow_schema(event.SCHEMA_NAME)) == (event, place(event, 7))


def test_columns_are_envelope_then_fields_then_source_with_docs() -> None:
    schema = arrow_schema("Reward")
    names = schema.names
    assert tuple(names[:len(ENVELOPE)]) == ENVELOPE
    assert tuple(names[-len(SOURCE) - 1:-1]) == SOURCE and names[-1] == "event_type"
    assert schema.field("components").type == pa.list_(pa.field("element", pa.struct([
        pa.field("name", pa.string(), nullable=False), pa.field("value", pa.float64(), nullable=False),
        pa.field("weight", pa.float64(), nullable=False)]), nullable=False))
    assert schema.field("tool_calls").type == pa.map_(pa.string(), pa.field("value", pa.int32(), nullable=False))
    assert schema.field("error").nullable and not schema.field("score").nullable
    assert all(f.metadata and f.metadata[b"doc"] for f in schema), "every column carries its Avro doc"


def test_issue_12_ok_and_error_reward_in_one_roll(tmp_path: Path) -> None:
    """#12 item 3: an OK Reward (components) and an ERROR Reward (no components, e.g. an unknown task) in
    one roll crashed the archive (JSON text vs empty list), and again after every restart. Now one typed file."""
    ok = next(e for e in sample_events() if isinstance(e, R.Reward))
    assert ok.components
    error = replace(ok, envelope=replace(ok.envelope, event_id="0f0e0d0c-0000-4000-8000-000000000001"),
                    status=R.RewardStatus.ERROR, score=0.0, components=[], error="no Task with id t-unknown")
    writer = ArchiveWriter(tmp_path, roll_records=10)
    assert writer.add(ok, place(ok, 0)) and writer.add(error, place(error, 1))
    assert writer.flush() == 2
    assert [e for e, _ in read_events(tmp_path, "rewards")] == [ok, error]


@FUZZ
@given(st.lists(events(), min_size=1, max_size=8))
def test_any_valid_events_share_one_roll(tmp_path_factory: pytest.TempPathFactory, batch: list[R.Event]) -> None:
    """Whatever valid events arrive together, the roll is written and every one reads back equal."""
    root = tmp_path_factory.mktemp("roll")
    writer = ArchiveWriter(root)
    expected: dict[str, list[R.Event]] = {}
    for i, event in enumerate(batch):
        if writer.add(event, place(event, i)):
            expected.setdefault(topic_for(event).name, []).append(event)
    writer.flush()
    for topic, want in expected.items():
        assert [e for e, _ in read_events(root, topic)] == want
