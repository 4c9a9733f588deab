"""Archive rows whose types are DERIVED from the Avro contract (pure; no I/O).

Every event type has one Arrow schema, computed from its ``.avsc`` (:func:`arrow_schema`), so two
valid events of one type can never disagree on a column type inside a Parquet file (the crash of
issue #12: an OK Reward's ``components`` as JSON text next to an ERROR Reward's empty list).

Mapping (Avro -> Arrow): ``string`` (and ``uuid``) and enums -> ``string``; ``int`` -> ``int32``;
``long`` -> ``int64``; ``timestamp-millis`` -> ``timestamp[ms, UTC]``; ``float``/``double`` ->
``float32``/``float64``; ``boolean`` -> ``bool``; ``bytes`` -> ``binary``; ``array`` -> ``list``;
``map`` -> ``map<string, _>``; records -> ``struct``; ``["null", X]`` -> nullable X. Each column
carries its Avro ``doc`` as field metadata (``streamgrpo analyse --describe`` prints it).

A row (:func:`to_row`) is the event's envelope flattened into top-level columns (:data:`ENVELOPE`),
then the event's own fields in contract order, then where the record was read: :data:`SOURCE`
(``kafka_topic`` = catalog name, ``kafka_partition``, ``kafka_offset``, ``kafka_key``,
``kafka_timestamp``) and ``event_type``. :func:`from_row` is the exact inverse: an archived row
turns back into the event that was read (restore and replay re-encode it; same schema, same bytes).

What is not covered: Avro unions other than ``["null", X]`` and ``fixed`` (the contract uses neither;
:func:`arrow_schema` raises on them, so a contract change that adds one fails the tests).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import pyarrow as pa

from streamgrpo.avro import records as R
from streamgrpo.avro import registry

ENVELOPE = ("event_id", "event_time", "producer", "task_id", "group_id", "rollout_id", "turn")
SOURCE = ("kafka_topic", "kafka_partition", "kafka_offset", "kafka_key", "kafka_timestamp")
EVENT_TYPE = "event_type"
_UTC_MS = pa.timestamp("ms", tz="UTC")
_PRIMITIVES: dict[str, pa.DataType] = {
    "string": pa.string(), "int": pa.int32(), "long": pa.int64(), "float": pa.float32(), "double": pa.float64(),
    "boolean": pa.bool_(), "bytes": pa.binary(),
}
_SOURCE_FIELDS = (
    pa.field("kafka_topic", pa.string(), nullable=False, metadata={"doc": "Catalog topic the record was read from."}),
    pa.field("kafka_partition", pa.int32(), nullable=False, metadata={"doc": "Partition of the record."}),
    pa.field("kafka_offset", pa.int64(), nullable=False, metadata={"doc": "Offset of the record in its partition."}),
    pa.field("kafka_key", pa.binary(), metadata={"doc": "Record key bytes (UTF-8 of the catalog key)."}),
    pa.field("kafka_timestamp", _UTC_MS, metadata={"doc": "Record timestamp (producer create time)."}),
    pa.field(EVENT_TYPE, pa.string(), nullable=False, metadata={"doc": "Event type (short Avro name)."}),
)


@dataclass(frozen=True)
class Place:
    """Where an archived event was read: catalog topic, partition, offset, key and record timestamp."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    timestamp_ms: int | None


def short_name(full_name: str) -> str:
    return full_name.rsplit(".", 1)[-1]


def _named(avro: Any, names: dict[str, Any]) -> Any:
    """Resolve a reference to a named type (``"streamgrpo.events.Envelope"``) to its definition."""
    if isinstance(avro, str) and avro not in _PRIMITIVES and avro != "null":
        if avro in names:
            return names[avro]
        return registry.get(avro).parsed
    if isinstance(avro, dict) and avro.get("type") in ("record", "enum") and "name" in avro:
        names[avro["name"]] = avro
    return avro


def arrow_type(avro: Any, names: dict[str, Any]) -> tuple[pa.DataType, bool]:
    """(Arrow type, nullable) of an Avro type; raises ValueError on a type the archive does not map."""
    avro = _named(avro, names)
    if isinstance(avro, list):
        kinds = [a for a in avro if a != "null"]
        if len(kinds) != 1 or len(avro) != 2:
            raise ValueError(f"union {avro} is not ['null', X]; the archive maps only nullable unions")
        return arrow_type(kinds[0], names)[0], True
    if isinstance(avro, str):
        return _PRIMITIVES[avro], False
    kind, logical = avro["type"], avro.get("logicalType")
    if logical == "timestamp-millis":
        return _UTC_MS, False
    if kind == "enum":
        return pa.string(), False
    if kind == "array":
        item, null = arrow_type(avro["items"], names)
        return pa.list_(pa.field("element", item, nullable=null)), False
    if kind == "map":
        value, null = arrow_type(avro["values"], names)
        return pa.map_(pa.string(), pa.field("value", value, nullable=null)), False
    if kind == "record":
        return pa.struct([_field(f, names) for f in avro["fields"]]), False
    if kind in _PRIMITIVES:
        return _PRIMITIVES[kind], False
    raise ValueError(f"Avro type {avro!r} has no archive mapping")


def _field(avro_field: dict[str, Any], names: dict[str, Any]) -> pa.Field:
    typ, null = arrow_type(avro_field["type"], names)
    return pa.field(avro_field["name"], typ, nullable=null, metadata={"doc": avro_field.get("doc", "")})


@functools.cache
def arrow_schema(event_name: str) -> pa.Schema:
    """The archive schema of one event type (full or short Avro name): envelope, fields, source columns."""
    parsed = registry.get(event_name).parsed
    names: dict[str, Any] = {}
    fields: list[pa.Field] = []
    for f in parsed["fields"]:
        if f["name"] == "envelope":
            env = _named(f["type"], names)
            fields += [_field(ef, names) for ef in env["fields"]]
        else:
            fields.append(_field(f, names))
    fields += _SOURCE_FIELDS
    seen = [f.name for f in fields]
    clash = sorted({n for n in seen if seen.count(n) > 1})
    if clash:
        raise ValueError(f"{event_name}: fields {clash} clash with envelope or source columns")
    return pa.schema(fields, metadata={"avro_name": parsed["name"]})


def _ms(value: int | None) -> datetime | None:
    return None if value is None else datetime.fromtimestamp(value / 1000, timezone.utc)


def to_row(event: R.Event, place: Place) -> dict[str, Any]:
    """One archive row of ``event`` read at ``place`` (plain Python values; see the module docstring)."""
    data = event.to_avro()
    row: dict[str, Any] = dict(data.pop("envelope"))
    row.update(data)
    row.update(kafka_topic=place.topic, kafka_partition=place.partition, kafka_offset=place.offset,
               kafka_key=place.key, kafka_timestamp=_ms(place.timestamp_ms), event_type=short_name(event.SCHEMA_NAME))
    return row


def _plain(value: Any, typ: pa.DataType) -> Any:
    """An Arrow ``to_pylist`` value back to what ``from_avro`` reads (maps as dicts, nested)."""
    if value is None:
        return None
    if pa.types.is_map(typ):
        return {k: _plain(v, typ.item_type) for k, v in value}
    if pa.types.is_list(typ):
        return [_plain(v, typ.value_type) for v in value] if not _is_flat(typ.value_type) else list(value)
    if pa.types.is_struct(typ):
        return _fields(value, list(typ))
    if pa.types.is_timestamp(typ):
        return value.astimezone(timezone.utc)
    return value


def _fields(value: dict[str, Any], fields: list[pa.Field]) -> dict[str, Any]:
    """A record's fields; a NULL in a non-nullable column (a file written before the field existed) is
    left out, so the dataclass default applies as Avro schema resolution would."""
    out = {}
    for f in fields:
        v = value.get(f.name)
        if v is not None or f.nullable:
            out[f.name] = _plain(v, f.type)
    return out


def _is_flat(typ: pa.DataType) -> bool:
    return not (pa.types.is_map(typ) or pa.types.is_list(typ) or pa.types.is_struct(typ) or pa.types.is_timestamp(typ))


def from_row(row: dict[str, Any], schema: pa.Schema) -> tuple[R.Event, Place]:
    """The event and place of an archived row (``row`` as ``Table.to_pylist`` gives it)."""
    name = schema.metadata[b"avro_name"].decode()
    data = _fields(row, [f for f in schema if f.name not in SOURCE and f.name != EVENT_TYPE])
    data["envelope"] = {k: data.pop(k) for k in ENVELOPE if k in data}
    event = R.EVENT_TYPES[name].from_avro(data)
    ts = row.get("kafka_timestamp")
    place = Place(row["kafka_topic"], int(row["kafka_partition"]), int(row["kafka_offset"]), row.get("kafka_key"),
                  None if ts is None else round(ts.timestamp() * 1000))
    return event, place


def table(rows: list[dict[str, Any]], event_name: str) -> pa.Table:
    """Rows of one event type as an Arrow table with the derived schema (raises ``pa.ArrowException``)."""
    return pa.Table.from_pylist(rows, schema=arrow_schema(event_name))
