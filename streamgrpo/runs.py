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

Records are trusted only as far as they can be checked (:func:`read`): a record that is not this user's file,
whose fields do not have their types (``started_at`` text, say) or whose ``run_id`` is not a plain name equal
to its file's is unreadable (logged and left out of :func:`all_runs`; an error naming the file for ``--run``).
A record is live only when its process is this user's and its command line is a ``streamgrpo ... run``
(:func:`_is_streamgrpo_run`): another user's process, or a reused pid, never makes a record the live run. A
``--run`` id that is not a plain name (``../../x``) is refused before any file is read. Not verifiable from the
outside: WHICH run a live ``streamgrpo run`` process is (its run id is not on its command line); a second run of
this user that reused the pid of a SIGKILLed one makes the dead one's record look live.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from streamgrpo.config import KafkaSettings
from streamgrpo.errors import ConfigError
from streamgrpo.log import printable

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
        """Not marked finished and its process still runs: this user's process, a ``streamgrpo ... run`` (a reused
        pid, another user's process or another streamgrpo command does not count)."""
        return self.finished_at is None and _is_streamgrpo_run(self.pid)


#: A run id: a plain file name (``streamgrpo run`` makes ``20260101-120000`` or ``20260101-120000-2``).
RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
_TYPES: dict[str, tuple[type, ...]] = {"run_id": (str,), "bootstrap": (str,), "topic_prefix": (str,),
                                       "run_dir": (str,), "pid": (int,), "started_at": (int, float),
                                       "finished_at": (int, float, type(None)), "archive_dir": (str, type(None))}


def check_run_id(run_id: str) -> str:
    """``run_id`` when it is a plain name; a ConfigError otherwise (``../../x`` would name a file outside runs/)."""
    if not RUN_ID.fullmatch(run_id) or ".." in run_id:
        raise ConfigError(f"{run_id!r} is not a run id: give the plain name `streamgrpo run` printed (e.g. "
                          "20260101-120000), as listed under <home>/runs/")
    return run_id


def _is_streamgrpo_run(pid: int) -> bool:
    """Whether ``pid`` is a live (not zombie) process of this user whose command line is a ``streamgrpo ... run``
    (the ``streamgrpo`` entry point or ``-m streamgrpo[.cli]``, with a later ``run`` argument)."""
    if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0:
        return False
    try:
        owner = os.stat(f"/proc/{pid}").st_uid
        args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    if state == "Z" or owner != os.getuid():
        return False
    for i, arg in enumerate(args):
        module = i > 0 and args[i - 1] == b"-m" and arg in (b"streamgrpo", b"streamgrpo.cli")
        if module or arg.rsplit(b"/", 1)[-1] == b"streamgrpo":
            return b"run" in args[i + 1:]
    return False


def record_path(home: Path, run_id: str) -> Path:
    return Path(home) / "runs" / f"{check_run_id(run_id)}.json"


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
    """The record in ``path``; a ConfigError naming the file when it is not this user's, not JSON, or its fields
    are missing, unknown or of the wrong type (see the module docstring)."""
    try:
        owner = path.stat().st_uid
        if owner != os.getuid():
            raise ValueError(f"the file is owned by uid {owner}, not by you (uid {os.getuid()}): not trusted")
        data = json.loads(path.read_text())
        if not isinstance(data, dict):
            raise TypeError(f"a JSON object is expected, not {type(data).__name__}")
        for name, value in data.items():
            kinds = _TYPES.get(name)
            if kinds is not None and (isinstance(value, bool) or not isinstance(value, kinds)):
                raise TypeError(f"{name} is {printable(repr(value), limit=80)}, not "
                                f"{' or '.join(k.__name__ for k in kinds)}")
        record = RunRecord(**data)
        if not all(math.isfinite(t) for t in (record.started_at, record.finished_at or 0.0)):
            raise ValueError("started_at and finished_at must be finite times")
        if not RUN_ID.fullmatch(record.run_id) or record.run_id != path.stem:
            raise ValueError(f"run_id {record.run_id!r} is not the plain name of its file {path.name}")
        return record
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
