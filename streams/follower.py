"""Global, group-less view of small control topics for every worker (the shell of fan-out and A/B).

A :class:`LogFollower` reads ``adapter-events``, ``groups`` and ``rollout-requests`` from the
beginning, on all partitions, without a consumer group (so every worker sees everything, like a
Faust GlobalTable but explicit), and folds them into:
- ``adapters``: :class:`~streamgrpo.streams.ab_controller.AdapterState` (primary, canary, latest);
- requested and closed group ids -> groups (and their rollouts) in flight;
- samples produced by closed groups that train, and samples consumed by the trainer (the sizes of
  the offset ranges in every AdapterPublished lineage) -> samples waiting for the trainer;
- per-version arm statistics of closed groups (for the A/B controller).
These feed admission (:func:`~streamgrpo.streams.fanout.admit`).
``caught_up`` is set once the log end seen at start has been read; the fan-out waits for it so a
restarted worker does not over-admit. The state is rebuilt from the log on every start (O(history)
reads; memory ~100 bytes per group id). What is not covered: compaction of that history.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError

from streamgrpo.avro import records as R
from streamgrpo.avro.errors import DecodeError
from streamgrpo.streams.ab_controller import AdapterState, ArmStats
from streamgrpo.streams.fanout import Backlog
from streamgrpo.topics.clients import aiokafka_config

log = logging.getLogger(__name__)
TOPICS = ("adapter-events", "groups", "rollout-requests")
NO_STATS_REASONS = {"too_few_rewards", "timed_out_dropped"}


class LogFollower:
    def __init__(self, ctx: Any) -> None:
        self.ctx = ctx
        self.adapters = AdapterState()
        self.requested: set[str] = set()
        self.closed: set[str] = set()
        self.arms: dict[int, ArmStats] = {}
        self.caught_up = asyncio.Event()
        self.open: dict[str, int] = {}  # group id -> rollouts requested
        self.produced = 0  # samples of closed groups that train
        self.consumed = 0  # training-samples records in published adapters' lineage
        self._published: set[tuple[str, int]] = set()

    @property
    def in_flight(self) -> int:
        """Groups requested and not yet closed."""
        return len(self.open)

    def backlog(self) -> Backlog:
        return Backlog(len(self.open), sum(self.open.values()), max(0, self.produced - self.consumed))

    def arm(self, version: int) -> ArmStats:
        return self.arms.get(version, ArmStats())

    def note_requested(self, group_id: str, group_size: int) -> None:
        if group_id not in self.requested:
            self.requested.add(group_id)
            if group_id not in self.closed:
                self.open[group_id] = group_size

    def apply(self, event: R.Event) -> None:
        if isinstance(event, R.RolloutRequest):
            self.note_requested(event.envelope.group_id or "", event.group_size)
        elif isinstance(event, R.GroupClosed):
            gid = event.envelope.group_id or ""
            if gid in self.closed:
                return
            self.closed.add(gid)
            self.open.pop(gid, None)
            if event.trains:
                self.produced += event.received
            if event.reason not in NO_STATS_REASONS:
                self.arms.setdefault(event.adapter_version, ArmStats()).add(event.reward_mean)
        else:
            if isinstance(event, R.AdapterPublished) and (event.adapter_name, event.version) not in self._published:
                self._published.add((event.adapter_name, event.version))
                self.consumed += sum(r.end - r.start + 1 for r in event.lineage if r.topic.endswith("training-samples"))
            self.adapters.apply(event, self.ctx.settings.canary_share)

    async def run(self) -> None:
        names = [self.ctx.name(t) for t in TOPICS]
        consumer = AIOKafkaConsumer(**aiokafka_config(self.ctx.kafka), group_id=None, enable_auto_commit=False,
                                    auto_offset_reset="earliest")
        await consumer.start()
        try:
            tps = [TopicPartition(n, p) for n in names for p in sorted(consumer.partitions_for_topic(n) or [])]
            consumer.assign(tps)
            await consumer.seek_to_beginning(*tps)
            ends = await consumer.end_offsets(tps)
            pending = {tp for tp, end in ends.items() if end > 0}
            if not pending:
                self.caught_up.set()
            while True:
                batches = await consumer.getmany(timeout_ms=500, max_records=1000)
                for tp, records in batches.items():
                    for rec in records:
                        self._apply_raw(rec.value)
                    if tp in pending and records[-1].offset + 1 >= ends[tp]:
                        pending.discard(tp)
                if pending and not batches:
                    pending = {tp for tp in pending if await consumer.position(tp) < ends[tp]}
                if not pending and not self.caught_up.is_set():
                    log.info("follower caught up: %d groups requested, %d closed, adapters %s",
                             len(self.requested), len(self.closed), self.adapters)
                    self.caught_up.set()
        except KafkaError as exc:
            log.error("follower stopped on a Kafka error: %s; the worker restarts it", exc)
            raise
        finally:
            await consumer.stop()

    def _apply_raw(self, value: bytes | None) -> None:
        try:
            event = self.ctx.codec.decode(value)
        except DecodeError:
            return  # the owning consumer dead-letters bad records; the follower only skips them
        self.apply(event)


def follower_for(ctx: Any) -> LogFollower:
    """The worker's one follower (created and started on first use)."""
    existing = getattr(ctx, "follower", None)
    if existing is not None:
        return existing  # type: ignore[no-any-return]
    follower = LogFollower(ctx)
    ctx.follower = follower

    async def run_follower() -> None:
        await follower.run()

    ctx.app.task(run_follower)
    return follower
