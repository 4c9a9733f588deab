"""The agent behind ``streamgrpo serve``: ``solve``, ``adapters`` and ``feedback`` as plain methods.

``solve(question)`` builds a Task (source ``mcp:<client>``, group size 1, deterministic group and rollout ids
derived from the task id as the fan-out derives them) and runs its one rollout with
:meth:`~streamgrpo.rollout.worker.RolloutWorker.run_group_sync` -- the worker's own path: a rolled-back
version serves the primary instead, a version > 0 is waited for (``adapter_wait_s``), verified and pinned.
The version is the PRIMARY one (as the adapter follower's registry says) unless the call pins
``planner@vN``. With a broker, the Task and every rollout event are produced and flushed before the answer
returns; ``feedback(rollout_id, score, comment)`` then produces a human Reward (judge ``human:mcp:<client>``).

Without a broker (``recorder`` None) the base model (v0) answers, nothing is recorded, and the answer says so.

What is not covered: the comment of ``feedback`` travels only in the reply and the log (the Reward schema has
no free-text field); the Task also reaches the streams fan-out, which runs it as a training group of its
own (its rollout ids are the ones served here, so downstream dedup by event id keeps the first copy).
"""

from __future__ import annotations

import logging
import re
import uuid
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Protocol

from streamgrpo.avro import ids
from streamgrpo.avro import records as R
from streamgrpo.errors import StreamGRPOError
from streamgrpo.rollout.config import RolloutConfig
from streamgrpo.rollout.loop import LoopContext

log = logging.getLogger(__name__)
_PIN = re.compile(r"^(?:(?P<name>[A-Za-z0-9_.-]+)@)?v?(?P<version>\d+)$")
NOT_RECORDED = "no broker: this call was answered by the base model (v0) and is not recorded as events"


class ServeError(StreamGRPOError):
    """A serve call cannot be done (bad pin, unknown rollout, no broker for feedback)."""


class Producer(Protocol):
    def send(self, event: R.Event) -> None: ...
    def flush(self) -> None: ...


@dataclass
class _Sink:
    """What the worker's group runner writes to: kept for the reply, forwarded to the producer when there is one."""

    producer: Producer | None
    events: list[R.Event] = field(default_factory=list)

    def send(self, event: R.Event) -> None:
        self.events.append(event)
        if self.producer is not None:
            self.producer.send(event)

    def flush(self) -> None:
        if self.producer is not None:
            self.producer.flush()


def parse_pin(pin: str | None, adapter_name: str) -> int | None:
    """``planner@v3`` / ``v3`` / ``3`` -> 3; None for no pin; ServeError for another adapter or bad text."""
    if pin is None or not pin.strip():
        return None
    m = _PIN.match(pin.strip())
    if m is None or (m["name"] not in (None, adapter_name)):
        raise ServeError(f"version {pin!r}: give {adapter_name}@v<N> (this server serves {adapter_name!r})")
    return int(m["version"])


def trace(events: list[R.Event], clip: int = 160) -> list[str]:
    """One short line per step of a rollout's events."""
    out = []
    for e in events:
        if isinstance(e, R.ToolObservation):
            result = f"ERROR {e.error}" if e.error else e.output
            out.append(f"turn {e.envelope.turn}: {e.tool}({e.command[:80]}) -> {' '.join(result.split())[:clip]}")
        elif isinstance(e, R.RolloutCompleted):
            out.append(f"{e.status.value} after {e.turns} turn(s)" + (f": {e.error[:clip]}" if e.error else ""))
    return out


class ServeAgent:
    """``solve`` / ``adapters`` / ``feedback`` (see the module docstring). Thread-safe: calls may overlap."""

    def __init__(self, cfg: RolloutConfig, ctx: LoopContext, *, producer: Producer | None = None,
                 follower: Any = None, kafka: Any = None) -> None:
        self.cfg, self.ctx, self.producer, self.follower, self.kafka = cfg, ctx, producer, follower, kafka
        self._done: OrderedDict[str, R.RolloutCompleted] = OrderedDict()

    @property
    def recording(self) -> bool:
        return self.producer is not None

    def primary(self) -> int:
        return int(self.follower.primary(self.cfg.adapter_name)) if self.follower is not None else 0

    def solve(self, question: str, client: str, version: str | None = None) -> dict[str, Any]:
        from streamgrpo.topics.sdk import make_task

        pinned = parse_pin(version, self.cfg.adapter_name)
        asked = self.primary() if pinned is None else pinned
        task = make_task(question, source=f"mcp:{client}", group_size=1, service="mcp",
                         metadata={"served_by": "mcp", "client": client}, task_id=str(uuid.uuid4()))
        task_id = str(task.envelope.task_id)
        group = ids.group_id(task_id, 0)
        rollout = ids.rollout_id(group, 0)
        sampling = R.SamplingParams(temperature=self.cfg.temperature, top_p=self.cfg.top_p,
                                    max_new_tokens=self.cfg.max_new_tokens, seed=self.cfg.seed)
        request = R.RolloutRequest(
            envelope=R.Envelope.new("mcp", event_id=ids.request_event_id(rollout), task_id=task_id, group_id=group,
                                    rollout_id=rollout),
            question=task.question, source=task.source, rollout_index=0, group_size=1,
            adapter_name=self.cfg.adapter_name, adapter_version=asked, max_turns=self.cfg.max_turns,
            sampling=sampling, metadata=dict(task.metadata))
        sink = _Sink(self.producer)
        sink.send(task)
        results = self._run(request, sink)
        sink.flush()
        done = next(e for e in sink.events if isinstance(e, R.RolloutCompleted))
        self._remember(done)
        result = results[0]
        reply: dict[str, Any] = {
            "answer": result.final_answer, "status": result.status.value, "rollout_id": rollout,
            "adapter": f"{self.cfg.adapter_name}@v{result.adapter_version}", "version": result.adapter_version,
            "trace": trace(sink.events), "recorded": self.recording,
        }
        if result.error:
            reply["error"] = result.error
        if not self.recording:
            reply["note"] = NOT_RECORDED
        return reply

    def _run(self, request: R.RolloutRequest, sink: _Sink) -> list[Any]:
        from streamgrpo.rollout.worker import RolloutWorker

        worker = RolloutWorker(self.cfg, self.kafka, self.ctx, sink, self.follower)  # per call: its own sink
        return worker.run_group_sync([request])

    def _remember(self, done: R.RolloutCompleted) -> None:
        self._done[str(done.envelope.rollout_id)] = done
        while len(self._done) > 10_000:
            self._done.popitem(last=False)

    def adapters(self) -> list[dict[str, Any]]:
        """Versions and their lifecycle status; without a broker only the base model."""
        if self.kafka is None:
            return [{"version": 0, "status": "base model", "serving": True, "note": NOT_RECORDED}]
        from datetime import datetime, timezone

        from streamgrpo.cli.adapters import load_view, row

        view = load_view(self.kafka, self.cfg.adapter_name, self.cfg.canary_share)
        now = datetime.now(timezone.utc)
        primary = self.primary()
        return [{**row(view.state(v, now), now), "version": v, "serving": v == primary} for v in view.versions]

    def feedback(self, rollout_id: str, score: float, comment: str, client: str) -> dict[str, Any]:
        """A human Reward (judge ``human:mcp:<client>``) for a rollout this server answered (or one on ``rollouts``)."""
        from streamgrpo.topics.sdk import Label, human_reward, label_rollouts

        if self.producer is None or self.kafka is None:
            raise ServeError(f"feedback cannot be recorded: {NOT_RECORDED}")
        by = f"mcp:{client}"
        done = self._done.get(rollout_id)
        if done is not None:
            reward = human_reward(done, score, by)
            self.producer.send(reward)
            self.producer.flush()
        else:
            reward = label_rollouts(self.kafka, [Label(rollout_id, score)], by)[0]
        log.info("feedback %s on rollout %s by %s: %s", score, rollout_id, reward.judge.name, comment[:500])
        return {"rollout_id": rollout_id, "score": reward.score, "judge": reward.judge.name,
                "adapter": f"{reward.adapter_name}@v{reward.adapter_version}", "recorded": True}
