"""Reward metrics per adapter version in tumbling windows (+ Prometheus), as a pure aggregator + thin agent.

:class:`RewardWindows` buckets Rewards by (adapter name, adapter version, window start) using the
reward's ``event_time``; :meth:`RewardWindows.flush` returns a RewardMetrics for every window that
ended at least ``grace_s`` ago: count (judge rewards, OK and ERROR), mean reward and success rate as the one
definition of a version's figures has them (:class:`~streamgrpo.lifecycle.stats.VersionStats`: the mean of
the OK scores, 0.0 when the window has none; successes per judge reward, an ERROR reward a failure), mean
turns and summed tool calls.

The agent consumes ``rewards`` (dedup by event id: :class:`~streamgrpo.topics.dedup.RecentIds`), a timer flushes closed
windows to ``reward-metrics``. In a worker that also runs the window, the metrics have no Faust agent of their
own: the window hands them each Reward it decodes (``StreamsContext.on_reward``). Two agents on one topic made a
rebalance hang: Faust hands both channels the same event, its ``flow_control.clear()`` drops the window's queued
copy unacknowledged, and ``wait_empty`` waits for that message to leave its weak set, which it never does while
the metrics agent's stream still holds the copy it had just processed (seen twice after a broker restart, each
time on ``rewards``). Each judged reward is observed in ``streamgrpo_reward_score{arm}`` and each
flushed window sets ``streamgrpo_reward_mean{arm}`` / ``streamgrpo_reward_success_ratio{arm}`` in the
process's shared metrics (:mod:`streamgrpo.metrics`; the endpoint is the streams worker's
``metrics_port``). The arm is the A/B role of the version that served (canary or primary), never the
version itself (an unbounded label); ``reward-metrics`` keeps the per-version figures.

Human rewards (provenance ``human:<name>``, ``streamgrpo label``) are kept apart: they are counted
(``metrics.human_rewards``) and never enter a window; the A/B registry reports them separately.

What is not covered: windows are per worker process and in memory. With several workers each one
reports over its own partitions (merge downstream, weighted by ``count``: exact for the success rate and the
turns, for the mean reward only where the windows hold no ERROR reward, since the event does not carry the
OK count); a crash loses the open windows' partial sums. Metrics are observability, never inputs to training.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timezone

from streamgrpo import metrics
from streamgrpo.avro import records as R
from streamgrpo.lifecycle.stats import VersionStats, is_human
from streamgrpo.streams.app import FaustStream, StreamsContext
from streamgrpo.topics import catalog
from streamgrpo.topics.dedup import RecentIds

log = logging.getLogger(__name__)


@dataclass
class _Bucket:
    stats: VersionStats = field(default_factory=VersionStats)
    turns_sum: int = 0
    tools: Counter[str] = field(default_factory=Counter)


@dataclass
class RewardWindows:
    window_s: float
    success_threshold: float
    grace_s: float = 2.0
    buckets: dict[tuple[str, int, float], _Bucket] = field(default_factory=dict)
    seen: RecentIds = field(default_factory=RecentIds)

    def add(self, reward: R.Reward) -> bool:
        """Add a judge reward to its window; False for a duplicate (an event id seen recently), a person's, or a
        demonstration's (the demonstrator's answer, not the version's: ``Reward.demo_source``)."""
        if is_human(reward) or reward.demo_source is not None or self.seen.seen(reward.event_id):
            return False
        t = reward.envelope.event_time.timestamp()
        start = t - (t % self.window_s)
        b = self.buckets.setdefault((reward.adapter_name, int(reward.adapter_version), start), _Bucket())
        b.stats.add(reward, self.success_threshold)
        b.turns_sum += reward.turns
        b.tools.update(reward.tool_calls)
        return True

    def flush(self, now: float) -> list[R.RewardMetrics]:
        """RewardMetrics of every window with ``end + grace <= now`` (removed from the open set)."""
        out = []
        for key in sorted(k for k in self.buckets if k[2] + self.window_s + self.grace_s <= now):
            name, version, start = key
            b = self.buckets.pop(key)
            s = b.stats
            out.append(R.RewardMetrics(
                envelope=R.Envelope.new("streams"), adapter_name=name, adapter_version=version,
                window_start=_dt(start), window_end=_dt(start + self.window_s), count=s.rewards,
                mean_reward=s.reward_mean or 0.0, success_rate=s.success_rate or 0.0,
                mean_turns=b.turns_sum / s.rewards, tool_calls=dict(b.tools),
            ))
        return out


def _dt(ts: float) -> datetime:
    return datetime.fromtimestamp(round(ts, 3), timezone.utc)


def arm_of(ctx: StreamsContext, version: int) -> str:
    """``"canary"`` when ``version`` is the canary of the A/B test this worker follows, else ``"primary"``."""
    line = ctx.follower.view.adapters(ctx.settings.adapter_name) if ctx.follower is not None else None
    return "canary" if line is not None and line.canary == version else "primary"


def register(ctx: StreamsContext) -> None:
    import time

    s = ctx.settings
    windows = RewardWindows(s.metrics_window_s, s.success_threshold)

    def on_reward(reward: R.Reward) -> None:
        if is_human(reward):
            ctx.count("metrics.human_rewards")  # kept apart: reward metrics are the judge's
        elif windows.add(reward):
            metrics.current().observe(metrics.REWARD_SCORE, reward.score, arm=arm_of(ctx, reward.adapter_version))

    async def metrics_agent(stream: FaustStream) -> None:
        async for ev in stream.events():
            reward = await ctx.decode(ev, (R.Reward,))
            if isinstance(reward, R.Reward):
                on_reward(reward)

    async def flush_metrics() -> None:
        for m in windows.flush(time.time()):
            arm = arm_of(ctx, m.adapter_version)
            metrics.current().set(metrics.REWARD_MEAN, m.mean_reward, arm=arm)
            metrics.current().set(metrics.REWARD_SUCCESS, m.success_rate, arm=arm)
            await ctx.send(m)
            ctx.count("metrics.windows")

    if "window" in ctx.agents:  # one Faust channel per topic (module docstring): the window feeds on_reward
        ctx.on_reward = on_reward
    else:
        ctx.app.agent(ctx.topics[catalog.REWARDS], name="streamgrpo.metrics")(metrics_agent)
    ctx.app.timer(min(1.0, s.metrics_window_s), name="streamgrpo.metrics.flush")(flush_metrics)
    ctx.reward_windows = windows
