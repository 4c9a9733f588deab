"""Group fan-out: each Task -> N RolloutRequests sharing ONE adapter version, paced by admission.

Pure core:
- :func:`fan_out` builds the N requests (``group_id = ids.group_id(task_id, attempt)`` with
  ``attempt`` from ``task.metadata["attempt"]`` or 0; ``rollout_id = ids.rollout_id(group_id, i)``;
  request ids derived from the rollout id), with sampling params and ``max_turns`` from settings.
- :func:`admit` returns why a new group must wait, or ``None``. Staleness is controlled HERE, by
  admission, on by default, with the rule of :func:`streamgrpo.lifecycle.pacing.admit` (the admission
  budget, the never-starve exception and ``max_groups_in_flight``) over the :class:`Backlog` the follower
  folds: a group admitted within the budget is trained at most ``max_staleness`` versions after the
  version it was sampled with, and the trainer drops what is older by the same shared ``max_staleness``
  (``[loop]`` settings).

Intake bounds (:func:`check_task`): a task without an id, with ``group_size`` outside
1..:data:`~streamgrpo.topics.limits.MAX_GROUP_SIZE`, or encoded larger than
:data:`~streamgrpo.topics.limits.MAX_TASK_BYTES` (its question is copied into every request and
completion of the group) is dead-lettered (``invalid_task`` / ``task_too_large``) before any request
is built, so a hostile or careless Task can neither exhaust memory nor make the fan-out produce a
record the broker refuses.

Thin agent: consumes ``tasks``; waits for the worker's
:class:`~streamgrpo.streams.follower.StreamsFollower` to catch up; while admission says wait, it
sleeps (backpressure: the task is not acknowledged, the consumer stops fetching once its buffer is
full; nothing is dropped). The wait yields to a stop or a rebalance (checked every ``admission_poll_s``;
:meth:`~streamgrpo.streams.app.StreamsContext.must_yield`): the held task is handed back unacknowledged, its
offset is not committed, and it is delivered again after the rebalance or restart, so neither waits for
admission (which frees only when the window, paused by that rebalance, closes groups). A task whose group
already appears on ``rollout-requests`` (a redelivery after a crash) is skipped.
Curriculum (:mod:`streamgrpo.streams.curriculum`, ``[streams] curriculum``, on by default): before each
new task, and every second while no task arrives, the tasks the curriculum has due (a task whose last
group had reward variance, then parked tasks whose time has come) are fanned out first, under the same
admission. A Task with ``metadata["served_by"]`` (e.g. ``streamgrpo serve``'s production calls) was already run
by its server and is recorded for analysis only: it is not fanned out again.
A Task with a ``demonstration`` (:mod:`streamgrpo.tasks.demos`) is fanned out as a group of ONE request carrying the
given steps (every copy would be the same trajectory), under the same admission, outside the curriculum (it is no
sample of its kind's pass rate); a demonstration with more steps than ``max_turns`` or steps that are not planner
replies ending in one answer is dead-lettered (``invalid_demonstration``). Demonstrations submitted ahead of the
tasks (``streamgrpo run`` does) are trained first: the warm start. What is not covered: priorities between new tasks.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass

from streamgrpo import metrics
from streamgrpo.avro import ids
from streamgrpo.avro import records as R
from streamgrpo.lifecycle import pacing
from streamgrpo.lifecycle.pacing import Backlog, Pacing
from streamgrpo.streams.ab_controller import choose_version, comparison_only
from streamgrpo.streams.app import FaustEvent, FaustStream, StreamsContext
from streamgrpo.streams.config import StreamsSettings
from streamgrpo.streams.curriculum import Curriculum, CurriculumPolicy, Decision
from streamgrpo.tasks.demos import check_steps
from streamgrpo.topics import catalog
from streamgrpo.topics.limits import MAX_GROUP_SIZE, MAX_TASK_BYTES

__all__ = ["Backlog", "FanoutPolicy", "admit", "check_task", "fan_out", "register"]

log = logging.getLogger(__name__)
#: Seconds without an admitted group (and none in flight) after which the fan-out counts as idle.
IDLE_S = 10.0


@dataclass(frozen=True)
class FanoutPolicy:
    adapter_name: str
    max_turns: int
    sampling: R.SamplingParams
    max_groups_in_flight: int
    max_staleness: int
    samples_per_step: int

    @property
    def pacing(self) -> Pacing:
        return Pacing(self.max_staleness, self.samples_per_step)

    @classmethod
    def from_settings(cls, s: StreamsSettings) -> FanoutPolicy:
        return cls(s.adapter_name, s.max_turns, R.SamplingParams(s.temperature, s.top_p, s.max_new_tokens),
                   s.max_groups_in_flight, s.max_staleness, s.samples_per_step)


def check_task(task: R.Task, encoded_size: int, max_turns: int | None = None) -> tuple[str, str] | None:
    """Why ``task`` cannot be fanned out, as (reason code, reason), or None when it can (pure). ``max_turns``: the
    rollouts' turn budget, which a demonstration's steps must fit."""
    if not task.envelope.task_id or not 1 <= task.group_size <= MAX_GROUP_SIZE:
        return "invalid_task", (f"task needs a task_id and 1 <= group_size <= {MAX_GROUP_SIZE} "
                                f"(got {task.envelope.task_id!r}, {task.group_size})")
    if encoded_size > MAX_TASK_BYTES:
        return "task_too_large", (f"task is {encoded_size} bytes encoded; at most {MAX_TASK_BYTES} are accepted "
                                  "(its question is copied into every request and completion of the group)")
    if task.demonstration is not None:
        try:
            check_steps(task.demonstration.steps)
        except ValueError as exc:
            return "invalid_demonstration", f"demonstration of task {task.envelope.task_id}: {exc}"
        if max_turns is not None and len(task.demonstration.steps) > max_turns:
            return "invalid_demonstration", (f"demonstration has {len(task.demonstration.steps)} steps; the rollouts "
                                             f"take at most max_turns = {max_turns} ([loop] max_turns)")
    return None


def fan_out(task: R.Task, version: int, policy: FanoutPolicy, control: bool = False) -> list[R.RolloutRequest]:
    """The group's N requests; raises ValueError for a task :func:`check_task` rejects on its fields. ``control``:
    the group starts as the A/B control arm (``metadata[pacing.AB_ARM_KEY]``; a task's own value is dropped)."""
    problem = check_task(task, 0)
    if problem is not None:
        raise ValueError(problem[1])
    task_id = task.envelope.task_id or ""
    group = ids.group_id(task_id, ids.attempt_of(task.metadata))
    metadata = {k: v for k, v in task.metadata.items() if k != pacing.AB_ARM_KEY}
    if control:
        metadata[pacing.AB_ARM_KEY] = pacing.CONTROL_ARM
    size = group_size(task)
    out = []
    for i in range(size):
        rollout = ids.rollout_id(group, i)
        out.append(R.RolloutRequest(
            envelope=R.Envelope.new("streams", event_id=ids.request_event_id(rollout), task_id=task_id,
                                    group_id=group, rollout_id=rollout),
            question=task.question, source=task.source, rollout_index=i, group_size=size,
            adapter_name=policy.adapter_name, adapter_version=version, max_turns=policy.max_turns,
            sampling=policy.sampling, metadata=dict(metadata), demonstration=task.demonstration,
        ))
    return out


def group_size(task: R.Task) -> int:
    """The rollouts of ``task``'s group: one for a demonstration (its steps are given: every copy would be the same
    trajectory), else the task's N."""
    return 1 if task.demonstration is not None else task.group_size


def admit(backlog: Backlog, group_size: int, policy: FanoutPolicy) -> str | None:
    """Why a new group of ``group_size`` rollouts must wait, or None when it may start (the pacing rule)."""
    return pacing.admit(backlog, group_size, policy.pacing, policy.max_groups_in_flight)


class _Shell:
    """The agent shell: intake checks, the wait on the follower and on admission (each yielding to a stop or
    rebalance), the curriculum's due tasks first, the send."""

    def __init__(self, ctx: StreamsContext) -> None:
        from streamgrpo.streams.follower import follower_for

        self.ctx = ctx
        self.follower = follower_for(ctx)
        self.view = self.follower.view
        self.policy = FanoutPolicy.from_settings(ctx.settings)
        self.curriculum = Curriculum(curriculum_policy(ctx.settings))
        self.view.on_closed.append(lambda event: _note(ctx, self.curriculum.closed(event)))
        self.lock = asyncio.Lock()  # one admission decision at a time (the agent and the curriculum pump)
        self.deferred: list[R.Task] = []  # due tasks whose send yielded to a stop or rebalance: sent first next

    async def agent(self, stream: FaustStream) -> None:
        async for ev in stream.events():
            task = await self.ctx.decode(ev, (R.Task,))
            if isinstance(task, R.Task):
                await self.handle(task, ev)

    async def handle(self, task: R.Task, ev: FaustEvent) -> None:
        ctx = self.ctx
        problem = check_task(task, len(ev.value or b""), self.policy.max_turns)
        if problem is not None:
            m = ev.message
            await ctx.dead_letter(m.topic, m.partition, m.offset, ev.key, ev.value, *problem)
            return
        if task.metadata.get("served_by"):  # already run by the server that produced it (streamgrpo serve)
            ctx.count("fanout.served_elsewhere")
            return
        if not await self.caught_up():
            return self.hand_back(task, ev)
        async with self.lock:
            if not await self.send_due() or not await self.send_group(task):  # tasks with signal go first
                self.hand_back(task, ev)

    async def send_due(self, idle: bool = False) -> bool:
        """Sends every group the curriculum has due (``idle``: parked ones too, see
        :meth:`Curriculum.next_due`); False when the worker yielded (the rest wait, in order)."""
        while (due := self.deferred.pop(0) if self.deferred else self.curriculum.next_due(idle)) is not None:
            if not await self.send_group(due):
                self.deferred.insert(0, due)
                return False
        return True

    def hand_back(self, task: R.Task, ev: FaustEvent) -> None:
        self.ctx.hand_back(ev)
        self.ctx.count("fanout.handed_back")
        log.info("fan-out: stop or rebalance; task %s handed back unacknowledged (delivered again)",
                 task.envelope.task_id)

    async def caught_up(self) -> bool:
        """Waits for the follower; False when the worker must yield first (stop or rebalance)."""
        while not self.follower.caught_up.is_set():
            if self.ctx.must_yield():
                return False
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.follower.caught_up.wait(), self.ctx.settings.admission_poll_s)
        return True

    async def admitted(self, task: R.Task, size: int) -> bool:
        """Waits until admission lets a group of ``task`` (``size`` rollouts) start; False when the worker must
        yield first."""
        waited, stalled, since = False, False, time.monotonic()
        m = metrics.current()
        try:
            while not self.ctx.must_yield():
                reason = admit(self.view.backlog(), size, self.policy)
                if reason is None:
                    return True
                if not waited:
                    log.info("fan-out waiting: %s", reason)
                    self.ctx.count("fanout.backpressure")
                    m.set(metrics.ADMISSION_BLOCKED, 1)
                    waited = True
                if not stalled and time.monotonic() - since >= self.ctx.settings.liveness_s:
                    log.warning("fan-out STALLED: no group admitted for %.0f s while task %s waits ([loop] "
                                "liveness_s %.0f): %s", time.monotonic() - since, task.envelope.task_id,
                                self.ctx.settings.liveness_s, reason)
                    self.ctx.count("fanout.stalled")
                    m.set(metrics.STALLED, 1)
                    stalled = True
                await asyncio.sleep(self.ctx.settings.admission_poll_s)
            return False  # this worker no longer waits (it may not own the task)
        finally:
            m.set(metrics.ADMISSION_BLOCKED, 0)
            m.set(metrics.STALLED, 0)

    async def send_group(self, task: R.Task) -> bool:
        """Fans out ``task``'s group once admitted (or skips a group already requested); False when the worker
        yielded to a stop or rebalance instead (nothing sent)."""
        ctx, view = self.ctx, self.view
        group = ids.group_id(task.envelope.task_id or "", ids.attempt_of(task.metadata))
        if group in view.requested:
            ctx.count("fanout.already_requested")
            return True
        demo = task.demonstration is not None  # a demonstration is no sample of its kind: the curriculum skips it
        sized = task if demo else self.curriculum.sized(task)  # a probe group when the task's kind is cold
        if not await self.admitted(sized, group_size(sized)):
            return False
        line = view.adapters(self.policy.adapter_name)
        version = choose_version(line, group, ctx.settings.canary_share)
        control = comparison_only(line, version, ctx.settings.max_staleness)
        requests = fan_out(sized, version, self.policy, control)
        futures = [await ctx.send(r) for r in requests]
        await asyncio.gather(*futures)
        view.note_requested(group, len(requests), control)
        if demo:
            ctx.count("fanout.demonstrations")
        else:
            self.curriculum.remember(task, ids.attempt_of(task.metadata))
        ctx.count("fanout.groups")
        if "curriculum" in task.metadata:
            ctx.count(f"fanout.curriculum_{task.metadata['curriculum']}")
        if "probe" in sized.metadata:
            ctx.count("fanout.curriculum_probe")
        if "all_cold" in sized.metadata:
            ctx.count("fanout.curriculum_all_cold")
        metrics.current().inc(metrics.GROUPS_REQUESTED)
        metrics.current().set(metrics.GROUPS_OPEN, view.in_flight)
        return True

    async def curriculum_pump(self) -> None:
        """Fans out due tasks while no new task arrives (the agent only runs on new tasks). When no group was
        admitted for :data:`IDLE_S` and none is in flight, the task source has run dry: parked tasks are
        retried at once (the ``park_after`` clock counts admissions and would never advance)."""
        await self.follower.caught_up.wait()
        admitted, since = self.curriculum.admitted, time.monotonic()
        while True:
            await asyncio.sleep(1.0)
            if self.curriculum.admitted != admitted:
                admitted, since = self.curriculum.admitted, time.monotonic()
            idle = self.view.in_flight == 0 and time.monotonic() - since >= IDLE_S
            if (self.deferred or self.curriculum.pending) and not self.lock.locked():
                async with self.lock:
                    await self.send_due(idle)


def register(ctx: StreamsContext) -> None:
    shell = _Shell(ctx)
    ctx.app.agent(ctx.topics[catalog.TASKS], name="streamgrpo.fanout")(shell.agent)
    if ctx.settings.curriculum:
        ctx.app.task(shell.curriculum_pump)


def curriculum_policy(s: StreamsSettings) -> CurriculumPolicy:
    return CurriculumPolicy(enabled=s.curriculum, requeue_max=s.curriculum_requeue_max,
                            park_after=s.curriculum_park_after, park_retries=s.curriculum_park_retries,
                            cold_kind_groups=s.curriculum_cold_kind_groups,
                            probe_group_size=s.curriculum_probe_group_size,
                            all_cold_keeps_last=s.curriculum_all_cold_keeps_last)


def _note(ctx: StreamsContext, decision: Decision | None) -> None:
    if decision is not None:
        ctx.count(f"curriculum.{decision.action}")
        log.debug("curriculum: task %s %s (pass rate %.2f after %d group(s))", decision.task_id, decision.action,
                  decision.pass_rate, decision.groups)
