from __future__ import annotations

import copy
import io
from pathlib import Path

import pytest
from fastavro import schemaless_writer
from fixtures.sample_events import sample_events

from streamgrpo.avro import ids, registry
from streamgrpo.avro import records as R
from streamgrpo.avro.codec import CONFLUENT_MAGIC, SINGLE_OBJECT_MAGIC, Codec
from streamgrpo.avro.errors import DecodeError, EncodeError

GOLDEN = Path(__file__).parents[2] / "fixtures" / "golden"


@pytest.mark.parametrize("event", sample_events(), ids=lambda e: type(e).__name__)
def test_every_event_round_trips_single_object(event: R.Event) -> None:
    codec = Codec()
    data = codec.encode(event)
    assert data[:2] == SINGLE_OBJECT_MAGIC
    assert data[2:10] == registry.get(event.SCHEMA_NAME).fingerprint
    assert codec.decode(data, type(event)) == event


@pytest.mark.parametrize("event", sample_events(), ids=lambda e: type(e).__name__)
def test_every_event_round_trips_confluent_wire_format(event: R.Event) -> None:
    codec = Codec("mock://tests")
    data = codec.encode(event, "some-topic")
    assert data[:1] == CONFLUENT_MAGIC
    assert codec.decode(data) == event


def test_every_event_type_has_a_sample() -> None:
    assert {e.SCHEMA_NAME for e in sample_events()} == set(R.EVENT_TYPES)


@pytest.mark.parametrize("path", sorted(GOLDEN.glob("*/*.bin")), ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_golden_bytes_of_released_versions_decode_with_current_reader(path: Path) -> None:
    expected = {e.SCHEMA_NAME: e for e in sample_events(path.parent.name)}[path.stem]
    assert Codec().decode(path.read_bytes()) == expected


def test_old_writer_without_a_field_decodes_with_new_reader_and_default() -> None:
    """An older producer whose Task schema lacked `metadata` and `ground_truths` (both defaulted now)."""
    old = copy.deepcopy(registry.get("Task").parsed)
    old["fields"] = [f for f in old["fields"] if f["name"] not in ("metadata", "ground_truths")]
    codec = Codec()
    fp = codec.register_writer(old, release="v0-test")
    task = sample_events()[0]
    body = io.BytesIO()
    schemaless_writer(body, old, task.to_avro())
    decoded = codec.decode(SINGLE_OBJECT_MAGIC + fp + body.getvalue(), R.Task)
    assert decoded.question == task.question
    assert decoded.metadata == {} and decoded.ground_truths == []


def test_old_writer_with_int_field_is_promoted_to_new_long() -> None:
    old = copy.deepcopy(registry.get("ToolObservation").parsed)
    codec = Codec()
    fp = codec.register_writer(old)
    obs = sample_events()[3]
    body = io.BytesIO()
    schemaless_writer(body, old, obs.to_avro())
    assert codec.decode(SINGLE_OBJECT_MAGIC + fp + body.getvalue()) == obs


@pytest.mark.parametrize(
    "data, fragment",
    [
        (b"", "empty"),
        (b"garbage bytes", "not a streamgrpo event"),
        (b"\xc3\x01\x00", "truncated"),
        (b"\xc3\x01" + b"\x11" * 8 + b"body", "unknown schema fingerprint"),
    ],
)
def test_garbage_is_a_decode_error_with_a_reason(data: bytes, fragment: str) -> None:
    with pytest.raises(DecodeError, match=fragment):
        Codec().decode(data)


def test_corrupt_body_is_a_decode_error() -> None:
    good = Codec().encode(sample_events()[0])
    with pytest.raises(DecodeError, match="corrupt"):
        Codec().decode(good[:14])


def test_wrong_expected_type_is_a_decode_error() -> None:
    data = Codec().encode(sample_events()[0])
    with pytest.raises(DecodeError, match="expected"):
        Codec().decode(data, R.Reward)


def test_encoding_an_event_that_breaks_its_schema_is_an_encode_error() -> None:
    bad = R.Task(envelope=sample_events()[0].envelope, question=None, source="x", group_size=1)  # type: ignore[arg-type]
    with pytest.raises(EncodeError, match="Task"):
        Codec().encode(bad)


def test_derived_ids_are_deterministic_and_distinct() -> None:
    assert ids.derived_id("reward", "r1") == ids.derived_id("reward", "r1")
    assert ids.derived_id("reward", "r1") != ids.derived_id("sample", "r1")


_ROLLOUT = {"type": "record", "name": "RolloutCompleted", "namespace": "streamgrpo.events"}


@pytest.mark.parametrize(
    ("writer", "datum", "fragment"),
    [("string", "hello", "not an Avro record"),  # was: TypeError escaped decode
     ({"type": "array", "items": "long"}, [1, 2], "not an Avro record"),
     ({"type": "enum", "name": "E", "symbols": ["A"]}, "A", "not an Avro record"),
     ({**_ROLLOUT, "fields": [{"name": "question", "type": "int"}]}, {"question": 7},
      "SchemaResolutionError"),  # was: SchemaResolutionError escaped decode
     ({**_ROLLOUT, "fields": []}, {}, "SchemaResolutionError")],  # required reader fields missing
)
def test_a_registry_writer_schema_that_does_not_resolve_is_a_decode_error(writer: object, datum: object,
                                                                          fragment: str) -> None:
    import json
    import struct
    import uuid

    from confluent_kafka.schema_registry import Schema
    from fastavro import parse_schema

    codec = Codec(f"mock://codec-{uuid.uuid4().hex[:8]}")
    schema_id = codec.schema_registry.register_schema("rollouts-x", Schema(json.dumps(writer), "AVRO"))
    body = io.BytesIO()
    schemaless_writer(body, parse_schema(writer), datum)
    with pytest.raises(DecodeError, match=fragment):
        codec.decode(CONFLUENT_MAGIC + struct.pack(">I", schema_id) + body.getvalue())


def test_codecs_of_one_process_share_a_mock_registry() -> None:
    writer, reader = Codec("mock://codec-shared"), Codec("mock://codec-shared")
    event = sample_events()[0]
    assert reader.decode(writer.encode(event, "tasks")) == event
    assert Codec("mock://codec-other").schema_registry is not writer.schema_registry


def test_text_utf8_cannot_carry_is_encoded_with_a_replacement_character() -> None:
    # issue 24, finding 9: a lone surrogate in model output made EncodeError escape (a crash loop)
    from streamgrpo.avro.codec import valid_text

    task = R.Task(envelope=R.Envelope.new("test", task_id="t\ud800"), question="4\ud800?", source="s",
                  group_size=2, ground_truths=["\udfff"], metadata={"k\ud83d": "v"})
    for codec in (Codec(), Codec("mock://codec-surrogate")):
        back = codec.decode(codec.encode(task, "tasks"), R.Task)
        assert (back.question, back.ground_truths, back.envelope.task_id) == ("4\ufffd?", ["\ufffd"], "t\ufffd")
        assert back.metadata == {"k\ufffd": "v"}
    assert valid_text({"a\ud800": ["\udbff\udfff", 3, None]}) == {"a\ufffd": ["\ufffd\ufffd", 3, None]}
