"""Parquet archive of every event topic, and DuckDB queries over it.

Sink: :class:`ArchiveWriter` buffers decoded events per topic as flat rows (envelope fields as
top-level columns ``event_id, event_time, producer, task_id, group_id, rollout_id, turn``; scalar and
scalar-list fields as columns; records, maps and lists of records as JSON strings) and writes one
Parquet file per topic (``<root>/<topic>/part-<ms>-<n>.parquet``, written to a temp name then
renamed) every ``archive_roll_records`` records or ``archive_roll_s`` seconds. The runner commits
consumer offsets only after the files are written: at-least-once, so a crash can write a record
twice; the DuckDB views de-duplicate by ``event_id``. Records that do not decode are dead-lettered
by the consumer (under the archive's own consumer name) and not archived.

Query: :func:`query` opens DuckDB in memory with one view per topic directory, named after the topic
(dashes -> underscores), e.g. ``SELECT adapter_version, avg(score) FROM rewards GROUP BY 1``; human rewards
are kept apart: ``judge_rewards`` and ``human_rewards`` split ``rewards`` by provenance (``human:<name>``).
What is not covered: compaction of small files, retention of the archive.
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from typing import Any

from streamgrpo.avro import records as R
from streamgrpo.streams.app import StreamsContext
from streamgrpo.streams.errors import ArchiveError

log = logging.getLogger(__name__)
ENVELOPE_COLUMNS = ("event_id", "event_time", "producer", "task_id", "group_id", "rollout_id", "turn")


def _cell(value: Any) -> Any:
    if isinstance(value, dict) or (isinstance(value, list) and value and isinstance(value[0], (dict, list))):
        return json.dumps(value, default=str, sort_keys=True)
    return value


def flatten(event: R.Event) -> dict[str, Any]:
    """One archive row of ``event`` (pure)."""
    data = event.to_avro()
    env = data.pop("envelope")
    row: dict[str, Any] = {"event_type": type(event).__name__}
    row.update({k: env[k] for k in ENVELOPE_COLUMNS if k != "producer"})
    row["producer"] = f"{env['producer']['service']}@{env['producer']['instance']}"
    for key, value in data.items():
        row[key if key not in row else f"{key}_"] = _cell(value)
    return row


class ArchiveWriter:
    def __init__(self, root: Path, roll_records: int, roll_s: float) -> None:
        self.root = Path(root)
        self.roll_records = roll_records
        self.roll_s = roll_s
        self.rows: dict[str, list[dict[str, Any]]] = {}
        self.since = time.monotonic()
        self.files = 0

    def add(self, topic: str, event: R.Event) -> None:
        self.rows.setdefault(topic, []).append(flatten(event))

    def due(self) -> bool:
        n = sum(len(v) for v in self.rows.values())
        return n >= self.roll_records or (n > 0 and time.monotonic() - self.since >= self.roll_s)

    def flush(self) -> int:
        """Write every buffered topic to a new Parquet file; returns the number of rows written."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        written = 0
        for topic, rows in self.rows.items():
            if not rows:
                continue
            folder = self.root / topic
            folder.mkdir(parents=True, exist_ok=True)
            self.files += 1
            path = folder / f"part-{int(time.time() * 1000)}-{os.getpid()}-{self.files}.parquet"
            tmp = path.with_suffix(".tmp")
            try:
                pq.write_table(pa.Table.from_pylist(rows), tmp)
            except (pa.ArrowException, OSError) as exc:
                raise ArchiveError(f"cannot write {tmp}: {exc}") from exc
            tmp.rename(path)
            written += len(rows)
        self.rows = {}
        self.since = time.monotonic()
        return written


def query(root: Path, sql: str) -> tuple[list[str], list[tuple[Any, ...]]]:
    """Run ``sql`` on DuckDB with one de-duplicated view per archived topic."""
    import duckdb

    root = Path(root)
    if not root.is_dir():
        raise ArchiveError(f"archive {root} does not exist; run `streamgrpo streams --only archive` first "
                           "or pass --archive-dir")
    con = duckdb.connect()
    try:
        for folder in sorted(p for p in root.iterdir() if p.is_dir() and any(p.glob("*.parquet"))):
            view = folder.name.replace("-", "_")
            pattern = str(folder / "*.parquet").replace("'", "''")
            con.execute(
                f'CREATE VIEW "{view}" AS SELECT * EXCLUDE (_rn) FROM (SELECT *, row_number() OVER '
                f"(PARTITION BY event_id ORDER BY event_time) AS _rn FROM read_parquet('{pattern}', "
                f"union_by_name=true)) WHERE _rn = 1"
            )
        if (root / "rewards").is_dir() and any((root / "rewards").glob("*.parquet")):
            _reward_views(con)
        cur = con.execute(sql)
        columns = [d[0] for d in cur.description or []]
        return columns, cur.fetchall()
    except duckdb.Error as exc:
        raise ArchiveError(f"query failed: {exc}") from exc
    finally:
        con.close()


def _reward_views(con: Any) -> None:
    """``judge_rewards`` and ``human_rewards``: the ``rewards`` view split by provenance (``human:<name>``)."""
    human = "json_extract_string(judge, '$.name') LIKE 'human:%'"
    con.execute(f'CREATE VIEW "judge_rewards" AS SELECT * FROM "rewards" WHERE NOT ({human})')
    con.execute(f'CREATE VIEW "human_rewards" AS SELECT * FROM "rewards" WHERE {human}')


async def run_archive(ctx: StreamsContext, writer: ArchiveWriter) -> None:
    """Consume every event topic and roll Parquet files; commit offsets after each roll."""
    import asyncio

    from streamgrpo.topics.catalog import TOPICS
    from streamgrpo.topics.consumer import EventConsumer

    group = f"{ctx.kafka.topic_prefix}{ctx.settings.app_id}-archive"
    names = [t.name for t in TOPICS]
    async with EventConsumer(ctx.kafka, group_id=group, topics=names, service="streams-archive",
                             dead_lettered_ids=ctx.dead_lettered) as consumer:
        async for batch in consumer.batches(max_records=500, timeout_ms=500):
            for rec in batch:
                if rec.event is not None:
                    writer.add(rec.topic, rec.event)
            if writer.due():
                n = await asyncio.to_thread(writer.flush)
                await consumer.commit()
                ctx.count("archive.rows", n)


def register(ctx: StreamsContext) -> None:
    s = ctx.settings
    writer = ArchiveWriter(s.archive_dir, s.archive_roll_records, s.archive_roll_s)

    async def archive_task() -> None:
        await run_archive(ctx, writer)

    ctx.app.task(archive_task)
    ctx.archive = writer

