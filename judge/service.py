"""The judge service: ``tasks`` + ``rollouts`` in, ``rewards`` + ``dead-letters`` out.

Wiring only; every decision is in :mod:`decide`. Two consumers run in one asyncio loop:
- a task follower reads ``tasks`` from the beginning in its own per-instance consumer group (every
  judge instance sees every task, whatever partitions of ``rollouts`` it owns) into a bounded LRU
  :class:`TaskTable`; it never commits;
- the rollouts consumer (group ``judge.consumer_group``, scalable) routes each RolloutCompleted to a
  judge by the task's source (``judge.routes``, else ``judge.default_judge``).

A rollout whose task is not known yet waits up to ``task_wait_s`` (re-checked on every poll) before
it is rejected as ``unknown_task``. Groupwise judges (group_relative) buffer a group until all N
rollouts arrived or ``group_wait_s`` passed. Blocking scorers run in a thread pool.

Delivery: at-least-once. After each poll the produced Rewards are flushed (and the dead letters, by
the consumer's commit), then offsets are committed — but only while no rollout is waiting for its
task or its group (otherwise the commit is deferred: a crash redelivers them; Rewards carry
deterministic ids, so duplicates are dropped downstream). Dedup key inside one process: rollout_id
(a bounded LRU of recently judged rollouts).
What is not covered: scoring order across partitions; exactly-once.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
import uuid
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from streamgrpo import heartbeat
from streamgrpo.avro import records as R
from streamgrpo.config import KafkaSettings
from streamgrpo.judge.cache import ScoreCache
from streamgrpo.judge.config import JudgeSettings
from streamgrpo.judge.decide import Reject, decide_group, decide_reward
from streamgrpo.judge.errors import UnknownJudgeError
from streamgrpo.judge.scorers import SCORERS, build_scorer
from streamgrpo.judge.scorers.base import Scorer
from streamgrpo.redact import redact, register_secrets_in

if TYPE_CHECKING:
    from streamgrpo.topics.consumer import Received

log = logging.getLogger(__name__)
SERVICE = "judge"


def _redacted(reward: R.Reward) -> R.Reward:
    """The Reward as it may leave the process: registered secrets masked in its error text."""
    return reward if reward.error is None else dataclasses.replace(reward, error=redact(reward.error))


class TaskTable:
    """Bounded LRU of Tasks by task_id."""

    def __init__(self, max_size: int) -> None:
        self.max_size = max_size
        self._tasks: OrderedDict[str, R.Task] = OrderedDict()

    def add(self, task: R.Task) -> None:
        key = task.envelope.task_id or task.event_id
        self._tasks[key] = task
        self._tasks.move_to_end(key)
        while len(self._tasks) > self.max_size:
            self._tasks.popitem(last=False)

    def get(self, task_id: str | None) -> R.Task | None:
        return self._tasks.get(task_id) if task_id else None

    def __len__(self) -> int:
        return len(self._tasks)


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
class _Waiting:
    received: Received
    deadline: float


@dataclass
class _GroupBuffer:
    task: R.Task | None
    scorer: Scorer
    deadline: float
    items: dict[str, Received] = field(default_factory=dict)  # rollout_id -> record


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


class JudgeService:
    """Consumes rollouts, scores them, produces one Reward per rollout."""

    def __init__(
        self,
        kafka: KafkaSettings,
        settings: JudgeSettings | None = None,
        *,
        router: Router | None = None,
        cache: ScoreCache | None = None,
    ) -> None:
        self.kafka = kafka
        self.settings = settings or JudgeSettings()
        register_secrets_in(self.settings)  # the LLM API key is masked in every Reward / dead letter it emits
        self.router = router or Router(self.settings)
        self.cache = cache or ScoreCache(self.settings.cache)
        self.tasks = TaskTable(self.settings.task_table_size)
        self.stats = JudgeStats()
        self._waiting: list[_Waiting] = []
        self._groups: dict[str, _GroupBuffer] = {}
        self._judged: OrderedDict[str, None] = OrderedDict()
        self._pool = ThreadPoolExecutor(max_workers=self.settings.llm.concurrency, thread_name_prefix="judge")

    # ---- pure-ish steps -------------------------------------------------------------------
    def _seen(self, rollout_id: str) -> bool:
        if rollout_id in self._judged:
            return True
        self._judged[rollout_id] = None
        while len(self._judged) > self.settings.task_table_size:
            self._judged.popitem(last=False)
        return False

    def admit(self, batch: list[Any], now: float) -> None:
        """Queue new RolloutCompleted records (duplicates by rollout_id are skipped)."""
        for rec in batch:
            event = rec.event
            if not isinstance(event, R.RolloutCompleted):
                continue
            if self._seen(event.envelope.rollout_id or event.event_id):
                self.stats.duplicates += 1
                continue
            self.stats.rollouts += 1
            self._waiting.append(_Waiting(rec, now + self.settings.task_wait_s))

    def ready(self, now: float) -> list[tuple[Any, R.Task | None, Scorer]]:
        """Rollouts that can be decided now (task known, or waited long enough); groupwise ones are buffered."""
        out, still = [], []
        for w in self._waiting:
            rollout: R.RolloutCompleted = w.received.event
            task = self.tasks.get(rollout.envelope.task_id)
            if task is None and now < w.deadline:
                still.append(w)
                continue
            scorer = self.router.scorer_for(task.source if task else rollout.source)
            if scorer.groupwise:
                self._buffer(w.received, task, scorer, now)
            else:
                out.append((w.received, task, scorer))
        self._waiting = still
        return out

    def _buffer(self, rec: Any, task: R.Task | None, scorer: Scorer, now: float) -> None:
        gid = rec.event.envelope.group_id or rec.event.envelope.rollout_id
        buf = self._groups.setdefault(gid, _GroupBuffer(task, scorer, now + self.settings.group_wait_s))
        buf.items[rec.event.envelope.rollout_id] = rec
        buf.task = buf.task or task

    def full_groups(self, now: float) -> list[_GroupBuffer]:
        done = [
            gid for gid, b in self._groups.items()
            if now >= b.deadline or len(b.items) >= next(iter(b.items.values())).event.group_size
        ]
        return [self._groups.pop(gid) for gid in done]

    @property
    def pending(self) -> int:
        return len(self._waiting) + sum(len(b.items) for b in self._groups.values())

    # ---- I/O shell -----------------------------------------------------------------------
    async def _decide_all(
        self, singles: list[tuple[Any, R.Task | None, Scorer]], groups: list[_GroupBuffer]
    ) -> list[tuple[Any, R.Reward | Reject]]:
        loop = asyncio.get_running_loop()
        jobs = [loop.run_in_executor(self._pool, decide_reward, t, rec.event, s, self.cache) for rec, t, s in singles]
        recs = [rec for rec, _, _ in singles]
        for g in groups:
            items = list(g.items.values())
            jobs.append(loop.run_in_executor(self._pool, decide_group, g.task, [r.event for r in items], g.scorer))
            recs.append(items)
        results = await asyncio.gather(*jobs)
        out: list[tuple[Any, R.Reward | Reject]] = []
        for rec, res in zip(recs, results, strict=True):
            if isinstance(rec, list):
                out.extend(zip(rec, res, strict=True))
            else:
                out.append((rec, res))
        return out

    async def _emit(self, outcomes: list[tuple[Any, R.Reward | Reject]], producer: Any, consumer: Any) -> None:
        for rec, outcome in outcomes:
            self.stats.count(outcome)
            if isinstance(outcome, Reject):
                await consumer.dead_letter(rec, outcome.reason_code, redact(outcome.reason))
                producer.send(_redacted(outcome.reward))
            else:
                producer.send(_redacted(outcome))
        if outcomes:
            await asyncio.to_thread(producer.flush)

    async def step(self, batch: list[Any], producer: Any, consumer: Any) -> int:
        """Admit a polled batch, decide what is ready, emit, and commit when nothing is pending."""
        now = time.monotonic()
        self.admit(batch, now)
        singles = self.ready(now)
        outcomes = await self._decide_all(singles, self.full_groups(now))
        await self._emit(outcomes, producer, consumer)
        if self.pending == 0:
            await consumer.commit()
        return len(outcomes)

    async def _follow_tasks(self, consumer: Any) -> None:
        while True:
            for rec in await consumer.poll(self.settings.batch_size, self.settings.poll_timeout_ms):
                if isinstance(rec.event, R.Task):
                    self.tasks.add(rec.event)

    async def _loop(self, consumer: Any, producer: Any, follower: asyncio.Task[None],
                    max_idle_s: float | None, stop: asyncio.Event | None) -> None:
        idle_since = time.monotonic()
        while not (stop is not None and stop.is_set()):
            batch = await consumer.poll(self.settings.batch_size, self.settings.poll_timeout_ms)
            produced = await self.step(batch, producer, consumer)
            heartbeat.beat()
            if batch or produced or self.pending or not consumer.assignment():
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
        task_group = f"{s.consumer_group}-tasks-{uuid.uuid4().hex[:12]}"
        task_consumer = EventConsumer(self.kafka, task_group, ["tasks"], SERVICE, dlq=producer)
        consumer = EventConsumer(self.kafka, s.consumer_group, ["rollouts"], SERVICE, dlq=producer)
        # started together: each start (group join) takes seconds on the embedded broker
        started = await asyncio.gather(task_consumer.start(), consumer.start(), return_exceptions=True)
        follower = asyncio.create_task(self._follow_tasks(task_consumer))
        try:
            for result in started:
                if isinstance(result, BaseException):
                    raise result
            await self._loop(consumer, producer, follower, max_idle_s, stop)
        finally:
            follower.cancel()
            await asyncio.gather(follower, return_exceptions=True)
            await asyncio.to_thread(producer.flush)
            if self.pending == 0 and not isinstance(started[1], BaseException):
                await consumer.commit()
            await asyncio.gather(task_consumer.stop(), consumer.stop(), return_exceptions=True)
        self._pool.shutdown(wait=False)
        log.info("judge stopped: %s", self.stats)
        return self.stats

    def close(self) -> None:
        self._pool.shutdown(wait=False)
        self.cache.close()
