"""``streamgrpo status`` against records a catalog topic should not hold (issue 24, finding 11): a record of
another event type on ``rollouts`` (and on every topic status reads) is skipped, every call, not a crash."""

from __future__ import annotations

import dataclasses
import socket
from typing import Any

import pytest

from streamgrpo.avro import records as R
from streamgrpo.cli.status import collect, render
from streamgrpo.config import KafkaSettings
from streamgrpo.topics import catalog
from streamgrpo.topics.producer import EventProducer

pytestmark = pytest.mark.broker


def _sample(kind: type[R.Event]) -> Any:
    from fixtures.sample_events import sample_events

    return next(e for e in sample_events() if isinstance(e, kind))


def test_wrong_type_records_are_skipped_on_every_call(kafka_ns: KafkaSettings) -> None:
    p = EventProducer(kafka_ns, "tests")
    task = _sample(R.Task)
    for topic in (catalog.ROLLOUTS, catalog.ROLLOUT_REQUESTS, catalog.GROUPS, catalog.DEAD_LETTERS,
                  catalog.ADAPTER_REGISTRY):
        p.send(task, topic=topic, key="k")
    done = _sample(R.RolloutCompleted)
    p.send(dataclasses.replace(done, envelope=dataclasses.replace(
        R.Envelope.new("rollout", group_id="g1"), producer=R.Producer(service="rollout", instance="w1")),
        adapter_version=4))
    p.flush()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        down = f"127.0.0.1:{s.getsockname()[1]}"
    for _ in range(2):  # the campaign saw every call after the record crash, not only the first
        report = collect(kafka_ns, {"streams": down}, timeout_s=0.3)
        assert report.served == {"rollout/w1": 4}
        assert report.groups_in_flight == 0 and report.dead_letters == 0 and report.registry == {}
        assert "rollout/w1 v4" in render(report)
