"""The archive agent: every event topic -> the Parquet archive (the durable copy of the log).

A group consumer (``<prefix><app_id>-archive``) reads every catalog topic and hands each decoded event
with its place to :class:`~streamgrpo.archive.store.ArchiveWriter`, which rolls files every
``archive_roll_records`` records or ``archive_roll_s`` seconds: atomic files partitioned by topic,
event type and date, column types derived from the Avro contract (so no two valid events disagree),
duplicates dropped by event id. Offsets are committed only after a roll is on disk: a crash re-reads
what was not committed and the writer skips what is already archived.

A graceful stop writes what is buffered. A roll that cannot be written (disk full, permissions) is retried with backoff and the agent waits,
logging loudly; it never exits into a restart loop and never commits past unwritten records. Records
that do not decode are dead-lettered by the consumer (under the archive's consumer name), not archived.
Queries: ``streamgrpo analyse`` (:mod:`streamgrpo.analysis`).
What is not covered: compaction of small files; the archive is never pruned (Kafka keeps the recent
log, the archive keeps everything).
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

from streamgrpo.archive.duck import query as query
from streamgrpo.archive.errors import ArchiveError
from streamgrpo.archive.store import ArchiveWriter, place_of
from streamgrpo.streams.app import StreamsContext

log = logging.getLogger(__name__)
MAX_RETRY_S = 60.0

__all__ = ["ArchiveWriter", "query", "register", "run_archive"]


async def flush_until_written(ctx: StreamsContext, writer: ArchiveWriter) -> int:
    """Flush, retrying with backoff (and beating the heartbeat) until the roll is on disk."""
    attempt = 0
    while True:
        try:
            return await asyncio.to_thread(writer.flush)
        except ArchiveError as exc:
            attempt += 1
            delay = min(MAX_RETRY_S, 2.0 ** attempt)
            ctx.count("archive.write_errors")
            log.error("archive roll failed (attempt %d; %d rows kept, offsets not committed): %s; retrying in %.0fs",
                      attempt, writer.pending, exc, delay)
            ctx.heartbeat.beat()
            await asyncio.sleep(delay)


async def run_archive(ctx: StreamsContext, writer: ArchiveWriter) -> None:
    """Consume every event topic and roll Parquet files; commit offsets after each roll."""
    from streamgrpo.topics.catalog import TOPICS
    from streamgrpo.topics.consumer import EventConsumer

    group = f"{ctx.kafka.topic_prefix}{ctx.settings.app_id}-archive"
    async with EventConsumer(ctx.kafka, group_id=group, topics=[t.name for t in TOPICS], service="streams-archive",
                             dead_lettered_ids=ctx.dead_lettered, alive=ctx.heartbeat.beat) as consumer:
        try:
            async for batch in consumer.batches(max_records=500, timeout_ms=500):
                for rec in batch:
                    if rec.event is not None:
                        writer.add(rec.event, place_of(rec))
                if writer.due():
                    n = await flush_until_written(ctx, writer)
                    await consumer.commit()
                    ctx.count("archive.rows", n)
        finally:
            flush_at_shutdown(writer)


def flush_at_shutdown(writer: ArchiveWriter) -> None:
    """On stop, write what is buffered (one attempt, blocking): a graceful stop leaves nothing read but
    unarchived. Offsets are not committed here; a restart re-reads those records and the writer skips them."""
    if not writer.pending:
        return
    try:
        log.info("archive: %d rows written at shutdown", writer.flush())
    except ArchiveError as exc:
        log.error("archive: %d buffered rows not written at shutdown (they are re-read on restart): %s",
                  writer.pending, exc)


def build_writer(settings: Any) -> ArchiveWriter:
    return ArchiveWriter(Path(settings.archive_dir), settings.archive_roll_records, settings.archive_roll_s)


def register(ctx: StreamsContext) -> None:
    writer = build_writer(ctx.settings)

    async def archive_task() -> None:
        await run_archive(ctx, writer)

    ctx.app.task(archive_task)
    ctx.archive = writer
