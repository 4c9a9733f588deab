"""Readers of the run registry and of a finished run's archive against hostile or broken inputs (issue 38,
findings 12 to 15): ``status``, ``tail`` and ``label`` run discovery never crash with a traceback, never trust a
record they cannot check, and never show an empty or inconsistent history without a word.

Real parts: ``streamgrpo`` processes (``python -m streamgrpo.cli``) for what a person sees (exit status, one
``error:`` line, no traceback), a real Parquet archive written by the archive sink's writer (one file then altered
as a foreign writer would), real processes standing for runs (one of them another user's when the tests run as
root). No broker: every run here is finished, or no command gets as far as Kafka.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from streamgrpo import runs
from streamgrpo.archive.schema import Place
from streamgrpo.archive.store import ArchiveWriter, parts
from streamgrpo.avro import records as R
from streamgrpo.avro.ids import derived_id
from streamgrpo.config import KafkaSettings
from streamgrpo.errors import ConfigError

RUN = "20260101-130000"


def _sample(kind: type[R.Event]) -> Any:
    from fixtures.sample_events import sample_events

    return next(e for e in sample_events() if isinstance(e, kind))


def _cli(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``streamgrpo ARGS`` as a person runs it: a second terminal with only the home set."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMGRPO")}
    env.update(STREAMGRPO_HOME=str(home), STREAMGRPO_CONFIG="")
    return subprocess.run([sys.executable, "-m", "streamgrpo.cli", *args], env=env, capture_output=True, text=True,
                          timeout=120)


def _published(version: int, auto_promote: bool = True) -> R.AdapterPublished:
    pub = _sample(R.AdapterPublished)
    env = dataclasses.replace(R.Envelope.new("trainer"), event_id=derived_id("readers-test", version))
    return dataclasses.replace(pub, envelope=env, version=version, parent_version=version - 1 or None,
                               uri=f"/store/planner/v{version}", auto_promote=auto_promote)


def _finished(home: Path, archive_dir: Path | None = None, run_id: str = RUN) -> Path:
    """A finished run's record (its archive: ``<run dir>/archive``, or ``archive_dir``); returns the archive."""
    run_dir = home / "runs" / run_id
    run_dir.mkdir(parents=True, exist_ok=True)
    runs.register(home, runs.RunRecord(run_id, "127.0.0.1:1", "", str(run_dir), 999_999_999, time.time() - 60,
                                       finished_at=time.time(),
                                       archive_dir=None if archive_dir is None else str(archive_dir)))
    return archive_dir if archive_dir is not None else run_dir / "archive"


def _archive(root: Path, killed: bool = False) -> None:
    """v1 and v2 published (each its own primary: the trainer's canary_share 0) with their registry states, two
    closed groups. ``killed``: the broker died after v2's AdapterPublished and before the streams worker wrote
    v2's AdapterState, so the archived ``adapter-registry`` still says v1 PRIMARY."""
    writer, now = ArchiveWriter(root), int(time.time() * 1000)
    state = _sample(R.AdapterState)
    for v in (1, 2):
        writer.add(_published(v), Place("adapter-events", 0, v - 1, b"planner", now))
        if v == 1 or not killed:
            env = dataclasses.replace(R.Envelope.new("streams"), event_id=derived_id("readers-state", v))
            writer.add(dataclasses.replace(state, envelope=env, version=v, parent_version=v - 1 or None,
                                           status=R.AdapterStatus.PRIMARY), Place("adapter-registry", 0, v - 1,
                                                                                  b"planner", now))
    for n in range(2):
        env = dataclasses.replace(R.Envelope.new("streams", task_id=f"t{n}", group_id=f"g{n}"),
                                  event_id=derived_id("readers-group", n))
        writer.add(dataclasses.replace(_sample(R.GroupClosed), envelope=env), Place("groups", 0, n, b"g", now))
    writer.flush()


def _alter_group_status(root: Path, value: str) -> Path:
    """Rewrite the archived GroupClosed file with ``value`` as the status of its first row (an enum value this
    contract does not know: a file of a newer writer, or altered); returns the file."""
    (path,) = parts(root / "groups" / "GroupClosed")
    table = pq.read_table(path)
    statuses = table.column("status").to_pylist()
    statuses[0] = value
    i = table.schema.get_field_index("status")
    pq.write_table(table.set_column(i, table.schema.field(i), pa.array(statuses, pa.string())), path)
    return path


# -- finding 12: an unknown enum value in an archive part ------------------------------------------------------
def test_status_and_tail_of_a_run_skip_an_archived_row_with_an_unknown_enum_and_name_its_file(tmp_path: Path) -> None:
    """``status --run`` and ``tail --run`` exited 1 with a ValueError traceback ('BOGUS' is not a valid
    GroupStatus). The row is skipped with a warning naming the file; everything else is shown."""
    archive = _finished(tmp_path)
    _archive(archive)
    bad = _alter_group_status(archive, "BOGUS")
    status = _cli(tmp_path, "status", "--run", RUN)
    assert status.returncode == 0, status.stderr[-3000:]
    assert "Traceback" not in status.stderr and "published v2   primary v2" in status.stdout
    warning = next(ln for ln in status.stderr.splitlines() if "does not decode" in ln)
    assert str(bad) in warning and "BOGUS" in warning and "skipped that row" in warning
    tail = _cli(tmp_path, "tail", "groups", "--run", RUN)
    assert tail.returncode == 0, tail.stderr[-3000:]
    assert "Traceback" not in tail.stderr and str(bad) in tail.stderr
    assert [json.loads(line)["event"]["envelope"]["group_id"] for line in tail.stdout.splitlines()] == ["g1"]


def test_a_reader_that_does_not_skip_gets_an_error_naming_the_file(tmp_path: Path) -> None:
    """replay and eval read the archive without ``skip_bad``: an ArchiveError that names the file and the row's
    place, never a bare ValueError."""
    from streamgrpo.archive.errors import ArchiveError
    from streamgrpo.archive.store import read_events

    _archive(tmp_path)
    bad = _alter_group_status(tmp_path, "BOGUS")
    with pytest.raises(ArchiveError, match=r"GroupClosed row in .*\(partition 0, offset 0\) does not decode") as err:
        list(read_events(tmp_path, "groups"))
    assert str(bad) in str(err.value) and "move the file out of the archive" in str(err.value)


# -- finding 13: a run record whose started_at is text ----------------------------------------------------------


@pytest.mark.parametrize("field,value", [("started_at", "yesterday"), ("pid", "1"), ("finished_at", "later"),
                                         ("run_id", "../../elsewhere")])
def test_a_malformed_record_is_skipped_with_a_warning_naming_its_file(tmp_path: Path, field: str, value: Any,
                                                                      run_process: subprocess.Popen[bytes],
                                                                      caplog: pytest.LogCaptureFixture) -> None:
    """A record whose started_at is text made every run discovery raise TypeError while sorting the runs
    (``status`` without flags, ``status --run`` of an unknown id). It is now left out with a warning that names
    the file and the field; the good run is still found."""
    good = runs.RunRecord("good", "127.0.0.1:9", "p.", str(tmp_path / "runs" / "good"), run_process.pid,
                          time.time())
    runs.register(tmp_path, good)
    data = {**dataclasses.asdict(good), "run_id": "bad", field: value}
    bad = tmp_path / "runs" / "bad.json"
    bad.write_text(json.dumps(data))
    caplog.set_level(logging.WARNING, logger="streamgrpo.runs")
    assert runs.latest_live(tmp_path) == good and runs.all_runs(tmp_path) == [good]
    assert f"run record {bad} is unreadable" in caplog.text and field in caplog.text
    with pytest.raises(ConfigError, match=r"no run 'nope' under .*latest runs: good"):
        runs.find(tmp_path, "nope")
    with pytest.raises(ConfigError, match=rf"run record {re.escape(str(bad))} is unreadable .*{field}"):
        runs.find(tmp_path, "bad")


def test_status_with_a_record_whose_started_at_is_text_says_so_and_exits_clearly(tmp_path: Path) -> None:
    _finished(tmp_path)
    (tmp_path / "runs" / "20260101-140000.json").write_text(json.dumps(
        {"run_id": "20260101-140000", "bootstrap": "127.0.0.1:1", "topic_prefix": "", "run_dir": str(tmp_path),
         "pid": 1, "started_at": "2026-01-01T14:00:00"}))
    out = _cli(tmp_path, "status", "--run", "nope")
    assert "Traceback" not in out.stderr, out.stderr[-3000:]
    assert out.returncode == 78 and f"error: no run 'nope' under {tmp_path / 'runs'} (latest runs: {RUN})" in out.stderr
    assert f"run record {tmp_path / 'runs' / '20260101-140000.json'} is unreadable" in out.stderr


# -- finding 14: records that cannot be verified, run ids that are paths -----------------------------------------
def test_a_record_naming_a_streamgrpo_process_of_another_user_is_not_live(tmp_path: Path,
                                                                         run_process: subprocess.Popen[bytes],
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """The process is a `streamgrpo run` but not ours (seen from a user whose uid is not its owner's): the record
    is not live, so `status` and `label` never connect to the bootstrap it names."""
    rec = runs.RunRecord("r1", "evil:9092", "", str(tmp_path / "runs" / "r1"), run_process.pid, time.time())
    runs.register(tmp_path, rec)
    assert rec.live() and runs.latest_live(tmp_path) == rec  # ours: live
    monkeypatch.setattr(runs.os, "getuid", lambda: os.stat(f"/proc/{run_process.pid}").st_uid + 1)
    assert not rec.live()


@pytest.mark.skipif(os.getuid() != 0, reason="starting a process as another user needs root")
def test_a_record_naming_another_users_real_streamgrpo_run_is_never_picked(tmp_path: Path) -> None:
    """A real process of uid 65534 whose command line is a `streamgrpo run`, and a record of ours naming it (a
    stale record whose pid another user's run reused): no live run is found, `label` does not connect to the
    record's bootstrap. Also a record file that is not ours is unreadable."""
    other = subprocess.Popen(["/bin/sh", "-c", "sleep 60; exit 0", "streamgrpo", "run"], user=65534, cwd="/")
    try:
        time.sleep(0.5)  # its command line is in /proc a moment after exec
        assert b"streamgrpo\0run" in Path(f"/proc/{other.pid}/cmdline").read_bytes()
        rec = runs.RunRecord("r1", "127.0.0.1:9", "", str(tmp_path / "runs" / "r1"), other.pid, time.time())
        runs.register(tmp_path, rec)
        assert not rec.live() and runs.latest_live(tmp_path) is None
        kafka, which = runs.locate(KafkaSettings(), tmp_path)
        assert which is None and kafka.bootstrap is None  # not the record's 127.0.0.1:9
    finally:
        other.kill()
        other.wait()
    os.chown(runs.record_path(tmp_path, "r1"), 65534, 65534)
    with pytest.raises(ConfigError, match="owned by uid 65534, not by you"):
        runs.find(tmp_path, "r1")


@pytest.mark.parametrize("command", [["status"], ["tail", "adapter-events"], ["label", "r-1", "0.5"]])
def test_a_run_id_that_is_a_path_is_refused_before_any_file_is_read(tmp_path: Path, command: list[str]) -> None:
    """``--run ../../x`` read ``<home>/../x.json``: a record outside runs/, here a finished run with an archive
    whose history was shown. Refused with a clear error; nothing outside runs/ is read."""
    home = tmp_path / "home"
    _archive(_finished(tmp_path, run_id="x"))
    shutil.copy(runs.record_path(tmp_path, "x"), tmp_path / "x.json")  # <home>/runs/../../x.json
    (home / "runs").mkdir(parents=True)
    out = _cli(home, *command, "--run", "../../x")
    assert "Traceback" not in out.stderr, out.stderr[-3000:]
    assert out.returncode == 78 and "error: '../../x' is not a run id" in out.stderr
    assert "published" not in out.stdout and "FINISHED" not in out.stdout and "adapter_name" not in out.stdout


# -- finding 15: an archive_dir with no archive in it; two lines of one fold -----------------------------------
@pytest.mark.parametrize("where", ["root", "link-to-etc", "empty"])
def test_an_archive_dir_without_archive_parts_says_so(tmp_path: Path, where: str) -> None:
    """A record whose archive_dir is ``/`` or a symlink to ``/etc`` gave exit 0 and an empty history (published
    v0, no dead letters) with no word that nothing was found there."""
    target = {"root": Path("/"), "link-to-etc": tmp_path / "etc-link", "empty": tmp_path / "empty"}[where]
    if where == "link-to-etc":
        target.symlink_to("/etc")
    elif where == "empty":
        target.mkdir()
    _finished(tmp_path, archive_dir=target)
    for command in (["status", "--run", RUN], ["tail", "adapter-events", "--run", RUN]):
        out = _cli(tmp_path, *command)
        assert "Traceback" not in out.stderr, out.stderr[-3000:]
        assert out.returncode != 0 and f"no archive parts found under {target}" in out.stderr
        assert out.stdout == ""


def test_tail_of_a_topic_the_run_never_archived_says_so(tmp_path: Path) -> None:
    _archive(_finished(tmp_path))
    out = _cli(tmp_path, "tail", "rewards", "--run", RUN)
    assert out.returncode == 0 and out.stdout == ""
    note = next(ln for ln in out.stderr.splitlines() if ln.startswith("(no archived rewards events in"))
    assert sorted(note.rsplit("archived topics: ", 1)[1].rstrip(")").split(", ")) == [
        "adapter-events", "adapter-registry", "groups"]


def test_a_broker_killed_run_shows_one_primary_in_both_lines(tmp_path: Path) -> None:
    """The broker died between v2's AdapterPublished (primary on publication) and the AdapterState the streams
    worker writes after it: the versions line said "primary v2" (the fold of adapter-events) and the registry line
    "v1 PRIMARY" (the archived adapter-registry). Both lines now come from the one fold."""
    from streamgrpo.cli.status import history, render

    archive = _finished(tmp_path)
    _archive(archive, killed=True)
    report = history(runs.find(tmp_path, RUN), canary_share=0.5)
    assert report.versions == {"published": 2, "primary": 2, "canary": None}
    assert report.registry == {1: "RETIRED", 2: "PRIMARY"}
    lines = render(report).splitlines()
    assert "published v2   primary v2   canary -" in lines[2] and lines[3] == "registry   v1 RETIRED  v2 PRIMARY"
