"""Dead letters for ``adapter-events`` records the loop cannot use (the streams follower's shell).

``adapter-events`` has readers and no consumer group, so no consumer dead-letters its bad records; the
streams follower (:mod:`streamgrpo.streams.follower`, in every worker that runs the fan-out, which chooses
the version of each new group) does, one ``DeadLetter`` per record on ``dead-letters`` (built by
:func:`streamgrpo.topics.dead_letter.dead_letter`: id = the record's place, a bounded copy):

- an ``AdapterPublished`` the registry fold refuses (:mod:`streamgrpo.lifecycle.lineage_check`: a version below
  1, a self, newer or unknown parent, a version not newer than the newest or far past it, an announced
  version with another sha256; or typed facts out of their domain), or a lifecycle action it refuses (a version
  never announced, a writer that may not act: :mod:`streamgrpo.lifecycle.writers`): reason code
  ``adapter_lineage`` and the fold's reason, named by the refused event's type. The fold ignores it
  either way (never primary, never served); the dead letter says why;
- a record that does not decode, or an event that does not belong on the topic: ``decode_error`` /
  ``wrong_event_type``, as every consumer classifies them.

Once per record: a worker dead-letters a place once per process (``StreamsContext.dead_lettered``), so a
record is not dead-lettered again per poll or replay. Across restarts: the follower replays the log from the
beginning at every start and meets the same records again, so what it meets before it is caught up is held,
and at catch-up (only when something is held) the ``dead-letters`` topic is read once and the places already
dead-lettered are skipped; a record written after the start is dead-lettered when it is met.
What is not covered: two workers that both meet a NEW bad record each write its dead letter (the same id:
readers of ``dead-letters`` drop the copy by id); when ``dead-letters`` cannot be read at catch-up the held
records are dead-lettered anyway (a WARNING says copies may follow); a dead letter expired by the topic's
retention is written again by the next start.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from aiokafka.errors import KafkaError

from streamgrpo.avro import ids
from streamgrpo.avro import records as R
from streamgrpo.lifecycle.lineage_check import REASON_CODE
from streamgrpo.lifecycle.registry import Refused
from streamgrpo.streams.app import StreamsContext
from streamgrpo.topics import catalog
from streamgrpo.topics.errors import TopicsError
from streamgrpo.topics.follow import LogFollower
from streamgrpo.topics.received import Received

log = logging.getLogger(__name__)

#: A fold that returns the refusals an event caused (``LoopView.apply``).
Fold = Callable[[R.Event], list[Refused]]
Letter = tuple[Received, str, str]  # (record, reason code, reason)


def letters_of(rec: Received, refusals: list[Refused]) -> list[Letter]:
    """The dead letters one ``adapter-events`` record calls for (pure): one per refusal, or its decoding error."""
    if rec.event is None:
        return [(rec, rec.error_code or "decode_error", rec.error or "undecodable record")]
    return [(rec, REASON_CODE, f"{r.event_type} {r.adapter_name}@v{r.version} refused: {r.reason}")
            for r in refusals]


class RefusalLetters:
    """Folds batches with ``fold`` and dead-letters the bad ``adapter-events`` records (module docstring).
    Set :attr:`caught_up` to the follower's event before it runs, and run :meth:`run` beside it."""

    def __init__(self, ctx: StreamsContext, fold: Fold) -> None:
        self.ctx = ctx
        self.fold = fold
        self.caught_up: asyncio.Event | None = None
        self.held: list[Letter] = []
        self.checked = False  # whether dead-letters was read for places already dead-lettered
        self._lock = asyncio.Lock()

    async def handle(self, batch: list[Received]) -> None:
        """The follower's handler: fold every decoded event; hold or write the dead letters it calls for."""
        for rec in batch:
            refusals = self.fold(rec.event) if rec.event is not None else []
            if rec.topic == catalog.ADAPTER_EVENTS:
                self.held += letters_of(rec, refusals)
        if self.held and self.caught_up is not None and self.caught_up.is_set():
            await self.flush()

    async def run(self) -> None:
        """At catch-up, write what the replay held (the places not dead-lettered before)."""
        if self.caught_up is None:
            raise RuntimeError("RefusalLetters.caught_up was not set")
        await self.caught_up.wait()
        await self.flush()

    async def flush(self) -> None:
        async with self._lock:
            if not self.held:
                return
            if not self.checked:
                await self._skip_written()
                self.checked = True
            held, self.held = self.held, []
            for rec, code, reason in held:
                await self.ctx.dead_letter(rec.topic, rec.partition, rec.offset, rec.key, rec.value, code, reason)

    async def _skip_written(self) -> None:
        """Mark the held places that ``dead-letters`` already has as dead-lettered (one snapshot read)."""
        wanted = {ids.dead_letter_id(rec.topic, rec.partition, rec.offset) for rec, _, _ in self.held}
        found: set[str] = set()

        async def collect(batch: list[Received]) -> None:
            found.update(r.event.event_id for r in batch
                         if isinstance(r.event, R.DeadLetter) and r.event.event_id in wanted)

        try:
            await LogFollower(self.ctx.kafka, [catalog.DEAD_LETTERS], collect, codec=self.ctx.codec
                              ).run(until_caught_up=True)
        except (TopicsError, KafkaError) as exc:
            log.warning("cannot read %s to skip records already dead-lettered (%s); dead-lettering %d record(s) of "
                        "%s anyway: copies with the same id may follow", catalog.DEAD_LETTERS, exc, len(wanted),
                        catalog.ADAPTER_EVENTS)
        for letter_id in found:
            self.ctx.dead_lettered.add(letter_id)
        if found:
            log.info("%d record(s) of %s were dead-lettered before this start; not again", len(found),
                     catalog.ADAPTER_EVENTS)
