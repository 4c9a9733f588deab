"""The judge on the real broker when records do not decode or a batch crashes (issue 24, finding 4).

- With a schema registry (``mock://``, one per URL in a process), a record whose writer schema is not
  a record, or a record incompatible with the reader, goes to ``dead-letters`` with its reason, and
  the good rollouts polled with it are scored; offsets are committed past all of them.
- A scorer bug crashes the judge; nothing is committed, so a second judge of the same group scores
  every rollout of the crashed batch.
"""

from __future__ import annotations

import asyncio
import io
import json
import struct
import uuid
from collections.abc import Sequence

import pytest
from confluent_kafka.schema_registry import Schema
from fastavro import parse_schema, schemaless_writer

from streamgrpo.avro import records as R
from streamgrpo.avro.codec import CONFLUENT_MAGIC, Codec
from streamgrpo.config import KafkaSettings
from streamgrpo.judge.config import JudgeSettings
from streamgrpo.judge.scorers.base import Candidate, Score, SingleScorer
from streamgrpo.judge.service import JudgeService, Router
from streamgrpo.topics.clients import topic_name
from streamgrpo.topics.follow import read_topic
from streamgrpo.topics.producer import EventProducer

pytestmark = pytest.mark.broker


def _task(tid: str) -> R.Task:
    return R.Task(envelope=R.Envelope.new("test", task_id=tid), question="q?", source="deepmath",
                  group_size=3, ground_truths=["42"])


def _rollout(tid: str, rid: str, answer: str) -> R.RolloutCompleted:
    return R.RolloutCompleted(
        envelope=R.Envelope.new("test", task_id=tid, group_id=f"g-{tid}", rollout_id=rid),
        question="q?", source="deepmath", final_answer=answer, turns=1, status=R.RolloutStatus.ANSWERED,
        group_size=3, adapter_name="planner", adapter_version=1, duration_ms=5, error=None, tool_calls={},
    )


def _framed(codec: Codec, subject: str, schema: object, datum: object) -> bytes:
    """Confluent wire-format bytes of ``datum`` under ``schema``, registered in the codec's registry."""
    schema_id = codec.schema_registry.register_schema(subject, Schema(json.dumps(schema), "AVRO"))
    body = io.BytesIO()
    schemaless_writer(body, parse_schema(schema), datum)
    return CONFLUENT_MAGIC + struct.pack(">I", schema_id) + body.getvalue()


def _run(kafka: KafkaSettings, router: Router | None = None) -> JudgeService:
    settings = JudgeSettings(task_wait_s=3.0, poll_timeout_ms=100, consumer_group="judge-decode", batch_size=50)
    service = JudgeService(kafka, settings, router=router)
    try:
        asyncio.run(asyncio.wait_for(service.run(max_idle_s=3.0), timeout=120))
    finally:
        service.close()
    return service


def _publish(kafka: KafkaSettings, events: Sequence[R.Event | bytes]) -> None:
    with EventProducer(kafka, "test") as prod:
        for e in events:
            if isinstance(e, bytes):
                prod.send_raw(topic_name(kafka, "rollouts"), e, b"bad")
            else:
                prod.send(e)


def test_undecodable_registry_records_are_dead_lettered_and_their_batch_is_scored(kafka_ns: KafkaSettings) -> None:
    kafka = kafka_ns.model_copy(update={"schema_registry_url": f"mock://judge-{uuid.uuid4().hex[:8]}"})
    codec = Codec(kafka.schema_registry_url)
    not_a_record = _framed(codec, "rollouts-string", "string", "hello")  # was: TypeError escaped decode
    incompatible = _framed(codec, "rollouts-streamgrpo.events.RolloutCompleted",  # was: SchemaResolutionError
                           {"type": "record", "name": "RolloutCompleted", "namespace": "streamgrpo.events",
                            "fields": [{"name": "question", "type": "int"}]}, {"question": 7})
    _publish(kafka, [_task("t1")])
    _publish(kafka, [_rollout("t1", "r1", "42"), not_a_record, _rollout("t1", "r2", "41"), incompatible,
                     _rollout("t1", "r3", r"\boxed{42}")])

    service = _run(kafka)

    rewards = {r.event.envelope.rollout_id: r.event for r in read_topic(kafka, "rewards", timeout_s=10)}
    assert {rid: rw.score for rid, rw in rewards.items()} == {"r1": 1.0, "r2": 0.0, "r3": 1.0}
    dead = [r.event for r in read_topic(kafka, "dead-letters", timeout_s=10)]
    assert sorted(d.reason_code for d in dead) == ["decode_error", "decode_error"]
    reasons = " | ".join(d.reason for d in dead)
    assert "not an Avro record" in reasons and "SchemaResolutionError" in reasons, reasons
    assert service.stats.rollouts == 3
    assert _run(kafka).stats.rollouts == 0  # committed past the good and the bad records alike


class _Boom(SingleScorer):
    """A judge with a bug: it raises on one answer (not a ScoringError: a crash, not a reject)."""

    name = "math"
    rubric_hash = "boom"

    def score(self, candidate: Candidate) -> Score:
        if candidate.answer == "boom":
            raise RuntimeError("judge bug")
        return Score(1.0, (), self.name, self.rubric_hash)


def test_a_crashed_batch_is_not_committed(kafka_ns: KafkaSettings) -> None:
    _publish(kafka_ns, [_task("t2")])
    _publish(kafka_ns, [_rollout("t2", "r1", "42"), _rollout("t2", "r2", "boom"), _rollout("t2", "r3", "42")])
    settings = JudgeSettings()
    with pytest.raises(RuntimeError, match="judge bug"):
        _run(kafka_ns, Router(settings, {"math": _Boom(), "qa": _Boom(), "hybrid": _Boom()}))

    again = _run(kafka_ns)  # the same group, a working judge: every rollout of the crashed batch is redelivered
    assert again.stats.rollouts == 3
    rewards = {r.event.envelope.rollout_id for r in read_topic(kafka_ns, "rewards", timeout_s=10)}
    assert rewards >= {"r1", "r2", "r3"}
