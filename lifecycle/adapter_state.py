"""The ``AdapterState`` of each version: the lifecycle fold and the live statistics, joined (pure).

:func:`adapter_states` turns a :class:`~streamgrpo.lifecycle.registry.Line` and a
:class:`~streamgrpo.lifecycle.stats.Stats` into one ``AdapterState`` per version (the base model,
version 0, included), as the A/B controller publishes them on the compacted ``adapter-registry``
topic and as ``streamgrpo adapters`` shows them when no controller has published yet:
status, parent, uri/sha256, trainer step, samples trained (its own lineage plus its ancestors'),
publication time, lineage, served groups, judge rewards (count, mean, success rate), latest held-out
evaluation, the last decision (reason, by whom) and ``metrics``: human rewards (apart), failure
rates, and for the canary the running test's statistics.

:func:`content_key` is what "changed" means for a republish (everything but the envelope and
``updated_at``). What is not covered: versions of other adapter names than the one asked for.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from streamgrpo.avro import records as R
from streamgrpo.lifecycle.registry import Line, ancestors, status
from streamgrpo.lifecycle.stats import Stats, VersionStats

SERVICE = "registry"


def samples_trained(line: Line, version: int) -> int:
    """TrainingSamples trained behind ``version``: its own and every ancestor's
    (:func:`streamgrpo.lifecycle.published.samples_trained` each)."""
    chain = [version, *ancestors(line, version)]
    return sum(line.announced[v].trained for v in chain if v in line.announced)


def _figures(s: VersionStats) -> dict[str, float]:
    out = {"human_rewards": float(s.human), "planner_actions": float(s.actions),
           "rollout_error_rate": s.rate("rollout_errors"), "judge_failure_rate": s.rate("judge_failures"),
           "parse_failure_rate": s.rate("parse_failures")}
    if s.human_mean is not None:
        out["human_reward_mean"] = s.human_mean
    return out


def adapter_state(line: Line, adapter_name: str, version: int, stats: Stats, now: datetime,
                  extra: Mapping[str, float] | None = None) -> R.AdapterState:
    ann = line.announced.get(version)
    s = stats.of(adapter_name, version)
    ev = s.evaluation
    last = (line.history.get(version) or (None,))[-1]
    return R.AdapterState(
        envelope=R.Envelope.new(SERVICE), adapter_name=adapter_name, version=version,
        status=status(line, version), updated_at=now,
        parent_version=ann.parent_version if ann else None, base_model=ann.base_model if ann else "",
        uri=ann.uri if ann else "", sha256=ann.sha256 if ann else "", trainer_step=ann.trainer_step if ann else 0,
        samples_trained=samples_trained(line, version), published_at=ann.published_at if ann else None,
        lineage=list(ann.lineage) if ann else [], groups=s.groups, reward_count=s.rewards,
        reward_mean=s.reward_mean, success_rate=s.success_rate,
        eval_accuracy=ev.accuracy if ev else None, eval_ci_low=ev.ci_low if ev else None,
        eval_ci_high=ev.ci_high if ev else None, eval_task_set=ev.task_set if ev else None,
        decision_reason=last.reason if last else "", decided_by=last.by if last else None,
        metrics={**_figures(s), **(extra or {})},
    )


def adapter_states(line: Line, adapter_name: str, stats: Stats, now: datetime,
                   extra: Mapping[int, Mapping[str, float]] | None = None) -> list[R.AdapterState]:
    """One state per announced version and the base model (version 0), ascending."""
    versions = sorted({0, *line.announced})
    return [adapter_state(line, adapter_name, v, stats, now, (extra or {}).get(v)) for v in versions]


def content_key(state: R.AdapterState) -> tuple[Any, ...]:
    """Everything a reader sees in a state except its envelope and ``updated_at``."""
    data = state.to_avro()
    return tuple((k, repr(v)) for k, v in sorted(data.items()) if k not in ("envelope", "updated_at"))
