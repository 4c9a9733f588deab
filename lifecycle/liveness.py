"""Liveness: the rule that tells a run that stopped making progress from one that is busy (pure; no I/O).

A run is live while work it has moves. :class:`Liveness` folds the log's facts (by their event time, so a replay of
the topics says what the live run said) and :meth:`Liveness.stalls` names what has not moved for ``bound_s``:

- **admission**: no group was admitted (no RolloutRequest) for ``bound_s`` while tasks wait, i.e. Tasks were
  submitted that no group has started yet (minus the ones the fan-out dead-lettered or left to their own server,
  ``metadata["served_by"]``). Its clock starts at the last admission or when
  tasks began to wait, whichever is later.
- **serving**: no rollout completed (no RolloutCompleted, on any version) for ``bound_s`` while groups are in
  flight (requested, not closed). Its clock starts at the oldest request still in flight.

Demonstrations count: they are work the loop must move too. Every stall seen is remembered (:attr:`seen`) so the
run's report fails on a stall that ended before the run did. What is not covered: a loop that moves but learns
nothing (the collapse alarms of :mod:`streamgrpo.lifecycle.health` and the held-out evaluation say that), and
which service is to blame (the progress line's other figures and the services' logs say that).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from streamgrpo.avro import records as R
from streamgrpo.topics import catalog
from streamgrpo.topics.dedup import RecentIds

#: Default bound, seconds (``[loop] liveness_s``): longer than any pause a healthy default run makes (a held-out
#: evaluation of the 94 tasks beside the loop, a trainer step, a warm start's likelihood step on this 2-core CPU).
DEFAULT_BOUND_S = 600.0


@dataclass
class Liveness:
    """The fold of the module docstring."""

    bound_s: float = DEFAULT_BOUND_S
    submitted: int = 0  # Tasks the fan-out may start (no served_by)
    refused: int = 0  # Tasks dead-lettered on the tasks topic
    started: int = 0  # distinct tasks with a group requested
    open_groups: dict[str, float] = field(default_factory=dict)  # group id -> first request's event time
    closed: RecentIds = field(default_factory=RecentIds)
    waiting_since: float | None = None  # event time of the task that made the waiting count leave 0
    last_admitted: float | None = None
    last_completed: float | None = None
    seen: list[str] = field(default_factory=list)  # every stall sentence raised so far (first time each kind)
    _seen_kinds: set[str] = field(default_factory=set)
    _ids: RecentIds = field(default_factory=RecentIds)
    _started: RecentIds = field(default_factory=RecentIds)

    def apply(self, event: R.Event) -> None:
        if self._ids.seen(event.event_id):
            return
        t = _ts(event.envelope.event_time)
        if isinstance(event, R.Task):
            if not event.metadata.get("served_by"):
                if self.waiting == 0:  # the first task to wait since none did
                    self.waiting_since = t
                self.submitted += 1
        elif isinstance(event, R.DeadLetter) and event.source_topic.endswith(catalog.TASKS):
            self.refused += 1
        elif isinstance(event, R.RolloutRequest):
            group = event.envelope.group_id or ""
            if group and group not in self.open_groups and group not in self.closed:
                self.open_groups[group] = t
            if event.envelope.task_id and not self._started.seen(event.envelope.task_id):
                self.started += 1
            self.last_admitted = max(self.last_admitted or t, t)
        elif isinstance(event, R.RolloutCompleted):
            self.last_completed = max(self.last_completed or t, t)
        elif isinstance(event, R.GroupClosed):
            group = event.envelope.group_id or ""
            self.open_groups.pop(group, None)
            self.closed.add(group)

    @property
    def waiting(self) -> int:
        """Tasks submitted that no group has started (nor the fan-out refused)."""
        return max(0, self.submitted - self.refused - self.started)

    def stalls(self, now: float) -> list[str]:
        """What has not moved for ``bound_s`` at wall time ``now`` (sentences a user reads; empty: live)."""
        out = []
        if self.waiting:
            since = max(t for t in (self.last_admitted, self.waiting_since) if t is not None)
            if now - since >= self.bound_s:
                out.append(("admission", f"no group admitted for {now - since:.0f} s while {self.waiting} task(s) "
                            f"wait (liveness bound {self.bound_s:.0f} s): is the trainer, a rollout worker or the "
                            "streams worker down? (`streamgrpo status`)"))
        if self.open_groups:
            since = max(t for t in (self.last_completed, min(self.open_groups.values())) if t is not None)
            if now - since >= self.bound_s:
                out.append(("serving", f"no rollout completed for {now - since:.0f} s while {len(self.open_groups)} "
                            f"group(s) are in flight (liveness bound {self.bound_s:.0f} s): is a rollout worker "
                            "down or stuck? (`streamgrpo status`)"))
        for kind, sentence in out:
            if kind not in self._seen_kinds:
                self._seen_kinds.add(kind)
                self.seen.append(sentence)
        return [sentence for _, sentence in out]


def _ts(when: datetime) -> float:
    return when.timestamp()
