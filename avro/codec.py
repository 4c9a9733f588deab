"""Encode events to bytes and back.

Two wire formats:
- **Avro single-object encoding** (default): ``C3 01`` + 8-byte little-endian CRC-64-AVRO
  fingerprint of the writer schema + Avro binary body. Self-describing without any server.
- **Confluent Schema Registry wire format** (when ``schema_registry_url`` is set): ``00`` + 4-byte
  big-endian schema id + body. Subjects follow the TopicRecordNameStrategy (``<topic>-<full name>``)
  because one topic may carry several event types (``adapter-events``). ``mock://`` URLs use
  confluent-kafka's in-memory registry (tests).

Text that UTF-8 cannot carry (a lone surrogate, e.g. in a model's reply) is encoded with U+FFFD in its
place (:func:`valid_text`): a producer never fails on what a model wrote.

Decoding always resolves the writer schema to the current reader schema, so events written by any
released schema version decode with today's code. Bad bytes raise :class:`DecodeError` with the
reason; callers route those records to ``dead-letters``.

What is not covered: schema evolution of the *key* (keys are plain UTF-8 strings).
"""

from __future__ import annotations

import io
import json
import re
import struct
from typing import Any, TypeVar, overload

from fastavro import schemaless_reader, schemaless_writer
from fastavro.read import SchemaResolutionError
from fastavro.schema import SchemaParseException, UnknownType, parse_schema

from streamgrpo.avro import registry
from streamgrpo.avro.errors import DecodeError, EncodeError
from streamgrpo.avro.records import EVENT_TYPES, Event

SINGLE_OBJECT_MAGIC = b"\xc3\x01"
CONFLUENT_MAGIC = b"\x00"
E = TypeVar("E", bound=Event)
# what fastavro raises on a body that does not resolve or read (OverflowError: a varint or timestamp out of
# range, found by tests/unit/fuzz; SchemaResolutionError: a writer schema incompatible with the reader's)
_READ_ERRORS = (ValueError, TypeError, KeyError, IndexError, EOFError, StopIteration, OverflowError,
                SchemaResolutionError)
_SURROGATE = re.compile("[\ud800-\udfff]")
_MOCK_REGISTRIES: dict[str, Any] = {}  # mock:// URL -> its in-memory registry, shared like a real server


def valid_text(datum: Any) -> Any:
    """``datum`` with every surrogate code point in its strings (keys included) replaced by U+FFFD: text
    that UTF-8, hence Avro, can carry. Python strings hold lone surrogates (``json.loads('"\\ud800"')``)."""
    if isinstance(datum, str):
        return _SURROGATE.sub("\ufffd", datum)
    if isinstance(datum, dict):
        return {valid_text(k): valid_text(v) for k, v in datum.items()}
    if isinstance(datum, (list, tuple)):
        return [valid_text(v) for v in datum]
    return datum


def _plain(schema: Any) -> Any:
    """A parsed fastavro schema without fastavro's private hint keys (for registries)."""
    if isinstance(schema, dict):
        return {k: _plain(v) for k, v in schema.items() if not k.startswith("__")}
    if isinstance(schema, list):
        return [_plain(v) for v in schema]
    return schema


def _body(sv: registry.SchemaVersion, event: Event, datum: Any, *, retry_text: bool) -> bytes:
    """The Avro binary body; EncodeError when ``datum`` does not match the schema (UnicodeEncodeError
    passes through with ``retry_text``, for the caller to retry with :func:`valid_text`)."""
    out = io.BytesIO()
    try:
        schemaless_writer(out, sv.parsed, datum)
    except UnicodeEncodeError:
        if retry_text:
            raise
        raise EncodeError(f"{event.SCHEMA_NAME} holds text UTF-8 cannot carry") from None
    except (ValueError, TypeError, KeyError, AttributeError, OverflowError) as exc:
        raise EncodeError(f"{event.SCHEMA_NAME} does not match its schema: {exc}") from exc
    return out.getvalue()


class Codec:
    """Event <-> bytes. Thread-safe for encode/decode; create one per process."""

    def __init__(self, schema_registry_url: str | None = None, registry_config: dict[str, Any] | None = None):
        self._registry: Any = None
        self._ids: dict[tuple[str, str], int] = {}
        self._writers: dict[int, Any] = {}
        self._extra: dict[bytes, registry.SchemaVersion] = {}
        if schema_registry_url:
            from confluent_kafka.schema_registry import SchemaRegistryClient

            # `new_client` returns the in-memory MockSchemaRegistryClient for mock:// URLs; one per URL in a
            # process, so that every codec of the process sees the schemas the others registered.
            conf = {"url": schema_registry_url, **(registry_config or {})}
            if schema_registry_url.startswith("mock://"):
                self._registry = _MOCK_REGISTRIES.setdefault(schema_registry_url, SchemaRegistryClient.new_client(conf))
            else:
                self._registry = SchemaRegistryClient.new_client(conf)

    @property
    def schema_registry(self) -> Any:
        """The schema registry client (None without a registry URL)."""
        return self._registry

    def register_writer(self, schema: dict[str, Any], release: str = "external") -> bytes:
        """Teach this codec an extra writer schema (e.g. a producer's older or newer version).

        Returns its fingerprint. Its events decode by resolution to the current reader schema.
        """
        parsed: dict[str, Any] = parse_schema(schema)  # type: ignore[assignment]
        sv = registry.SchemaVersion(parsed["name"], release, parsed, registry.fingerprint_of(parsed))
        self._extra[sv.fingerprint] = sv
        return sv.fingerprint

    # -- encode ---------------------------------------------------------------------------------
    def encode(self, event: Event, topic: str | None = None, writer: registry.SchemaVersion | None = None) -> bytes:
        """Encode with the current schema (or ``writer``, an older/registered version, for tests and tools)."""
        sv = writer or registry.get(event.SCHEMA_NAME)
        if self._registry is not None:
            header = CONFLUENT_MAGIC + struct.pack(">I", self._schema_id(sv, topic or "events"))
        else:
            header = SINGLE_OBJECT_MAGIC + sv.fingerprint
        datum = event.to_avro()
        try:
            return header + _body(sv, event, datum, retry_text=True)
        except UnicodeEncodeError:  # a lone surrogate (model output, "\ud800"): Avro strings are UTF-8
            return header + _body(sv, event, valid_text(datum), retry_text=False)

    def _schema_id(self, sv: registry.SchemaVersion, topic: str) -> int:
        key = (topic, sv.name)
        if key not in self._ids:
            from confluent_kafka.schema_registry import Schema

            schema = Schema(json.dumps(_plain(sv.parsed)), "AVRO")
            self._ids[key] = self._registry.register_schema(f"{topic}-{sv.name}", schema)
        return self._ids[key]

    # -- decode ---------------------------------------------------------------------------------
    @overload
    def decode(self, data: bytes, expected: type[E]) -> E: ...
    @overload
    def decode(self, data: bytes, expected: None = None) -> Event: ...

    def decode(self, data: bytes | None, expected: type[Event] | None = None) -> Event:
        """Decode ``data``; with ``expected``, anything else is a :class:`DecodeError`."""
        if not data:
            raise DecodeError("empty record value (a tombstone or a producer bug)")
        writer_name, writer_schema, body = self._writer(data)
        reader = registry.current().get(writer_name)
        if reader is None or writer_name not in EVENT_TYPES:
            raise DecodeError(f"{writer_name} is not an event type this version knows")
        cls = EVENT_TYPES[writer_name]
        if expected is not None and cls is not expected:
            raise DecodeError(f"expected {expected.SCHEMA_NAME}, got {writer_name}")
        try:
            record = schemaless_reader(io.BytesIO(body), writer_schema, reader.parsed)
            return cls.from_avro(record)  # type: ignore[no-any-return]
        except _READ_ERRORS as exc:
            raise DecodeError(f"corrupt {writer_name} body: {type(exc).__name__}: {exc}") from exc

    def _writer(self, data: bytes) -> tuple[str, Any, bytes]:
        if data[:2] == SINGLE_OBJECT_MAGIC:
            if len(data) < 10:
                raise DecodeError("truncated single-object header")
            sv = registry.by_fingerprint().get(data[2:10]) or self._extra.get(data[2:10])
            if sv is None:
                raise DecodeError(
                    f"unknown schema fingerprint {data[2:10].hex()}: written by a schema version this "
                    "reader does not know (upgrade streamgrpo or add the version under avro/released/)"
                )
            return sv.name, sv.parsed, data[10:]
        if data[:1] == CONFLUENT_MAGIC and self._registry is not None:
            if len(data) < 5:
                raise DecodeError("truncated Confluent wire-format header")
            schema_id = struct.unpack(">I", data[1:5])[0]
            if schema_id not in self._writers:
                self._writers[schema_id] = self._registered_writer(schema_id)
            name, parsed = self._writers[schema_id]
            return name, parsed, data[5:]
        raise DecodeError(
            f"not a streamgrpo event: first bytes {data[:4].hex()} match neither Avro single-object "
            "encoding (c301) nor, with a registry configured, the Confluent wire format (00)"
        )

    def _registered_writer(self, schema_id: int) -> tuple[str, Any]:
        """(full name, parsed schema) of a registry's writer schema; DecodeError unless it is an Avro record."""
        from confluent_kafka.schema_registry.error import SchemaRegistryError

        try:
            schema = self._registry.get_schema(schema_id)
        except SchemaRegistryError as exc:
            raise DecodeError(f"schema id {schema_id} not found in the registry: {exc}") from exc
        try:
            writer = parse_schema(json.loads(schema.schema_str))
        except (ValueError, TypeError, KeyError, SchemaParseException, UnknownType) as exc:
            raise DecodeError(f"schema id {schema_id} is not a valid Avro schema: {type(exc).__name__}: {exc}") from exc
        if not isinstance(writer, dict) or writer.get("type") != "record" or not isinstance(writer.get("name"), str):
            kind = writer.get("type") if isinstance(writer, dict) else type(writer).__name__
            raise DecodeError(f"schema id {schema_id} is not an Avro record (it is {kind!r}): not a streamgrpo event")
        return writer["name"], writer
