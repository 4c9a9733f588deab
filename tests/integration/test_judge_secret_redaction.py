"""The judge service on the real broker with an LLM endpoint that echoes its API key in errors: the
key is in no record of ``rewards`` or ``dead-letters`` (decoded text and raw bytes), masked instead."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from fixtures.echo_endpoint import echo_endpoint
from pydantic import SecretStr

from streamgrpo.avro import records as R
from streamgrpo.config import KafkaSettings
from streamgrpo.judge.config import JudgeSettings, LLMSettings
from streamgrpo.judge.service import JudgeService
from streamgrpo.redact import MASK
from streamgrpo.topics.follow import read_topic
from streamgrpo.topics.producer import EventProducer

pytestmark = pytest.mark.broker


def test_an_echoed_api_key_reaches_no_event(kafka_ns: KafkaSettings) -> None:
    key = "sk-live-" + uuid.uuid4().hex
    task = R.Task(envelope=R.Envelope.new("test", task_id="t-open"), question="Why?", source="open", group_size=1,
                  ground_truths=[])
    rollout = R.RolloutCompleted(
        envelope=R.Envelope.new("test", task_id="t-open", group_id="g1", rollout_id="r1"), question="Why?",
        source="open", final_answer="Because.", turns=1, status=R.RolloutStatus.ANSWERED, group_size=1,
        adapter_name="planner", adapter_version=1, duration_ms=5, error=None, tool_calls={},
    )
    with EventProducer(kafka_ns, "test") as prod:
        prod.send(task)
        prod.send(rollout)
    with echo_endpoint() as url:
        settings = JudgeSettings(routes={"open": "llm"}, task_wait_s=3.0, poll_timeout_ms=100,
                                 consumer_group="judge-secret",
                                 llm=LLMSettings(base_url=url, api_key=SecretStr(key), max_retries=0))
        service = JudgeService(kafka_ns, settings)
        asyncio.run(asyncio.wait_for(service.run(max_idle_s=3.0), timeout=120))
        service.close()

    rewards = read_topic(kafka_ns, "rewards", timeout_s=10)
    dead = read_topic(kafka_ns, "dead-letters", timeout_s=10)
    assert [r.event.status for r in rewards] == [R.RewardStatus.ERROR]
    assert [d.event.reason_code for d in dead] == ["judge_error"]
    # masked by the endpoint itself ('*****') or by the redaction path (MASK); the key never appears
    masked = ("Bearer *****", f"Bearer {MASK}")
    assert any(m in (rewards[0].event.error or "") for m in masked) and any(m in dead[0].event.reason for m in masked)
    for rec in [*rewards, *dead]:
        assert key.encode() not in (rec.value or b"")
