"""The runs of ``streamgrpo run`` on this machine, registered in the home so that other commands find them.

``run`` writes ``<home>/runs/<id>.json`` (:class:`RunRecord`: its bootstrap, topic prefix, run directory and
pid) as soon as its broker is up, and marks it finished at exit. :func:`locate` is how a command that reads
the loop (``status``, ``adapters``, ``label``) picks its Kafka: an explicit bootstrap (``--bootstrap``,
``STREAMGRPO_BOOTSTRAP``, ``[kafka] bootstrap``) wins; else ``--run ID``; else the latest live run; else the
broker of ``streamgrpo broker up`` (:func:`streamgrpo.topics.broker.resolve_bootstrap`, which also falls back
to the latest live run, so ``tail`` and ``analyse --live`` find it too). After a run its embedded broker is
gone; its record still names the run directory, whose ``archive/`` (the Parquet archive sink's output) is
what ``adapters list --run ID`` and ``eval --adapter planner@vN --run ID`` read.

What is covered: runs on this machine and home. What is not: runs of another user or home; a run killed with
SIGKILL stays "unfinished" in its record, but is not live (its pid is gone, or is no longer a streamgrpo
process) and is never picked as the live run.
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from streamgrpo.config import KafkaSettings
from streamgrpo.errors import ConfigError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RunRecord:
    """One ``streamgrpo run`` as registered in ``<home>/runs/<run_id>.json``."""

    run_id: str
    bootstrap: str
    topic_prefix: str
    run_dir: str
    pid: int
    started_at: float
    finished_at: float | None = None
    archive_dir: str | None = None  # the services' [streams] archive_dir (a user's own; None: <run dir>/archive)

    @property
    def archive(self) -> Path:
        """The run's Parquet event archive: the ``[streams] archive_dir`` its services write (recorded at start;
        ``<run dir>/archive``, the run's default, for a record without it)."""
        return Path(self.archive_dir) if self.archive_dir else Path(self.run_dir) / "archive"

    def live(self) -> bool:
        """Not marked finished and its process still runs (a streamgrpo process: a reused pid does not count)."""
        return self.finished_at is None and _is_streamgrpo(self.pid)


def _is_streamgrpo(pid: int) -> bool:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z" and b"streamgrpo" in cmdline


def record_path(home: Path, run_id: str) -> Path:
    return Path(home) / "runs" / f"{run_id}.json"


def _write(home: Path, record: RunRecord) -> None:
    path = record_path(home, record.run_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(asdict(record), indent=2))
    os.replace(tmp, path)


def register(home: Path, record: RunRecord) -> Path:
    """Write the record of a starting run; returns its path."""
    _write(home, record)
    return record_path(home, record.run_id)


def mark_finished(home: Path, run_id: str, at: float | None = None) -> None:
    """Mark a run finished (its broker and services are stopped); its record stays for the archive."""
    try:
        record = read(record_path(home, run_id))
    except ConfigError:
        return
    _write(home, replace(record, finished_at=time.time() if at is None else at))


def read(path: Path) -> RunRecord:
    try:
        return RunRecord(**json.loads(path.read_text()))
    except (OSError, ValueError, TypeError) as exc:
        raise ConfigError(f"run record {path} is unreadable ({exc}); remove it") from exc


def all_runs(home: Path) -> list[RunRecord]:
    """Every readable run record, oldest first (an unreadable one is logged and left out)."""
    out = []
    for path in sorted((Path(home) / "runs").glob("*.json")):
        try:
            out.append(read(path))
        except ConfigError as exc:
            log.warning("%s", exc)
    return sorted(out, key=lambda r: r.started_at)


def latest_live(home: Path) -> RunRecord | None:
    live = [r for r in all_runs(home) if r.live()]
    return live[-1] if live else None


def find(home: Path, run_id: str) -> RunRecord:
    """The run ``run_id``; a ConfigError listing the known runs when there is none."""
    path = record_path(home, run_id)
    if not path.is_file():
        known = ", ".join(r.run_id for r in all_runs(home)[-5:]) or "none"
        raise ConfigError(f"no run {run_id!r} under {Path(home) / 'runs'} (latest runs: {known}); "
                          "`streamgrpo run` registers each run there")
    return read(path)


def locate(kafka: KafkaSettings, home: Path, run_id: str | None = None) -> tuple[KafkaSettings, RunRecord | None]:
    """The Kafka settings a command should read with, and the run they belong to (None: no run involved).

    ``run_id`` given: that run (a finished one is returned with the settings unchanged: read its archive).
    Else an explicit bootstrap is kept as is; without one, the latest live run's bootstrap and prefix."""
    record = find(home, run_id) if run_id else None if kafka.bootstrap else latest_live(home)
    if record is None or not record.live():
        return kafka, record
    update = {"bootstrap": record.bootstrap}
    if not kafka.topic_prefix:
        update["topic_prefix"] = record.topic_prefix
    return kafka.model_copy(update=update), record


def locate_configured(config_path: str | None, run_id: str | None = None, *, bootstrap: str | None = None,
                      topic_prefix: str | None = None) -> tuple[KafkaSettings, RunRecord | None]:
    """:func:`locate` with the ``[kafka]`` settings of ``config_path`` (a command's ``--bootstrap`` and topic
    prefix applied when given) and its ``[broker] home``: what every command that finds a run calls."""
    from streamgrpo.config import BrokerSettings, load

    kafka = load(KafkaSettings, "kafka", path=config_path, overrides={"bootstrap": bootstrap,
                                                                       "topic_prefix": topic_prefix})
    return locate(kafka, load(BrokerSettings, "broker", path=config_path).home, run_id)
