"""A consumed record and the one classification of records that do not decode (pure).

:class:`Received` is what every reader of the project hands its handlers: the decoded event (or
``None`` with ``error`` set), the record's place (catalog topic name, partition, offset), key, raw
value and timestamp. :func:`decode_record` decodes a value and checks that its event type belongs
on the topic; a failure is one of two reason codes, whichever consumer meets the record:
``decode_error`` (not a streamgrpo event, unknown schema, corrupt body) and ``wrong_event_type``.
"""

from __future__ import annotations

from dataclasses import dataclass

from streamgrpo.avro.codec import Codec
from streamgrpo.avro.errors import DecodeError
from streamgrpo.avro.records import Event
from streamgrpo.topics.catalog import CATALOG


@dataclass(frozen=True)
class Received:
    """One consumed record. ``event`` is None (and ``error`` says why) when it did not decode."""

    event: Event | None
    topic: str  # catalog (logical) name
    partition: int
    offset: int
    key: bytes | None
    value: bytes
    timestamp_ms: int
    error: str | None = None
    error_code: str | None = None


def decode_record(codec: Codec, topic: str, value: bytes | None) -> tuple[Event | None, str | None, str | None]:
    """Decode and check the event type against the topic. Returns (event, reason_code, reason)."""
    try:
        event = codec.decode(value or b"")
    except DecodeError as exc:
        return None, "decode_error", str(exc)
    spec = CATALOG.get(topic)
    if spec is not None and event.SCHEMA_NAME not in spec.event_types:
        return None, "wrong_event_type", f"{event.SCHEMA_NAME} does not belong on topic {topic}"
    return event, None, None


def received(codec: Codec, topic: str, partition: int, offset: int, key: bytes | None, value: bytes | None,
             timestamp_ms: int) -> Received:
    """Decode one record into a :class:`Received` (``event`` None and the reason set when it does not decode)."""
    event, code, reason = decode_record(codec, topic, value)
    return Received(event, topic, partition, offset, key, value or b"", timestamp_ms, error=reason, error_code=code)
