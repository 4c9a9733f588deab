"""``streamgrpo status`` on the real broker: lag per group and partition, adapter versions, served per
worker, groups in flight, samples waiting, dead letters, and services up or DOWN (never a crash)."""

from __future__ import annotations

import dataclasses
import json
import logging
import re
import socket
import time
import uuid
from datetime import timedelta
from typing import Any

import pytest
from click.testing import CliRunner

from streamgrpo import metrics as M
from streamgrpo.avro import records as R
from streamgrpo.avro.ids import derived_id
from streamgrpo.cli import cli
from streamgrpo.cli.status import TopicView, collect, render
from streamgrpo.cli.status_topics import Reader
from streamgrpo.config import KafkaSettings
from streamgrpo.lifecycle.pacing import CONTROL_ARM
from streamgrpo.topics.clients import client_config
from streamgrpo.topics.producer import EventProducer

pytestmark = pytest.mark.broker


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _sample(kind: type[R.Event]) -> Any:
    from fixtures.sample_events import sample_events

    return next(e for e in sample_events() if isinstance(e, kind))


def _env(service: str, instance: str = "host:1", salt: object = "", **ids: Any) -> R.Envelope:
    """A fresh envelope (now, so it is inside the last hour) from ``service``/``instance``."""
    return dataclasses.replace(R.Envelope.new(service, **ids), producer=R.Producer(service=service, instance=instance),
                               event_id=derived_id("status-test", service, instance, salt, *ids.values()))


#: A version's lineage: 6 samples trained, 2 dropped as stale, 1 duplicate (the sample event's drops): share 6 / 24.
NINE = [R.OffsetRange("training-samples", 0, 0, 8)]


def _produce(kafka: KafkaSettings) -> None:
    p = EventProducer(kafka, "tests")
    pub = _sample(R.AdapterPublished)
    for v in (1, 2, 3):  # each step trained 6 samples of 9, dropped 2 as stale, 1 duplicate (the sample's drops)
        p.send(dataclasses.replace(pub, envelope=_env("trainer", salt=v), version=v, parent_version=v - 1 or None,
                                   metrics={"loss": 0.1}, lineage=NINE, samples_dequeued=8,
                                   auto_promote=False))  # a trainer with canary_share 0.5, as `status` below
    p.send(dataclasses.replace(_sample(R.AdapterPromoted), envelope=_env("streams"), version=2, previous_version=1))
    state = _sample(R.AdapterState)
    for v, status in ((1, R.AdapterStatus.RETIRED), (2, R.AdapterStatus.PRIMARY)):
        p.send(dataclasses.replace(state, envelope=_env("streams", salt=v), version=v, status=status))
    req = _sample(R.RolloutRequest)
    for g in ("g1", "g2", "g3"):
        p.send(dataclasses.replace(req, envelope=_env("streams", group_id=g, rollout_id=f"{g}-r0")))
    p.send(dataclasses.replace(_sample(R.GroupClosed), envelope=_env("streams", group_id="g1")))
    for g, received in (("ca1", 3), ("ca2", 5)):  # A/B control arm: judged for the comparison only, no samples
        p.send(dataclasses.replace(_sample(R.GroupClosed), envelope=_env("streams", group_id=g), reason=CONTROL_ARM,
                                   trains=False, samples=0, received=received, missing_rollout_ids=[]))
    done = _sample(R.RolloutCompleted)
    for instance, version in (("w1", 1), ("w1", 2), ("w2", 3)):
        p.send(dataclasses.replace(done, envelope=_env("rollout", instance, group_id=f"g-{instance}-{version}"),
                                   adapter_version=version))
    sample = _sample(R.TrainingSample)
    for i in range(6):
        p.send(dataclasses.replace(sample, envelope=_env("streams", group_id=f"s{i}", rollout_id=f"s{i}")))
    dl = _sample(R.DeadLetter)
    for i, code in enumerate(("decode_error", "decode_error", "trainer_stale")):
        p.send(dataclasses.replace(dl, envelope=_env("judge", salt=i), reason_code=code, consumer="judge",
                                   source_offset=i))
    p.flush()


#: The trainer consumer group these tests commit as. Consumer group ids are not namespaced by the test's topic
#: prefix, so a name of its own: another test's trainer (run name "default") may still be a member of
#: ``trainer.planner.default`` on the shared broker, and a commit without membership then fails (UNKNOWN_MEMBER_ID).
TRAINER_GROUP = f"trainer.planner.st-{uuid.uuid4().hex[:6]}"  # within status's 28-character column


def _commit_trainer(kafka: KafkaSettings) -> dict[int, int]:
    """The trainer group commits all but the last sample of each partition; returns the ends."""
    from confluent_kafka import Consumer, TopicPartition

    from streamgrpo.topics.follow import log_bounds

    c = Consumer(client_config(kafka, **{"group.id": TRAINER_GROUP, "enable.auto.commit": False}))
    topic = f"{kafka.topic_prefix}training-samples"
    ends = {p: end for (_, p), (_, end) in log_bounds(kafka, [topic]).items()}
    c.commit(offsets=[TopicPartition(topic, p, e - 1) for p, e in ends.items() if e > 0], asynchronous=False)
    c.close()
    return ends


def test_status_from_topics_with_services_down(kafka_ns: KafkaSettings) -> None:
    _produce(kafka_ns)
    ends = _commit_trainer(kafka_ns)
    judge_port, down = _free_port(), _free_port()
    M.start("judge", judge_port, host="127.0.0.1").identity = {"topic_prefix": kafka_ns.topic_prefix}  # this loop's
    try:
        logging.getLogger("streamgrpo.judge.test").error("LLM judge endpoint refused the connection")
        targets = {"judge": f"127.0.0.1:{judge_port}", "rollout": f"127.0.0.1:{down}",
                   "streams": f"127.0.0.1:{down}", "trainer": f"127.0.0.1:{down}"}
        report = collect(kafka_ns, targets, canary_share=0.5, timeout_s=0.5)
    finally:
        M.stop()
    assert report.versions == {"published": 3, "primary": 2, "canary": 3}
    assert report.registry == {1: "RETIRED", 2: "PRIMARY", 3: "CANARY"}  # the fold of adapter-events, as versions
    assert report.served == {"rollout/w1": 2, "rollout/w2": 3} and report.served_source == "rollouts topic"
    assert report.groups_in_flight == 2 and report.groups_source.startswith("topics")
    with_data = [p for p, e in ends.items() if e > 0]
    assert report.samples_waiting == len(with_data)
    trainer = [lag for lag in report.lags if lag.group == TRAINER_GROUP]
    assert sorted((lag.partition, lag.lag, lag.end) for lag in trainer) == sorted((p, 1, ends[p]) for p in with_data)
    assert report.dead_letters == 3 and report.dead_letter_reasons == {"decode_error": 2, "trainer_stale": 1}
    assert report.last_dead_letter["judge"].startswith("trainer_stale")
    up = {s.service: s for s in report.services}
    assert up["judge"].up and up["judge"].last_error["message"] == "LLM judge endpoint refused the connection"
    assert not up["rollout"].up and up["rollout"].error
    assert report.loop == {"samples_trained": 18.0, "samples_dropped_stale": 6.0, "stale_share": 0.25,
                           "control_arm_groups": 2, "control_arm_rollouts": 8}
    screen = render(report)
    assert "DOWN" in screen and TRAINER_GROUP in screen and "canary v3" in screen
    assert "dropped as stale 6 (stale share 25.0 %)" in screen and "2 groups, 8 rollouts" in screen
    assert report.stalls == [] and "liveness   ok: no stall longer than 600 s" in screen  # rollouts just completed


def test_status_says_stalled_when_no_rollout_completed_for_the_liveness_bound(kafka_ns: KafkaSettings) -> None:
    """The liveness rule (issue 38) read from the topics: a group requested 20 minutes ago, no rollout since."""
    p = EventProducer(kafka_ns, "tests")
    long_ago = dataclasses.replace(R.Envelope.new("streams"), event_time=R.Envelope.new("x").event_time
                                   - timedelta(minutes=20))
    p.send(dataclasses.replace(_sample(R.Task), envelope=dataclasses.replace(long_ago, task_id="t1")))
    p.send(dataclasses.replace(_sample(R.RolloutRequest), envelope=dataclasses.replace(
        R.Envelope.new("streams", task_id="t1", group_id="g-old", rollout_id="g-old-r0"),
        event_time=long_ago.event_time)))
    p.flush()
    report = collect(kafka_ns, {}, timeout_s=0.5)
    (stall,) = report.stalls or [None]
    assert stall is not None and re.match(r"no rollout completed for 120\d s while 1 group\(s\) are in flight", stall)
    assert f"STALLED    {stall}" in render(report)
    view = TopicView(kafka_ns, 0.0, liveness_s=3600)  # [loop] liveness_s read by `status`: a longer bound, no stall
    try:
        assert collect(kafka_ns, {}, timeout_s=0.5, view=view).stalls == []
    finally:
        view.close()


def test_status_prefers_endpoints_when_up(kafka_ns: KafkaSettings) -> None:
    streams_port, rollout_port = _free_port(), _free_port()
    streams, rollout = M.Metrics("streams"), M.Metrics("rollout")
    try:
        assert streams.serve(streams_port, "127.0.0.1") and rollout.serve(rollout_port, "127.0.0.1")
        streams.set(M.GROUPS_OPEN, 7)
        rollout.set(M.ADAPTER_VERSION, 5, role="served")
        report = collect(kafka_ns, {"streams": f"127.0.0.1:{streams_port}", "rollout": f"127.0.0.1:{rollout_port}"},
                         timeout_s=1.0)
    finally:
        streams.close()
        rollout.close()
    assert report.groups_in_flight == 7 and report.groups_source == "streams endpoint"
    assert report.served == {f"endpoint 127.0.0.1:{rollout_port}": 5}
    assert report.served_source == "rollouts topic + rollout endpoint"
    assert report.versions == {"published": 0, "primary": 0, "canary": None} and report.lags == []


def test_a_watch_refresh_reads_only_what_arrived_and_folds_it_into_the_same_figures(kafka_ns: KafkaSettings) -> None:
    _produce(kafka_ns)
    reader = Reader(kafka_ns)
    try:
        first = reader.new("groups", R.GroupClosed)
        assert sorted(ev.envelope.group_id for ev in first) == ["ca1", "ca2", "g1"] and reader.partial == set()
        assert reader.new("groups", R.GroupClosed) == []  # nothing new: nothing read again
        p = EventProducer(kafka_ns, "tests")
        p.send(dataclasses.replace(_sample(R.GroupClosed), envelope=_env("streams", group_id="ca3"), reason=CONTROL_ARM,
                                   trains=False, samples=0, received=4, missing_rollout_ids=[]))
        p.flush()
        reader.refresh()
        assert [ev.envelope.group_id for ev in reader.new("groups", R.GroupClosed)] == ["ca3"]
    finally:
        reader.close()

    down = {"streams": f"127.0.0.1:{_free_port()}"}
    view = TopicView(kafka_ns, canary_share=0.5)
    try:
        before = collect(kafka_ns, down, timeout_s=0.3, view=view)
        p = EventProducer(kafka_ns, "tests")
        pub = _sample(R.AdapterPublished)  # v4: 6 more trained, 2 more stale; one more control-arm group
        p.send(dataclasses.replace(pub, envelope=_env("trainer", salt=4), version=4, parent_version=3,
                                   metrics={"loss": 0.1}, lineage=NINE, samples_dequeued=8, auto_promote=False))
        p.send(dataclasses.replace(_sample(R.GroupClosed), envelope=_env("streams", group_id="ca4"), reason=CONTROL_ARM,
                                   trains=False, samples=0, received=2, missing_rollout_ids=[]))
        p.flush()
        after = collect(kafka_ns, down, timeout_s=0.3, view=view)
    finally:
        view.close()
    fresh = collect(kafka_ns, down, canary_share=0.5, timeout_s=0.3)
    assert before.loop["control_arm_groups"] == 3 and before.versions["published"] == 3
    assert after.loop == fresh.loop == {"samples_trained": 24.0, "samples_dropped_stale": 8.0, "stale_share": 0.25,
                                        "control_arm_groups": 4, "control_arm_rollouts": 14}
    assert after.versions == fresh.versions and after.versions["published"] == 4
    assert after.registry == fresh.registry == {1: "RETIRED", 2: "PRIMARY", 3: "CANDIDATE", 4: "CANARY"}
    assert after.partial == []


def test_a_whole_topic_read_cut_short_says_partial_and_the_next_refresh_reads_on(kafka_ns: KafkaSettings) -> None:
    _produce(kafka_ns)
    down = {"streams": f"127.0.0.1:{_free_port()}"}
    view = TopicView(kafka_ns, canary_share=0.5)
    try:
        view.reader.read_s = 0.0  # every read stops before its first record
        cut = collect(kafka_ns, down, timeout_s=0.3, view=view)
        view.reader.read_s = 15.0
        whole = collect(kafka_ns, down, timeout_s=0.3, view=view)
    finally:
        view.close()
    cut_short = ["adapter-events", "dead-letters", "groups", "rollout-requests", "rollouts"]  # tasks: none produced
    assert cut.partial == cut_short and cut.loop["control_arm_groups"] == 0
    assert f"PARTIAL    {', '.join(cut_short)}: not read to the end" in render(cut)
    assert cut.stalls is None and "liveness" not in render(cut)  # old records alone would look like a stall
    assert whole.partial == [] and "PARTIAL" not in render(whole) and whole.stalls == []
    assert whole.loop == {"samples_trained": 18.0, "samples_dropped_stale": 6.0, "stale_share": 0.25,
                          "control_arm_groups": 2, "control_arm_rollouts": 8}
    assert whole.versions == {"published": 3, "primary": 2, "canary": 3}


def test_a_topic_written_in_transactions_is_read_to_its_end_past_the_commit_marker(kafka_ns: KafkaSettings) -> None:
    """The last offset of a partition written in a transaction (Faust's exactly_once) is a commit marker that is
    never delivered: a read waiting for a record at the end spun its 15 s and said PARTIAL at every refresh."""
    from confluent_kafka import Producer

    from streamgrpo.avro.codec import Codec

    codec, topic = Codec(kafka_ns.schema_registry_url), f"{kafka_ns.topic_prefix}groups"
    producer = Producer(client_config(kafka_ns, **{"transactional.id": f"status-test-{uuid.uuid4().hex[:6]}"}))
    producer.init_transactions(10)
    producer.begin_transaction()
    for g in ("tx1", "tx2"):
        closed = dataclasses.replace(_sample(R.GroupClosed), envelope=_env("streams", group_id=g))
        producer.produce(topic, codec.encode(closed, "groups"), partition=0)
    producer.commit_transaction(10)
    reader = Reader(kafka_ns)
    try:
        started = time.monotonic()
        read = reader.new("groups", R.GroupClosed)
        took = time.monotonic() - started
    finally:
        reader.close()
    assert sorted(ev.envelope.group_id for ev in read) == ["tx1", "tx2"]
    assert reader.partial == set() and took < 10, took


def test_status_cli_json_and_screen(kafka_ns: KafkaSettings) -> None:
    _produce(kafka_ns)
    down = _free_port()
    env = {"STREAMGRPO_KAFKA__BOOTSTRAP": kafka_ns.bootstrap or "", "STREAMGRPO_KAFKA__TOPIC_PREFIX": kafka_ns.topic_prefix,
           "STREAMGRPO_CONFIG": ""}
    args = [f"--endpoint={s}=127.0.0.1:{down}" for s in M.SERVICES]
    runner = CliRunner()
    out = runner.invoke(cli, ["status", "--json", "--timeout", "0.3", *args], env=env)
    assert out.exit_code == 0, out.output
    data = json.loads(out.output)
    assert data["versions"]["published"] == 3 and data["dead_letters"] == 3
    assert data["loop"]["stale_share"] == 0.25 and data["loop"]["control_arm_groups"] == 2
    assert data["loop"]["control_arm_rollouts"] == 8
    assert [s["up"] for s in data["services"]] == [False] * 4
    screen = runner.invoke(cli, ["status", "--timeout", "0.3", *args], env=env)
    assert screen.exit_code == 0 and screen.output.count("DOWN") == 4
    assert "stale share 25.0 %" in screen.output and "control arm" in screen.output
    bad = runner.invoke(cli, ["status", "--endpoint", "nope=1.2.3.4:5"], env=env)
    assert bad.exit_code == 2 and "SERVICE=HOST:PORT" in bad.output


def test_status_says_what_to_do_when_kafka_is_down() -> None:
    down = _free_port()
    env = {"STREAMGRPO_KAFKA__BOOTSTRAP": f"127.0.0.1:{down}", "STREAMGRPO_CONFIG": ""}
    out = CliRunner().invoke(cli, ["status", "--timeout", "0.2", *[f"--endpoint={s}=127.0.0.1:{down}" for s in M.SERVICES]],
                             env=env)
    assert out.exit_code != 0
    assert "did not answer" in str(out.exception) + out.output and "STREAMGRPO_KAFKA__BOOTSTRAP" in str(out.exception) + out.output


def test_status_shows_a_process_of_another_loop_as_other_loop_not_up(kafka_ns: KafkaSettings) -> None:
    """Two real endpoints on this machine: one reports this loop's identity on /status, the other another
    run's (other prefix, other local broker). Only the first is up; the second's figures are not used."""
    ours_port, theirs_port = _free_port(), _free_port()
    ours, theirs = M.Metrics("rollout"), M.Metrics("streams")
    ours.identity = {"run_id": "20260101-000000", "topic_prefix": kafka_ns.topic_prefix,
                     "bootstrap": kafka_ns.bootstrap or ""}
    theirs.identity = {"run_id": "20260101-999999", "topic_prefix": "other.", "bootstrap": "127.0.0.1:1"}
    theirs.set(M.GROUPS_OPEN, 42)
    try:
        assert ours.serve(ours_port, "127.0.0.1") and theirs.serve(theirs_port, "127.0.0.1")
        targets = {"rollout": f"127.0.0.1:{ours_port}", "streams": f"127.0.0.1:{theirs_port}"}
        report = collect(kafka_ns, targets, timeout_s=1.0, run_id="20260101-000000")
    finally:
        ours.close()
        theirs.close()
    state = {s.service: s for s in report.services}
    assert state["rollout"].up and not state["rollout"].other_loop
    assert not state["streams"].up
    assert state["streams"].other_loop == "topic prefix 'other.', run 20260101-999999, kafka 127.0.0.1:1"
    assert report.groups_source != "streams endpoint" and report.groups_in_flight != 42
    screen = render(report)
    assert "other loop (topic prefix 'other.'" in screen and screen.count(" up") >= 1
