"""The archive on disk: an atomic, de-duplicated Parquet writer and an ordered reader.

Layout (one schema per directory, derived from the Avro contract by :mod:`.schema`)::

    <root>/<topic>/<EventType>/date=<YYYY-MM-DD>/part-<ms>-<host>-<pid>-<n>.parquet
    <root>/_ns/<namespace>/<topic>/...      events re-emitted under a topic prefix (replay --judge)

``date`` is the UTC day of the event's ``event_time`` (a redelivered event lands in the same directory).

Writer guarantees (:class:`ArchiveWriter`):

- atomic commits: a file is written under a hidden temporary name, fsynced, then renamed into place
  (and the directory fsynced), so a reader never sees a partial file and a crash leaves at most a
  ``.part-*.tmp`` that nothing reads;
- idempotent under redelivery: an event whose id is already archived in its directory (or buffered) is
  skipped; the ids of a directory are loaded from its files the first time it is written to (an LRU of
  directories bounds the memory). Readers de-duplicate by id as well (several writers sharing a root);
- every row keeps its source topic, partition, offset, key and record timestamp.

Reader (:func:`read_events`): the events of a topic in ``(partition, offset)`` order, as
``(event, Place)`` pairs rebuilt from the rows (what ``replay restore`` and ``replay train --archive``
consume), de-duplicated by event id. A row that does not decode (an enum value this contract does not know,
say) is an :class:`ArchiveError` naming its file, or with ``skip_bad`` a warning naming it and the row skipped;
:func:`require_parts` says so when a directory holds no archive part at all.

Retention: Kafka keeps the recent log (topics expire after their catalog retention, and the embedded
broker keeps nothing across a restart); the archive keeps everything and is never pruned by streamgrpo.
What is not covered: compaction of small files (a roll is one file per directory), deleting
archived data, object stores (a local or mounted file system only).
"""

from __future__ import annotations

import heapq
import logging
import os
import socket
import time
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from datetime import timezone
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from streamgrpo.archive.errors import ArchiveError
from streamgrpo.archive.schema import Place, arrow_schema, from_row, short_name, to_row
from streamgrpo.avro import records as R
from streamgrpo.log import printable
from streamgrpo.topics.catalog import CATALOG, spec
from streamgrpo.topics.received import Received

log = logging.getLogger(__name__)
NAMESPACES = "_ns"


def namespace_root(root: Path, namespace: str = "") -> Path:
    """Root of a namespace's subtree (the archive root itself for the default namespace ``""``)."""
    if not namespace:
        return Path(root)
    if "/" in namespace or namespace in (".", ".."):
        raise ArchiveError(f"namespace {namespace!r} cannot be a directory name")
    return Path(root) / NAMESPACES / namespace


def namespaces(root: Path) -> list[str]:
    """The namespaces archived under ``root`` (besides the default one)."""
    base = Path(root) / NAMESPACES
    return sorted(p.name for p in base.iterdir() if p.is_dir()) if base.is_dir() else []


def type_dir(root: Path, topic: str, event_name: str) -> Path:
    return Path(root) / topic / short_name(event_name)


def day_dir(root: Path, topic: str, event: R.Event) -> Path:
    day = event.envelope.event_time.astimezone(timezone.utc).date().isoformat()
    return type_dir(root, topic, event.SCHEMA_NAME) / f"date={day}"


def parts(directory: Path) -> list[Path]:
    """The committed Parquet files under ``directory`` (recursively), sorted."""
    return sorted(directory.rglob("part-*.parquet")) if directory.is_dir() else []


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: Path, table: pa.Table) -> None:
    """Write ``table`` to ``path``: temporary hidden file, fsync, rename, fsync the directory."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        pq.write_table(table, tmp, compression="zstd")
        _fsync(tmp)
        os.replace(tmp, path)
        _fsync(path.parent)
    except (pa.ArrowException, OSError) as exc:
        tmp.unlink(missing_ok=True)
        raise ArchiveError(f"cannot write {path}: {exc}") from exc


class ArchiveWriter:
    """Buffers events per directory and writes one file per directory each :meth:`flush`."""

    def __init__(self, root: Path, roll_records: int = 1000, roll_s: float = 30.0, *, namespace: str = "",
                 id_cache_dirs: int = 64) -> None:
        self.root = namespace_root(Path(root), namespace)
        self.roll_records = roll_records
        self.roll_s = roll_s
        self.id_cache_dirs = id_cache_dirs
        self._rows: dict[Path, tuple[str, list[dict[str, Any]]]] = {}
        self._ids: OrderedDict[Path, set[str]] = OrderedDict()
        self._since = time.monotonic()
        self.seen = 0  # records offered since the last flush (duplicates included)
        self.files = 0
        self.written = 0
        self.duplicates = 0
        self._prefix = f"{socket.gethostname()}-{os.getpid()}"

    def _known(self, directory: Path) -> set[str]:
        ids = self._ids.get(directory)
        if ids is None:
            ids = set()
            for part in parts(directory):
                try:
                    ids.update(pq.read_table(part, columns=["event_id"]).column("event_id").to_pylist())
                except (pa.ArrowException, OSError) as exc:
                    raise ArchiveError(f"cannot read the event ids of {part}: {exc}") from exc
            self._ids[directory] = ids
        self._ids.move_to_end(directory)
        while len(self._ids) > self.id_cache_dirs:  # forget the least recently used directory with nothing buffered
            victim = next((d for d in self._ids if d not in self._rows and d != directory), None)
            if victim is None:
                break
            del self._ids[victim]
        return ids

    def add(self, event: R.Event, place: Place) -> bool:
        """Buffer ``event`` read at ``place``; False (and nothing buffered) when its id is archived already."""
        self.seen += 1
        directory = day_dir(self.root, place.topic, event)
        known = self._known(directory)
        if event.event_id in known:
            self.duplicates += 1
            return False
        known.add(event.event_id)
        self._rows.setdefault(directory, (event.SCHEMA_NAME, []))[1].append(to_row(event, place))
        return True

    def add_all(self, items: Iterable[tuple[R.Event, Place]]) -> int:
        return sum(self.add(e, p) for e, p in items)

    @property
    def pending(self) -> int:
        return sum(len(rows) for _, rows in self._rows.values())

    def due(self) -> bool:
        return self.seen >= self.roll_records or (self.seen > 0 and time.monotonic() - self._since >= self.roll_s)

    def flush(self) -> int:
        """Write every buffered directory to a new file; returns the rows written. On an error the
        unwritten buffers are kept (a later flush retries them) and :class:`ArchiveError` is raised."""
        written = 0
        for directory in sorted(self._rows):
            name, rows = self._rows[directory]
            self.files += 1
            path = directory / f"part-{int(time.time() * 1000)}-{self._prefix}-{self.files}.parquet"
            try:
                tbl = pa.Table.from_pylist(rows, schema=arrow_schema(name))
            except (pa.ArrowException, ValueError, TypeError) as exc:
                raise ArchiveError(f"{len(rows)} {short_name(name)} rows do not fit the archive schema: {exc}") from exc
            write_atomic(path, tbl)
            del self._rows[directory]
            written += len(rows)
        self.written += written
        self.seen = 0
        self._since = time.monotonic()
        return written


def place_of(rec: Received) -> Place:
    """The archive place of a consumed record."""
    return Place(rec.topic, rec.partition, rec.offset, rec.key, rec.timestamp_ms)


def topics_in(root: Path) -> list[str]:
    """Catalog topics with at least one archived file under ``root``."""
    return [t for t in CATALOG if parts(Path(root) / t)]


def require_parts(root: Path, what: str) -> list[str]:
    """The catalog topics archived under ``root``; an :class:`ArchiveError` that says so when ``root`` holds no
    archive part at all (an ``archive_dir`` of ``/``, ``/etc`` or an empty directory), so that a reader never
    shows an empty history as if the run had done nothing. ``what`` names the reader (``run X``)."""
    found = topics_in(root)
    if not found:
        raise ArchiveError(f"{what}: no archive parts found under {root} (none of the catalog topics has a "
                           "<topic>/<EventType>/date=*/part-*.parquet there): check that this is the run's "
                           "[streams] archive_dir")
    return found


def read_events(root: Path, topic: str, *, batch_rows: int = 2048,
                skip_bad: bool = False) -> Iterator[tuple[R.Event, Place]]:
    """Every archived event of ``topic`` in (partition, offset) order, first copy of each event id only.

    A row that does not turn back into its event (an enum value the contract does not know, a field of another
    shape: a file written by another contract or altered) raises an :class:`ArchiveError` naming its file, or
    with ``skip_bad`` (readers that only show the archive: ``status``, ``tail``) is skipped with a warning that
    names it."""
    streams = [_read_type(Path(root), topic, name, batch_rows, skip_bad) for name in spec(topic).event_types]
    seen: set[str] = set()
    for _, event, place in heapq.merge(*streams, key=lambda item: item[0]):
        if event.event_id not in seen:
            seen.add(event.event_id)
            yield event, place


def _read_type(root: Path, topic: str, name: str, batch_rows: int,
               skip_bad: bool = False) -> Iterator[tuple[tuple[int, int], R.Event, Place]]:
    import duckdb

    directory = type_dir(root, topic, name)
    if not parts(directory):
        return
    schema = arrow_schema(name)
    pattern = "'" + str(directory / "date=*" / "part-*.parquet").replace("'", "''") + "'"
    con = duckdb.connect()
    try:
        rel = con.sql(f"SELECT * FROM read_parquet({pattern}, union_by_name=true, hive_partitioning=false, "
                      "filename=true) ORDER BY kafka_partition, kafka_offset")
        reader = rel.to_arrow_reader(batch_rows) if hasattr(rel, "to_arrow_reader") else rel.fetch_arrow_reader(batch_rows)
        for batch in reader:
            for row in batch.to_pylist():
                decoded = _decode_row(row, schema, skip_bad)
                if decoded is not None:
                    yield (decoded[1].partition, decoded[1].offset), *decoded
    except duckdb.Error as exc:
        raise ArchiveError(f"cannot read the archived {short_name(name)} events of {topic} under {root}: {exc}") from exc
    finally:
        con.close()


def _decode_row(row: dict[str, Any], schema: pa.Schema, skip_bad: bool) -> tuple[R.Event, Place] | None:
    """The event and place of one archived row; a row that does not decode raises an ArchiveError naming its file
    and place, or is logged and skipped (None) with ``skip_bad``."""
    try:
        return from_row(row, schema)
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        where = printable(f"{row.get('filename')} (partition {row.get('kafka_partition')}, offset "
                          f"{row.get('kafka_offset')})", keep_newlines=False)
        why = printable(f"{type(exc).__name__}: {exc}", keep_newlines=False, limit=300)
        message = (f"an archived {short_name(schema.metadata[b'avro_name'].decode())} row in {where} does not "
                   f"decode ({why}): the file was written by another contract or altered")
        if not skip_bad:
            raise ArchiveError(f"{message}; move the file out of the archive to read the rest") from exc
        log.warning("%s; skipped that row (move the file out of the archive to silence this)", message)
        return None
