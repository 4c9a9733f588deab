"""Progress of a run, derived from its events (never from the services' internal state).

:class:`Progress` is a pure reducer: ``apply(event)`` for every event of interest, then ``line()``
for the live progress line, ``summary()`` for the report and ``plot(path)`` for the
reward-per-version figure. :class:`RunTracker` feeds it from the broker in a background thread,
through the project's one log follower (:class:`~streamgrpo.topics.follow.LogFollower`: group-less,
every partition, from the beginning, following).

The adapter lifecycle (primary, canary, statuses, every A/B verdict and manual action) is the one
registry fold of ``adapter-events`` (:mod:`streamgrpo.lifecycle.registry`). Per adapter version number one
:class:`~streamgrpo.lifecycle.stats.VersionStats` folds the rollouts, the OK judge rewards and the closed
groups: the progress line's and the report's ``per_version`` figures (count of OK judge rewards, their mean
reward, success rate per judge reward as every other reader) and the collapse alarms (:mod:`streamgrpo.lifecycle.health`) read that one fold. Human
rewards (provenance ``human:<name>``) are counted apart and never enter it; ERROR judge rewards enter it as
failures (never as a score), as in the A/B view, :class:`~streamgrpo.lifecycle.stats.Stats`.

What is not covered: exactness under duplicates beyond what event ids give (duplicates are
dropped by event id, remembered in a bounded :class:`~streamgrpo.topics.dedup.RecentIds`).
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from streamgrpo.avro import records as R
from streamgrpo.config import KafkaSettings
from streamgrpo.lifecycle.health import alarms
from streamgrpo.lifecycle.liveness import Liveness
from streamgrpo.lifecycle.pacing import CONTROL_ARM
from streamgrpo.lifecycle.published import drops as trainer_drops
from streamgrpo.lifecycle.published import samples_trained
from streamgrpo.lifecycle.registry import AdapterRegistry, Line, status
from streamgrpo.lifecycle.stats import (
    SUCCESS_THRESHOLD,
    VersionStats,
    carries_signal,
    is_demonstration,
    is_human,
)
from streamgrpo.topics import catalog
from streamgrpo.topics.dedup import RecentIds

TOPICS = (catalog.TASKS, catalog.ROLLOUT_REQUESTS, catalog.ROLLOUTS, catalog.REWARDS, catalog.GROUPS, catalog.TRAINING_SAMPLES, catalog.ADAPTER_EVENTS, catalog.EVALUATIONS, catalog.DEAD_LETTERS)


@dataclass
class Demonstrations:
    """The warm start as the events tell it: demonstrations requested, executed, trained on, and dead-lettered by
    reason (``demonstration_failed`` / ``demonstration_wrong``), and the versions a warm-start step published."""

    requested: int = 0
    executed: int = 0
    trained: int = 0  # demonstration samples (TrainingSample.demo_source)
    rejected: dict[str, int] = field(default_factory=dict)
    warm_start_versions: list[int] = field(default_factory=list)

    def apply(self, event: R.Event) -> bool:
        """Fold ``event`` if it is a demonstration's (:func:`~streamgrpo.lifecycle.stats.is_demonstration`); True when
        it was (the policy's figures must not count it)."""
        if isinstance(event, R.AdapterPublished) and event.metrics.get("warm_start"):
            self.warm_start_versions.append(event.version)
        if not is_demonstration(event):
            return False
        self.requested += isinstance(event, R.RolloutRequest)
        self.executed += isinstance(event, R.RolloutCompleted)
        self.trained += isinstance(event, R.TrainingSample)
        if isinstance(event, R.DeadLetter):
            self.rejected[event.reason_code] = self.rejected.get(event.reason_code, 0) + 1
        return True

    def line(self) -> str:
        """``demos 298 executed, 296 trained, 2 rejected (demonstration_wrong 2) | warm start v1-v37``, or ''."""
        if not self.requested and not self.executed:
            return ""
        rejected = sum(self.rejected.values())
        why = f" ({', '.join(f'{k} {n}' for k, n in sorted(self.rejected.items()))})" if rejected else ""
        out = f"demos {self.executed}/{self.requested} executed, {self.trained} trained, {rejected} rejected{why}"
        if self.warm_start_versions:
            out += f" | warm start v{min(self.warm_start_versions)}-v{max(self.warm_start_versions)}"
        return out + " | "

    def as_dict(self) -> dict[str, Any]:
        return {"requested": self.requested, "executed": self.executed, "trained": self.trained,
                "rejected": dict(self.rejected), "warm_start_versions": list(self.warm_start_versions)}


@dataclass(frozen=True)
class VersionRewards:
    """One version's judge-reward figures as the progress line and the report show them (read from the fold)."""

    count: int  # OK judge rewards
    mean: float
    success_rate: float  # per judge reward (an ERROR reward fails): VersionStats.success_rate, as every reader


@dataclass
class Progress:
    """Counts and curves of one run."""

    success_threshold: float = SUCCESS_THRESHOLD  # run: [streams] success_threshold
    tasks: int = 0
    rollouts: int = 0
    groups: int = 0
    groups_training: int = 0
    groups_control_arm: int = 0  # A/B control-arm groups judged for the comparison only (reason control_arm)
    rollouts_control_arm: int = 0  # their rewarded rollouts: no sample, so neither trained nor dropped
    samples: int = 0
    adapters: list[tuple[float, int, int, dict[str, float]]] = field(default_factory=list)  # (t, version, step, metrics)
    dropped: dict[str, float] = field(default_factory=dict)  # records the trainer did not train, by reason (all versions)
    serving_version: int = 0
    versions: dict[int, VersionStats] = field(default_factory=lambda: defaultdict(VersionStats))  # the one fold
    rewards: list[tuple[float, int, float]] = field(default_factory=list)  # (t, version, score)
    evaluations: list[R.EvaluationCompleted] = field(default_factory=list)
    published_at: dict[int, datetime] = field(default_factory=dict)  # version -> AdapterPublished event time
    first_served: dict[int, datetime] = field(default_factory=dict)  # version -> first RolloutCompleted on it
    trained: dict[int, int] = field(default_factory=dict)  # version -> samples it trained (published.samples_trained)
    notes: list[str] = field(default_factory=list)
    canary_share: float = 0.5  # [loop] canary_share: how the registry fold derives primary and canary
    registry: AdapterRegistry = field(init=False)  # the one fold of adapter-events
    human_rewards: int = 0  # rewards with provenance human:<name>, kept apart from the judge's
    heldout_change: dict[str, Any] | None = None  # the final evaluation's paired difference, last vs base
    demonstrations: Demonstrations = field(default_factory=Demonstrations)  # the warm start, kept apart
    #: the final evaluation's gains apart: ``warm_start`` (its last version vs base: demonstrations alone) and
    #: ``grpo_on_warm_start`` (the last adapter vs that version), when a warm start published versions
    heldout_parts: dict[str, Any] | None = None
    liveness: Liveness = field(default_factory=Liveness)  # stalls: [loop] liveness_s (run: progress_for)
    _seen: RecentIds = field(default_factory=RecentIds)
    _probes: RecentIds = field(default_factory=RecentIds)  # group ids whose requests carry metadata["probe"]
    started: float = field(default_factory=time.time)

    def __post_init__(self) -> None:
        self.registry = AdapterRegistry(self.canary_share)

    def apply(self, event: R.Event, t: float | None = None) -> None:
        if self._seen.seen(event.event_id):
            return
        t = time.time() if t is None else t
        self.liveness.apply(event)  # demonstrations are work the loop must move too
        if self.demonstrations.apply(event):  # the demonstrator's facts, not the policy's: kept apart
            return
        if isinstance(event, R.Task):
            self.tasks += 1
        elif isinstance(event, R.RolloutCompleted):
            self.rollouts += 1
            self.serving_version = max(self.serving_version, event.adapter_version)
            v, when = event.adapter_version, event.envelope.event_time
            if v not in self.first_served or when < self.first_served[v]:
                self.first_served[v] = when
            self.versions[v].add(event)
        elif isinstance(event, R.Reward) and is_human(event):
            self.human_rewards += 1
        elif isinstance(event, R.Reward):  # a judge's, OK or ERROR (an ERROR reward is a failure, never a score)
            self.versions[event.adapter_version].add(event, self.success_threshold)
            if event.status is R.RewardStatus.OK:
                self.rewards.append((t, event.adapter_version, event.score))
        elif isinstance(event, R.RolloutRequest):
            if "probe" in event.metadata and event.envelope.group_id:
                self._probes.add(event.envelope.group_id)
        elif isinstance(event, R.GroupClosed):
            self.groups += 1
            self.groups_training += event.trains
            if event.reason == CONTROL_ARM:
                self.groups_control_arm += 1
                self.rollouts_control_arm += event.received
            probe = event.envelope.group_id in self._probes
            self.versions[event.adapter_version].add_group(carries_signal(event), probe=probe)
        elif isinstance(event, R.TrainingSample):
            self.samples += 1
        elif isinstance(event, R.EvaluationCompleted):
            self.evaluations.append(event)
        if isinstance(event, R.AdapterPublished):
            self.adapters.append((t, event.version, event.trainer_step, dict(event.metrics)))
            for reason, n in trainer_drops(event).items():
                self.dropped[reason] = self.dropped.get(reason, 0.0) + n
            self.published_at[event.version] = event.envelope.event_time
            self.trained[event.version] = samples_trained(event)
        self.registry.apply(event)  # lifecycle events only (published, promoted, rolled back, verdicts, approvals)

    @property
    def per_version(self) -> dict[int, VersionRewards]:
        """The judge-reward figures of every version with an OK judge reward, ascending."""
        return {v: VersionRewards(s.ok, s.reward_mean or 0.0, s.success_rate or 0.0)
                for v, s in sorted(self.versions.items()) if s.ok}

    def line(self) -> str:
        rewards = " ".join(f"v{v}={s.mean:.2f}(n={s.count})" for v, s in self.per_version.items()) or "-"
        if self.adapters:
            _, version, step, metrics = self.adapters[-1]
            loss = metrics.get("loss")
            trainer = f"step {step} loss {loss:.4f}" if loss is not None else f"step {step}"
            line = self.lifecycle_line()
            adapters = (f"adapters {len(self.adapters)} (latest v{version}, serving v{self.serving_version}, primary "
                        f"v{line.primary}, canary {'v' + str(line.canary) if line.canary is not None else '-'})")
        else:
            trainer, adapters = "waiting for samples", "adapters 0"
        warnings = [f"STALLED: {s}" for s in self.stalls()] + [f"ALARM: {a}" for a in self.alarms()]
        alarm = f" | {warnings[0]}" if warnings else ""
        control = f", {self.groups_control_arm} A/B control only" if self.groups_control_arm else ""
        return (f"{self.demonstrations.line()}tasks {self.tasks} | rollouts {self.rollouts} | groups {self.groups} "
                f"({self.groups_training} trained"
                f"{control})"
                f" | samples {self.samples} | reward {rewards} | trainer {trainer} | {adapters}"
                f" | held-out {self.heldout_line()}{alarm}")

    def alarms(self) -> list[str]:
        """Collapse alarms over the versions served so far (:mod:`streamgrpo.lifecycle.health`)."""
        return alarms(self.versions)

    def stalls(self, now: float | None = None) -> list[str]:
        """What has not moved for the liveness bound (:mod:`streamgrpo.lifecycle.liveness`); every stall raised is
        kept in ``liveness.seen`` for the report."""
        return self.liveness.stalls(time.time() if now is None else now)

    def lifecycle_line(self) -> Line:
        names = {a for a in self.registry.state.lines}
        return self.registry.line(sorted(names)[0]) if names else self.registry.line("planner")

    def lifecycle(self) -> dict[str, Any]:
        """Primary, canary, every version's status and every decision (A/B verdicts, manual actions)."""
        line = self.lifecycle_line()
        decisions = [{"version": v, "kind": d.kind, "by": d.by, "reason": d.reason, "t": d.at.timestamp() - self.started,
                      **{k: d.metrics[k] for k in ("canary_groups", "control_groups", "p_value") if k in d.metrics}}
                     for v, history in line.history.items() for d in history if d.kind != "published"]
        return {"primary": line.primary, "canary": line.canary, "human_rewards": self.human_rewards,
                "statuses": {str(v): status(line, v).value for v in sorted({0, *line.announced})},
                "decisions": sorted(decisions, key=lambda d: d["t"])}

    def heldout_line(self) -> str:
        """Latest in-loop evaluation per version: ``v0 0.19 v3 0.31`` (the last 4 versions)."""
        latest = {e.adapter_version: e for e in self.evaluations if e.trigger == "run-evaluator"}
        if not latest:
            return "-"
        return " ".join(f"v{v} {e.accuracy:.2f}" for v, e in sorted(latest.items())[-4:])

    def loop_closure(self) -> dict[str, Any]:
        """How fast published adapters serve: seconds and trainer steps from AdapterPublished to the first
        rollout completed on it; versions never served (a warm-start version, published while only demonstrations
        ran, is counted apart: ``warm_start_versions``); samples the trainer dropped as stale (and dropped for
        any reason, by reason: ``duplicate`` counts redelivered samples); the A/B control arm's rollouts judged for
        the comparison only (no sample: outside the stale share's denominator, so counted here)."""
        delays, steps = [], []
        warm = set(self.demonstrations.warm_start_versions)  # trained on demonstrations: no policy rollout is owed
        for v, published in sorted(self.published_at.items()):
            served = self.first_served.get(v)
            if served is None:
                continue
            delays.append((served - published).total_seconds())
            steps.append(sum(1 for w, t in self.published_at.items() if w > v and t < served))
        dropped = {reason: n for reason, n in self.dropped.items() if n}
        stale = dropped.get("stale", 0.0)
        trained = float(sum(self.trained.values()))
        return {
            "versions_published": len(self.published_at), "versions_served": len(delays),
            "never_served": sorted(v for v in self.published_at if v not in self.first_served and v not in warm),
            "warm_start_versions": len(warm),
            "publish_to_first_rollout_s": _percentiles(delays),
            "trainer_steps_to_first_rollout": {"max": max(steps) if steps else None, **_percentiles(steps)},
            "samples_trained": trained, "samples_dropped_stale": stale, "samples_dropped": dropped,
            "stale_share": stale / (stale + trained) if stale + trained else 0.0,
            "control_arm_groups": self.groups_control_arm, "control_arm_rollouts": self.rollouts_control_arm,
        }

    def summary(self) -> dict[str, Any]:
        return {
            "tasks": self.tasks, "rollouts": self.rollouts, "groups": self.groups,
            "groups_training": self.groups_training, "training_samples": self.samples,
            "adapters_published": len(self.adapters), "latest_adapter": self.adapters[-1][1] if self.adapters else 0,
            "serving_version": self.serving_version,
            "per_version": {str(v): {"count": s.count, "mean_reward": s.mean, "success_rate": s.success_rate}
                            for v, s in self.per_version.items()},
            "adapters": [{"version": v, "step": st, "metrics": m, "t": t - self.started}
                         for t, v, st, m in self.adapters],
            "loop": self.loop_closure(),
            "lifecycle": self.lifecycle(),
            "evaluations": [{"version": e.adapter_version, "accuracy": e.accuracy, "ci_low": e.ci_low,
                             "ci_high": e.ci_high, "tasks": e.tasks, "task_set": e.task_set, "trigger": e.trigger,
                             "answered_rate": e.answered_rate, "parse_failure_rate": e.parse_failure_rate,
                             "t": e.envelope.event_time.timestamp() - self.started}
                            for e in self.evaluations],
            "notes": self.notes,
            "heldout_change": self.heldout_change,
            "demonstrations": self.demonstrations.as_dict(),
            "heldout_parts": self.heldout_parts,
            "health": {"per_version": {str(v): s.as_dict() for v, s in sorted(self.versions.items())},
                       "alarms": self.alarms(), "stalls": list(self.liveness.seen),
                       "max_lora_b": {str(v): m["max_lora_b"] for _, v, _, m in self.adapters if "max_lora_b" in m}},
        }

    def plot(self, path: Path) -> None:
        """Two panels: running mean reward over time with adapter publications; mean reward per version."""
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
        if self.rewards:
            t0 = self.rewards[0][0]
            xs = [(t - t0) / 60 for t, _, _ in self.rewards]
            window = max(1, min(32, len(self.rewards) // 5 or 1))
            scores = [s for _, _, s in self.rewards]
            running = [sum(scores[max(0, i - window + 1): i + 1]) / len(scores[max(0, i - window + 1): i + 1])
                       for i in range(len(scores))]
            ax1.plot(xs, running, color="tab:blue", label=f"running mean reward (last {window})")
            for t, v, _, _ in self.adapters:
                ax1.axvline((t - t0) / 60, color="tab:gray", ls=":", lw=1)
                ax1.text((t - t0) / 60, 1.0, f"v{v}", fontsize=7, rotation=90, va="top")
            ax1.set_ylim(-0.05, 1.05)
        ax1.set_xlabel("minutes since first reward")
        ax1.set_ylabel("reward")
        ax1.set_title("reward over time (dotted: adapter published)")
        ax1.legend(loc="lower right", fontsize=8)
        per_version = self.per_version
        ax2.bar([f"v{v}" for v in per_version], [s.mean for s in per_version.values()], color="tab:green")
        for i, s in enumerate(per_version.values()):
            ax2.text(i, s.mean, f"n={s.count}", ha="center", va="bottom", fontsize=8)
        ax2.set_ylim(0, 1.05)
        ax2.set_xlabel("adapter version that produced the rollout")
        ax2.set_ylabel("mean reward")
        ax2.set_title("mean reward per adapter version")
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)


def lifecycle_lines(lifecycle: dict[str, Any]) -> list[str]:
    """The report's adapter lifecycle section (markdown)."""
    canary = lifecycle["canary"]
    out = ["## Adapter lifecycle (A/B test, rollbacks, approvals)", "",
           f"- primary v{lifecycle['primary']}, canary {'v' + str(canary) if canary is not None else '-'}; human "
           f"rewards {lifecycle['human_rewards']} (kept apart from the judge's)",
           "- statuses: " + ", ".join(f"v{v} {st}" for v, st in lifecycle["statuses"].items()), ""]
    if lifecycle["decisions"]:
        out += ["| t (s) | version | decision | by | reason |", "|---|---|---|---|---|"]
        out += [f"| {d['t']:.0f} | v{d['version']} | {d['kind']} | {d['by']} | {d['reason'][:160]} |"
                for d in lifecycle["decisions"]]
    else:
        out.append("- no lifecycle decision during the run")
    return out + [""]


def _percentiles(values: Sequence[float]) -> dict[str, float | None]:
    if not values:
        return {"p50": None, "p95": None, "n": 0}
    ordered = sorted(values)

    def at(q: float) -> float:
        return float(ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))])

    return {"p50": at(0.5), "p95": at(0.95), "n": len(ordered)}


def plot_heldout(evaluations: list[Any], started: float, path: Path) -> bool:
    """Held-out accuracy with 95% intervals, per adapter version and over wall time; False when none."""
    points = sorted(((e.adapter_version, e) for e in evaluations), key=lambda p: p[0])
    if not points:
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    for trigger, marker, colour in (("run-evaluator", "o", "tab:purple"), ("run-final", "s", "tab:red")):
        chosen = [e for _, e in points if e.trigger == trigger]
        if not chosen:
            continue
        label = {"run-evaluator": "in-loop sample", "run-final": "full held-out split (end of run)"}[trigger]
        xs = [e.adapter_version for e in chosen]
        ys = [e.accuracy for e in chosen]
        err = [[y - e.ci_low for y, e in zip(ys, chosen, strict=True)], [e.ci_high - y for y, e in zip(ys, chosen, strict=True)]]
        ax1.errorbar(xs, ys, yerr=err, fmt=marker + "-", color=colour, capsize=3, label=f"{label} (n={chosen[0].tasks})")
        ts = [(e.envelope.event_time.timestamp() - started) / 60 for e in chosen]
        ax2.errorbar(ts, ys, yerr=err, fmt=marker, color=colour, capsize=3, label=label)
    ax1.set_xlabel("adapter version (0 = base model)")
    ax2.set_xlabel("minutes since the run started")
    for ax in (ax1, ax2):
        ax.set_ylabel("held-out accuracy (correctness only, greedy)")
        ax.set_ylim(-0.02, 1.02)
        ax.legend(loc="upper left", fontsize=8)
    ax1.set_title("held-out accuracy per adapter version (95% CI)")
    ax2.set_title("held-out accuracy over time")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


class RunTracker:
    """Feeds a :class:`Progress` from the broker in a daemon thread."""

    def __init__(self, kafka: KafkaSettings, progress: Progress | None = None) -> None:
        from streamgrpo.topics.follow import FollowerThread, fold_events

        self.progress = progress or Progress()
        # records that do not decode are the services' business
        self.follower = FollowerThread(kafka, TOPICS, fold_events(self.progress.apply), name="run-tracker",
                                       max_records=500)

    def start(self) -> None:
        self.follower.start()

    def stop(self) -> None:
        self.follower.close(timeout_s=10)
