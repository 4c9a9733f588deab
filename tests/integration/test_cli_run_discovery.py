"""The CLI finds the loop of `streamgrpo run` without flags, during the run (its registered broker and topic
prefix) and after it (its Parquet event archive), and `eval` checks an adapter's sha256 against the archived
AdapterPublished event when there is no broker.

Real parts: the embedded broker (the run's), real Avro events, a real Parquet archive written by the archive
sink's writer, real adapter files with their sha256, and a live process standing for the `run` process (what
`run` itself registers is checked by tests/e2e/test_run_registers_itself.py).
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from streamgrpo import runs
from streamgrpo.archive.schema import Place
from streamgrpo.archive.store import ArchiveWriter
from streamgrpo.avro import records as R
from streamgrpo.avro.ids import derived_id
from streamgrpo.cli import cli
from streamgrpo.config import KafkaSettings
from streamgrpo.models import adapter_store as store
from streamgrpo.topics.producer import EventProducer

pytestmark = pytest.mark.broker


def _published(version: int, uri: str = "/nowhere", sha256: str = "0" * 64) -> R.AdapterPublished:
    from fixtures.sample_events import sample_events

    pub = next(e for e in sample_events() if isinstance(e, R.AdapterPublished))
    env = dataclasses.replace(R.Envelope.new("trainer"), event_id=derived_id("discovery-test", version, uri))
    return dataclasses.replace(pub, envelope=env, adapter_name="planner", version=version, uri=uri, sha256=sha256,
                               parent_version=version - 1 if version > 1 else None)




def _env(home: Path) -> dict[str, str]:
    """A second terminal: only the home (no bootstrap, no prefix, no config)."""
    return {"STREAMGRPO_HOME": str(home), "STREAMGRPO_CONFIG": "", "STREAMGRPO_BOOTSTRAP": "",
            "STREAMGRPO_KAFKA__BOOTSTRAP": "", "STREAMGRPO_KAFKA__TOPIC_PREFIX": ""}


def _invoke(home: Path, *args: str) -> Any:
    env = {k: v for k, v in _env(home).items() if v}
    unset = [k for k, v in _env(home).items() if not v]
    result = CliRunner().invoke(cli, list(args), env={**env, **dict.fromkeys(unset)})
    assert result.exit_code == 0, (result.output, result.exception)
    return result


def test_status_adapters_and_tail_find_the_live_run_without_flags(kafka_ns: KafkaSettings, tmp_path: Path,
                                                                   run_process: subprocess.Popen[bytes]) -> None:
    with EventProducer(kafka_ns, "tests") as producer:
        for v in (1, 2):
            producer.send(_published(v))
    run_dir = tmp_path / "runs" / "20260101-120000"
    runs.register(tmp_path, runs.RunRecord("20260101-120000", kafka_ns.bootstrap or "", kafka_ns.topic_prefix,
                                           str(run_dir), run_process.pid, time.time()))
    status = json.loads(_invoke(tmp_path, "status", "--json", "--timeout", "0.2").stdout)
    assert (status["bootstrap"], status["prefix"], status["run_id"]) == (
        kafka_ns.bootstrap, kafka_ns.topic_prefix, "20260101-120000")
    assert status["versions"]["published"] == 2
    listed = [json.loads(line) for line in _invoke(tmp_path, "adapters", "list", "--json").stdout.splitlines()]
    assert [s["version"] for s in listed] == [0, 1, 2]
    tail = _invoke(tmp_path, "tail", "adapter-events", "--from-beginning", "--limit", "2").stdout.splitlines()
    assert sorted(json.loads(line)["event"]["version"] for line in tail) == [1, 2]
    live = _invoke(tmp_path, "analyse", "--live", "--format", "json", "SELECT count(*) AS n FROM adapter_published")
    assert json.loads(live.stdout.splitlines()[-1]) == {"n": 2}  # the run's broker, found without flags


def _adapter_dir(path: Path) -> str:
    path.mkdir(parents=True)
    (path / "adapter_config.json").write_text('{"r": 4}')
    (path / "adapter_model.safetensors").write_bytes(b"weights")
    return store.sha256_dir(path)


def _finished_run(home: Path) -> tuple[str, Path]:
    """A finished run: its record, its adapter store (v1, v2) and its archive (their AdapterPublished events)."""
    run_id = "20260101-130000"
    run_dir = home / "runs" / run_id
    writer = ArchiveWriter(run_dir / "archive")
    for v in (1, 2):
        path = store.version_dir(run_dir / "adapters", "planner", v)
        event = _published(v, uri=str(path), sha256=_adapter_dir(path))
        writer.add(event, Place("adapter-events", 0, v - 1, b"planner", int(time.time() * 1000)))
    writer.flush()
    runs.register(home, runs.RunRecord(run_id, "127.0.0.1:1", "", str(run_dir), 999_999_999, time.time() - 60,
                                       finished_at=time.time()))
    return run_id, run_dir


def test_after_the_run_adapters_list_and_show_read_its_archive(tmp_path: Path) -> None:
    run_id, _ = _finished_run(tmp_path)
    out = _invoke(tmp_path, "adapters", "list", "--run", run_id)
    assert f"run {run_id} has finished: read from its archive" in out.output
    listed = [json.loads(line) for line in _invoke(tmp_path, "adapters", "list", "--run", run_id, "--json")
              .stdout.splitlines()]
    assert [s["version"] for s in listed] == [0, 1, 2]
    shown = json.loads(_invoke(tmp_path, "adapters", "show", "2", "--run", run_id, "--json").stdout)
    assert shown["state"]["version"] == 2 and shown["state"]["parent_version"] == 1
    tailed = _invoke(tmp_path, "tail", "adapter-events", "--run", run_id, "--limit", "2")
    assert [json.loads(line)["event"]["version"] for line in tailed.stdout.splitlines()] == [1, 2]
    assert f"run {run_id} has finished: read from its archive" in tailed.stderr
    follow = CliRunner().invoke(cli, ["tail", "adapter-events", "--run", run_id, "--follow"],
                                env={"STREAMGRPO_HOME": str(tmp_path), "STREAMGRPO_CONFIG": ""})
    assert follow.exit_code == 2 and "has no new records to follow" in follow.output
    refused = CliRunner().invoke(cli, ["adapters", "promote", "2", "--run", run_id, "--reason", "x"],
                                 env={"STREAMGRPO_HOME": str(tmp_path), "STREAMGRPO_CONFIG": ""})
    assert refused.exit_code != 0 and "has finished: there is no loop to act on" in str(refused.exception)


def test_eval_checks_the_adapter_against_the_archived_event_and_refuses_a_mismatch(tmp_path: Path) -> None:
    from streamgrpo.evaluation.adapters import resolve

    run_id, run_dir = _finished_run(tmp_path)
    targets = resolve(["planner@v1"], [], all_versions=False, include_base=False, adapter_name="planner",
                      events=None, store_root=run_dir / "adapters")
    assert [(t.label, t.verified) for t in targets] == [("planner@v1", True)]
    (store.version_dir(run_dir / "adapters", "planner", 1) / "adapter_model.safetensors").write_bytes(b"tampered")
    result = CliRunner().invoke(cli, ["eval", "--adapter", "planner@v1", "--run", run_id, "--limit", "1",
                                      "--no-publish"],
                                env={"STREAMGRPO_HOME": str(tmp_path), "STREAMGRPO_CONFIG": ""})
    message = str(result.exception) + result.output
    assert result.exit_code != 0, message
    assert "planner@v1" in message and "sha256" in message and "refusing" in message
    assert f"{run_dir / 'archive'}" in message  # says which announcement it was checked against


def test_after_the_run_status_shows_its_history_from_the_archive(tmp_path: Path) -> None:
    """issue 21: `status` after the run refused ("its broker is gone"); it now shows the run's history with the live
    screen's folds: versions, the last version each worker served, stale share, A/B control arm, dead letters."""
    from fixtures.sample_events import sample_events

    from streamgrpo.lifecycle.pacing import CONTROL_ARM

    def sample(kind: type) -> Any:
        return next(e for e in sample_events() if isinstance(e, kind))

    run_id, run_dir = _finished_run(tmp_path)
    writer = ArchiveWriter(run_dir / "archive")
    now = int(time.time() * 1000)
    closed = dataclasses.replace(sample(R.GroupClosed), reason=CONTROL_ARM, trains=False, samples=0, received=4,
                                 missing_rollout_ids=[])
    writer.add(closed, Place("groups", 0, 0, b"g", now))
    done = sample(R.RolloutCompleted)
    done = dataclasses.replace(done, adapter_version=2, envelope=dataclasses.replace(
        done.envelope, producer=R.Producer(service="rollout", instance="w1")))
    writer.add(done, Place("rollouts", 0, 0, b"r", now))
    writer.add(dataclasses.replace(sample(R.DeadLetter), reason_code="decode_error", consumer="judge"),
               Place("dead-letters", 0, 0, None, now))
    writer.flush()
    screen = _invoke(tmp_path, "status", "--run", run_id).output
    assert f"run {run_id}  FINISHED, read from its archive {run_dir / 'archive'}" in screen
    assert "published v2" in screen and "rollout/w1 v2" in screen
    assert "A/B        control arm, judged for the comparison only (no samples): 1 groups, 4 rollouts" in screen
    assert "dead letters, the whole run 1 (decode_error 1)" in screen and "consumer group" not in screen
    data = json.loads(_invoke(tmp_path, "status", "--run", run_id, "--json").stdout)
    assert data["archive"] == str(run_dir / "archive") and data["versions"]["published"] == 2
    watch = CliRunner().invoke(cli, ["status", "--run", run_id, "--watch", "1"],
                               env={"STREAMGRPO_HOME": str(tmp_path), "STREAMGRPO_CONFIG": ""})
    assert watch.exit_code == 2 and "has finished: nothing to watch" in watch.output


def test_after_the_run_analyse_queries_its_archive_and_refuses_live(tmp_path: Path) -> None:
    run_id, _ = _finished_run(tmp_path)  # no [streams] archive_dir of its own: --run names the archive
    out = _invoke(tmp_path, "analyse", "--run", run_id, "--format", "json",
                  "SELECT count(*) AS n FROM adapter_events")
    assert json.loads(out.stdout.splitlines()[-1]) == {"n": 2}
    live = CliRunner().invoke(cli, ["analyse", "--run", run_id, "--live", "SELECT 1"],
                              env={"STREAMGRPO_HOME": str(tmp_path), "STREAMGRPO_CONFIG": ""})
    assert live.exit_code == 2 and "has finished: its broker is gone; drop --live" in live.output
