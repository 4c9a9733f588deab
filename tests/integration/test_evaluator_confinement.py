"""The in-loop evaluator loads announced adapters only from its adapter store (issue 23): an
``AdapterPublished`` on the real broker whose uri points outside the store -- with the right sha256 of real
peft files, so only the confinement can refuse it -- is logged as skipped with the reason, never evaluated
or published, and the evaluator carries on (the version announced inside the store is evaluated and
published). Real parts: the embedded broker, Avro events, a tiny in-process Llama with real peft adapters."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from support.evaluator import adapter, announcement, run_until, session

from streamgrpo.avro import records as R
from streamgrpo.config import KafkaSettings
from streamgrpo.evaluation.service import EvaluatorSettings
from streamgrpo.models import adapter_store as store
from streamgrpo.topics import catalog
from streamgrpo.topics.follow import read_topic
from streamgrpo.topics.producer import EventProducer

pytestmark = pytest.mark.broker


def test_an_announcement_outside_the_store_is_skipped_with_its_reason(
        kafka_ns: KafkaSettings, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    adapter_store, outside = tmp_path / "store", tmp_path / "outside"
    inside_dir = store.version_dir(adapter_store, "planner", 1)
    inside_dir.parent.mkdir(parents=True)
    outside_dir = outside / "planner" / "v2"
    outside_dir.parent.mkdir(parents=True)
    events = [announcement(1, inside_dir, adapter(inside_dir)), announcement(2, outside_dir, adapter(outside_dir))]
    with EventProducer(kafka_ns, "test") as producer:
        for event in events:
            producer.send(event)
        producer.flush()
    evs = session(kafka_ns, adapter_store)
    settings = EvaluatorSettings(limit=1, include_base=False, batch_size=1, nice=0, poll_s=0.2, metrics_port=0)

    def evaluations() -> dict[int, R.EvaluationCompleted]:
        return {e.adapter_version: e for e in (r.event for r in read_topic(kafka_ns, catalog.EVALUATIONS))
                if isinstance(e, R.EvaluationCompleted)}

    def skipped() -> list[str]:
        return [r.getMessage() for r in caplog.records if "skipped" in r.getMessage()]

    with caplog.at_level(logging.INFO, logger="streamgrpo.evaluation.service"):
        errors = run_until(settings, evs, lambda: 1 in evaluations() and (2 in evaluations() or skipped()))
    assert errors == []
    assert sorted(evaluations()) == [1], "only the version inside the store is evaluated and published"
    assert evaluations()[1].trigger == "run-evaluator"
    [message] = skipped()
    assert "v2 skipped" in message and "outside the adapter store" in message and str(outside_dir) in message
    assert 2 not in evs.context().policy.resident_versions("planner")  # never loaded
