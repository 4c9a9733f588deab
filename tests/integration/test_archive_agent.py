"""The archive agent on the real broker: #12 item 3 (OK + ERROR Rewards in one roll), restarts, redelivery.

Before: an OK Reward (components) and an ERROR Reward (no components: a rollout for an unknown task) in one
roll crashed the streams worker, and again after every restart. Now the worker keeps running, archives both,
and a restart (SIGKILL mid-stream, then a fresh consumer group that re-reads everything) adds no duplicate row.
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import pytest
from support.streams import WorkerProcess, synthetic_group

from streamgrpo.archive import duck
from streamgrpo.archive.store import parts
from streamgrpo.avro import records as R
from streamgrpo.config import KafkaSettings
from streamgrpo.topics.producer import EventProducer

pytestmark = pytest.mark.broker


def rows(archive: Path, sql: str) -> list[tuple]:
    return duck.query(archive, sql)[1] if parts(archive) else []


def wait_rows(archive: Path, sql: str, want: list[tuple], worker: WorkerProcess, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and rows(archive, sql) != want:
        assert worker.alive(), worker.log_text()[-3000:]
        time.sleep(0.5)
    assert rows(archive, sql) == want, worker.log_text()[-3000:]


@pytest.mark.fault
def test_ok_and_error_rewards_archive_and_survive_restarts(kafka_ns: KafkaSettings, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STREAMGRPO_KAFKA__SESSION_TIMEOUT_MS", "3000")  # a killed member leaves the group fast
    archive = tmp_path / "archive"
    settings = {"archive_dir": archive, "archive_roll_s": 0.5, "archive_roll_records": 1000}
    g = synthetic_group("arch-ok", [1.0, 0.0, 1.0])
    ok = [replace(r, components=[R.RewardComponent("correct", r.score, 1.0)]) for r in g.rewards]
    unknown = synthetic_group("arch-unknown-task", [0.0, 0.0], errors=[0, 1])
    errors = [replace(r, error="no Task with id arch-unknown-task") for r in unknown.rewards]
    assert errors[0].components == [] and ok[0].components
    count = "SELECT status, count(*) FROM rewards GROUP BY 1 ORDER BY 1"

    worker = WorkerProcess(kafka_ns, "archive", tmp_path / "data", settings)
    try:
        with EventProducer(kafka_ns, "test") as prod:
            for event in [*g.actions, *ok, *errors]:  # OK and ERROR rewards land in one roll
                prod.send(event)
        wait_rows(archive, count, [("ERROR", 2), ("OK", 3)], worker)
        worker.kill()  # SIGKILL: whatever was rolled but not committed is read again
        worker = WorkerProcess(kafka_ns, "archive", tmp_path / "data", settings)
        with EventProducer(kafka_ns, "test") as prod:
            for event in [*ok, *errors, *g.completions]:  # redelivered duplicates, then new events
                prod.send(event)
        wait_rows(archive, "SELECT count(*) FROM rollouts", [(3,)], worker)
        time.sleep(2)
        assert worker.alive(), worker.log_text()[-3000:]
    finally:
        worker.stop()
    # a consumer group that starts over (e.g. offsets lost with the broker) re-reads every record: nothing new
    files = len(parts(archive))
    fresh = WorkerProcess(kafka_ns, "archive", tmp_path / "data2", {**settings, "app_id": "archive-again"})
    try:
        deadline = time.monotonic() + 120
        while "archive-again-archive assigned" not in fresh.log_text() and time.monotonic() < deadline:
            time.sleep(0.5)
        verdict = R.Verdict(R.Envelope.new("test", task_id="arch-ok", group_id=g.group_id,
                                           rollout_id=g.rollout_ids[0], turn=1), R.Decision.STOP, "ok", "rule")
        with EventProducer(kafka_ns, "test") as prod:
            prod.send(verdict)
        wait_rows(archive, "SELECT count(*) FROM verdicts", [(1,)], fresh)  # it read up to the end of the log
        time.sleep(3)
        assert fresh.alive(), fresh.log_text()[-3000:]
    finally:
        fresh.stop()
    assert rows(archive, count) == [("ERROR", 2), ("OK", 3)]
    raw = duck.query(archive, "SELECT count(*) FROM read_parquet('" + str(archive) + "/**/*.parquet', "
                              "union_by_name=true)")[1]
    assert raw == [(len(g.actions) + 5 + 3 + 1,)], "no duplicate row on disk, even before the views' de-duplication"
    assert len(parts(archive)) == files + 1  # only the new verdict's file
    (error,) = rows(archive, "SELECT components, error FROM rewards WHERE status = 'ERROR' LIMIT 1")
    assert error == ([], "no Task with id arch-unknown-task")
