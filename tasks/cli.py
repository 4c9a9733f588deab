"""Commands of the tasks domain: ``submit`` (publish task files or the built-in set) and ``tasks`` (export
the built-in set and its fact corpus). Registered on the root CLI by :data:`streamgrpo.cli.COMMANDS`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from streamgrpo.topics.cli import BOOTSTRAP_HELP, kafka_settings


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
@click.option("--demos", is_flag=True, help="FILE holds demonstrations (JSONL: a task's columns plus `steps`, the "
              "planner's replies that solve it, e.g. [{\"tool\": \"calculator\", \"input\": \"6*7\"}, "
              "{\"answer\": \"42\"}]), or FILE=`builtin:train` for the built-in expert's: each is executed "
              "through the real tools, judged, and trained on by likelihood (a warm start).")
@click.option("--bootstrap", default=None, help=BOOTSTRAP_HELP)
@click.pass_context
def submit(ctx: click.Context, source_file: str, group_size: int, source: str | None, kind: str, fmt: str | None,
           skip_invalid: bool, report_path: Path | None, limit: int | None, demos: bool, bootstrap: str | None) -> None:
    """Publish tasks from FILE (JSONL, CSV or Parquet), or FILE=`builtin` for the built-in offline set;
    with --demos, demonstrations (README: "Demonstrations").

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

    kafka = kafka_settings(ctx, bootstrap)
    with EventProducer(kafka, "submit") as producer:
        try:
            rows = _demo_rows(source_file) if demos else _rows(source_file, fmt, kind)
            ready, rejected = prepare_rows(rows, producer, group_size=group_size, source=source, limit=limit)
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
    what = "demonstration(s)" if demos else "task(s)"
    click.echo(f"published {report.published} {what}, rejected {len(report.rejected)} row(s) "
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


def _demo_rows(source_file: str) -> Any:
    from streamgrpo.tasks.datasets import DatasetError
    from streamgrpo.tasks.reader import read_demo_rows

    try:
        return read_demo_rows(source_file)
    except DatasetError as exc:
        raise click.ClickException(str(exc)) from exc


def _progress(total: int | None) -> Any:
    def show(done: int) -> None:
        if done % 50 == 0 or (total is not None and done == total):
            suffix = f"/{total}" if total else ""
            click.echo(f"\rpublishing tasks: {done}{suffix}", nl=False, err=True)

    return show


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
