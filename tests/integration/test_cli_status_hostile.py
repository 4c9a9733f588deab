"""``streamgrpo status`` against records a catalog topic should not hold (issue 24, finding 11): a record of
another event type on ``rollouts`` (and on every topic status reads) is skipped, every call, not a crash; and
against real endpoints that serve a non-finite figure or a malformed /status ``identity`` (its re-run)."""

from __future__ import annotations

import dataclasses
import socket
from typing import Any

import pytest
from click.testing import CliRunner

from streamgrpo import metrics as M
from streamgrpo.avro import records as R
from streamgrpo.cli import cli
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


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _status_cli(kafka: KafkaSettings, targets: dict[str, str]) -> Any:
    env = {"STREAMGRPO_KAFKA__BOOTSTRAP": kafka.bootstrap or "", "STREAMGRPO_KAFKA__TOPIC_PREFIX": kafka.topic_prefix,
           "STREAMGRPO_CONFIG": ""}
    return CliRunner().invoke(cli, ["status", "--timeout", "1", *[f"--endpoint={s}={t}" for s, t in targets.items()]],
                              env=env)


@pytest.mark.parametrize("value", [float("nan"), float("inf")], ids=["nan", "inf"])
def test_status_treats_a_non_finite_served_version_or_groups_open_as_absent(kafka_ns: KafkaSettings,
                                                                           value: float) -> None:
    """Issue 24, re-run of finding 11: real rollout and streams endpoints serving
    ``streamgrpo_adapter_version{role="served"}`` and ``streamgrpo_groups_open`` as NaN / +Inf made ``status``
    exit 1 (ValueError / OverflowError from int()). The figure is now absent: no endpoint entry among the served
    versions, groups in flight from the topics; both endpoints still up. Not covered: -Inf (the same check)."""
    streams_port, rollout_port = _free_port(), _free_port()
    streams, rollout = M.Metrics("streams"), M.Metrics("rollout")
    targets = {"streams": f"127.0.0.1:{streams_port}", "rollout": f"127.0.0.1:{rollout_port}"}
    try:
        assert streams.serve(streams_port, "127.0.0.1") and rollout.serve(rollout_port, "127.0.0.1")
        streams.set(M.GROUPS_OPEN, value)
        rollout.set(M.ADAPTER_VERSION, value, role="served")
        report = collect(kafka_ns, targets, timeout_s=1.0)
        out = _status_cli(kafka_ns, targets)
    finally:
        streams.close()
        rollout.close()
    assert [(s.service, s.up) for s in report.services] == [("streams", True), ("rollout", True)]
    assert report.served == {} and report.served_source == "rollouts topic"
    assert report.groups_in_flight == 0 and report.groups_source.startswith("topics")
    assert out.exit_code == 0, out.output
    assert "served     (rollouts topic) -" in out.output and "groups in flight 0 (topics, last 60 min)" in out.output


@pytest.mark.parametrize("identity", ["x", [1, 2], {"bootstrap": 123, "topic_prefix": ""}],
                         ids=["str", "list", "badtypes"])
def test_status_reports_a_malformed_identity_for_that_service_only(kafka_ns: KafkaSettings, identity: Any) -> None:
    """Issue 24, re-run of finding 11: a /status ``identity`` of "x", [1, 2] or {"bootstrap": 123, ...} made
    ``status`` exit 1 (AttributeError in other_loop / _loopback). That service is now shown DOWN with
    "identity malformed" and its figures unused (its loop cannot be told); a well-formed one beside it is up."""
    bad_port, good_port = _free_port(), _free_port()
    bad, good = M.Metrics("streams"), M.Metrics("judge")
    bad.identity = identity
    good.identity = {"topic_prefix": kafka_ns.topic_prefix}
    bad.set(M.GROUPS_OPEN, 42)
    targets = {"streams": f"127.0.0.1:{bad_port}", "judge": f"127.0.0.1:{good_port}"}
    try:
        assert bad.serve(bad_port, "127.0.0.1") and good.serve(good_port, "127.0.0.1")
        report = collect(kafka_ns, targets, timeout_s=1.0)
        out = _status_cli(kafka_ns, targets)
    finally:
        bad.close()
        good.close()
    state = {s.service: s for s in report.services}
    assert not state["streams"].up and "identity malformed" in state["streams"].error
    assert not state["streams"].other_loop and state["judge"].up
    assert report.groups_source != "streams endpoint" and report.groups_in_flight != 42
    assert out.exit_code == 0, out.output
    lines = out.output.splitlines()
    assert "DOWN (/status identity malformed (not an object of strings" in next(ln for ln in lines
                                                                               if ln.startswith("streams "))
    assert next(ln for ln in lines if ln.startswith("judge ")).endswith(" up")
