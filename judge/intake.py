"""The judge's intake, as a functional core: which rollouts can be scored now (no I/O, no clock, no threads).

State: the rollouts waiting for their task, the groups buffered for a groupwise judge, and the
recently judged rollout ids (:class:`~streamgrpo.topics.dedup.RecentIds`); :class:`TaskTable` is the
bounded fold of ``tasks`` the intake looks tasks up in. Every step takes ``now`` from the caller:

- :meth:`Intake.admit` queues each new RolloutCompleted with the deadline ``now + task_wait_s``;
  a rollout id seen recently is a duplicate (dedup key: rollout_id, else the event id);
- :meth:`Intake.ready` releases a rollout once its task is known, or unknown past its deadline (it is
  then scored by its own source's judge; :mod:`~streamgrpo.judge.decide` rejects it as
  ``unknown_task``); a rollout for a groupwise judge goes into its group's buffer instead;
- :meth:`Intake.full_groups` releases a group once all ``group_size`` rollouts arrived or
  ``group_wait_s`` passed since its first one.

``pending`` counts what is held back: the shell commits offsets only when it is zero.
What is not covered: scoring (``decide``), routing (the shell's ``Router``), and Kafka.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

from streamgrpo.avro import records as R
from streamgrpo.judge.scorers.base import Scorer
from streamgrpo.topics.dedup import RecentIds
from streamgrpo.topics.received import Received


class TaskTable:
    """Bounded LRU of Tasks by task_id (the fold of ``tasks``)."""

    def __init__(self, max_size: int) -> None:
        self.max_size = max_size
        self._tasks: OrderedDict[str, R.Task] = OrderedDict()

    def apply(self, event: R.Event) -> None:
        if isinstance(event, R.Task):
            self.add(event)

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


@dataclass(frozen=True)
class Admitted:
    """A rollout accepted for scoring (its record, for dead-lettering, and the decoded event)."""

    received: Received
    rollout: R.RolloutCompleted


@dataclass(frozen=True)
class Waiting:
    item: Admitted
    deadline: float


@dataclass(frozen=True)
class Ready:
    """A rollout to score now, with its task (None: unknown) and judge."""

    item: Admitted
    task: R.Task | None
    scorer: Scorer


@dataclass
class GroupBuffer:
    """The rollouts of one group waiting for a groupwise judge."""

    task: R.Task | None
    scorer: Scorer
    deadline: float
    items: dict[str, Admitted] = field(default_factory=dict)  # rollout_id -> rollout

    def full(self) -> bool:
        return bool(self.items) and len(self.items) >= next(iter(self.items.values())).rollout.group_size


class Intake:
    """The waiting rollouts and buffered groups of one judge process (see the module docstring)."""

    def __init__(self, task_wait_s: float, group_wait_s: float, dedup_capacity: int = 100_000) -> None:
        self.task_wait_s = task_wait_s
        self.group_wait_s = group_wait_s
        self.waiting: list[Waiting] = []
        self.groups: dict[str, GroupBuffer] = {}
        self.judged = RecentIds(dedup_capacity)

    @property
    def pending(self) -> int:
        return len(self.waiting) + sum(len(b.items) for b in self.groups.values())

    def admit(self, batch: list[Received], now: float) -> tuple[int, int]:
        """Queue new RolloutCompleted records; returns (admitted, duplicates)."""
        admitted = duplicates = 0
        for rec in batch:
            event = rec.event
            if not isinstance(event, R.RolloutCompleted):
                continue
            if self.judged.seen(event.envelope.rollout_id or event.event_id):
                duplicates += 1
                continue
            admitted += 1
            self.waiting.append(Waiting(Admitted(rec, event), now + self.task_wait_s))
        return admitted, duplicates

    def ready(self, now: float, task_of: Callable[[str | None], R.Task | None],
              scorer_for: Callable[[str], Scorer]) -> list[Ready]:
        """Rollouts that can be decided now; groupwise ones go to their group's buffer instead."""
        out, still = [], []
        for w in self.waiting:
            task = task_of(w.item.rollout.envelope.task_id)
            if task is None and now < w.deadline:
                still.append(w)
                continue
            scorer = scorer_for(task.source if task else w.item.rollout.source)
            if scorer.groupwise:
                self._buffer(w.item, task, scorer, now)
            else:
                out.append(Ready(w.item, task, scorer))
        self.waiting = still
        return out

    def _buffer(self, item: Admitted, task: R.Task | None, scorer: Scorer, now: float) -> None:
        env = item.rollout.envelope
        gid = env.group_id or env.rollout_id or item.rollout.event_id
        buf = self.groups.setdefault(gid, GroupBuffer(task, scorer, now + self.group_wait_s))
        buf.items[env.rollout_id or item.rollout.event_id] = item
        buf.task = buf.task or task

    def full_groups(self, now: float) -> list[GroupBuffer]:
        """Groups complete or past their deadline (removed from the buffer)."""
        done = [gid for gid, b in self.groups.items() if now >= b.deadline or b.full()]
        return [self.groups.pop(gid) for gid in done]
