"""Group fan-out: each Task -> N RolloutRequests sharing ONE adapter version, paced by admission.

Pure core:
- :func:`fan_out` builds the N requests (``group_id = derived_id("group", task_id, attempt)`` with
  ``attempt`` from ``task.metadata["attempt"]`` or 0; ``rollout_id = derived_id("rollout", group_id, i)``;
  request ids derived from the rollout id), with sampling params and ``max_turns`` from settings.
- :func:`admit` returns why a new group must wait, or ``None``. Staleness is controlled HERE, by
  admission, on by default: a group's samples queue behind the samples already waiting for the
  trainer (``pending``: produced by closed groups, not yet in any published adapter's lineage) and
  the rollouts in flight. The trainer consumes ``samples_per_step`` per version, so a group admitted
  while ``pending + in_flight + group_size <= (1 + max_staleness) * samples_per_step`` is trained
  at most ``max_staleness`` versions after the version it was sampled with. A group is always
  admitted while fewer than ``samples_per_step`` samples are waiting or in flight (the trainer
  would otherwise starve), and at most ``max_groups_in_flight`` groups are open at once. The
  trainer drops what is older than the same shared ``max_staleness`` (``[loop]`` settings).

Thin agent: consumes ``tasks``; waits for the :class:`~streamgrpo.streams.follower.LogFollower`
to catch up; while admission says wait, it sleeps (backpressure: the task is not acknowledged, the
consumer stops fetching once its buffer is full; nothing is dropped). A task whose group already
appears on ``rollout-requests`` (a redelivery after a crash) is skipped.
What is not covered: priorities between tasks.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

from streamgrpo.avro import records as R
from streamgrpo.streams import ids
from streamgrpo.streams.ab_controller import choose_version

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class FanoutPolicy:
    adapter_name: str
    max_turns: int
    sampling: R.SamplingParams
    max_groups_in_flight: int
    max_staleness: int
    samples_per_step: int

    @classmethod
    def from_settings(cls, s: Any) -> FanoutPolicy:
        return cls(s.adapter_name, s.max_turns, R.SamplingParams(s.temperature, s.top_p, s.max_new_tokens),
                   s.max_groups_in_flight, s.max_staleness, s.samples_per_step)


def attempt_of(task: R.Task) -> int:
    try:
        return int(task.metadata.get("attempt", "0"))
    except ValueError:
        return 0


def fan_out(task: R.Task, version: int, policy: FanoutPolicy) -> list[R.RolloutRequest]:
    """The group's N requests; raises ValueError for a task without id or with group_size < 1."""
    task_id = task.envelope.task_id
    if not task_id or task.group_size < 1:
        raise ValueError(f"task needs a task_id and group_size >= 1 (got {task_id!r}, {task.group_size})")
    group = ids.group_id(task_id, attempt_of(task))
    out = []
    for i in range(task.group_size):
        rollout = ids.rollout_id(group, i)
        out.append(R.RolloutRequest(
            envelope=R.Envelope.new("streams", event_id=ids.request_event_id(rollout), task_id=task_id,
                                    group_id=group, rollout_id=rollout),
            question=task.question, source=task.source, rollout_index=i, group_size=task.group_size,
            adapter_name=policy.adapter_name, adapter_version=version, max_turns=policy.max_turns,
            sampling=policy.sampling, metadata=dict(task.metadata),
        ))
    return out


@dataclass(frozen=True)
class Backlog:
    """What admission looks at (folded from the log by the follower)."""

    groups_in_flight: int  # groups requested, not closed
    rollouts_in_flight: int  # their rollouts
    pending_samples: int  # samples of closed groups not yet in a published adapter's lineage


def admit(backlog: Backlog, group_size: int, policy: FanoutPolicy) -> str | None:
    """Why a new group of ``group_size`` rollouts must wait, or None when it may start (see module doc)."""
    if backlog.groups_in_flight >= policy.max_groups_in_flight:
        return f"{backlog.groups_in_flight} groups in flight (max {policy.max_groups_in_flight})"
    queued = backlog.pending_samples + backlog.rollouts_in_flight
    if queued < policy.samples_per_step:
        return None  # the trainer needs more samples than are coming: never starve it
    budget = (1 + policy.max_staleness) * policy.samples_per_step
    if queued + group_size > budget:
        return (f"{backlog.pending_samples} samples waiting for the trainer and {backlog.rollouts_in_flight} "
                f"rollouts in flight; {group_size} more would exceed {budget} = (1 + max_staleness "
                f"{policy.max_staleness}) x samples_per_step {policy.samples_per_step}")
    return None


def register(ctx: Any) -> None:
    from streamgrpo.streams.follower import follower_for

    follower = follower_for(ctx)
    policy = FanoutPolicy.from_settings(ctx.settings)

    async def fanout_agent(stream: Any) -> None:
        async for ev in stream.events():
            task = await ctx.decode(ev, (R.Task,))
            if task is not None:
                await handle(task, ev)

    async def handle(task: R.Task, ev: Any) -> None:
        await follower.caught_up.wait()
        try:
            requests = fan_out(task, 0, policy)
        except ValueError as exc:
            m = ev.message
            await ctx.dead_letter(m.topic, m.partition, m.offset, ev.key, ev.value, "invalid_task", str(exc))
            return
        group = requests[0].envelope.group_id
        if group in follower.requested:
            ctx.count("fanout.already_requested")
            return
        waited = False
        while (reason := admit(follower.backlog(), task.group_size, policy)):
            if not waited:
                log.info("fan-out waiting: %s", reason)
                ctx.count("fanout.backpressure")
                waited = True
            await asyncio.sleep(ctx.settings.admission_poll_s)
        version = choose_version(follower.adapters, group, ctx.settings.canary_share)
        requests = fan_out(task, version, policy)
        futures = [await ctx.send(r) for r in requests]
        await asyncio.gather(*futures)
        follower.note_requested(group, len(requests))
        ctx.count("fanout.groups")

    ctx.app.agent(ctx.topics["tasks"], name="streamgrpo.fanout")(fanout_agent)
