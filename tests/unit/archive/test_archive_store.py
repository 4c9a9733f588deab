"""The archive writer: layout, atomic files, de-duplication under redelivery, failures that lose nothing."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from fixtures.sample_events import sample_events
from support.streams import synthetic_group

from streamgrpo.archive import duck
from streamgrpo.archive import store as S
from streamgrpo.archive.errors import ArchiveError
from streamgrpo.archive.schema import Place
from streamgrpo.avro import records as R
from streamgrpo.topics.catalog import topic_for


def at(event: R.Event, day: int) -> R.Event:
    t = datetime(2026, 3, day, 12, 0, 0, tzinfo=timezone.utc)
    return replace(event, envelope=replace(event.envelope, event_time=t))  # type: ignore[arg-type]


def add(writer: S.ArchiveWriter, events: list[R.Event], partition: int = 0) -> int:
    return sum(writer.add(e, Place(topic_for(e).name, partition, i, e.envelope.group_id.encode()
                                   if e.envelope.group_id else None, 1000 + i)) for i, e in enumerate(events))


def test_layout_topic_type_date_and_no_temporary_file_left(tmp_path: Path) -> None:
    g = synthetic_group("lay", [1.0, 0.0])
    events = [at(e, 1 + i % 2) for i, e in enumerate(g.events())]
    writer = S.ArchiveWriter(tmp_path)
    assert add(writer, events) == len(events)
    writer.flush()
    dirs = sorted({p.parent.relative_to(tmp_path).as_posix() for p in S.parts(tmp_path)})
    assert dirs == [f"{topic}/{kind}/date=2026-03-0{d}" for topic, kind in
                    (("planner-actions", "PlannerAction"), ("rewards", "Reward"), ("rollouts", "RolloutCompleted"))
                    for d in (1, 2)]
    assert not [p for p in tmp_path.rglob("*") if p.name.endswith(".tmp")]


def test_redelivery_is_dropped_by_event_id_across_restarts(tmp_path: Path) -> None:
    events = synthetic_group("dup", [1.0, 0.0, 0.5]).events()
    first = S.ArchiveWriter(tmp_path)
    assert add(first, events) == len(events)
    assert add(first, events[:3], partition=1) == 0  # redelivered before the roll
    first.flush()
    restarted = S.ArchiveWriter(tmp_path)  # a new process: ids come from the files
    assert add(restarted, events, partition=2) == 0 and restarted.duplicates == len(events)
    assert restarted.flush() == 0 and len(S.parts(tmp_path)) == 3
    _, rows = duck.query(tmp_path, "SELECT count(*), count(DISTINCT event_id), min(kafka_partition) FROM planner_actions")
    assert rows == [(len([e for e in events if isinstance(e, R.PlannerAction)]),) * 2 + (0,)]


def test_a_failed_write_leaves_no_file_keeps_the_rows_and_retries(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    events = synthetic_group("fail", [1.0, 0.0]).events()
    writer = S.ArchiveWriter(tmp_path)
    add(writer, events)
    real = pq.write_table

    def broken(table: object, where: object, **kw: object) -> None:
        Path(str(where)).write_bytes(b"PAR1 half a file")  # a partial write, then the disk fails
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(pq, "write_table", broken)
    with pytest.raises(ArchiveError, match="No space left"):
        writer.flush()
    assert S.parts(tmp_path) == [] and not list(tmp_path.rglob("*.tmp"))  # nothing partial is visible
    assert writer.pending == len(events)
    monkeypatch.setattr(pq, "write_table", real)
    assert writer.flush() == len(events)
    assert [type(e) for e, _ in S.read_events(tmp_path, "rewards")] == [R.Reward, R.Reward]


def test_read_events_orders_by_partition_and_offset_across_types(tmp_path: Path) -> None:
    adapter_events = [e for e in sample_events() if topic_for(e).name == "adapter-events"]
    writer = S.ArchiveWriter(tmp_path)
    for i, e in enumerate(reversed(adapter_events)):
        writer.add(e, Place("adapter-events", 0, 10 - i, b"planner", 5))
    writer.flush()
    out = list(S.read_events(tmp_path, "adapter-events"))
    assert [p.offset for _, p in out] == sorted(p.offset for _, p in out)
    assert [e for e, _ in out] == adapter_events


def test_namespaces_live_apart_and_show_in_all_views(tmp_path: Path) -> None:
    g = synthetic_group("ns", [1.0, 0.0])
    main, other = S.ArchiveWriter(tmp_path), S.ArchiveWriter(tmp_path, namespace="replay.r1.")
    add(main, g.rewards)
    rescored = [replace(r, envelope=replace(r.envelope, event_id=f"{r.event_id[:-1]}f"), judge=R.JudgeInfo("qa", "h2"))
                for r in g.rewards]
    add(other, rescored)
    main.flush()
    other.flush()
    assert S.namespaces(tmp_path) == ["replay.r1."]
    _, rows = duck.query(tmp_path, "SELECT (SELECT count(*) FROM rewards), namespace, count(*) FROM all_rewards "
                                   "GROUP BY namespace ORDER BY namespace")
    assert rows == [(2, "", 2), (2, "replay.r1.", 2)]
    with pytest.raises(ArchiveError, match="directory name"):
        S.ArchiveWriter(tmp_path, namespace="a/b")


def test_every_topic_has_a_typed_view_even_when_empty(tmp_path: Path) -> None:
    cols = duck.columns(tmp_path)
    assert {"tasks", "rewards", "adapter_events", "adapter_published", "dead_letters", "all_rewards"} <= set(cols)
    assert ("components", "STRUCT(\"name\" VARCHAR, \"value\" DOUBLE, weight DOUBLE)[]") in cols["rewards"]
    with pytest.raises(ArchiveError, match="does not exist"):
        duck.connect(tmp_path / "missing")
    with pytest.raises(ArchiveError, match="query failed"):
        duck.query(tmp_path, "SELECT * FROM no_such_view")
