"""Where ``streamgrpo serve`` serves from: which run, which broker, which adapter store (:func:`locate`).

``serve`` finds the loop the way ``streamgrpo status`` does (:mod:`streamgrpo.runs`), and never refuses to start
for want of one:

1. ``--no-broker``: nothing is recorded and no broker is contacted. Alone, the base model (v0) answers; with
   ``--run ID``, the versions that run's event archive holds are served from its adapter store.
2. ``--run ID``: that run. Live: its broker and topic prefix (recorded), its adapter store. Finished: its archive
   and its store, nothing recorded (its embedded broker is gone).
3. A configured bootstrap (``--bootstrap``, ``STREAMGRPO_BOOTSTRAP``, ``[kafka] bootstrap``): that broker; when a
   live run of this home uses that very broker, its adapter store and topic prefix (unless one is configured) too.
4. Else the latest live ``streamgrpo run`` of the home, else the broker of ``streamgrpo broker up``.
5. No broker found, or the one found does not answer within ``probe_timeout_s``: the base model answers and
   nothing is recorded (:attr:`Where.why_not_recorded` says why, for the one warning ``serve`` logs).

A run's adapter store is its settings file's ``[loop] adapter_store`` (``<run dir>/adapters`` by default: each run
has its own); its settings file (``<run dir>/streamgrpo.toml``) also gives the ``[rollout]`` settings when no
``--config`` is given, so the served agent is the one the run trains (same base model, tools, prompts).

What is not covered: runs of another home or user (as :mod:`streamgrpo.runs`); a run found by its bootstrap when
several live runs share one broker (the latest wins; ``--run`` picks one).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from streamgrpo import runs
from streamgrpo.config import BrokerSettings, KafkaSettings, LoopSettings, load
from streamgrpo.runs import RunRecord

log = logging.getLogger(__name__)
#: Seconds the broker found has to answer a metadata request before serve gives up on recording.
PROBE_TIMEOUT_S = 3.0


@dataclass(frozen=True)
class Where:
    """What ``serve`` serves from (see the module docstring)."""

    config_path: str | None  # the settings file [rollout] and [loop] are read from (the user's, else the run's)
    kafka: KafkaSettings | None  # the broker calls are recorded on and versions followed from; None: not recorded
    run: RunRecord | None = None
    adapter_store: Path | None = None  # the run's adapter store; None: [loop] adapter_store of config_path
    archive: Path | None = None  # versions from this event archive (a finished run, or --no-broker --run)
    why_not_recorded: str = ""  # why nothing is recorded ('' when kafka is set)

    @property
    def recording(self) -> bool:
        return self.kafka is not None


def broker_reachable(kafka: KafkaSettings, timeout_s: float = PROBE_TIMEOUT_S) -> bool:
    """True when the bootstrap broker answers a metadata request within ``timeout_s``."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    from streamgrpo.topics.clients import client_config

    try:
        AdminClient(client_config(kafka)).list_topics(timeout=timeout_s)
    except KafkaException:
        return False
    return True


def run_settings(record: RunRecord) -> Path | None:
    """The run's settings file (``<run dir>/streamgrpo.toml``), or None when it has none."""
    path = Path(record.run_dir) / "streamgrpo.toml"
    return path if path.is_file() else None


def run_store(record: RunRecord) -> Path:
    """The run's adapter store: ``[loop] adapter_store`` of its settings file, else ``<run dir>/adapters``."""
    path = run_settings(record)
    if path is None:
        return Path(record.run_dir) / "adapters"
    return Path(load(LoopSettings, "loop", path=path).adapter_store)


def run_on(home: Path, kafka: KafkaSettings) -> RunRecord | None:
    """The latest live run of ``home`` whose broker is ``kafka.bootstrap`` (and whose topic prefix is the configured
    one, when one is), or None."""
    wanted = {h.strip() for h in (kafka.bootstrap or "").split(",") if h.strip()}
    same = [r for r in runs.all_runs(home) if {h.strip() for h in r.bootstrap.split(",")} == wanted
            and (not kafka.topic_prefix or kafka.topic_prefix == r.topic_prefix) and r.live()]
    return same[-1] if same else None


def _on_run(kafka: KafkaSettings, record: RunRecord) -> KafkaSettings:
    update = {"bootstrap": record.bootstrap}
    if not kafka.topic_prefix:
        update["topic_prefix"] = record.topic_prefix
    return kafka.model_copy(update=update)


def locate(config_path: str | None, run_id: str | None = None, *, bootstrap: str | None = None,
           no_broker: bool = False, probe: Callable[[KafkaSettings], bool] = broker_reachable) -> Where:
    """Where to serve from (see the module docstring). ConfigError only for a ``--run`` that does not exist or whose
    record is unreadable; a missing or silent broker is never an error."""
    from streamgrpo.topics.broker import resolve_bootstrap
    from streamgrpo.topics.errors import BrokerError

    home = load(BrokerSettings, "broker", path=config_path).home
    kafka = load(KafkaSettings, "kafka", path=config_path, overrides={"bootstrap": bootstrap})

    def serving(record: RunRecord | None, kafka: KafkaSettings | None, archive: Path | None, why: str) -> Where:
        if record is None:
            return Where(config_path, kafka, None, None, archive, why)
        settings = config_path if config_path is not None else run_settings(record)
        return Where(str(settings) if settings is not None else None, kafka, record, run_store(record), archive, why)

    record: RunRecord | None
    if no_broker:
        record = runs.find(home, run_id) if run_id else None
        return serving(record, None, record.archive if record is not None else None, "--no-broker")
    if run_id:
        record = runs.find(home, run_id)
    elif kafka.bootstrap:
        record = run_on(home, kafka)
    else:
        record = runs.latest_live(home)
    if record is not None and not record.live():
        return serving(record, None, record.archive,
                       f"run {record.run_id} has finished: its broker is gone (the versions its archive holds are "
                       "served)")
    if record is not None:
        kafka = _on_run(kafka, record)
    if not kafka.bootstrap:
        try:
            kafka = kafka.model_copy(update={"bootstrap": resolve_bootstrap(kafka, load(BrokerSettings, "broker",
                                                                                         path=config_path))})
        except BrokerError:
            return serving(None, None, None, f"no Kafka broker configured, no `streamgrpo broker up` broker and no "
                           f"live `streamgrpo run` in {home}")
    if not probe(kafka):
        archive = record.archive if record is not None and record.archive.is_dir() else None
        return serving(record, None, archive, f"the broker at {kafka.bootstrap} does not answer")
    return serving(record, kafka, None, "")
