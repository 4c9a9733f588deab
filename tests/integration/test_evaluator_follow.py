"""The in-loop evaluator follows its topics with one log follower for its lifetime (issue 23): it reads
``adapter-events`` from the beginning once -- a version announced before it started is evaluated -- and then only
new records: a version announced later is picked up without another read from the beginning (before, every poll
re-read the whole topic with a fresh consumer and logged "caught up with ..." each time: ~900 reads in a 30-minute
run). A broker that does not answer at start is waited for (before, the first read raised and the service exited
into its supervisor's restart loop) and the evaluator still stops at once when asked. Real parts: the embedded
broker, Avro events, a tiny in-process Llama with real peft adapters."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest
from support.evaluator import adapter, announcement, run_until, session

from streamgrpo.avro import records as R
from streamgrpo.config import KafkaSettings
from streamgrpo.evaluation.service import EvaluatorSettings
from streamgrpo.models import adapter_store as store
from streamgrpo.topics import catalog
from streamgrpo.topics.broker import free_port
from streamgrpo.topics.follow import read_topic
from streamgrpo.topics.producer import EventProducer

pytestmark = pytest.mark.broker

SETTINGS = EvaluatorSettings(limit=1, include_base=False, batch_size=1, nice=0, poll_s=0.1, metrics_port=0,
                             interval_s=0)
IDLE_S = 2.0  # polls with nothing new between the two announcements: ~20 at poll_s = 0.1


def _announce(kafka: KafkaSettings, event: R.AdapterPublished) -> None:
    with EventProducer(kafka, "test") as producer:
        producer.send(event)
        producer.flush()


def test_one_follower_reads_the_history_once_and_picks_up_a_later_version(
        kafka_ns: KafkaSettings, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    adapter_store = tmp_path / "store"
    v1, v2 = store.version_dir(adapter_store, "planner", 1), store.version_dir(adapter_store, "planner", 2)
    v1.parent.mkdir(parents=True)
    _announce(kafka_ns, announcement(1, v1, adapter(v1)))  # before the evaluator starts
    later = announcement(2, v2, adapter(v2))
    announced_later: list[float] = []

    def evaluations() -> list[int]:
        return [e.adapter_version for e in (r.event for r in read_topic(kafka_ns, catalog.EVALUATIONS))
                if isinstance(e, R.EvaluationCompleted)]

    def done() -> bool:
        """v1 evaluated -> idle for IDLE_S -> announce v2 -> done once v2 is evaluated."""
        seen = evaluations()
        if 1 in seen and not announced_later:
            time.sleep(IDLE_S)
            _announce(kafka_ns, later)
            announced_later.append(time.monotonic())
        return 2 in seen

    with caplog.at_level(logging.INFO, logger="streamgrpo"):
        errors = run_until(SETTINGS, session(kafka_ns, adapter_store), done)
    assert errors == []
    assert evaluations() == [1, 2], "the version announced before start, then the one announced later"
    reads = [r.getMessage() for r in caplog.records
             if r.name == "streamgrpo.topics.follow" and "caught up with" in r.getMessage()
             and catalog.ADAPTER_EVENTS in r.getMessage()]
    assert len(reads) == 1, f"{catalog.ADAPTER_EVENTS} was read from the beginning {len(reads)} times: {reads[:3]}"


def test_an_evaluator_started_without_a_broker_waits_and_stops_when_asked(
        kafka_ns: KafkaSettings, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    bootstrap = f"127.0.0.1:{free_port()}"  # nothing listens there
    evs = session(kafka_ns.model_copy(update={"bootstrap": bootstrap}), tmp_path / "store")

    def attempts() -> list[str]:
        return [r.getMessage() for r in list(caplog.records)
                if "Unable connect" in r.getMessage() and bootstrap in r.getMessage()]

    with caplog.at_level(logging.INFO, logger="streamgrpo"):
        errors = run_until(SETTINGS.model_copy(update={"include_base": True}), evs, lambda: len(attempts()) >= 2,
                           timeout_s=60)
    assert errors == [], "a broker that does not answer at start is waited for, not raised"
    assert len(attempts()) >= 2, "the follower tries again with backoff"
    assert not any("accuracy" in r.getMessage() for r in caplog.records), "nothing evaluated before the history"
