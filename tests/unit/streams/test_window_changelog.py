"""The window's tables survive a restart: what a table writes to its changelog topic decodes back, through
that topic's own decode path (the one Faust's recovery uses), to the value the table stored.

Found by the chaos campaign (RELIABILITY.md): ``window-actions`` stores raw Avro bytes but its changelog topic
took the table's default ``json`` value serializer (Faust derives a table's serializers from ``value_type``,
not from ``schema``), so every recovered action failed with ``'utf-8' codec can't decode byte 0xc3`` and a
restarted streams worker lost the planner actions of every open group (their samples could never be built).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from faust.types import Message
from fixtures.sample_events import sample_events

from streamgrpo.avro import records as R
from streamgrpo.avro.codec import Codec
from streamgrpo.config import KafkaSettings
from streamgrpo.streams.app import create_app
from streamgrpo.streams.config import StreamsSettings


def _round_trip(table: Any, key: Any, value: Any) -> tuple[Any, Any]:
    topic = table.changelog_topic
    app = table.app
    raw_key = app.serializers.dumps_key(topic.key_type, key, serializer=table.key_serializer)
    raw_value = app.serializers.dumps_value(topic.value_type, value, serializer=table.value_serializer)
    message = Message(topic.get_topic_name(), 0, 0, 0.0, 0, [], raw_key, raw_value, None)
    event = asyncio.run(topic.decode(message, propagate=True))
    return event.key, event.value


def test_window_tables_decode_their_own_changelog(tmp_path: Path) -> None:
    app = create_app(StreamsSettings(data_dir=tmp_path / "d", archive_dir=tmp_path / "a"),
                     KafkaSettings(bootstrap="127.0.0.1:1", topic_prefix="p."), ["window"])
    window = app.streamgrpo.window  # type: ignore[attr-defined]
    action = next(e for e in sample_events() if isinstance(e, R.PlannerAction))
    raw = Codec().encode(action)
    assert raw[:1] == b"\xc3"  # Avro single-object bytes: not UTF-8, not JSON
    assert _round_trip(window.actions, "rollout-1/1", raw) == ("rollout-1/1", raw)
    state = {"closed": False, "rewards": {"r1": 0.5}}
    assert _round_trip(window.groups, "group-1", state) == ("group-1", state)
