"""Global, group-less view of small control topics for every worker (the shell of fan-out and A/B).

:class:`LoopView` is a pure fold of ``adapter-events``, ``groups`` and ``rollout-requests``:
- the adapter versions: :mod:`streamgrpo.lifecycle.registry` (primary, canary, latest per name);
- requested and closed group ids -> groups (and their rollouts) in flight;
- samples produced by closed groups (``GroupClosed.samples``: usable rewards of a group that trains;
  an ERROR reward yields no sample) and samples consumed by the trainer (the sizes of the offset
  ranges in every AdapterPublished lineage, less the redelivered duplicates in them: those were never
  counted as produced) -> samples waiting for the trainer.
These feed admission (:func:`~streamgrpo.lifecycle.pacing.admit`, by way of the fan-out) and the version choice. (The A/B
controller keeps its own follower: :mod:`streamgrpo.streams.ab_controller`.) ``apply`` returns the
events the registry fold refused (announcements off their lineage or with facts out of their domain, lifecycle
actions on versions never announced or by writers that may not act: :mod:`streamgrpo.lifecycle.registry`); the
follower dead-letters them, and the records of ``adapter-events`` that do not decode
(:mod:`streamgrpo.streams.refusals`). A refused announcement's ``samples_dequeued`` is never counted, so a forged
count cannot stall admission.

:class:`StreamsFollower` runs the fold under the project's one log follower
(:class:`~streamgrpo.topics.follow.LogFollower`: every partition, no consumer group, so every worker
sees everything). ``caught_up`` is set once every record below the TRUE log end seen at start was
folded; the fan-out waits for it so a restarted worker does not over-admit. The state is rebuilt
from the log on every start (O(history) reads; memory ~100 bytes per group id).
What is not covered: compaction of that history.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass

from aiokafka.errors import KafkaError

from streamgrpo.avro import records as R
from streamgrpo.lifecycle import pacing
from streamgrpo.lifecycle.pacing import Backlog
from streamgrpo.lifecycle.registry import AdapterRegistry, Announced, Line, Refused
from streamgrpo.streams.app import StreamsContext
from streamgrpo.streams.refusals import RefusalLetters
from streamgrpo.topics import catalog
from streamgrpo.topics.follow import LogFollower

log = logging.getLogger(__name__)
TOPICS = (catalog.ADAPTER_EVENTS, catalog.GROUPS, catalog.ROLLOUT_REQUESTS)


class LoopView:
    """The fold (pure: ``apply(event)`` only)."""

    def __init__(self, canary_share: float) -> None:
        self.registry = AdapterRegistry(canary_share)
        self.requested: set[str] = set()
        self.closed: set[str] = set()
        self.open: dict[str, int] = {}  # group id -> rollouts requested
        self.control: set[str] = set()  # open groups requested as the A/B control arm, for the comparison only
        self.produced = 0  # samples of closed groups that train
        self.consumed = 0  # distinct samples in published adapters' lineage (duplicates excluded)
        #: called once per distinct GroupClosed, after the fold (the fan-out's curriculum listens)
        self.on_closed: list[Callable[[R.GroupClosed], None]] = []

    @property
    def in_flight(self) -> int:
        """Groups requested and not yet closed."""
        return len(self.open)

    def backlog(self) -> Backlog:
        control = sum(self.open[g] for g in self.control)
        return Backlog(len(self.open), sum(self.open.values()) - control,
                       pacing.pending_samples(self.produced, self.consumed), control)

    def adapters(self, adapter_name: str) -> Line:
        return self.registry.line(adapter_name)

    def note_requested(self, group_id: str, group_size: int, control: bool = False) -> None:
        """A group of ``group_size`` rollouts was requested; ``control``: the fan-out started it as the A/B control
        arm (its requests' ``metadata[pacing.AB_ARM_KEY]``), outside the admission budget until it closes."""
        if group_id not in self.requested:
            self.requested.add(group_id)
            if group_id not in self.closed:
                self.open[group_id] = group_size
                if control:
                    self.control.add(group_id)

    def apply(self, event: R.Event) -> list[Refused]:
        """Fold one event; returns the events the registry refused (they changed nothing)."""
        if isinstance(event, R.RolloutRequest):
            self.note_requested(event.envelope.group_id or "", event.group_size,
                                event.metadata.get(pacing.AB_ARM_KEY) == pacing.CONTROL_ARM)
        elif isinstance(event, R.GroupClosed):
            self._closed(event)
        else:
            refused = []
            for change in self.registry.apply(event):
                if isinstance(change, Announced):
                    self.consumed += change.announcement.samples_dequeued
                elif isinstance(change, Refused):
                    refused.append(change)
            return refused
        return []

    def _closed(self, event: R.GroupClosed) -> None:
        gid = event.envelope.group_id or ""
        if gid in self.closed:
            return
        self.closed.add(gid)
        self.open.pop(gid, None)
        self.control.discard(gid)
        if event.trains:  # events older than `samples` counted ERROR rewards as samples
            self.produced += event.samples if event.samples is not None else event.received
        for listener in self.on_closed:
            listener(event)


@dataclass
class StreamsFollower:
    """A worker's :class:`LoopView` and the log follower that feeds it."""

    view: LoopView
    reader: LogFollower

    @property
    def caught_up(self) -> asyncio.Event:
        return self.reader.caught_up

    async def run(self) -> None:
        try:
            await self.reader.run()
        except KafkaError as exc:
            log.error("follower stopped on a Kafka error: %s; the worker restarts it", exc)
            raise


def follower_for(ctx: StreamsContext) -> StreamsFollower:
    """The worker's one follower (created and started on first use), with the dead letters of what it refuses."""
    if ctx.follower is not None:
        return ctx.follower
    view = LoopView(ctx.settings.canary_share)
    letters = RefusalLetters(ctx, view.apply)
    follower = StreamsFollower(view, LogFollower(ctx.kafka, TOPICS, letters.handle, codec=ctx.codec))
    letters.caught_up = follower.caught_up
    ctx.follower = follower

    async def run_follower() -> None:
        await follower.run()

    async def run_letters() -> None:
        await letters.run()

    ctx.app.task(run_follower)
    ctx.app.task(run_letters)
    return follower
