"""Reward metrics and the Parquet archive on the real broker, queried with `streamgrpo analyse`."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from support.streams import WorkerProcess, synthetic_group

from streamgrpo.analysis.cli import analyse
from streamgrpo.archive.store import parts
from streamgrpo.config import KafkaSettings
from streamgrpo.topics.follow import read_topic
from streamgrpo.topics.producer import EventProducer

pytestmark = pytest.mark.broker


def test_metrics_and_archive(kafka_ns: KafkaSettings, tmp_path: Path) -> None:
    archive = tmp_path / "archive"
    worker = WorkerProcess(kafka_ns, "metrics,archive", tmp_path / "data", {
        "metrics_window_s": 1, "archive_dir": archive, "archive_roll_s": 1, "success_threshold": 0.5})
    g1 = synthetic_group("m1", [1.0, 0.0, 1.0, 1.0], version=1, turns=[1, 2, 3, 2])
    g2 = synthetic_group("m2", [0.2, 0.4], version=2)
    try:
        with EventProducer(kafka_ns, "test") as prod:
            for event in [*g1.events(), *g2.events(), g1.rewards[0]]:
                prod.send(event)
        deadline = time.monotonic() + 60
        metrics: list = []
        while time.monotonic() < deadline:
            metrics = [r.event for r in read_topic(kafka_ns, "reward-metrics", timeout_s=10)]
            if sum(m.count for m in metrics) >= 6 and parts(archive / "rewards") and parts(archive / "planner-actions"):
                break
            time.sleep(0.5)
        time.sleep(2)  # let the archive roll the remaining buffers
    finally:
        worker.stop()
    by_version: dict[int, list] = {}
    for m in metrics:
        by_version.setdefault(m.adapter_version, []).append(m)
    v1 = by_version[1]
    n1 = sum(m.count for m in v1)
    assert n1 == 4, worker.log_text()[-2000:]  # the duplicate reward is not counted twice
    assert sum(m.mean_reward * m.count for m in v1) / n1 == pytest.approx(0.75)
    assert sum(m.success_rate * m.count for m in v1) / n1 == pytest.approx(0.75)
    assert sum(m.mean_turns * m.count for m in v1) / n1 == pytest.approx(2.0)
    assert sum(m.count for m in by_version[2]) == 2

    result = CliRunner().invoke(analyse, ["--archive-dir", str(archive), "--format", "json",
                                          "SELECT adapter_version, avg(score) AS mean, count(*) AS n FROM rewards "
                                          "GROUP BY 1 ORDER BY 1"], obj={})
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in result.output.splitlines()]
    assert rows == [{"adapter_version": 1, "mean": 0.75, "n": 4}, {"adapter_version": 2, "mean": pytest.approx(0.3), "n": 2}]
    result = CliRunner().invoke(analyse, ["--archive-dir", str(archive), "--format", "csv",
                                          "SELECT count(DISTINCT rollout_id) FROM planner_actions"], obj={})
    assert result.exit_code == 0 and result.output.splitlines()[1] == "6", result.output
