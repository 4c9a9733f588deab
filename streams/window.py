"""Advantage window + sample assembly agent (Faust wiring around ``window_core`` and ``samples``).

One agent consumes ``rewards``, ``planner-actions`` and ``rollouts`` (all keyed by group_id, so a
whole group lives on one partition) plus an internal ``streams-window-ticks`` topic. Two tables,
changelogged by Faust and partitioned like the inputs:
- ``window-groups``: group_id -> :class:`GroupState` (rewards, turn bookkeeping, advantages);
- ``window-actions``: ``rollout_id/turn`` -> the PlannerAction exactly as it arrived (its Avro bytes:
  the event is stored, not re-shaped; decoded again when its sample is built).

A timer scans open groups of the partitions this worker owns and sends a tick (key group_id, the
group's partition) for every group past ``group_timeout_s`` or past ``action_ttl_s`` after closing;
the agent handles the tick inside stream iteration, where tables may be written.

Delivery: at-least-once. Samples and GroupClosed are sent and their delivery awaited BEFORE the
table records them as emitted, so a crash can repeat an emission but never lose one; repeats carry
the same deterministic id (``ids.sample_id(rollout_id)``) and the trainer drops them by id.
Human rewards (``streamgrpo label``) are used ahead of the judge's while a group is open (see
:func:`~streamgrpo.streams.window_core.add_reward`); the review hold keeps groups served to a client
(``served_review_hold_s``), or every group (``review_hold_s``), open for them
(:func:`~streamgrpo.streams.window_core.review_hold`).
A/B control arm: at a group's close the worker's follower (:mod:`streamgrpo.streams.follower`, the one registry
fold) says whether the group is the test's control too far behind the line to train
(:func:`~streamgrpo.streams.ab_controller.comparison_only`); such a group closes with reason ``control_arm`` and no
samples. Until the follower has caught up after a start, no group is taken for the control arm (the trainer's
staleness rule still applies to what it receives).
Counted (``ctx.counters``): ``groups.<reason>``, ``rewards.duplicate_or_late``, ``rewards.human``,
``actions.expired``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import faust
from faust.types import TP

from streamgrpo import metrics
from streamgrpo.avro import ids
from streamgrpo.avro import records as R
from streamgrpo.streams import faust_transport
from streamgrpo.streams import window_core as W
from streamgrpo.streams.ab_controller import comparison_only
from streamgrpo.streams.advantages import build_estimator
from streamgrpo.streams.app import FaustEvent, FaustStream, StreamsContext
from streamgrpo.streams.follower import follower_for
from streamgrpo.streams.samples import action_key, build_sample, ready_rollouts
from streamgrpo.topics import catalog
from streamgrpo.topics.catalog import spec
from streamgrpo.topics.limits import MAX_TURNS

log = logging.getLogger(__name__)
TICKS = "streams-window-ticks"


class Window:
    """State and handlers of the window agent (one per worker)."""

    def __init__(self, ctx: StreamsContext) -> None:
        s = ctx.settings
        self.ctx = ctx
        self.policy = W.WindowPolicy(s.estimator, build_estimator(s.estimator), s.group_timeout_s,
                                     s.partial_policy, s.min_group_size, s.review_hold_s, s.served_review_hold_s)
        parts = spec(catalog.REWARDS).partitions
        groups: Any = faust.Schema(key_serializer="json", value_serializer="json")
        actions: Any = faust.Schema(key_serializer="json", value_serializer="raw")
        self.groups = ctx.app.Table("window-groups", default=None, partitions=parts, schema=groups)
        # value_type=bytes: Faust derives a table's changelog serializers from value_type, not from schema (with
        # json the raw Avro values did not decode on recovery; a restarted worker lost every stored action)
        self.actions = ctx.app.Table("window-actions", default=None, partitions=parts, schema=actions,
                                     value_type=bytes)
        self.ticks = ctx.topic(TICKS, internal=True, partitions=parts)
        self.source = ctx.topic(catalog.REWARDS, catalog.PLANNER_ACTIONS, catalog.ROLLOUTS, TICKS, internal=True, partitions=parts)
        self.ticked: dict[str, float] = {}
        self.follower = follower_for(ctx)

    # -- state access -----------------------------------------------------------------------------
    def _load(self, group_id: str) -> W.GroupState | None:
        raw = self.groups.get(group_id)
        if not raw:
            return None
        state, repaired = W.GroupState.restored(raw)
        for note in repaired:  # a state an older release stored with what the intake now refuses
            log.warning("window: group %s as stored: %s", group_id, note)
            self.ctx.count("window.state_repaired")
        return state

    # -- handlers ---------------------------------------------------------------------------------
    async def on_record(self, ev: FaustEvent) -> None:
        topic = ev.message.topic
        if topic == self.ctx.name(TICKS):
            await self.on_tick((ev.key or b"").decode())
            return
        event = await self.ctx.decode(ev, (R.Reward, R.PlannerAction, R.RolloutCompleted))
        if event is None:
            return
        if isinstance(event, R.Reward) and (bad := W.reward_problem(event)) is not None:
            # not finite, or a person's outside [0, 1]: never folded (nor observed), dead-lettered like out_of_bounds
            await self.ctx.dead_letter(topic, ev.message.partition, ev.message.offset, ev.key, ev.value,
                                       "out_of_bounds", bad)
            return
        if isinstance(event, R.Reward) and self.ctx.on_reward is not None:
            self.ctx.on_reward(event)  # the metrics of this worker (they have no agent of their own beside the window)
        if not event.envelope.group_id or not event.envelope.rollout_id:
            await self.ctx.dead_letter(topic, ev.message.partition, ev.message.offset, ev.key, ev.value,
                                       "missing_ids", f"{type(event).__name__} without group_id/rollout_id")
            return
        problem = W.out_of_bounds(event)
        if problem is not None:
            await self.ctx.dead_letter(topic, ev.message.partition, ev.message.offset, ev.key, ev.value,
                                       "out_of_bounds", f"{type(event).__name__}: {problem}")
            return
        partition = ev.message.partition
        known = self._load(event.envelope.group_id)
        if isinstance(event, R.PlannerAction):
            await self.on_action(known or self._new(event, 0, partition), event, ev.value or b"", changed=known is None)
            return
        state = known or self._new(event, int(event.group_size), partition)
        if isinstance(event, R.Reward):
            state, accepted = W.add_reward(state, event)
            if not accepted:
                self.ctx.count("rewards.duplicate_or_late")
            elif W.is_human(event):
                self.ctx.count("rewards.human")
        else:
            before = len(state.turns_expected)
            state = W.add_completed(state, event)
            accepted = len(state.turns_expected) > before
        await self._advance(state, changed=accepted or known is None)

    def _new(self, event: R.Event, expected: int, partition: int) -> W.GroupState:
        env = event.envelope
        return W.new_state(env.group_id or "", env.task_id, expected, time.time(), partition)

    async def on_action(self, state: W.GroupState, action: R.PlannerAction, raw: bytes, changed: bool) -> None:
        """Store the turn's event (once) while it can still be trained on; only the first event of a group, or
        an action that completes a closed group's rollout, writes the group state."""
        rollout = action.envelope.rollout_id or ""
        if W.wants_action(state, rollout):
            key = action_key(rollout, int(action.envelope.turn or 0))
            if self.actions.get(key) is None:
                self.actions[key] = raw
        else:
            self.ctx.count("actions.ignored")
        if changed or state.closed:
            await self._advance(state, changed)

    async def on_tick(self, group_id: str) -> None:
        state = self._load(group_id)
        if state is None:
            return
        if W.expired(state, time.time(), self.ctx.settings.action_ttl_s):
            self.ctx.count("actions.expired", self._drop_actions(state, self._rollouts(state)))
            del self.groups[group_id]
            self.ticked.pop(group_id, None)
            return
        await self._advance(state, changed=False)

    def _has_turn(self, rollout: str, turn: int) -> bool:
        return self.actions.get(action_key(rollout, turn)) is not None

    async def _advance(self, state: W.GroupState, changed: bool) -> None:
        """Close the group if due, emit every ready sample, then persist the state (when it changed)."""
        group = state.group_id
        state, closed = W.maybe_close(state, self.policy, time.time(), lambda version: self._control(group, version))
        futures = []
        if closed is not None:
            self.ctx.count(f"groups.{closed.reason}")
            metrics.current().inc(metrics.GROUPS_CLOSED, status=closed.status, trains=str(closed.trains).lower())
            log.debug("group %s closed: %s (%s)", state.group_id, closed.status.value, closed.reason)
            futures.append(await self.ctx.send(closed))
            self._drop_actions(state, [r for r in self._rollouts(state) if r not in state.advantages])
        ready = ready_rollouts(state, self._has_turn)
        for rollout in ready:
            actions = [self.ctx.codec.decode(self.actions[action_key(rollout, t)], R.PlannerAction)
                       for t in range(1, state.turns_expected[rollout] + 1)]
            futures.append(await self.ctx.send(build_sample(state, rollout, actions)))
        if futures:
            await asyncio.gather(*futures)  # delivered before the table says "emitted"
        if ready:
            self.ctx.count("samples.emitted", len(ready))
            metrics.current().inc(metrics.SAMPLES_EMITTED, len(ready))
            state.emitted = [*state.emitted, *ready]
            self._drop_actions(state, ready)
        if changed or closed is not None or ready:
            self.groups[state.group_id] = state.to_dict()

    def _control(self, group_id: str, version: int) -> bool:
        """Whether group ``group_id``, served by ``version``, closing now is the A/B control arm for the comparison
        only: it was one when it started (outside admission's budget: it must not train now) or is one now."""
        if not self.follower.caught_up.is_set():
            return False
        view = self.follower.view
        if group_id in view.control:
            return True
        return comparison_only(view.adapters(self.ctx.settings.adapter_name), version, self.ctx.settings.max_staleness)

    def _rollouts(self, state: W.GroupState) -> list[str]:
        """Every rollout id the group may have actions for."""
        out = {ids.rollout_id(state.group_id, i) for i in range(state.expected)}
        return sorted(out | set(state.rewards) | set(state.turns_expected))

    def _drop_actions(self, state: W.GroupState, rollouts: list[str]) -> int:
        """Delete the stored turns of ``rollouts``; returns how many were deleted."""
        dropped = 0
        for rollout in rollouts:
            last = MAX_TURNS  # turns beyond it are rejected at intake; a count may be unknown yet
            for turn in range(0, last + 1):
                key = action_key(rollout, turn)
                if self.actions.get(key) is not None:
                    del self.actions[key]
                    dropped += 1
        return dropped

    # -- timer ------------------------------------------------------------------------------------
    def due_ticks(self, now: float) -> list[tuple[str, int]]:
        """Groups of this worker's partitions that are due for a timeout or retention check."""
        actives = faust_transport.assigned(self.ctx.app)
        rewards = self.ctx.name(catalog.REWARDS)
        out = []
        for key, raw in list(self.groups.items()):
            if not raw or TP(rewards, raw["partition"]) not in actives:
                continue
            if raw["closed"]:
                due = now - (raw["closed_at"] or now) >= self.ctx.settings.action_ttl_s
            else:
                hold = W.review_hold(self.policy, raw.get("served"), int(raw.get("expected") or 0),
                                     raw.get("demo_source"))
                due = now - raw["first_seen"] >= self.policy.timeout_s or W.hold_over(raw.get("complete_at"),
                                                                                      self.policy, now, hold)
            if due and now - self.ticked.get(key, 0.0) >= self.ctx.settings.tick_interval_s * 5:
                self.ticked[key] = now
                out.append((key, raw["partition"]))
        return out

    async def send_ticks(self) -> None:
        for group_id, partition in self.due_ticks(time.time()):
            await self.ticks.send(key=group_id.encode(), value=b"tick", partition=partition, force=True)


def register(ctx: StreamsContext) -> Window:
    window = Window(ctx)

    async def window_agent(stream: FaustStream) -> None:
        busy, n, since = 0.0, 0, time.monotonic()
        async for ev in stream.events():
            t0 = time.monotonic()
            await window.on_record(ev)
            busy += time.monotonic() - t0
            n += 1
            if n == 1000:
                log.info("window: 1000 records in %.2fs (%.2fs in handlers); counters %s",
                         time.monotonic() - since, busy, dict(ctx.counters))
                busy, n, since = 0.0, 0, time.monotonic()

    ctx.app.agent(window.source, name="streamgrpo.window")(window_agent)
    ctx.app.timer(ctx.settings.tick_interval_s, name="streamgrpo.window.ticks")(window.send_ticks)
    ctx.window = window
    return window
