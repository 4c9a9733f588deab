"""Progress of a run, derived from its events (never from the services' internal state).

:class:`Progress` is a pure reducer: ``apply(event)`` for every event of interest, then ``line()``
for the live progress line, ``summary()`` for the report and ``plot(path)`` for the
reward-per-version figure. :class:`RunTracker` feeds it from the broker in a background thread,
through the project's one log follower (:class:`~streamgrpo.topics.follow.LogFollower`: group-less,
every partition, from the beginning, following).

What is not covered: exactness under duplicates beyond what event ids give (duplicates are
dropped by event id, remembered in a bounded :class:`~streamgrpo.topics.dedup.RecentIds`).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from streamgrpo.avro import records as R
from streamgrpo.config import KafkaSettings
from streamgrpo.topics.dedup import RecentIds

TOPICS = ("tasks", "rollouts", "rewards", "groups", "training-samples", "adapter-events")


@dataclass
class VersionStats:
    count: int = 0
    total: float = 0.0
    successes: int = 0

    @property
    def mean(self) -> float:
        return self.total / self.count if self.count else 0.0


@dataclass
class Progress:
    """Counts and curves of one run."""

    success_threshold: float = 0.5
    tasks: int = 0
    rollouts: int = 0
    groups: int = 0
    groups_training: int = 0
    samples: int = 0
    adapters: list[tuple[float, int, int, dict[str, float]]] = field(default_factory=list)  # (t, version, step, metrics)
    serving_version: int = 0
    per_version: dict[int, VersionStats] = field(default_factory=lambda: defaultdict(VersionStats))
    rewards: list[tuple[float, int, float]] = field(default_factory=list)  # (t, version, score)
    notes: list[str] = field(default_factory=list)
    _seen: RecentIds = field(default_factory=RecentIds)
    started: float = field(default_factory=time.time)

    def apply(self, event: R.Event, t: float | None = None) -> None:
        if self._seen.seen(event.event_id):
            return
        t = time.time() if t is None else t
        if isinstance(event, R.Task):
            self.tasks += 1
        elif isinstance(event, R.RolloutCompleted):
            self.rollouts += 1
            self.serving_version = max(self.serving_version, event.adapter_version)
        elif isinstance(event, R.Reward) and event.status is R.RewardStatus.OK:
            s = self.per_version[event.adapter_version]
            s.count += 1
            s.total += event.score
            s.successes += event.score >= self.success_threshold
            self.rewards.append((t, event.adapter_version, event.score))
        elif isinstance(event, R.GroupClosed):
            self.groups += 1
            self.groups_training += event.trains
        elif isinstance(event, R.TrainingSample):
            self.samples += 1
        elif isinstance(event, R.AdapterPublished):
            self.adapters.append((t, event.version, event.trainer_step, dict(event.metrics)))

    def line(self) -> str:
        rewards = " ".join(f"v{v}={s.mean:.2f}(n={s.count})" for v, s in sorted(self.per_version.items())) or "-"
        if self.adapters:
            _, version, step, metrics = self.adapters[-1]
            loss = metrics.get("loss")
            trainer = f"step {step} loss {loss:.4f}" if loss is not None else f"step {step}"
            adapters = f"adapters {len(self.adapters)} (latest v{version}, serving v{self.serving_version})"
        else:
            trainer, adapters = "waiting for samples", "adapters 0"
        return (f"tasks {self.tasks} | rollouts {self.rollouts} | groups {self.groups} ({self.groups_training} trained)"
                f" | samples {self.samples} | reward {rewards} | trainer {trainer} | {adapters}")

    def summary(self) -> dict[str, Any]:
        return {
            "tasks": self.tasks, "rollouts": self.rollouts, "groups": self.groups,
            "groups_training": self.groups_training, "training_samples": self.samples,
            "adapters_published": len(self.adapters), "latest_adapter": self.adapters[-1][1] if self.adapters else 0,
            "serving_version": self.serving_version,
            "per_version": {str(v): {"count": s.count, "mean_reward": s.mean,
                                     "success_rate": s.successes / s.count if s.count else 0.0}
                            for v, s in sorted(self.per_version.items())},
            "adapters": [{"version": v, "step": st, "metrics": m, "t": t - self.started}
                         for t, v, st, m in self.adapters],
            "notes": self.notes,
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
        versions = sorted(self.per_version)
        ax2.bar([f"v{v}" for v in versions], [self.per_version[v].mean for v in versions], color="tab:green")
        for i, v in enumerate(versions):
            ax2.text(i, self.per_version[v].mean, f"n={self.per_version[v].count}", ha="center", va="bottom", fontsize=8)
        ax2.set_ylim(0, 1.05)
        ax2.set_xlabel("adapter version that produced the rollout")
        ax2.set_ylabel("mean reward")
        ax2.set_title("mean reward per adapter version")
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)


class RunTracker:
    """Feeds a :class:`Progress` from the broker in a daemon thread."""

    def __init__(self, kafka: KafkaSettings, progress: Progress | None = None) -> None:
        self.kafka = kafka
        self.progress = progress or Progress()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="run-tracker", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        from streamgrpo.topics.follow import LogFollower, fold_events

        follower = LogFollower(self.kafka, TOPICS, fold_events(self.progress.apply), max_records=500)
        asyncio.run(follower.run(self._stop))  # records that do not decode are the services' business
