"""A/B controller: which adapter version serves a group, and when a canary is promoted or rolled back.

Pure core (the primary, canary and latest versions come from the one adapter-events fold,
:mod:`streamgrpo.models.registry`; with ``canary_share == 0`` there is no canary and every published
version becomes primary at once; version 0 is the base model):
- :func:`choose_version` gives a group the canary with probability ``canary_share`` (a deterministic
  hash of the group id, so a replay picks the same arm), else the primary.
- :func:`decide` compares mean group reward of the two arms once each has ``min_groups`` groups.

Thin agent: ``register(ctx)`` runs a timer that reads per-version group stats from the worker's
:class:`~streamgrpo.streams.follower.StreamsFollower` (global view of ``groups`` and ``adapter-events``)
and publishes AdapterPromoted / AdapterRolledBack (ids derived from the canary version, so two
controllers deciding the same thing publish the same id). Run it on one worker (``--only ab``);
what is not covered: sequential testing / confidence bounds (the rule is a plain mean difference).
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass

from streamgrpo.avro import ids
from streamgrpo.avro import records as R
from streamgrpo.models.registry import Line
from streamgrpo.streams.app import StreamsContext

log = logging.getLogger(__name__)


def choose_version(line: Line, group_id: str, canary_share: float) -> int:
    """The adapter version of a whole group."""
    if line.canary is None or canary_share <= 0:
        return line.primary
    bucket = int.from_bytes(hashlib.sha256(group_id.encode()).digest()[:8], "big") / 2**64
    return line.canary if bucket < canary_share else line.primary


@dataclass
class ArmStats:
    groups: int = 0
    reward_sum: float = 0.0

    @property
    def mean(self) -> float:
        return self.reward_sum / self.groups if self.groups else 0.0

    def add(self, group_mean: float) -> None:
        self.groups += 1
        self.reward_sum += group_mean


@dataclass(frozen=True)
class ABPolicy:
    min_groups: int
    min_gain: float
    max_loss: float


@dataclass(frozen=True)
class Promote:
    reason: str


@dataclass(frozen=True)
class Rollback:
    reason: str


@dataclass(frozen=True)
class Wait:
    reason: str


def decide(primary: ArmStats, canary: ArmStats, policy: ABPolicy) -> Promote | Rollback | Wait:
    """Promote when the canary's mean reward beats primary by ``min_gain``; roll back when it is worse
    by more than ``max_loss``; otherwise (or with fewer than ``min_groups`` groups per arm) wait."""
    if primary.groups < policy.min_groups or canary.groups < policy.min_groups:
        return Wait(f"need {policy.min_groups} groups per arm (primary {primary.groups}, canary {canary.groups})")
    diff = canary.mean - primary.mean
    detail = f"canary mean {canary.mean:.4f} vs primary {primary.mean:.4f} over {canary.groups}/{primary.groups} groups"
    if diff >= policy.min_gain:
        return Promote(detail)
    if diff < -policy.max_loss:
        return Rollback(detail)
    return Wait(detail)


def decision_event(decision: Promote | Rollback, adapter: str, state: Line,
                   primary: ArmStats, canary: ArmStats) -> R.Event:
    assert state.canary is not None
    metrics = {"primary_mean": primary.mean, "canary_mean": canary.mean,
               "primary_groups": float(primary.groups), "canary_groups": float(canary.groups)}
    if isinstance(decision, Promote):
        return R.AdapterPromoted(R.Envelope.new("streams", event_id=ids.promotion_id(adapter, state.canary)),
                                 adapter, state.canary, state.primary, decision.reason, metrics)
    return R.AdapterRolledBack(R.Envelope.new("streams", event_id=ids.rollback_id(adapter, state.canary)),
                               adapter, state.canary, state.primary, decision.reason, metrics)


def register(ctx: StreamsContext) -> None:
    from streamgrpo.streams.follower import follower_for

    follower = follower_for(ctx)
    s = ctx.settings
    policy = ABPolicy(s.ab_min_groups, s.ab_min_gain, s.ab_max_loss)
    decided: set[int] = set()

    async def ab_tick() -> None:
        if not follower.caught_up.is_set():
            return
        state = follower.view.adapters(s.adapter_name)
        if state.canary is None or state.canary in decided:
            return
        primary, canary = follower.view.arm(state.primary), follower.view.arm(state.canary)
        decision = decide(primary, canary, policy)
        if isinstance(decision, Wait):
            return
        event = decision_event(decision, s.adapter_name, state, primary, canary)
        log.info("A/B: %s version %d (%s)", type(decision).__name__, state.canary, decision.reason)
        decided.add(state.canary)
        await (await ctx.send(event))
        ctx.count(f"ab.{type(decision).__name__.lower()}")

    ctx.app.timer(max(1.0, s.tick_interval_s), name="streamgrpo.ab")(ab_tick)
