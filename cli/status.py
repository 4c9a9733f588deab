"""``streamgrpo status``: one screen of what the system is doing, from the topics and the metrics endpoints.

What it shows, and where each figure comes from:

- consumer lag per group, topic and partition: the committed offsets of every consumer group
  (confluent-kafka AdminClient) against the true end of each partition (:func:`end_offsets`, which
  also corrects the embedded Tansu's high-watermark quirk);
- adapter versions published / primary / canary and the status of each announced version: ONE fold of
  ``adapter-events`` (the registry fold, :mod:`streamgrpo.lifecycle.registry`, with ``[loop] canary_share``), so
  the two lines never disagree (``adapter-registry``, which the streams worker writes after that fold, is not read:
  it trails it, and a broker killed in between left a newer primary above an older PRIMARY);
- versions served per worker: the newest ``rollouts`` record of each worker instance, plus the
  rollout endpoint's ``streamgrpo_adapter_version{role="served"}`` when it answers;
- groups in flight: the streams endpoint's ``streamgrpo_groups_open`` when it is up, else groups
  requested on ``rollout-requests`` within ``--window`` and not closed on ``groups``;
- samples waiting for the trainer: the lag of the ``trainer.*`` groups on ``training-samples``
  (every sample when no trainer group has committed yet);
- dead letters in the last hour, by reason code, and the last one per consumer;
- the loop's stale share (samples the trainer dropped as stale / (stale + trained), from the ``drops`` and
  ``rollouts`` of every ``AdapterPublished``) and the A/B control arm (groups and rollouts closed with
  ``GroupClosed.reason`` ``control_arm``: judged for the comparison only, no samples): the run report's fold,
  :meth:`streamgrpo.cli.progress.Progress.loop_closure`, over all of ``adapter-events`` and ``groups``;
- each service's endpoint (``[<service>] metrics_port`` on 127.0.0.1, or ``--endpoint``): up, DOWN (never a
  crash) or "other loop" (its /status identity names another run, topic prefix or local broker: see
  :func:`other_loop`), and its last ERROR log line.

The topic reads and their folds are :mod:`streamgrpo.cli.status_topics`; this module probes the endpoints,
assembles the :class:`Report` and renders it.

Which loop: the configured Kafka, else ``--run ID``, else the latest live ``streamgrpo run`` of the home
(:func:`streamgrpo.runs.locate`; the run's own settings file gives the ports). A finished run is shown as
history (:func:`history`): the same folds over its Parquet archive, without lags, groups in flight or services; an
archive directory with no archive part in it (an ``archive_dir`` of ``/``) is an error that says so, and an archived
row that does not decode is skipped with a warning naming its file.

Works against the embedded broker and any Kafka (the same ``[kafka]`` settings as the services).
Not covered: groups requested before ``--window`` that are still open (topic fallback only), and
exactness on a busy cluster (figures are read one after another, not as one snapshot; each topic read stops
after 15 s: a whole-topic fold then says PARTIAL and reads on at the next ``--watch`` refresh, which reads only
the records that arrived since the last one).
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from streamgrpo import metrics as M
from streamgrpo.cli.status_topics import (
    DLQ_TOPIC,
    SAMPLES_TOPIC,
    Lag,
    Reader,
    WholeRun,
    consumer_lags,
    dead_letter_summary,
    dead_letters,
    groups_in_flight,
    newest_served,
    served_from_topics,
)
from streamgrpo.config import KafkaSettings, load
from streamgrpo.log import printable
from streamgrpo.topics import catalog

if TYPE_CHECKING:
    from streamgrpo.runs import RunRecord


@dataclass
class Service:
    service: str
    target: str
    up: bool
    error: str = ""
    last_error: dict[str, Any] | None = None
    other_loop: str = ""  # the endpoint answers for another loop (what differs); not counted as up


def _loopback(bootstrap: str) -> bool:
    return all(h.rsplit(":", 1)[0] in ("127.0.0.1", "localhost", "::1", "[::1]") for h in bootstrap.split(","))


def other_loop(theirs: dict[str, str], ours: dict[str, str]) -> str:
    """What tells an endpoint's loop (its /status ``identity``) from ours: '' when it is ours or says nothing.
    The topic prefix always counts; the run id when both have one; the bootstrap when both are on this machine
    (a cluster's Service name and a port-forward differ for the same loop)."""
    if not theirs:
        return ""
    diffs = []
    if theirs.get("topic_prefix", "") != ours.get("topic_prefix", ""):
        diffs.append(f"topic prefix {theirs.get('topic_prefix', '')!r}")
    if theirs.get("run_id") and ours.get("run_id") and theirs["run_id"] != ours["run_id"]:
        diffs.append(f"run {theirs['run_id']}")
    tb, ob = theirs.get("bootstrap", ""), ours.get("bootstrap", "")
    if tb and ob and _loopback(tb) and _loopback(ob) and set(tb.split(",")) != set(ob.split(",")):
        diffs.append(f"kafka {tb}")
    return ", ".join(diffs)


@dataclass
class Report:
    at: float
    bootstrap: str
    prefix: str
    run_id: str = ""
    lags: list[Lag] = field(default_factory=list)
    versions: dict[str, int | None] = field(default_factory=dict)
    registry: dict[int, str] = field(default_factory=dict)
    served: dict[str, int] = field(default_factory=dict)
    served_source: str = f"{catalog.ROLLOUTS} topic"
    groups_in_flight: int | None = None
    groups_source: str = ""
    samples_waiting: int | None = None
    dead_letters: int = 0
    dead_letter_reasons: dict[str, int] = field(default_factory=dict)
    last_dead_letter: dict[str, str] = field(default_factory=dict)
    services: list[Service] = field(default_factory=list)
    loop: dict[str, float] = field(default_factory=dict)  # LOOP_KEYS of Progress.loop_closure()
    stalls: list[str] | None = None  # the liveness rule's (None: not judged: history, or a topic read partially)
    liveness_s: float | None = None
    partial: list[str] = field(default_factory=list)  # whole-topic folds whose read stopped short (see status_topics)
    archive: str = ""  # a finished run's: the report is its history, read from this archive (no lags, no services)


class TopicView:
    """The topic reader and the whole-run fold of one ``status``, kept between ``--watch`` refreshes."""

    def __init__(self, kafka: KafkaSettings, canary_share: float, liveness_s: float | None = None) -> None:
        self.reader = Reader(kafka)
        self.run = WholeRun(canary_share, liveness_s=liveness_s)

    def close(self) -> None:
        self.reader.close()


def service_ports(config_path: str | None, evaluator: bool = False) -> dict[str, int]:
    """Each service's metrics_port from the same settings the services read (defaults if unreadable); with
    ``evaluator``, the evaluator's too when [evaluator] enabled (``streamgrpo run`` starts it then)."""
    import importlib

    models = {"streams": "streamgrpo.streams.config:StreamsSettings", "judge": "streamgrpo.judge.config:JudgeSettings",
              "rollout": "streamgrpo.rollout.config:RolloutConfig", "trainer": "streamgrpo.trainer.config:TrainerConfig"}
    out = dict(M.DEFAULT_PORTS)
    for service, target in models.items():
        module, attr = target.split(":")
        out[service] = int(load(getattr(importlib.import_module(module), attr), service, path=config_path).metrics_port)
    if evaluator:
        from streamgrpo.evaluation.service import EvaluatorSettings

        settings = load(EvaluatorSettings, "evaluator", path=config_path)
        if settings.enabled and settings.metrics_port:
            out["evaluator"] = settings.metrics_port
    return out


def probe_services(targets: dict[str, str], timeout_s: float, ours: dict[str, str] | None = None,
                   ) -> tuple[list[Service], dict[str, M.Reading]]:
    """Each endpoint's state; an endpoint of another loop (see :func:`other_loop`) is neither up nor read."""
    services, readings = [], {}
    for service, target in targets.items():
        reading = M.read_endpoint(target, timeout_s)
        other = other_loop(reading.status.get("identity") or {}, ours or {}) if reading.up else ""
        if other:
            services.append(Service(service, target, False, other_loop=other))
            continue
        readings[service] = reading
        services.append(Service(service, target, reading.up, reading.error,
                                last_error(reading.status.get("last_error")) if reading.up else None))
    return services, readings


def last_error(value: Any) -> dict[str, Any] | None:
    """An endpoint's ``last_error`` as {"time": float | None, "message": str}, whatever shape it came in (a
    string, a dict with a missing or non-numeric time): the screen shows what an endpoint says, never crashes."""
    if value is None or value == {}:
        return None
    if not isinstance(value, dict):
        return {"time": None, "message": str(value)}
    when = value.get("time")
    if isinstance(when, bool) or not isinstance(when, (int, float)) or not math.isfinite(when):
        when = None
    return {"time": None if when is None else float(when), "message": str(value.get("message", value))}


def collect(kafka: KafkaSettings, targets: dict[str, str], *, canary_share: float = 0.0, window_s: float = 3600.0,
            timeout_s: float = 2.0, run_id: str = "", view: TopicView | None = None) -> Report:
    """Everything ``status`` shows, as data. Unreachable endpoints are reported, never raised. ``view``: the reader
    and folds of the previous refresh (``--watch``), which then read only what arrived since; without it, a
    fresh one, closed on return."""
    from confluent_kafka import KafkaException

    from streamgrpo.topics.clients import bootstrap
    from streamgrpo.topics.errors import TopicsError

    report = Report(at=time.time(), bootstrap=bootstrap(kafka), prefix=kafka.topic_prefix, run_id=run_id)
    ours = {"run_id": run_id, "topic_prefix": kafka.topic_prefix, "bootstrap": report.bootstrap}
    report.services, readings = probe_services(targets, timeout_s, ours)
    own = view is None
    try:
        view = TopicView(kafka, canary_share) if view is None else view
        view.reader.refresh()
        _fill_from_topics(report, view, readings, window_s)
    except (KafkaException, TopicsError) as exc:
        raise TopicsError(f"Kafka at {report.bootstrap} did not answer ({exc}); check [kafka] bootstrap "
                          "(STREAMGRPO_KAFKA__BOOTSTRAP) or start the embedded broker") from exc
    finally:
        if own and view is not None:
            view.close()
    return report


def history(run: RunRecord, canary_share: float) -> Report:
    """A finished run's status as history, from its Parquet archive: adapter versions and statuses, the last version
    each worker served, the stale share and A/B control arm, and the dead letters of the whole run (the same folds
    as a live status; no lags, groups in flight or services: the loop is gone). An archive without any archive
    part is an error that says so; a row that does not decode is skipped with a warning naming its file."""
    from streamgrpo.archive.store import read_events, require_parts
    from streamgrpo.avro import records as R
    from streamgrpo.errors import ConfigError

    archive = Path(run.archive)
    if not archive.is_dir():
        raise ConfigError(f"run {run.run_id} has finished and left no event archive at {archive}: nothing to show")
    require_parts(archive, f"run {run.run_id} has finished, nothing to show")
    report = Report(at=time.time(), bootstrap="", prefix=run.topic_prefix, run_id=run.run_id, archive=str(archive))
    whole = WholeRun(canary_share)
    for topic in WholeRun.TOPICS:
        whole.fold(topic, (event for event, _ in read_events(archive, topic, skip_bad=True)))
    report.versions, report.registry, report.loop = whole.versions(), whole.registry, whole.loop()
    report.served = newest_served(e for e, _ in read_events(archive, catalog.ROLLOUTS, skip_bad=True)
                                  if isinstance(e, R.RolloutCompleted))
    dead = dead_letter_summary(e for e, _ in read_events(archive, DLQ_TOPIC, skip_bad=True)
                               if isinstance(e, R.DeadLetter))
    report.dead_letters, report.dead_letter_reasons, report.last_dead_letter = dead.count, dead.reasons, dead.last
    return report


def _fill_from_topics(report: Report, view: TopicView, readings: dict[str, M.Reading], window_s: float) -> None:
    """Every figure that comes from the topics (endpoint readings preferred where they answer)."""
    reader = view.reader
    report.lags = consumer_lags(reader)
    view.run.update(reader)
    report.versions, report.registry, report.loop = view.run.versions(), view.run.registry, view.run.loop()
    report.partial = sorted(reader.partial)
    report.stalls, report.liveness_s = view.run.stalls(report.partial, report.at), view.run.progress.liveness.bound_s
    rollout = readings.get("rollout")
    served = [v for lbl, v in (rollout.series("streamgrpo_adapter_version") if rollout and rollout.up else [])
              if lbl.get("role") == "served"]
    report.served = served_from_topics(reader)
    if rollout is not None and served:
        report.served[f"endpoint {rollout.target}"] = int(max(served))
        report.served_source = f"{catalog.ROLLOUTS} topic + rollout endpoint"
    streams = readings.get("streams")
    open_now = streams.get("streamgrpo_groups_open") if streams and streams.up else None
    if open_now is not None:
        report.groups_in_flight, report.groups_source = int(open_now), "streams endpoint"
    else:
        report.groups_in_flight = groups_in_flight(reader, window_s)
        report.groups_source = f"topics, last {window_s / 60:.0f} min"
    trainer = [lag for lag in report.lags if lag.topic == SAMPLES_TOPIC and lag.group.startswith("trainer.")]
    report.samples_waiting = sum(lag.lag for lag in trainer) if trainer else sum(reader.ends(SAMPLES_TOPIC).values())
    dead = dead_letters(reader)
    report.dead_letters, report.dead_letter_reasons, report.last_dead_letter = dead.count, dead.reasons, dead.last


def _ago(t: float, now: float) -> str:
    s = max(0, now - t)
    return f"{s:.0f}s ago" if s < 120 else f"{s / 60:.0f} min ago" if s < 7200 else f"{s / 3600:.1f} h ago"


def render(r: Report) -> str:
    """The one screen."""
    v = r.versions
    where = f"FINISHED, read from its archive {r.archive}" if r.archive else f"kafka {r.bootstrap}"
    lines = [f"streamgrpo status  {f'run {r.run_id}  ' if r.run_id else ''}{where}"
             f"{f' (prefix {r.prefix})' if r.prefix and not r.archive else ''}  "
             f"{time.strftime('%H:%M:%S', time.localtime(r.at))}", ""]
    lines.append(f"adapters   published v{v.get('published')}   primary v{v.get('primary')}   "
                 f"canary {'v' + str(v['canary']) if v.get('canary') is not None else '-'}")
    if r.registry:
        lines.append("registry   " + "  ".join(f"v{k} {s}" for k, s in sorted(r.registry.items())[-8:]))
    lines.append(f"served     ({r.served_source}) " + ("  ".join(f"{w} v{ver}" for w, ver in r.served.items()) or "-"))
    if not r.archive:
        lines.append(f"groups in flight {r.groups_in_flight} ({r.groups_source})   "
                     f"samples waiting for the trainer {r.samples_waiting}")
    if r.loop:
        lines.append(f"trainer    trained {r.loop['samples_trained']:.0f} samples, dropped as stale "
                     f"{r.loop['samples_dropped_stale']:.0f} (stale share {100 * r.loop['stale_share']:.1f} %)")
        lines.append(f"A/B        control arm, judged for the comparison only (no samples): "
                     f"{r.loop['control_arm_groups']:.0f} groups, {r.loop['control_arm_rollouts']:.0f} rollouts")
    if r.stalls:
        lines += [f"STALLED    {printable(s, keep_newlines=False)}" for s in r.stalls]
    elif r.stalls is not None:
        lines.append(f"liveness   ok: no stall longer than {r.liveness_s:.0f} s ([loop] liveness_s)")
    if r.partial:
        lines.append(f"PARTIAL    {', '.join(r.partial)}: not read to the end within 15 s; the figures above count "
                     "what was read (`status --watch` reads on from there at each refresh)")
    reasons = ", ".join(f"{k} {n}" for k, n in r.dead_letter_reasons.items())
    lines.append(f"dead letters, {'the whole run' if r.archive else 'last hour'} {r.dead_letters}"
                 f"{f' ({reasons})' if reasons else ''}")
    for consumer, what in r.last_dead_letter.items():
        lines.append(f"  last from {printable(consumer, keep_newlines=False)}: {printable(what, keep_newlines=False)}")
    if r.archive:
        return "\n".join(lines)
    lines += ["", f"{'consumer group':<28} {'topic':<18} {'part':>4} {'committed':>10} {'end':>10} {'lag':>8}"]
    for lag in sorted(r.lags, key=lambda x: (x.group, x.topic, x.partition)):
        lines.append(f"{lag.group[:28]:<28} {lag.topic[:18]:<18} {lag.partition:>4} {lag.committed:>10} "
                     f"{lag.end:>10} {lag.lag:>8}")
    if not r.lags:
        lines.append("  (no consumer group has committed offsets yet)")
    lines += ["", f"{'service':<8} {'endpoint':<22} state"]
    for s in r.services:
        state = "up" if s.up else f"other loop ({s.other_loop})" if s.other_loop else f"DOWN ({s.error})"
        if s.last_error:
            when = s.last_error.get("time")
            state += (f"   last error {_ago(when, r.at) if isinstance(when, (int, float)) else '(time unknown)'}: "
                      f"{printable(str(s.last_error.get('message', '')), keep_newlines=False)[:90]}")
        lines.append(f"{s.service:<8} {s.target:<22} {state}")
    return "\n".join(lines)


def _targets(ports: dict[str, int], host: str, endpoints: tuple[str, ...]) -> dict[str, str]:
    targets = {s: f"{host}:{p}" for s, p in ports.items() if p}
    for item in endpoints:
        service, _, target = item.partition("=")
        if (service not in M.SERVICES and service not in M.OPTIONAL_SERVICES) or not target:
            names = ", ".join((*M.SERVICES, *M.OPTIONAL_SERVICES))
            raise click.BadParameter(f"{item!r}: use SERVICE=HOST:PORT with SERVICE in {names}",
                                     param_hint="--endpoint")
        targets[service] = target
    return targets


@click.command("status")
@click.option("--watch", "watch", type=float, default=None, metavar="SECONDS",
              help="Refresh the screen every SECONDS until Ctrl-C.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON (for scripts).")
@click.option("--endpoint", "endpoints", multiple=True, metavar="SERVICE=HOST:PORT",
              help="Metrics endpoint of a service (repeatable), e.g. rollout=10.0.0.7:9463 or a kubectl "
                   "port-forward. Default: 127.0.0.1 and each service's [<service>] metrics_port.")
@click.option("--host", default="127.0.0.1", show_default=True, help="Host of the default endpoints.")
@click.option("--window", "window_s", type=float, default=3600.0, show_default=True,
              help=f"Seconds of {catalog.ROLLOUT_REQUESTS} read to count groups in flight when the streams endpoint is down.")
@click.option("--timeout", "timeout_s", type=float, default=2.0, show_default=True,
              help="Seconds to wait for each metrics endpoint.")
@click.option("--run", "run_id", default=None, metavar="ID",
              help="The `streamgrpo run` to show (default: the configured Kafka, else the latest live run).")
@click.pass_context
def status(ctx: click.Context, watch: float | None, as_json: bool, endpoints: tuple[str, ...], host: str,
           window_s: float, timeout_s: float, run_id: str | None) -> None:
    """One screen: consumer lag per group and partition, groups in flight, adapter versions (published,
    primary, canary, served per worker), samples waiting for the trainer, the stale share and the A/B control
    arm's groups and rollouts, dead letters in the last hour and each service's endpoint with its last error.

    Reads the topics with the [kafka] settings (embedded broker when unset) and every reachable
    metrics endpoint; a service whose endpoint does not answer is shown as DOWN. A finished run (`--run ID`)
    is shown as history from its event archive: versions, served, stale share, A/B, dead letters of the run.
    """
    from streamgrpo.config import LoopSettings
    from streamgrpo.runs import locate_configured

    config_path = (ctx.obj or {}).get("config_path")
    loop = load(LoopSettings, "loop", path=config_path)
    kafka, run = locate_configured(config_path, run_id)
    if run is not None and not run.live():
        if watch:
            raise click.UsageError(f"run {run.run_id} has finished: nothing to watch; drop --watch to see its history")
        report = history(run, loop.canary_share)
        click.echo(json.dumps(asdict(report), default=str) if as_json else render(report))
        return
    run_config = Path(run.run_dir) / "streamgrpo.toml" if run is not None else None
    settings = str(run_config) if config_path is None and run_config and run_config.is_file() else config_path
    ports = service_ports(settings, evaluator=run is not None)
    targets = _targets(ports, host, endpoints)
    view = TopicView(kafka, loop.canary_share, load(LoopSettings, "loop", path=settings).liveness_s)
    try:
        while True:
            report = collect(kafka, targets, canary_share=loop.canary_share, window_s=window_s, timeout_s=timeout_s,
                             run_id=run.run_id if run else loop.run_id, view=view)
            if as_json:
                click.echo(json.dumps(asdict(report), default=str))
            else:
                if watch:
                    click.clear()
                click.echo(render(report))
            if not watch:
                return
            try:
                time.sleep(watch)
            except KeyboardInterrupt:
                return
    finally:
        view.close()
