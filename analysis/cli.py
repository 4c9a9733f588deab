"""``streamgrpo analyse``: SQL, canned reports (with PNG plots) and a DuckDB shell over the event archive.

The archive is ``--archive-dir``, else a ``streamgrpo run``'s (``--run ID``, or the latest live run when no Kafka
is configured), else ``[streams] archive_dir``; where none exists, or with ``--live``, a snapshot of the broker's
topics (the run's broker when there is one) is archived into a temporary directory first and queried the same way.
Output: ``--format table|csv|json``. The views and their columns: ``--describe [VIEW]`` and docs/analysis.md.
"""

from __future__ import annotations

import contextlib
import csv
import json
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click

from streamgrpo.analysis.reports import REPORTS

EPILOG = "\b\nReports (--report NAME; --plot FILE writes a PNG where marked *):\n" + "\n".join(
    f"  {name}{'*' if r.plot else ''}: {r.doc}" for name, r in REPORTS.items()) + """

\b
Views: one per topic (tasks, rollout_requests, planner_actions, tool_observations, verdicts,
rollouts, rewards, groups, training_samples, adapter_events, adapter_registry, evaluations,
reward_metrics, dead_letters; adapter_published ... per adapter event type; all_rewards and
all_training_samples with replay namespaces) and the joined trajectory_steps, sample_lineage,
trajectories, adapter_versions. `--describe VIEW` lists a view's columns and what they hold.

\b
Examples:
  streamgrpo analyse "SELECT adapter_version, avg(score) FROM rewards GROUP BY 1 ORDER BY 1"
  streamgrpo analyse --report reward-by-version --plot reward.png
  streamgrpo analyse --report lineage --version 3 --format csv
  streamgrpo analyse --live --report tool-usage      (no archive: a snapshot of the topics)
  streamgrpo analyse --shell
"""


@contextlib.contextmanager
def _archive(ctx: click.Context, archive_dir: str | None, live: bool, bootstrap: str | None,
             prefix: str | None, run_id: str | None = None) -> Iterator[Path]:
    """The archive to query: ``--archive-dir``; else a run's (``--run ID``, or the latest live run when no Kafka
    is configured: :func:`streamgrpo.runs.locate`); else the configured one; or a temporary snapshot of the
    topics (``--live``, or no archive there) of the run's broker or the configured Kafka."""
    from streamgrpo.config import load
    from streamgrpo.runs import locate_configured
    from streamgrpo.streams.config import StreamsSettings

    path = (ctx.obj or {}).get("config_path")
    kafka, run = locate_configured(path, run_id, bootstrap=bootstrap, topic_prefix=prefix)
    if run is not None and not run.live() and live:
        raise click.UsageError(f"run {run.run_id} has finished: its broker is gone; drop --live to query its "
                               f"archive {run.archive}")
    root = Path(archive_dir) if archive_dir is not None else Path(run.archive) if run is not None else \
        Path(load(StreamsSettings, "streams", path=path).archive_dir)
    if archive_dir is None and run is not None and not run.live() and not root.is_dir():
        raise click.ClickException(f"run {run.run_id} has finished and left no event archive at {root}")
    if not live and root.is_dir():
        yield root
        return
    from streamgrpo.analysis.snapshot import snapshot

    with tempfile.TemporaryDirectory(prefix="streamgrpo-snapshot-") as tmp:
        why = "--live" if live else f"no archive at {root}"
        click.echo(f"{why}: querying a snapshot of the topics ...", err=True)
        n = snapshot(kafka, Path(tmp))
        click.echo(f"snapshot: {n} events", err=True)
        yield Path(tmp)


@click.command(epilog=EPILOG, context_settings={"max_content_width": 110})
@click.argument("sql", required=False)
@click.option("--report", "report", type=click.Choice(list(REPORTS)), default=None, help="Run a canned report.")
@click.option("--archive-dir", type=click.Path(file_okay=False), default=None,
              help="Archive root (default: the run's archive, see --run; else [streams] archive_dir).")
@click.option("--live", is_flag=True, help="Query a snapshot of the broker's topics instead of the archive.")
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table", show_default=True,
              help="Output format (json: one object per line).")
@click.option("--plot", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the report's PNG plot here (reports marked * below).")
@click.option("--adapter", default=None, help="Adapter family of the report (default: [loop] adapter_name).")
@click.option("--version", "version", type=int, default=None, help="Adapter version (report lineage).")
@click.option("--threshold", type=float, default=None,
              help="Reward counted as a success (default: [streams] success_threshold).")
@click.option("--limit", type=click.IntRange(1), default=20, show_default=True, help="Rows of top-N reports.")
@click.option("--describe", "describe", default=None, metavar="VIEW",
              help="List the columns of VIEW with their types and meaning ('all' for every view).")
@click.option("--shell", is_flag=True, help="Interactive SQL shell over the views (DuckDB).")
@click.option("--bootstrap", default=None, help="Kafka bootstrap servers (for --live).")
@click.option("--topic-prefix", "prefix", default=None, help="Topic prefix (for --live).")
@click.option("--run", "run_id", default=None, metavar="ID",
              help="A `streamgrpo run` (default: the latest live one when no Kafka is configured): its archive, or "
                   "with --live a snapshot of its broker's topics.")
@click.pass_context
def analyse(ctx: click.Context, sql: str | None, report: str | None, archive_dir: str | None, live: bool, fmt: str,
            plot: Path | None, adapter: str | None, version: int | None, threshold: float | None, limit: int,
            describe: str | None, shell: bool, bootstrap: str | None, prefix: str | None, run_id: str | None) -> None:
    """Query the event archive with DuckDB: SQL, a canned --report, --describe a view, or a --shell.

    Every topic is a view de-duplicated by event id, with the envelope flattened into columns and the
    record's place kept (kafka_topic, kafka_partition, kafka_offset); joined views follow a trajectory
    from its task to the adapter version it trained.
    """
    if sum(x is not None and x is not False for x in (sql, report, describe, shell or None)) != 1:
        raise click.UsageError("give exactly one of: SQL, --report NAME, --describe VIEW, --shell")
    if plot is not None and (report is None or REPORTS[report].plot is None):
        raise click.UsageError("--plot needs a --report that has a plot: "
                               + ", ".join(n for n, r in REPORTS.items() if r.plot))
    from streamgrpo.analysis.views import connect

    with _archive(ctx, archive_dir, live, bootstrap, prefix, run_id) as root:
        con = connect(root)
        try:
            if describe is not None:
                _describe(con, describe)
            elif shell:
                _shell(con, _params(ctx, adapter, version, threshold, limit))
            elif report is not None:
                _report(con, report, _params(ctx, adapter, version, threshold, limit), fmt, plot)
            else:
                _sql(con, str(sql), fmt)
        finally:
            con.close()


def _params(ctx: click.Context, adapter: str | None, version: int | None, threshold: float | None,
            limit: int) -> dict[str, Any]:
    from streamgrpo.config import LoopSettings, load
    from streamgrpo.streams.config import StreamsSettings

    path = (ctx.obj or {}).get("config_path")
    return {"adapter": adapter or load(LoopSettings, "loop", path=path).adapter_name, "version": version,
            "threshold": threshold if threshold is not None else load(StreamsSettings, "streams",
                                                                      path=path).success_threshold,
            "limit": limit}


def _report(con: Any, name: str, params: dict[str, Any], fmt: str, plot: Path | None) -> None:
    from streamgrpo.analysis.reports import run_report

    result = run_report(con, name, params)
    emit(result.columns, result.rows, fmt)
    if plot is not None:
        draw = REPORTS[name].plot
        assert draw is not None
        draw(result, plot)
        click.echo(f"plot: {plot}", err=True)


def _sql(con: Any, sql: str, fmt: str) -> None:
    import duckdb

    from streamgrpo.archive.errors import ArchiveError

    try:
        cur = con.execute(sql)
        emit([d[0] for d in cur.description or []], cur.fetchall(), fmt)
    except duckdb.Error as exc:
        raise ArchiveError(f"query failed: {exc}") from exc


def _describe(con: Any, view: str) -> None:
    from streamgrpo.analysis.docs import view_docs

    docs = view_docs(con)
    names = sorted(docs) if view == "all" else [view]
    for name in names:
        if name not in docs:
            raise click.UsageError(f"no view {name!r}; views: {', '.join(sorted(docs))}")
        doc, cols = docs[name]
        click.echo(f"{name}: {doc}")
        emit(["column", "type", "meaning"], [tuple(c) for c in cols], "table")
        click.echo("")


def _shell(con: Any, params: dict[str, Any]) -> None:
    """A minimal SQL prompt: statements end with ';'. Dot commands: .views .describe VIEW .report NAME .quit"""
    import duckdb

    with contextlib.suppress(ImportError):
        import readline  # noqa: F401 - line editing and history for input()
    click.echo("DuckDB over the archive. End statements with ';'. .views, .describe VIEW, .report NAME, .quit")
    buffer: list[str] = []
    while True:
        try:
            line = input("analyse> " if not buffer else "     ...> ")
        except EOFError:
            click.echo("")
            return
        if not buffer and line.strip().startswith("."):
            if not _dot(con, line.strip(), params):
                return
            continue
        buffer.append(line)
        if line.rstrip().endswith(";"):
            statement, buffer = "\n".join(buffer), []
            try:
                cur = con.execute(statement)
                emit([d[0] for d in cur.description or []], cur.fetchall(), "table")
            except duckdb.Error as exc:
                click.echo(f"error: {exc}", err=True)


def _dot(con: Any, command: str, params: dict[str, Any]) -> bool:
    """Run one dot command; False to leave the shell."""
    from streamgrpo.archive.errors import ArchiveError

    word, _, arg = command.partition(" ")
    try:
        if word in (".quit", ".exit", ".q"):
            return False
        if word == ".views":
            emit(["view"], [(v,) for v in sorted(_views(con))], "table")
        elif word == ".describe":
            _describe(con, arg.strip() or "all")
        elif word == ".report":
            _report(con, arg.strip(), params, "table", None)
        else:
            click.echo(f"unknown command {word}; .views, .describe VIEW, .report NAME, .quit", err=True)
    except (ArchiveError, click.UsageError) as exc:
        click.echo(f"error: {exc}", err=True)
    return True


def _views(con: Any) -> list[str]:
    return [r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall()]


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}" if abs(value) < 1e-3 or abs(value) >= 1e6 else f"{value:.4f}".rstrip("0").rstrip(".")
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    return "" if value is None else str(value)


def _json(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return str(value)


def emit(columns: list[str], rows: list[tuple[Any, ...]], fmt: str) -> None:
    """Print rows as an aligned table, CSV or JSON lines."""
    if fmt == "json":
        for row in rows:
            click.echo(json.dumps(dict(zip(columns, row, strict=True)), default=_json))
    elif fmt == "csv":
        w = csv.writer(sys.stdout)
        w.writerow(columns)
        w.writerows([[v.decode(errors="replace") if isinstance(v, bytes) else v for v in r] for r in rows])
    else:
        cells = [list(columns)] + [[_cell(v) for v in r] for r in rows]
        widths = [min(60, max(len(c[i]) for c in cells)) for i in range(len(columns))]
        for i, line in enumerate(cells):
            click.echo("  ".join(v[:60].ljust(w) for v, w in zip(line, widths, strict=True)).rstrip())
            if i == 0:
                click.echo("  ".join("-" * w for w in widths))
        click.echo(f"({len(rows)} row{'s' if len(rows) != 1 else ''})")
