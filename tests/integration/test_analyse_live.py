"""`analyse --live` (and `analyse` with no archive): the same views and reports over a snapshot of the topics."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from support.history import build

from streamgrpo.analysis.cli import analyse
from streamgrpo.config import KafkaSettings
from streamgrpo.topics.producer import EventProducer

pytestmark = pytest.mark.broker


def test_live_snapshot_when_no_archive_exists(kafka_ns: KafkaSettings, tmp_path: Path) -> None:
    log, _ = build()
    with EventProducer(kafka_ns, "test") as prod:
        for event, _ in log.records:
            prod.send(event)
    args = ["--bootstrap", kafka_ns.bootstrap or "", "--topic-prefix", kafka_ns.topic_prefix, "--format", "json"]
    out = CliRunner().invoke(analyse, ["--archive-dir", str(tmp_path / "none"), "--report", "turns", *args], obj={})
    assert out.exit_code == 0, out.output + repr(out.exception)
    assert "querying a snapshot of the topics" in out.output
    turns = {(r := json.loads(line))["turns"]: r["rollouts"] for line in out.output.splitlines() if line.startswith("{")}
    assert turns == {1: 4, 2: 1, 3: 1}
    out = CliRunner().invoke(analyse, ["--live", "SELECT count(*) AS n FROM trajectories", *args], obj={})
    assert out.exit_code == 0 and '{"n": 6}' in out.output, out.output
