"""The judge service: ``tasks`` + ``rollouts`` in, ``rewards`` + ``dead-letters`` out.

Wiring only: what can be scored when is the pure :mod:`~streamgrpo.judge.intake`, every decision is
in :mod:`~streamgrpo.judge.decide`. Two readers run in one asyncio loop:
- the project's log follower (:class:`~streamgrpo.topics.follow.LogFollower`: every partition, no
  consumer group, so every judge instance sees every task whatever partitions of ``rollouts`` it
  owns) folds ``tasks`` into a bounded LRU :class:`~streamgrpo.judge.intake.TaskTable`;
- the rollouts consumer (group ``judge.consumer_group``, scalable) routes each RolloutCompleted to a
  judge by the task's source (``judge.routes``, else ``judge.default_judge``).

A rollout whose task is not known yet waits up to ``task_wait_s`` (re-checked on every poll) before
it is rejected as ``unknown_task``. Groupwise judges (group_relative) buffer a group until all N
rollouts arrived or ``group_wait_s`` passed. Blocking scorers run in a thread pool that lives as
long as :meth:`JudgeService.run` (nothing is started by the constructor).

Delivery: at-least-once. After each poll the produced Rewards are flushed (and the dead letters, by
the consumer's commit, which retries and then pauses rather than exiting if they cannot be
delivered), then offsets are committed — but only while no rollout is waiting for its task or its
group (otherwise the commit is deferred: a crash redelivers them; Rewards carry deterministic ids, so
duplicates are dropped downstream). A crash commits nothing (:meth:`EventConsumer.abandon`): what it left
unscored is redelivered. Dedup key inside one process: rollout_id (the intake's
:class:`~streamgrpo.topics.dedup.RecentIds`).
What is not covered: scoring order across partitions; exactly-once.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

from streamgrpo import metrics
from streamgrpo.avro import records as R
from streamgrpo.config import KafkaSettings
from streamgrpo.heartbeat import Heartbeat
from streamgrpo.judge.cache import ScoreCache
from streamgrpo.judge.config import JudgeSettings
from streamgrpo.judge.decide import Reject, decide_group, decide_reward
from streamgrpo.judge.errors import UnknownJudgeError
from streamgrpo.judge.intake import Admitted, GroupBuffer, Intake, Ready, TaskTable
from streamgrpo.judge.scorers import SCORERS, build_scorer
from streamgrpo.judge.scorers.base import Scorer
from streamgrpo.redact import redact, register_secrets_in
from streamgrpo.topics import catalog
from streamgrpo.topics.follow import LogFollower, fold_events
from streamgrpo.topics.received import Received
from streamgrpo.topics.seams import EventSink, EventSource

log = logging.getLogger(__name__)
SERVICE = "judge"
Outcome = tuple[Admitted, R.Reward | Reject]
T = TypeVar("T")


def _redacted(reward: R.Reward) -> R.Reward:
    """The Reward as it may leave the process: registered secrets masked in its error text."""
    return reward if reward.error is None else dataclasses.replace(reward, error=redact(reward.error))


class Router:
    """Task source -> judge (built once per name, lazily)."""

    def __init__(self, settings: JudgeSettings, scorers: dict[str, Scorer] | None = None) -> None:
        self.settings = settings
        self._scorers: dict[str, Scorer] = dict(scorers or {})
        for name in sorted({*settings.routes.values(), settings.default_judge}):
            if name not in self._scorers and name not in SCORERS:
                raise UnknownJudgeError(f"judge.routes names unknown judge {name!r}; known: {sorted(SCORERS)}")

    def judge_name(self, source: str) -> str:
        return self.settings.routes.get(source, self.settings.default_judge)

    def scorer_for(self, source: str) -> Scorer:
        name = self.judge_name(source)
        if name not in self._scorers:
            self._scorers[name] = build_scorer(name, self.settings)
        return self._scorers[name]


@dataclass
class JudgeStats:
    rollouts: int = 0
    rewards_ok: int = 0
    rewards_error: int = 0
    dead_letters: dict[str, int] = field(default_factory=dict)
    cached: int = 0
    duplicates: int = 0

    def count(self, outcome: R.Reward | Reject) -> None:
        reward = outcome.reward if isinstance(outcome, Reject) else outcome
        if isinstance(outcome, Reject):
            self.dead_letters[outcome.reason_code] = self.dead_letters.get(outcome.reason_code, 0) + 1
        if reward.status == R.RewardStatus.OK:
            self.rewards_ok += 1
        else:
            self.rewards_error += 1
        self.cached += int(reward.cached)


def _timed(judge: str, rollouts: int, decide: Callable[..., T], *args: Any) -> T:
    """Run one decision; observe its wall time per rollout in ``judge_duration_seconds``."""
    start = time.perf_counter()
    try:
        return decide(*args)
    finally:
        per_rollout = (time.perf_counter() - start) / max(1, rollouts)
        for _ in range(rollouts):
            metrics.current().observe(metrics.JUDGE_DURATION, per_rollout, judge=judge)


class JudgeService:
    """Consumes rollouts, scores them, produces one Reward per rollout."""

    def __init__(
        self,
        kafka: KafkaSettings,
        settings: JudgeSettings | None = None,
        *,
        router: Router | None = None,
        cache: ScoreCache | None = None,
        heartbeat: Heartbeat | None = None,
    ) -> None:
        self.kafka = kafka
        self.settings = settings or JudgeSettings()
        register_secrets_in(self.settings)  # the LLM API key is masked in every Reward / dead letter it emits
        self.router = router or Router(self.settings)
        self.cache = cache or ScoreCache(self.settings.cache)
        self.heartbeat = heartbeat or Heartbeat.configured()
        self.tasks = TaskTable(self.settings.task_table_size)
        self.intake = Intake(self.settings.task_wait_s, self.settings.group_wait_s, self.settings.task_table_size)
        self.stats = JudgeStats()

    async def _decide_all(self, pool: ThreadPoolExecutor, singles: list[Ready],
                          groups: list[GroupBuffer]) -> list[Outcome]:
        loop = asyncio.get_running_loop()
        jobs = [loop.run_in_executor(pool, _timed, r.scorer.name, 1, decide_reward, r.task, r.item.rollout, r.scorer,
                                     self.cache) for r in singles]
        members: list[list[Admitted]] = [[r.item] for r in singles]
        for g in groups:
            items = list(g.items.values())
            jobs.append(loop.run_in_executor(pool, _timed, g.scorer.name, len(items), decide_group, g.task,
                                             [i.rollout for i in items], g.scorer))
            members.append(items)
        results = await asyncio.gather(*jobs)
        out: list[Outcome] = []
        for items, res in zip(members, results, strict=True):
            out.extend(zip(items, res if isinstance(res, list) else [res], strict=True))
        return out

    async def _emit(self, outcomes: list[Outcome], producer: EventSink, consumer: EventSource) -> None:
        for item, outcome in outcomes:
            self.stats.count(outcome)
            reward = outcome.reward if isinstance(outcome, Reject) else outcome
            metrics.current().inc(metrics.JUDGE_REWARDS, judge=reward.judge.name, status=reward.status)
            if isinstance(outcome, Reject):
                await consumer.dead_letter(item.received, outcome.reason_code, redact(outcome.reason))
                producer.send(_redacted(outcome.reward))
            else:
                producer.send(_redacted(outcome))
        if outcomes:
            await asyncio.to_thread(producer.flush)

    async def step(self, batch: list[Received], producer: EventSink, consumer: EventSource,
                   pool: ThreadPoolExecutor) -> int:
        """Admit a polled batch, decide what is ready, emit, and commit when nothing is pending."""
        now = time.monotonic()
        admitted, duplicates = self.intake.admit(batch, now)
        self.stats.rollouts += admitted
        self.stats.duplicates += duplicates
        singles = self.intake.ready(now, self.tasks.get, self.router.scorer_for)
        outcomes = await self._decide_all(pool, singles, self.intake.full_groups(now))
        await self._emit(outcomes, producer, consumer)
        if self.intake.pending == 0:
            await consumer.commit()
        return len(outcomes)

    async def _loop(self, consumer: EventSource, producer: EventSink, pool: ThreadPoolExecutor,
                    follower: asyncio.Task[None], max_idle_s: float | None, stop: asyncio.Event | None) -> None:
        idle_since = time.monotonic()
        while not (stop is not None and stop.is_set()):
            batch = await consumer.poll(self.settings.batch_size, self.settings.poll_timeout_ms)
            produced = await self.step(batch, producer, consumer, pool)
            self.heartbeat.beat()
            if batch or produced or self.intake.pending or not consumer.assignment():
                idle_since = time.monotonic()  # idle only counts once partitions are assigned
            elif max_idle_s is not None and time.monotonic() - idle_since >= max_idle_s:
                return
            if follower.done():
                follower.result()  # a crashed task follower crashes the service loudly

    async def run(self, *, max_idle_s: float | None = None, stop: asyncio.Event | None = None) -> JudgeStats:
        """Serve until ``stop`` is set, or until idle (nothing polled, nothing pending) for ``max_idle_s``."""
        from streamgrpo.topics.consumer import EventConsumer
        from streamgrpo.topics.producer import EventProducer

        s = self.settings
        producer = EventProducer(self.kafka, SERVICE)
        consumer = EventConsumer(self.kafka, s.consumer_group, [catalog.ROLLOUTS], SERVICE, dlq=producer,
                                 alive=self.heartbeat.beat, stop=stop)
        stop_tasks = asyncio.Event()
        follower = asyncio.create_task(
            LogFollower(self.kafka, [catalog.TASKS], fold_events(self.tasks.apply), max_records=s.batch_size).run(stop_tasks))
        started = finished = False
        try:
            with ThreadPoolExecutor(max_workers=s.llm.concurrency, thread_name_prefix="judge") as pool:
                started = await consumer.start()  # False: stopped while waiting for the broker
                await self._loop(consumer, producer, pool, follower, max_idle_s, stop)
                finished = True
        finally:
            stop_tasks.set()
            await asyncio.gather(follower, return_exceptions=True)
            await asyncio.to_thread(producer.flush)
            if not finished:
                consumer.abandon()  # a crash commits nothing past the records it left unscored
            elif self.intake.pending == 0 and started:
                await consumer.commit()
            await asyncio.gather(consumer.stop(), return_exceptions=True)
        log.info("judge stopped: %s", self.stats)
        return self.stats

    def close(self) -> None:
        self.cache.close()
