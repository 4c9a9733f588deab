"""The judge service on the real broker: Tasks + RolloutCompleted in, Rewards + dead letters out.

Runs :class:`JudgeService` in-process for a bounded time (``run(max_idle_s=...)``), then reads
``rewards`` and ``dead-letters`` from the beginning and checks scores, ids, provenance, caching,
the rejects (unknown task, missing ground truth), a task that arrives after its rollout, and that
offsets were committed (a second run of the same consumer group produces nothing new).
"""

from __future__ import annotations

import asyncio
import threading

import pytest

from streamgrpo.avro import ids
from streamgrpo.avro import records as R
from streamgrpo.config import KafkaSettings
from streamgrpo.judge.config import JudgeSettings
from streamgrpo.judge.scorers import build_scorer
from streamgrpo.judge.service import JudgeService
from streamgrpo.topics.follow import read_topic
from streamgrpo.topics.producer import EventProducer

pytestmark = pytest.mark.broker


def _task(tid: str, source: str, truths: list[str], question: str = "q?") -> R.Task:
    return R.Task(envelope=R.Envelope.new("test", task_id=tid), question=question, source=source,
                  group_size=2, ground_truths=truths)


def _rollout(tid: str, gid: str, rid: str, answer: str, *, source: str,
             status: R.RolloutStatus = R.RolloutStatus.ANSWERED) -> R.RolloutCompleted:
    return R.RolloutCompleted(
        envelope=R.Envelope.new("test", task_id=tid, group_id=gid, rollout_id=rid),
        question="q?", source=source, final_answer=answer, turns=2, status=status, group_size=2,
        adapter_name="planner", adapter_version=1, duration_ms=5,
        error="policy crashed" if status == R.RolloutStatus.ERROR else None, tool_calls={"search": 1},
    )


def _run(kafka: KafkaSettings, settings: JudgeSettings, *, late: list[R.Event] | None = None,
         max_idle_s: float = 4.0) -> JudgeService:
    service = JudgeService(kafka, settings)

    async def main() -> None:
        if late:  # published from a thread once the service runs (the rollout came first)
            def publish() -> None:
                with EventProducer(kafka, "test") as prod:
                    for e in late:
                        prod.send(e)
            threading.Timer(1.0, publish).start()
        await asyncio.wait_for(service.run(max_idle_s=max_idle_s), timeout=120)

    asyncio.run(main())
    service.close()
    return service


def test_judge_service_end_to_end(kafka_ns: KafkaSettings) -> None:
    tasks = [
        _task("t-math", "deepmath", ["42"]),
        _task("t-qa", "nq", ["Paris"]),
        _task("t-nogt", "nq", []),
        _task("t-hyb", "builtin", ["12"]),
    ]
    rollouts = [
        _rollout("t-math", "g-math", "r1", r"so \boxed{42}", source="deepmath"),
        _rollout("t-math", "g-math", "r2", "41", source="deepmath"),
        _rollout("t-qa", "g-qa", "r3", "Paris, France", source="nq"),
        _rollout("t-qa", "g-qa", "r4", "Paris, France", source="nq"),  # same answer: cached
        _rollout("t-qa", "g-qa2", "r5", "", source="nq", status=R.RolloutStatus.ERROR),
        _rollout("t-nogt", "g-nogt", "r6", "Paris", source="nq"),
        _rollout("t-missing", "g-missing", "r7", "7", source="deepmath"),
        _rollout("t-late", "g-late", "r8", "The answer is 9.", source="deepmath"),
        _rollout("t-hyb", "g-hyb", "r9", "12 eggs", source="builtin"),
    ]
    with EventProducer(kafka_ns, "test") as prod:
        for e in [*tasks, *rollouts, rollouts[0]]:  # r1 delivered twice
            prod.send(e)
    settings = JudgeSettings(task_wait_s=3.0, poll_timeout_ms=100, consumer_group="judge-it")
    service = _run(kafka_ns, settings, late=[_task("t-late", "deepmath", ["9"])])

    rewards = [r.event for r in read_topic(kafka_ns, "rewards", timeout_s=10)]
    by_rid = {r.envelope.rollout_id: r for r in rewards}
    assert len(rewards) == len(by_rid) == 9, [r.envelope.rollout_id for r in rewards]
    for rid, rw in by_rid.items():
        assert rw.envelope.event_id == ids.derived_id("reward", rid)
        assert rw.group_size == 2 and rw.adapter_name == "planner" and rw.adapter_version == 1
        assert rw.tool_calls == {"search": 1} and rw.turns == 2
    src = {r.envelope.rollout_id: r for r in rollouts}
    for rid, rw in by_rid.items():
        assert (rw.envelope.task_id, rw.envelope.group_id) == (src[rid].envelope.task_id, src[rid].envelope.group_id)

    ok = {rid: rw for rid, rw in by_rid.items() if rw.status == R.RewardStatus.OK}
    assert set(ok) == {"r1", "r2", "r3", "r4", "r8", "r9"}
    assert (ok["r1"].score, ok["r2"].score, ok["r3"].score, ok["r8"].score) == (1.0, 0.0, 1.0, 1.0)
    assert ok["r1"].judge == R.JudgeInfo("math", build_scorer("math").rubric_hash, None)
    assert ok["r3"].judge.name == "qa" and ok["r9"].judge.name == "correct"
    assert ok["r9"].score == 1.0  # correct (math: "12 eggs"), and nothing but correctness
    assert (ok["r3"].cached, ok["r4"].cached) == (False, True) and ok["r4"].score == 1.0

    errors = {rid: rw for rid, rw in by_rid.items() if rw.status == R.RewardStatus.ERROR}
    assert set(errors) == {"r5", "r6", "r7"}
    assert "policy crashed" in (errors["r5"].error or "")
    assert errors["r5"].rollout_status == R.RolloutStatus.ERROR

    dead = [r.event for r in read_topic(kafka_ns, "dead-letters", timeout_s=10)]
    codes = sorted((d.reason_code, d.source_topic) for d in dead)
    assert codes == [("missing_ground_truth", "rollouts"), ("unknown_task", "rollouts")]
    assert any("t-missing" in d.reason for d in dead)
    assert service.stats.duplicates == 1 and service.stats.cached == 1

    # offsets were committed: the same consumer group has nothing left to judge
    again = _run(kafka_ns, settings, max_idle_s=2.0)
    assert again.stats.rollouts == 0
    assert len(read_topic(kafka_ns, "rewards", timeout_s=10)) == 9
