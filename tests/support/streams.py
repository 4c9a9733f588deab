"""Helpers for tests, benchmarks and demos of the stream processors (no Faust import).

- :func:`synthetic_group` builds the events one group's rollouts would produce (PlannerActions with
  a chosen number of turns, RolloutCompleted, Reward) with the ids the fan-out would assign.
- :class:`WorkerProcess` runs ``streamgrpo streams`` in a subprocess (started and stopped by pid).

What is not covered: anything the product depends on; nothing in the worker imports this module.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from streamgrpo.avro import ids
from streamgrpo.avro import records as R
from streamgrpo.config import KafkaSettings
from streamgrpo.topics.received import Received


@dataclass
class SyntheticGroup:
    task_id: str
    group_id: str
    rollout_ids: list[str]
    rewards: list[R.Reward] = field(default_factory=list)
    actions: list[R.PlannerAction] = field(default_factory=list)
    completions: list[R.RolloutCompleted] = field(default_factory=list)

    def events(self) -> list[R.Event]:
        """Actions, then completions, then rewards (the order the real services produce them in)."""
        return [*self.actions, *self.completions, *self.rewards]


def synthetic_group(task_id: str, scores: Sequence[float | None], turns: Sequence[int] | None = None,
                    version: int = 0, errors: Sequence[int] = (), group_size: int | None = None) -> SyntheticGroup:
    """A group whose rollout ``i`` has reward ``scores[i]`` (``None``: the rollout never reports) and
    ``turns[i]`` planner turns; rollouts listed in ``errors`` get an ERROR reward."""
    n = group_size or len(scores)
    turns = list(turns or [1 + i % 3 for i in range(len(scores))])
    g = ids.group_id(task_id)
    out = SyntheticGroup(task_id, g, [ids.rollout_id(g, i) for i in range(n)])
    for i, score in enumerate(scores):
        rid = out.rollout_ids[i]
        for t in range(1, turns[i] + 1):
            out.actions.append(R.PlannerAction(
                envelope=R.Envelope.new("rollout", event_id=ids.derived_id("action", rid, t), task_id=task_id,
                                        group_id=g, rollout_id=rid, turn=t),
                prompt_token_ids=[i, t, 1, 2], action_text=f"step {t}", action_token_ids=[100 + t, i],
                behaviour_logprobs=[-0.1 * t, -0.2], adapter_name="planner", adapter_version=version,
                sampling=R.SamplingParams(), parse_status=R.ParseStatus.STRICT, prompt_hash="h", latency_ms=1,
                is_final=t == turns[i]))
        if score is None:
            continue
        env = dict(task_id=task_id, group_id=g, rollout_id=rid)
        out.completions.append(R.RolloutCompleted(
            envelope=R.Envelope.new("rollout", event_id=ids.derived_id("completed", rid), **env), question="q",
            source="synthetic", final_answer="a", turns=turns[i], status=R.RolloutStatus.ANSWERED, group_size=n,
            adapter_name="planner", adapter_version=version, duration_ms=1))
        out.rewards.append(R.Reward(
            envelope=R.Envelope.new("judge", event_id=ids.derived_id("reward", rid), **env), score=float(score),
            status=R.RewardStatus.ERROR if i in errors else R.RewardStatus.OK, judge=R.JudgeInfo("synthetic", "h"),
            group_size=n, adapter_name="planner", adapter_version=version, turns=turns[i],
            rollout_status=R.RolloutStatus.ANSWERED, tool_calls={"calculator": 1}))
    return out


class WorkerProcess:
    """``streamgrpo streams`` in a subprocess; stop() sends SIGTERM, kill() SIGKILL (by pid)."""

    def __init__(self, kafka: KafkaSettings, only: str, data_dir: Path, settings: Mapping[str, object] | None = None,
                 log_path: Path | None = None) -> None:
        env = dict(os.environ)
        from streamgrpo.streams.config import StreamsSettings

        for k, v in (settings or {}).items():
            section = "LOOP" if k in StreamsSettings.SHARED_FIELDS else "STREAMS"
            env[f"STREAMGRPO_{section}__{k.upper()}"] = str(v)
        env["STREAMGRPO_STREAMS__DATA_DIR"] = str(data_dir)
        env.setdefault("STREAMGRPO_STREAMS__REBALANCE_TIMEOUT_S", "3")
        cmd = [sys.executable, "-m", "streamgrpo.cli", "streams", "--only", only, "--bootstrap", str(kafka.bootstrap),
               "--topic-prefix", kafka.topic_prefix]
        self.log_path = log_path or Path(data_dir) / "worker.log"
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - closed in stop()/kill()
        self.proc = subprocess.Popen(cmd, env=env, stdout=self._log, stderr=subprocess.STDOUT)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self, timeout_s: float = 30.0) -> int | None:
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._log.close()
        return self.proc.returncode

    def kill(self) -> None:
        if self.alive():
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)
        self._log.close()

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


def wait_for_records(kafka: KafkaSettings, topic: str, n: int, timeout_s: float = 90.0) -> list[Received]:
    """``topic``'s records once there are at least ``n`` (or what there is after ``timeout_s``: the caller's
    assertions say what is missing)."""
    from streamgrpo.topics.follow import read_topic

    deadline = time.monotonic() + timeout_s
    got: list[Received] = []
    while time.monotonic() < deadline:
        got = read_topic(kafka, topic, timeout_s=10)
        if len(got) >= n:
            return got
        time.sleep(0.5)
    return got
