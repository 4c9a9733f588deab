"""Group fan-out: each Task -> N RolloutRequests sharing ONE adapter version, paced by admission.

Pure core:
- :func:`fan_out` builds the N requests (``group_id = derived_id("group", task_id, attempt)`` with
  ``attempt`` from ``task.metadata["attempt"]`` or 0; ``rollout_id = derived_id("rollout", group_id, i)``;
  request ids derived from the rollout id), with sampling params and ``max_turns`` from settings.
- :func:`admit` returns why a new group must wait, or ``None``: at most ``max_groups_in_flight``
  groups requested but not closed, and (when ``groups_per_version > 0``) at most
  ``(latest_version + 1 + max_staleness) * groups_per_version`` groups issued in total, i.e.
  rollouts never run more than ``max_staleness`` adapter versions ahead of the trainer.

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
    groups_per_version: int

    @classmethod
    def from_settings(cls, s: Any) -> FanoutPolicy:
        return cls(s.adapter_name, s.max_turns, R.SamplingParams(s.temperature, s.top_p, s.max_new_tokens),
                   s.max_groups_in_flight, s.max_staleness, s.groups_per_version)


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


def admit(in_flight: int, issued: int, latest_version: int, policy: FanoutPolicy) -> str | None:
    """Why a new group must wait, or None when it may start."""
    if in_flight >= policy.max_groups_in_flight:
        return f"{in_flight} groups in flight (max {policy.max_groups_in_flight})"
    if policy.groups_per_version > 0:
        budget = (latest_version + 1 + policy.max_staleness) * policy.groups_per_version
        if issued >= budget:
            return (f"{issued} groups issued; trainer at version {latest_version} allows {budget} "
                    f"(max_staleness {policy.max_staleness})")
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
        while (reason := admit(follower.in_flight, len(follower.requested), follower.adapters.latest, policy)):
            if not waited:
                log.info("fan-out waiting: %s", reason)
                ctx.count("fanout.backpressure")
                waited = True
            await asyncio.sleep(ctx.settings.admission_poll_s)
        version = choose_version(follower.adapters, group, ctx.settings.canary_share)
        requests = fan_out(task, version, policy)
        futures = [await ctx.send(r) for r in requests]
        await asyncio.gather(*futures)
        follower.note_requested(group)
        ctx.count("fanout.groups")

    ctx.app.agent(ctx.topics["tasks"], name="streamgrpo.fanout")(fanout_agent)
