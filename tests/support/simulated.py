"""Model-free rollout workers and judge for broker tests of the stream processors and the trainer.

:class:`SimulatedWorkersAndJudge` follows ``rollout-requests`` in a thread and, once a group's requests are all in,
produces what ``answer(group)`` returns for it (the test decides the events: completions, rewards, actions).
:func:`completed_and_reward` is the common pair: an ANSWERED completion of one turn and an OK reward of ``score``.
"""

from __future__ import annotations

import asyncio
import threading
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from streamgrpo.avro import ids
from streamgrpo.avro import records as R
from streamgrpo.config import KafkaSettings
from streamgrpo.topics import catalog
from streamgrpo.topics.follow import LogFollower
from streamgrpo.topics.producer import EventProducer
from streamgrpo.topics.received import Received

Answer = Callable[[list[R.RolloutRequest]], list[R.Event]]


class SimulatedWorkersAndJudge:
    """Answers each complete group of rollout-requests with ``answer(group)`` (start ``.thread``; set ``.stop``)."""

    def __init__(self, kafka: KafkaSettings, answer: Answer) -> None:
        self.kafka, self.answer, self.stop = kafka, answer, threading.Event()
        self.pending: dict[str, list[R.RolloutRequest]] = defaultdict(list)
        self.thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)

    async def _run(self) -> None:
        with EventProducer(self.kafka, "sim") as producer:
            async def handle(batch: list[Received]) -> None:
                for rec in batch:
                    if isinstance(rec.event, R.RolloutRequest):
                        group = self.pending[rec.event.envelope.group_id or ""]
                        group.append(rec.event)
                        if len(group) == rec.event.group_size:
                            for event in self.answer(group):
                                producer.send(event)
                producer.flush()

            await LogFollower(self.kafka, [catalog.ROLLOUT_REQUESTS], handle).run(self.stop)


def place(req: R.RolloutRequest) -> dict[str, Any]:
    """The envelope fields an event about ``req``'s rollout carries."""
    env = req.envelope
    return dict(task_id=env.task_id, group_id=env.group_id, rollout_id=env.rollout_id or "")


def completed_and_reward(req: R.RolloutRequest, score: float) -> list[R.Event]:
    """``req``'s rollout ANSWERED in one turn, and the judge's OK reward ``score`` for it."""
    where, rid = place(req), req.envelope.rollout_id or ""
    return [
        R.RolloutCompleted(R.Envelope.new("sim", event_id=ids.rollout_event_id("rollout_completed", rid), **where),
                           req.question, req.source, "a", 1, R.RolloutStatus.ANSWERED, req.group_size,
                           req.adapter_name, req.adapter_version, 1),
        R.Reward(R.Envelope.new("judge", event_id=ids.reward_id(rid), **where), score, R.RewardStatus.OK,
                 R.JudgeInfo("sim", "h"), req.group_size, req.adapter_name, req.adapter_version, 1,
                 R.RolloutStatus.ANSWERED),
    ]
