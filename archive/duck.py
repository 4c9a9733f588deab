"""DuckDB over an archive: one de-duplicated view per topic (and per event type where a topic carries several).

:func:`connect` opens DuckDB in memory and creates, for every catalog topic, a view named after it
(dashes -> underscores: ``rewards``, ``training_samples``, ``adapter_events`` ...) holding every
archived event of the topic once (the first copy of each ``event_id``). Its columns are those of
:mod:`.schema`: the envelope, the event's fields, then ``kafka_topic, kafka_partition,
kafka_offset, kafka_key, kafka_timestamp, event_type``. A topic with no archived file still has
its view, empty and typed, and a field the contract gained after the files were written is a NULL
column, so queries and reports run on any archive. ``adapter-events`` also has one
view per event type (``adapter_published``, ``adapter_promoted``, ``adapter_rolled_back``,
``adapter_approved``, ``adapter_rejected``). ``all_rewards`` and ``all_training_samples`` add the
events re-emitted into namespaces (``replay train --judge``) with a ``namespace`` column ('' for
the archive's own events).

What is not covered: writing (see :mod:`.store`), joined views (``streamgrpo.analysis.views``).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pyarrow as pa

from streamgrpo.archive.errors import ArchiveError
from streamgrpo.archive.schema import arrow_schema, short_name
from streamgrpo.archive.store import namespace_root, namespaces, parts, type_dir
from streamgrpo.topics import catalog
from streamgrpo.topics.catalog import TOPICS

#: Topics whose namespaced copies get an ``all_<view>`` view.
NAMESPACED_VIEWS = (catalog.REWARDS, catalog.TRAINING_SAMPLES)


def view_name(topic: str) -> str:
    return topic.replace("-", "_")


def snake(event_name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", short_name(event_name)).lower()


def _quote(path: Path) -> str:
    return "'" + str(path).replace("'", "''") + "'"


def _source(con: Any, root: Path, topic: str, event_name: str) -> str:
    """SQL of every archived row of one event type of ``topic`` with every column of today's contract: the files
    united with an empty typed table, so a field added after the files were written reads as NULL (an empty
    typed table alone when there is no file)."""
    empty = f"_empty_{snake(event_name)}"
    con.register(empty, pa.Table.from_pylist([], schema=arrow_schema(event_name)))
    directory = type_dir(root, topic, event_name)
    if parts(directory):
        pattern = _quote(directory / "date=*" / "part-*.parquet")
        return (f"SELECT * FROM read_parquet({pattern}, union_by_name=true, hive_partitioning=false) "
                f"UNION ALL BY NAME SELECT * FROM {empty}")
    return f"SELECT * FROM {empty}"


def _dedup(sql: str) -> str:
    return (f"SELECT * FROM ({sql}) QUALIFY row_number() OVER (PARTITION BY event_id "
            "ORDER BY kafka_timestamp NULLS LAST, kafka_partition, kafka_offset) = 1")


def topic_sql(con: Any, root: Path, topic: str, event_types: tuple[str, ...]) -> str:
    return _dedup(" UNION ALL BY NAME ".join(f"({_source(con, root, topic, n)})" for n in event_types))


def connect(root: Path) -> Any:
    """A DuckDB connection with the views of the module docstring; raises :class:`ArchiveError`."""
    import duckdb

    root = Path(root)
    if not root.is_dir():
        raise ArchiveError(f"archive {root} does not exist; run the archive agent (`streamgrpo streams`, part of "
                           "`streamgrpo run`) or pass --archive-dir (or --live to query the broker's topics)")
    con = duckdb.connect()
    try:
        for t in TOPICS:
            con.execute(f'CREATE VIEW "{view_name(t.name)}" AS {topic_sql(con, root, t.name, t.event_types)}')
            if len(t.event_types) > 1:
                for name in t.event_types:
                    con.execute(f'CREATE VIEW "{snake(name)}" AS {_dedup(_source(con, root, t.name, name))}')
        spaces = namespaces(root)
        for t in (t for t in TOPICS if t.name in NAMESPACED_VIEWS):
            selects = [f"SELECT '' AS namespace, * FROM \"{view_name(t.name)}\""]
            for ns in spaces:
                sql = topic_sql(con, namespace_root(root, ns), t.name, t.event_types)
                selects.append(f"SELECT '{ns.replace(chr(39), chr(39) * 2)}' AS namespace, * FROM ({sql})")
            con.execute(f'CREATE VIEW "all_{view_name(t.name)}" AS ' + " UNION ALL BY NAME ".join(selects))
    except duckdb.Error as exc:
        con.close()
        raise ArchiveError(f"cannot open the archive {root}: {exc}") from exc
    return con


def query(root: Path, sql: str) -> tuple[list[str], list[tuple[Any, ...]]]:
    """Run ``sql`` over the views of :func:`connect` -> (column names, rows)."""
    import duckdb

    con = connect(root)
    try:
        cur = con.execute(sql)
        return [d[0] for d in cur.description or []], cur.fetchall()
    except duckdb.Error as exc:
        raise ArchiveError(f"query failed: {exc}") from exc
    finally:
        con.close()


def columns(root: Path) -> dict[str, list[tuple[str, str]]]:
    """view -> [(column, DuckDB type)] of every view of :func:`connect`."""
    con = connect(root)
    try:
        rows = con.execute("SELECT table_name, column_name, data_type FROM information_schema.columns "
                           "ORDER BY table_name, ordinal_position").fetchall()
    finally:
        con.close()
    out: dict[str, list[tuple[str, str]]] = {}
    for table, column, typ in rows:
        out.setdefault(table, []).append((column, typ))
    return out


def file_count(root: Path) -> int:
    return len(parts(Path(root)))
