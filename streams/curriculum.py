"""A curriculum computed by the stream: dynamic sampling at the window (DAPO's, in streaming form).

Every closed group says whether its task carries signal: a group with reward variance trains
(``GroupClosed.trains``, or an A/B control-arm group judged for the comparison only:
:func:`~streamgrpo.lifecycle.stats.carries_signal`), a group whose rollouts all scored alike (all wrong or all
right) trains nothing. The fan-out keeps, per task it fanned out, the outcome of each of its groups, and decides:

- **requeue**: the group had signal (with the correctness reward: its pass rate was strictly between 0
  and 1) -> the task is fanned out again, AHEAD of new tasks, until it has had ``requeue_max`` groups;
- **park**: the group had no signal -> the task is retried once ``park_after`` other groups have been
  admitted (the policy may have changed by then), or at once when no new task arrives any more (the
  fan-out is idle), at most ``park_retries`` times;
- **retire**: neither (its budget is spent);
- **probe a cold kind**: a task kind (``metadata["kind"]``, else the task's source) whose last
  ``cold_kind_groups`` closed groups all had no signal is *cold*: its tasks are fanned out with a probe group
  of ``probe_group_size`` rollouts instead of their full group, so a kind the policy cannot yet solve costs a
  quarter of the rollouts and the rest of the budget goes to kinds with signal. Any probe group with signal
  warms the kind up again (full groups, and the task is requeued). Nothing is skipped: every task still runs,
  and ``metadata["probe"]`` (the cold kind) and the group's size record the decision in every RolloutRequest.
- **keep the last kind with signal when every kind is cold** (``all_cold_keeps_last``): a probe saves
  rollouts for the warm kinds, so when no kind is warm it saves them for no one, and a probe of 2 at a 6 %
  success rate has reward variance 11 % of the time where a group of 8 has it 38 % of the time. Then the
  kind whose group last had signal runs its full groups (``metadata["all_cold"]`` = the kind records it);
  the other cold kinds keep probing. A kind that never had signal is never kept.

A task fanned out again is a new group of the same task: ``metadata["attempt"]`` is its group count so
far (so its group id, :func:`streamgrpo.avro.ids.group_id`, is new and deterministic), and
``metadata["curriculum"]`` (``requeue`` or ``retry``) and ``metadata["pass_rate"]`` (the mean reward of
its last group) say why it was admitted. They travel into every RolloutRequest of the group, so the
log shows every curriculum decision that admitted something (``analyse`` / DuckDB over
``rollout-requests``). Task kinds interleave by construction: requeued tasks are taken oldest first, one
per admission, between new tasks, which ``streamgrpo run`` submits interleaved kind by kind.

Pure: no clock, no I/O; the fan-out agent (:mod:`streamgrpo.streams.fanout`) calls :meth:`Curriculum.
remember` when it fans a task out, :meth:`Curriculum.closed` for every GroupClosed its follower folds,
and :meth:`Curriculum.next_due` before each new task and when idle.

Memory is bounded: ``max_tasks`` tasks (the oldest forgotten first) and ``max_kinds`` kinds (the least recently
seen forgotten first: a kind is seen when a task of it is fanned out or a group of it closes). A forgotten kind
starts afresh: warm until ``cold_kind_groups`` of its groups close without signal again, and never kept by
``all_cold_keeps_last`` until one of its groups has signal again. A stream of tasks each with a kind of its
own (200,000 kinds) therefore keeps ``max_kinds`` of them, not all.

What is not covered: the queue is the worker's memory, rebuilt empty on a restart (a restart loses
pending requeues, never a task or a group); with several streams workers, the worker that fanned a task
out is the one that requeues it. Sources whose reward is not a pass rate still use ``trains`` (reward
variance), which is what decides whether a group teaches anything.
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict, deque
from dataclasses import dataclass, field

from streamgrpo.avro import ids
from streamgrpo.avro import records as R
from streamgrpo.lifecycle.stats import carries_signal

REQUEUE, RETRY = "requeue", "retry"


def kind_of(task: R.Task) -> str:
    """The task's kind for the curriculum: ``metadata["kind"]`` (the built-in tasks have one), else its source."""
    return task.metadata.get("kind") or task.source


@dataclass(frozen=True)
class CurriculumPolicy:
    """Settings of the curriculum (``[streams] curriculum_*``)."""

    enabled: bool = True
    requeue_max: int = 4  #: groups a task with signal gets in all (its first included)
    park_after: int = 48  #: groups admitted after which a parked task is retried
    park_retries: int = 1  #: retries of a task whose groups had no signal
    max_tasks: int = 10_000  #: tasks remembered (oldest forgotten first)
    max_kinds: int = 1_000  #: task kinds whose recent groups are remembered (least recently seen forgotten first)
    cold_kind_groups: int = 4  #: a kind is cold when this many of its last groups had no signal (0 = off)
    probe_group_size: int = 2  #: rollouts of a cold kind's task (its own group size when smaller)
    all_cold_keeps_last: bool = False  #: when every kind is cold, the kind with the latest signal keeps full groups


@dataclass
class _Entry:
    task: R.Task
    groups: int = 0  # groups of this task closed so far
    parked: int = 0  # times parked
    open_group: str | None = None  # the group fanned out and not yet closed


@dataclass
class Decision:
    task_id: str
    action: str  # requeue | park | retire
    pass_rate: float
    groups: int


@dataclass
class Curriculum:
    """The fold and the queue (see the module docstring)."""

    policy: CurriculumPolicy = field(default_factory=CurriculumPolicy)
    admitted: int = 0  # groups admitted by this fan-out (the clock of park_after)
    _tasks: OrderedDict[str, _Entry] = field(default_factory=OrderedDict)
    _requeue: OrderedDict[str, float] = field(default_factory=OrderedDict)  # task id -> pass rate
    _parked: dict[str, tuple[int, float]] = field(default_factory=dict)  # task id -> (due at admitted, pass rate)
    _kinds: OrderedDict[str, deque[bool]] = field(default_factory=OrderedDict)  # kind -> signal of its last closed
    # groups, least recently seen first (at most policy.max_kinds)
    _folded: int = 0  # groups of remembered tasks folded (the clock of _signal_at)
    _signal_at: dict[str, int] = field(default_factory=dict)  # kind -> _folded when its group last had signal

    def cold(self, task: R.Task) -> str | None:
        """The task's kind when it is cold and not kept (see the module docstring), else None."""
        kind = kind_of(task)
        if not self._cold(kind) or kind == self.kept():
            return None
        return kind

    def kept(self) -> str | None:
        """With ``all_cold_keeps_last``, when every kind seen is cold: the kind whose group last had signal,
        which keeps its full groups; else None (also when no kind has had signal yet)."""
        if not self.policy.all_cold_keeps_last or not self._signal_at or not all(map(self._cold, self._kinds)):
            return None
        return max(self._signal_at, key=self._signal_at.__getitem__)

    def sized(self, task: R.Task) -> R.Task:
        """``task`` as it should be fanned out: a probe group (``probe_group_size``, ``metadata["probe"]``) when
        its kind is cold and its own group is larger; its full group marked ``metadata["all_cold"]`` when its
        kind is cold but kept; else unchanged."""
        kind = kind_of(task)
        if not self._cold(kind) or task.group_size <= self.policy.probe_group_size:
            return task
        if kind == self.kept():
            return dataclasses.replace(task, metadata={**task.metadata, "all_cold": kind})
        return dataclasses.replace(task, group_size=self.policy.probe_group_size,
                                   metadata={**task.metadata, "probe": kind})

    def _cold(self, kind: str) -> bool:
        n = self.policy.cold_kind_groups
        recent = self._kinds.get(kind)
        return self.policy.enabled and n > 0 and recent is not None and len(recent) >= n and not any(recent)

    def remember(self, task: R.Task, attempt: int) -> None:
        """The fan-out admitted a group of ``task`` (attempt ``attempt``, group ``ids.group_id(task, attempt)``)."""
        self.admitted += 1
        if not self.policy.enabled:
            return
        task_id = task.envelope.task_id or ""
        entry = self._tasks.get(task_id)
        if entry is None:
            entry = self._tasks[task_id] = _Entry(task, groups=attempt)
            while len(self._tasks) > self.policy.max_tasks:
                self._forget(next(iter(self._tasks)))
        entry.open_group = ids.group_id(task_id, attempt)
        entry.groups = max(entry.groups, attempt)
        if kind_of(task) in self._kinds:
            self._kinds.move_to_end(kind_of(task))  # seen: the last to be forgotten

    def closed(self, event: R.GroupClosed) -> Decision | None:
        """Fold one GroupClosed of a remembered task's open group; other groups are not ours (None)."""
        task_id = event.envelope.task_id or ""
        entry = self._tasks.get(task_id)
        if entry is None or entry.open_group is None or entry.open_group != event.envelope.group_id:
            return None
        entry.open_group = None
        entry.groups += 1
        rate, signal = float(event.reward_mean), carries_signal(event)
        if self.policy.cold_kind_groups > 0:
            kind = kind_of(entry.task)
            self._kind(kind).append(signal)
            self._folded += 1
            if signal:
                self._signal_at[kind] = self._folded
        if signal and entry.groups < self.policy.requeue_max:
            self._requeue[task_id] = rate
            return Decision(task_id, "requeue", rate, entry.groups)
        if not signal and entry.parked < self.policy.park_retries:
            entry.parked += 1
            self._parked[task_id] = (self.admitted + self.policy.park_after, rate)
            return Decision(task_id, "park", rate, entry.groups)
        self._forget(task_id)
        return Decision(task_id, "retire", rate, entry.groups)

    def next_due(self, idle: bool = False) -> R.Task | None:
        """The next task to fan out again, requeues first (oldest first), then parked tasks whose time
        has come; None when nothing is due. ``idle``: no new task is arriving (the fan-out's source ran
        dry), so the clock of ``park_after`` would never advance: the oldest parked task is due now. The
        returned task carries its new attempt and the reason."""
        if self._requeue:
            task_id, rate = self._requeue.popitem(last=False)
            return self._again(task_id, REQUEUE, rate)
        for task_id, (due, rate) in list(self._parked.items()):
            if due <= self.admitted or idle:
                del self._parked[task_id]
                return self._again(task_id, RETRY, rate)
        return None

    @property
    def kinds(self) -> int:
        """Task kinds whose recent groups are remembered (at most ``max_kinds``)."""
        return len(self._kinds)

    @property
    def pending(self) -> int:
        """Tasks waiting to be fanned out again (requeued or parked)."""
        return len(self._requeue) + len(self._parked)

    def _again(self, task_id: str, reason: str, rate: float) -> R.Task:
        entry = self._tasks[task_id]
        meta = {**entry.task.metadata, "attempt": str(entry.groups), "curriculum": reason,
                "pass_rate": f"{rate:.3f}"}
        return dataclasses.replace(entry.task, metadata=meta)

    def _kind(self, kind: str) -> deque[bool]:
        """The recent signals of ``kind``, now its most recently seen; a new kind forgets the least recently seen
        ones beyond ``max_kinds`` (their signals and their last signal)."""
        recent = self._kinds.get(kind)
        if recent is not None:
            self._kinds.move_to_end(kind)
            return recent
        recent = self._kinds[kind] = deque(maxlen=self.policy.cold_kind_groups)
        while len(self._kinds) > max(1, self.policy.max_kinds):
            gone, _ = self._kinds.popitem(last=False)
            self._signal_at.pop(gone, None)
        return recent

    def _forget(self, task_id: str) -> None:
        self._tasks.pop(task_id, None)
        self._requeue.pop(task_id, None)
        self._parked.pop(task_id, None)
