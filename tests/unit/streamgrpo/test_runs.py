"""The run registry of the home (streamgrpo.runs): what `streamgrpo run` writes and how commands pick a loop.

Real processes stand for the runs (a run is live while its streamgrpo process runs); no broker is needed.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from streamgrpo import runs
from streamgrpo.config import KafkaSettings
from streamgrpo.errors import ConfigError


@pytest.fixture
def process() -> Iterator[subprocess.Popen[bytes]]:
    """A live process whose command line names streamgrpo (as `streamgrpo run`'s does)."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", "streamgrpo", "run"])
    deadline = time.monotonic() + 10
    while not runs.RunRecord("x", "", "", "", proc.pid, 0.0).live() and time.monotonic() < deadline:
        time.sleep(0.05)  # /proc/<pid>/cmdline shows the new command line a moment after exec
    yield proc
    proc.kill()
    proc.wait()


def _record(home: Path, run_id: str, pid: int, started: float, prefix: str = "") -> runs.RunRecord:
    rec = runs.RunRecord(run_id, f"127.0.0.1:{9000 + int(started) % 100}", prefix, str(home / "runs" / run_id), pid,
                         started)
    runs.register(home, rec)
    return rec


def test_the_latest_live_run_is_found_and_a_finished_or_dead_one_is_not(tmp_path: Path,
                                                                          process: subprocess.Popen[bytes]) -> None:
    assert runs.latest_live(tmp_path) is None
    dead = subprocess.Popen([sys.executable, "-c", "pass", "streamgrpo"])
    dead.wait()
    _record(tmp_path, "a-dead", dead.pid, 10.0)  # a SIGKILLed run: never marked finished, pid gone
    older = _record(tmp_path, "b-older", process.pid, 20.0)
    newer = _record(tmp_path, "c-newer", process.pid, 30.0)
    assert runs.latest_live(tmp_path) == newer
    runs.mark_finished(tmp_path, "c-newer", at=99.0)
    assert runs.find(tmp_path, "c-newer").finished_at == 99.0 and not runs.find(tmp_path, "c-newer").live()
    assert runs.latest_live(tmp_path) == older
    not_ours = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])  # pid of something else
    try:
        _record(tmp_path, "d-reused-pid", not_ours.pid, 40.0)
        assert runs.latest_live(tmp_path) == older
    finally:
        not_ours.kill()
        not_ours.wait()


def test_locate_prefers_an_explicit_bootstrap_then_run_id_then_the_latest_live_run(
        tmp_path: Path, process: subprocess.Popen[bytes]) -> None:
    rec = _record(tmp_path, "r1", process.pid, time.time(), prefix="p1.")
    found, which = runs.locate(KafkaSettings(), tmp_path)
    assert which == rec and (found.bootstrap, found.topic_prefix) == (rec.bootstrap, "p1.")
    explicit = KafkaSettings(bootstrap="kafka:9092")
    assert runs.locate(explicit, tmp_path) == (explicit, None)
    by_id, which = runs.locate(explicit, tmp_path, "r1")
    assert which == rec and by_id.bootstrap == rec.bootstrap
    mine = runs.locate(KafkaSettings(topic_prefix="mine."), tmp_path)[0]
    assert mine.topic_prefix == "mine."  # a configured prefix is kept
    runs.mark_finished(tmp_path, "r1")
    kafka, which = runs.locate(KafkaSettings(), tmp_path, "r1")  # finished: the settings stay, the record says where
    assert which is not None and which.archive == tmp_path / "runs" / "r1" / "archive" and kafka.bootstrap is None
    with pytest.raises(ConfigError, match=r"no run 'nope' under .*latest runs: r1"):
        runs.locate(KafkaSettings(), tmp_path, "nope")


def test_an_unreadable_record_is_skipped_with_a_warning(tmp_path: Path, process: subprocess.Popen[bytes],
                                                        caplog: pytest.LogCaptureFixture) -> None:
    rec = _record(tmp_path, "good", process.pid, 1.0)
    (tmp_path / "runs" / "bad.json").write_text("{not json")
    assert runs.latest_live(tmp_path) == rec
    assert "bad.json is unreadable" in caplog.text


def test_run_ids_are_unique_within_one_second(tmp_path: Path) -> None:
    from streamgrpo.cli.run import new_run_dir

    ids = [new_run_dir(tmp_path)[0] for _ in range(3)]
    assert len(set(ids)) == 3 and all((tmp_path / "runs" / i / "logs").is_dir() for i in ids)
