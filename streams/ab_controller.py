"""A/B controller: which adapter version serves a group, and when a canary is promoted or rolled back.

Pure core:
- :class:`AdapterState` folds ``adapter-events`` (AdapterPublished / Promoted / RolledBack) into the
  primary version, the canary (newest published version above primary, not rolled back) and the
  trainer's latest version. With ``canary_share == 0`` there is no canary: every published version
  becomes primary at once. Version 0 is the base model (no adapter yet).
- :func:`choose_version` gives a group the canary with probability ``canary_share`` (a deterministic
  hash of the group id, so a replay picks the same arm), else the primary.
- :func:`decide` compares mean group reward of the two arms once each has ``min_groups`` groups.

Thin agent: ``register(ctx)`` runs a timer that reads per-version group stats from the
:class:`~streamgrpo.streams.follower.LogFollower` (global view of ``groups`` and ``adapter-events``)
and publishes AdapterPromoted / AdapterRolledBack (ids derived from the canary version, so two
controllers deciding the same thing publish the same id). Run it on one worker (``--only ab``);
what is not covered: sequential testing / confidence bounds (the rule is a plain mean difference).
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass, field
from typing import Any

from streamgrpo.avro import records as R

log = logging.getLogger(__name__)


@dataclass
class AdapterState:
    primary: int = 0
    canary: int | None = None
    latest: int = 0
    rolled_back: set[int] = field(default_factory=set)

    def apply(self, event: R.Event, canary_share: float) -> None:
        if isinstance(event, R.AdapterPublished):
            self.latest = max(self.latest, event.version)
            if event.version in self.rolled_back or event.version <= self.primary:
                return
            if canary_share <= 0:
                self.primary = event.version
            elif self.canary is None or event.version > self.canary:
                self.canary = event.version
        elif isinstance(event, R.AdapterPromoted):
            self.primary = event.version
            if self.canary is not None and self.canary <= event.version:
                self.canary = None
        elif isinstance(event, R.AdapterRolledBack):
            self.rolled_back.add(event.version)
            if self.canary == event.version:
                self.canary = None


def choose_version(state: AdapterState, group_id: str, canary_share: float) -> int:
    """The adapter version of a whole group."""
    if state.canary is None or canary_share <= 0:
        return state.primary
    bucket = int.from_bytes(hashlib.sha256(group_id.encode()).digest()[:8], "big") / 2**64
    return state.canary if bucket < canary_share else state.primary


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


def decision_event(decision: Promote | Rollback, adapter: str, state: AdapterState,
                   primary: ArmStats, canary: ArmStats) -> R.Event:
    assert state.canary is not None
    metrics = {"primary_mean": primary.mean, "canary_mean": canary.mean,
               "primary_groups": float(primary.groups), "canary_groups": float(canary.groups)}
    if isinstance(decision, Promote):
        return R.AdapterPromoted(R.Envelope.new("streams", event_id=R.derived_id("ab-promote", adapter, state.canary)),
                                 adapter, state.canary, state.primary, decision.reason, metrics)
    return R.AdapterRolledBack(R.Envelope.new("streams", event_id=R.derived_id("ab-rollback", adapter, state.canary)),
                               adapter, state.canary, state.primary, decision.reason, metrics)


def register(ctx: Any) -> None:
    from streamgrpo.streams.follower import follower_for

    follower = follower_for(ctx)
    s = ctx.settings
    policy = ABPolicy(s.ab_min_groups, s.ab_min_gain, s.ab_max_loss)
    decided: set[int] = set()

    async def ab_tick() -> None:
        if not follower.caught_up.is_set():
            return
        state = follower.adapters
        if state.canary is None or state.canary in decided:
            return
        primary, canary = follower.arm(state.primary), follower.arm(state.canary)
        decision = decide(primary, canary, policy)
        if isinstance(decision, Wait):
            return
        event = decision_event(decision, s.adapter_name, state, primary, canary)
        log.info("A/B: %s version %d (%s)", type(decision).__name__, state.canary, decision.reason)
        decided.add(state.canary)
        await (await ctx.send(event))
        ctx.count(f"ab.{type(decision).__name__.lower()}")

    ctx.app.timer(max(1.0, s.tick_interval_s), name="streamgrpo.ab")(ab_tick)
