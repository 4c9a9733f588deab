"""Rollout worker: consume ``rollout-requests``, run each group's trajectories, produce their events.

Wiring only (the agent logic is :mod:`streamgrpo.rollout.loop`):

- consumes ``rollout-requests`` in the consumer group ``RolloutConfig.consumer_group`` (more
  workers in the group = more partitions served = more throughput);
- gathers the requests of one group that arrive together: after a non-empty poll it keeps polling
  for up to ``linger_ms`` while some group has fewer than ``group_size`` requests in hand;
  duplicates (same rollout_id) in hand are dropped; rollouts this process already completed and
  flushed are skipped (a redelivery after a rebalance), the rest re-run and re-emit the same
  deterministic event ids, so downstream dedup recognises them;
- runs up to ``concurrency`` groups at once, each with :func:`run_group` in a worker thread (model
  calls block; the asyncio consumer keeps heartbeating meanwhile). With the local policy's fast
  engine (the default) the planner calls of concurrent groups are decoded in ONE batch
  (:mod:`~streamgrpo.inference.engine`), so concurrency overlaps generation, not only tools;
- then flushes the producer and only then commits the offsets: at-least-once.

Adapter versions (no silent fallback): a group runs on the version its requests carry, unless that
version was rolled back or rejected before the group started: then the primary serves the whole group
(the adapter follower's registry says which) and every event records it. Version 0 is the base model. For v>0 the worker waits up to ``adapter_wait_s`` for the follower to have it
announced and resident (loading it on demand), then pins it for the whole group. If it never
becomes available, the group's rollouts end as ERROR ``"adapter <name>@v<N> not available..."`` --
unless ``serve_resident_fallback`` is on, in which case the newest resident version (or the base
model) serves and every PlannerAction/RolloutCompleted records the version that ACTUALLY served.

Stop (SIGTERM): the worker finishes the groups that are running, then exits. A group still waiting for its
adapter version stops waiting (the stop is checked every :data:`STOP_CHECK_S`), emits nothing (no ERROR
rollouts), and nothing of its batch is committed: the requests are delivered again to the next owner.

What is covered: delivery semantics, grouping, adapter gating, bounded concurrency.
What is not covered: pipelining across polls (the next poll waits until the current batch of
groups finished and was committed), admission/pacing (the fan-out does it).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from streamgrpo import heartbeat, metrics
from streamgrpo.avro import records as R
from streamgrpo.config import KafkaSettings
from streamgrpo.inference.errors import PolicyError
from streamgrpo.rollout.config import RolloutConfig
from streamgrpo.rollout.errors import WorkerStopping
from streamgrpo.rollout.loop import LoopContext, RolloutResult, fail_group, run_group
from streamgrpo.topics import catalog
from streamgrpo.topics.errors import DeliveryFailedError, ProduceError
from streamgrpo.topics.limits import MAX_TURNS

if TYPE_CHECKING:
    from streamgrpo.topics.consumer import EventConsumer

log = logging.getLogger(__name__)

TOPIC = catalog.ROLLOUT_REQUESTS
#: Seconds between checks of the stop signal while a group waits for its adapter version.
STOP_CHECK_S = 0.5


@dataclass
class WorkerStats:
    """Counters of one worker process (for logs and the benchmark)."""

    groups: int = 0
    rollouts: int = 0
    statuses: Counter[str] = field(default_factory=Counter)
    skipped_duplicates: int = 0
    started: float = field(default_factory=time.monotonic)

    def rate(self) -> float:
        """Completed rollouts per second since start."""
        return self.rollouts / max(1e-9, time.monotonic() - self.started)


def group_requests(requests: Sequence[R.RolloutRequest]) -> list[list[R.RolloutRequest]]:
    """Bucket by group_id in arrival order; drop repeated rollout_ids; sort each group by rollout_index."""
    groups: dict[str, dict[str, R.RolloutRequest]] = {}
    for r in requests:
        bucket = groups.setdefault(str(r.envelope.group_id), {})
        bucket.setdefault(str(r.envelope.rollout_id), r)
    return [sorted(b.values(), key=lambda r: r.rollout_index) for b in groups.values()]


def incomplete(requests: Sequence[R.RolloutRequest]) -> bool:
    """True when some group in hand has fewer requests than its group_size."""
    return any(len(g) < g[0].group_size for g in group_requests(requests))


class RolloutWorker:
    """One worker process: consumer + thread pool of group runs + producer (see module docstring)."""

    def __init__(self, config: RolloutConfig, kafka: KafkaSettings, ctx: LoopContext, producer: object,
                 follower: object | None = None) -> None:
        self.config = config
        self.kafka = kafka
        self.ctx = ctx
        self.producer = producer
        self.follower = follower
        self.stats = WorkerStats()
        self._done: OrderedDict[str, None] = OrderedDict()
        self._slots = asyncio.Semaphore(config.concurrency)
        self._stopping = threading.Event()  # the stop signal, as seen by the group threads

    # -- consumer loop --------------------------------------------------------------------------
    async def run(self, stop: asyncio.Event, *, max_rollouts: int | None = None) -> WorkerStats:
        """Consume until ``stop`` is set (or ``max_rollouts`` were completed)."""
        from streamgrpo.topics.consumer import EventConsumer

        watch = asyncio.create_task(self._watch(stop))
        try:
            async with EventConsumer(self.kafka, group_id=self.config.consumer_group, topics=[TOPIC],
                                     service=self.config.service, stop=stop) as consumer:
                await self._consume(consumer, stop, max_rollouts)
        finally:
            watch.cancel()
        return self.stats

    async def _watch(self, stop: asyncio.Event) -> None:
        await stop.wait()
        self._stopping.set()

    async def _consume(self, consumer: EventConsumer, stop: asyncio.Event, max_rollouts: int | None) -> None:
        while not stop.is_set():
            batch = await self._gather(consumer)
            heartbeat.beat()
            if batch:
                try:
                    await self.process(batch)
                except WorkerStopping as exc:
                    await self._flush()  # what finished groups produced (a redelivery repeats the same ids)
                    consumer.abandon()  # nothing of this batch is committed: its requests are delivered again
                    log.info("stopping: %s", exc)
                    return
                await self._flush()
                for r in batch:
                    self._remember(str(r.envelope.rollout_id))
            await consumer.commit()
            if max_rollouts is not None and self.stats.rollouts >= max_rollouts:
                return

    async def _gather(self, consumer: object) -> list[R.RolloutRequest]:
        cfg = self.config
        received = await consumer.poll(max_records=cfg.batch_max_records, timeout_ms=500)  # type: ignore[attr-defined]
        requests = [r.event for r in received if isinstance(r.event, R.RolloutRequest)]
        deadline = time.monotonic() + cfg.linger_ms / 1000
        while requests and incomplete(requests) and time.monotonic() < deadline:
            more = await consumer.poll(max_records=cfg.batch_max_records, timeout_ms=50)  # type: ignore[attr-defined]
            requests += [r.event for r in more if isinstance(r.event, R.RolloutRequest)]
        fresh = [r for r in requests if str(r.envelope.rollout_id) not in self._done]
        self.stats.skipped_duplicates += len(requests) - len(fresh)
        return fresh

    async def process(self, requests: Sequence[R.RolloutRequest]) -> None:
        """Run every group in ``requests`` (at most ``concurrency`` at once) and produce their events.

        Raises the first group's error once every group ended (:class:`WorkerStopping` only when a stop cut a
        group short and nothing else failed)."""
        ended = await asyncio.gather(*(self._one_group(g) for g in group_requests(requests)), return_exceptions=True)
        errors = [e for e in ended if isinstance(e, BaseException)]
        for e in sorted(errors, key=lambda e: isinstance(e, WorkerStopping)):
            raise e

    async def _one_group(self, group: list[R.RolloutRequest]) -> None:
        async with self._slots:
            results = await asyncio.to_thread(self.run_group_sync, group)
        heartbeat.beat()  # a long batch of groups still shows progress to the liveness probe
        self.stats.groups += 1
        self.stats.rollouts += len(results)
        self.stats.statuses.update(r.status.value for r in results)

    async def _flush(self) -> None:
        """Flush before committing. Records still queued are waited for again (up to 5 attempts); records the broker
        refused were dropped by librdkafka, so a second flush would "succeed" without them and the commit that
        follows would lose their rollouts: that raises at once, nothing is committed, and the requests are
        redelivered."""
        for attempt in range(5):
            try:
                await asyncio.to_thread(self.producer.flush)  # type: ignore[attr-defined]
                return
            except DeliveryFailedError as exc:
                raise DeliveryFailedError(f"{exc}; offsets not committed (the requests will be redelivered when the "
                                          "worker restarts)") from exc
            except ProduceError as exc:
                log.error("flush failed (attempt %d/5): %s", attempt + 1, exc)
                await asyncio.sleep(min(30.0, 2.0**attempt))
        raise ProduceError("events could not be delivered after 5 attempts; offsets not committed "
                           "(the requests will be redelivered when the worker restarts)")

    def _remember(self, rollout_id: str) -> None:
        self._done[rollout_id] = None
        while len(self._done) > 100_000:
            self._done.popitem(last=False)

    # -- one group (runs in a thread) --------------------------------------------------------------
    def run_group_sync(self, group: list[R.RolloutRequest]) -> list[RolloutResult]:
        """Adapter gate + pin + lockstep run; every rollout of ``group`` ends with one RolloutCompleted."""
        sink = self.producer.send  # type: ignore[attr-defined]
        first = group[0]
        if any(not 1 <= r.max_turns <= MAX_TURNS for r in group):  # honoured as asked, within the safety limit
            return fail_group(group, self.ctx, sink, f"max_turns {first.max_turns} is outside 1..{MAX_TURNS}, "
                              "the hard safety limit of one rollout").results
        asked = first.adapter_version
        if self.follower is not None:  # a rolled-back version starts no new group: its primary serves the group
            asked = self.follower.serving_version(first.adapter_name, asked)  # type: ignore[attr-defined]
        served, reason = self.acquire_version(first.adapter_name, asked)
        if served is None:
            return fail_group(group, self.ctx, sink, reason).results
        metrics.current().set(metrics.ADAPTER_VERSION, served, role="served")
        if served != first.adapter_version:
            why = "it was rolled back" if asked != first.adapter_version else "serve_resident_fallback"
            log.warning("group %s asked %s@v%d; serving v%d (%s)", first.envelope.group_id,
                        first.adapter_name, first.adapter_version, served, why)
            group = [replace(r, adapter_version=served) for r in group]
        try:
            return run_group(group, self.ctx, sink).results
        finally:
            if served != 0:
                self.ctx.policy.unpin(first.adapter_name, served)

    def acquire_version(self, name: str, version: int) -> tuple[int | None, str]:
        """Pin the version that will serve and return it, or (None, reason). Blocks up to ``adapter_wait_s``.

        The caller unpins a returned version > 0 when the group is done (version 0 is never pinned).
        """
        if version == 0:
            return 0, ""
        deadline = time.monotonic() + self.config.adapter_wait_s
        reason = "never became resident"
        log.debug("waiting for %s@v%d (up to %g s)", name, version, self.config.adapter_wait_s)
        while True:
            try:
                if self.follower is not None:
                    self._wait_announced(name, version, deadline)
                    self.follower.ensure_resident(name, version)  # type: ignore[attr-defined]
                self.ctx.policy.pin(name, version)
                return version, ""
            except PolicyError as exc:
                reason = str(exc)
            if time.monotonic() >= deadline:
                break
            if self._stopping.wait(min(0.5, max(0.0, deadline - time.monotonic()))):
                break
        if self._stopping.is_set():  # a wait cut short by the stop is not "never available"
            raise WorkerStopping(f"stop requested while a group waited for {name}@v{version}")
        if self.config.serve_resident_fallback:
            for resident in sorted(self.ctx.policy.resident_versions(name), reverse=True):
                try:
                    self.ctx.policy.pin(name, resident)
                    return resident, ""
                except PolicyError:
                    continue
            return 0, ""
        return None, f"adapter {name}@v{version} not available after {self.config.adapter_wait_s:g}s: {reason}"

    def _wait_announced(self, name: str, version: int, deadline: float) -> None:
        """The follower's wait for the announcement, in slices of :data:`STOP_CHECK_S`, until it is announced,
        ``deadline`` passed, or the worker is asked to stop."""
        follower: Any = self.follower
        while not follower.wait_announced(name, version, min(STOP_CHECK_S, max(0.0, deadline - time.monotonic()))):
            if self._stopping.is_set() or time.monotonic() >= deadline:
                return
