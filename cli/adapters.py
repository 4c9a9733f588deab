"""``streamgrpo adapters``: list, inspect, promote, roll back, approve and reject adapter versions.

Where the figures come from: the lifecycle (status, parent, decision history) from the one registry
fold of ``adapter-events`` (:mod:`streamgrpo.lifecycle.registry`: small, authoritative, always current);
the live figures (groups, judge rewards, success, human rewards, failure rates, held-out accuracy)
from the newest ``AdapterState`` of each version on the compacted ``adapter-registry`` topic, which
the A/B controller publishes (``streamgrpo streams``, agent ``ab``). Without any state there (no
controller ran), the figures are computed from ``rewards`` and ``evaluations`` instead, and the
output says so.

Manual actions (:mod:`streamgrpo.lifecycle.actions`) are checked against the current lifecycle and
written as ONE event on ``adapter-events`` carrying the operator (``--by``, default the OS user, as
``human:<name>``) and the reason; every service that follows the topic obeys it. Bad input (an
unknown or discarded version, a rollback to a newer version, approving what is not awaiting
approval) is an error that says what to do, and nothing is written.
What is not covered: editing or deleting events (the log is append-only: undo a promotion with a
rollback), several adapter names in one table (``--adapter`` picks one).
"""

from __future__ import annotations

import getpass
import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import click

from streamgrpo import config
from streamgrpo.avro import records as R
from streamgrpo.config import KafkaSettings, LoopSettings
from streamgrpo.errors import ConfigError
from streamgrpo.lifecycle.registry import Line, RegistryState, ancestors, apply, status
from streamgrpo.lifecycle.stats import SUCCESS_THRESHOLD
from streamgrpo.lifecycle.view import (  # noqa: F401 - LIVE_FIELDS, View, kafka_events: read here by older callers
    LIVE_FIELDS,
    EventSource,
    View,
    _num,
    age,
    archive_events,
    kafka_events,
    load_view,
    row,
    view_from,
)
from streamgrpo.topics import catalog


def render_table(rows: list[dict[str, str]]) -> str:
    if not rows:
        return "no adapter versions"
    cols = list(rows[0])
    widths = {c: max(len(c), *(len(r[c]) for r in rows)) for c in cols}
    lines = ["  ".join(c.ljust(widths[c]) for c in cols)]
    lines += ["  ".join(r[c].ljust(widths[c]) for c in cols) for r in rows]
    return "\n".join(lines)


def render_show(view: View, version: int, now: datetime) -> str:
    s = view.state(version, now)
    chain = " <- ".join(f"v{v}" for v in [version, *ancestors(view.line, version)]) if version else "v0"
    m = s.metrics
    out = [f"{view.adapter} v{version}  {s.status.value}", f"  lineage of versions: {chain} (v0 = the base model)"]
    if version:
        out += [f"  published {s.published_at:%Y-%m-%d %H:%M:%S} UTC ({age(s.published_at, now)} ago), trainer step "
                f"{s.trainer_step}, base model {s.base_model}" if s.published_at else "  published: -",
                f"  uri {s.uri}", f"  sha256 {s.sha256}",
                f"  samples trained {s.samples_trained} (this version's own lineage below, the rest its ancestors')"]
        out += ["  lineage (topic[partition] offsets, count):"]
        out += [f"    {r.topic}[{r.partition}] {r.start}..{r.end} ({r.end - r.start + 1})" for r in s.lineage] or [
            "    (none)"]
    out += [f"  served {s.groups} groups, {s.reward_count} judge rewards, mean {_num(s.reward_mean)}, success "
            f"{_num(s.success_rate)}; human rewards {m.get('human_rewards', 0):.0f} (kept apart, mean "
            f"{_num(m.get('human_reward_mean'))})",
            f"  failure rates: rollout errors {m.get('rollout_error_rate', 0):.2f}, judge failures "
            f"{m.get('judge_failure_rate', 0):.2f}, parse failures {m.get('parse_failure_rate', 0):.2f}",
            f"  held-out accuracy {_num(s.eval_accuracy)} [{_num(s.eval_ci_low)}, {_num(s.eval_ci_high)}]"
            f"{' on ' + s.eval_task_set if s.eval_task_set else ''}"]
    test = {k[5:]: v for k, v in m.items() if k.startswith("test_")}
    if test:
        out.append("  A/B test now: " + ", ".join(f"{k} {v:.4g}" for k, v in sorted(test.items())))
    out.append("  history:")
    for d in view.line.history.get(version, ()):
        figures = ", ".join(f"{k} {v:.4g}" for k, v in sorted(d.metrics.items()) if k in SHOWN_METRICS)
        out.append(f"    {d.at:%Y-%m-%d %H:%M:%S} {d.kind:<17} by {d.by}: {d.reason}{f' [{figures}]' if figures else ''}")
    return "\n".join(out)


SHOWN_METRICS = ("canary_groups", "control_groups", "canary_success", "control_success", "estimate", "p_value",
                 "p_better", "loss")


def _common(f: Callable[..., Any]) -> Callable[..., Any]:
    f = click.option("--run", "run_id", default=None, metavar="ID",
                     help="A `streamgrpo run` (default: the latest live one when no Kafka is configured); after "
                          "it finished, list/show read its event archive.")(f)
    f = click.option("--bootstrap", default=None, help="Kafka bootstrap host:port (default: [kafka] settings / the "
                     "latest live `streamgrpo run` / the embedded broker).")(f)
    f = click.option("--topic-prefix", default=None, help="Topic prefix ([kafka] topic_prefix).")(f)
    return click.option("--adapter", default=None, help="Adapter name (default: [loop] adapter_name).")(f)


@dataclass(frozen=True)
class Where:
    """What an adapters command reads: the broker of a loop, or the archive of a finished run."""

    kafka: KafkaSettings
    adapter: str
    canary_share: float
    archive: Path | None = None  # a finished run's archive: read it instead of Kafka
    success_threshold: float = SUCCESS_THRESHOLD  # [streams] success_threshold

    def view(self) -> View:
        source = archive_events(self.archive) if self.archive else kafka_events(self.kafka)
        return view_from(source, self.adapter, self.canary_share, self.success_threshold)


def _context(ctx: click.Context, bootstrap: str | None, topic_prefix: str | None, adapter: str | None,
             run_id: str | None = None) -> Where:
    from streamgrpo.runs import locate_configured

    path = (ctx.obj or {}).get("config_path")
    loop = config.load(LoopSettings, "loop", path=path)
    kafka, run = locate_configured(path, run_id, bootstrap=bootstrap, topic_prefix=topic_prefix)
    archive = run.archive if run is not None and not run.live() else None
    if archive is not None and not archive.is_dir():
        raise ConfigError(f"run {run_id} has finished and left no event archive at {archive}")
    from streamgrpo.streams.config import StreamsSettings

    threshold = config.load(StreamsSettings, "streams", path=path).success_threshold
    return Where(kafka, adapter or loop.adapter_name, loop.canary_share, archive, threshold)


@click.group()
def adapters() -> None:
    """List, inspect, promote, roll back, approve and reject adapter versions.

    \b
      streamgrpo adapters list                      table: status, parent, reward, held-out, samples, age
      streamgrpo adapters show 3                    lineage, figures and decision history of v3
      streamgrpo adapters promote 3 --reason TEXT   make v3 the primary
      streamgrpo adapters rollback [3] [--to 1] --reason TEXT
      streamgrpo adapters approve 3 --reason TEXT   (with [streams] ab_require_approval)
      streamgrpo adapters reject 3 --reason TEXT
    Actions are events on adapter-events with the operator (--by, default the OS user) and the reason.
    """


@adapters.command("list")
@_common
@click.option("--json", "as_json", is_flag=True, help="One JSON object per version (the AdapterState fields).")
@click.pass_context
def list_command(ctx: click.Context, bootstrap: str | None, topic_prefix: str | None, adapter: str | None,
                 run_id: str | None, as_json: bool) -> None:
    """Every version with its status, parent, judge reward, success, held-out accuracy, samples trained and age."""
    where = _context(ctx, bootstrap, topic_prefix, adapter, run_id)
    view, now = where.view(), datetime.now(timezone.utc)
    states = [view.state(v, now) for v in view.versions]
    if as_json:
        for s in states:
            click.echo(json.dumps(s.to_avro(), default=str))
        return
    click.echo(render_table([row(s, now) for s in states]))
    if where.archive is not None:
        click.echo(f"(run {run_id} has finished: read from its archive {where.archive})")
    if not view.states:
        click.echo(f"(figures computed from {catalog.REWARDS}/{catalog.EVALUATIONS}: no AdapterState on "
                   f"{catalog.ADAPTER_REGISTRY} yet; the A/B "
                   "agent of `streamgrpo streams` publishes them)")


@adapters.command("show")
@click.argument("version", type=click.IntRange(0))
@_common
@click.option("--json", "as_json", is_flag=True, help="The state and the decision history as JSON.")
@click.pass_context
def show_command(ctx: click.Context, version: int, bootstrap: str | None, topic_prefix: str | None,
                 adapter: str | None, run_id: str | None, as_json: bool) -> None:
    """Lineage (topic-partition offset ranges and counts), figures and the decision history of VERSION."""
    from streamgrpo.models.errors import AdapterActionError

    where = _context(ctx, bootstrap, topic_prefix, adapter, run_id)
    view, now, name = where.view(), datetime.now(timezone.utc), where.adapter
    if version and version not in view.line.announced:
        raise AdapterActionError(f"{name} v{version} was never published; see `streamgrpo adapters list`")
    if as_json:
        history = [{"kind": d.kind, "at": d.at.isoformat(), "by": d.by, "reason": d.reason, "metrics": dict(d.metrics)}
                   for d in view.line.history.get(version, ())]
        click.echo(json.dumps({"state": view.state(version, now).to_avro(), "history": history}, default=str))
        return
    click.echo(render_show(view, version, now))


def _act(ctx: click.Context, bootstrap: str | None, topic_prefix: str | None, adapter: str | None,
         run_id: str | None, build: Callable[[Line, str], R.Event]) -> None:
    """Check the action against the current lifecycle, write its one event, say what changed."""
    from streamgrpo.topics.producer import EventProducer

    where = _context(ctx, bootstrap, topic_prefix, adapter, run_id)
    if where.archive is not None:
        raise ConfigError(f"run {run_id} has finished: there is no loop to act on (its archive is read-only)")
    kafka, name, share = where.kafka, where.adapter, where.canary_share
    view = load_view(kafka, name, share)
    event = build(view.line, name)  # raises AdapterActionError: nothing written
    with EventProducer(kafka, "adapters-cli") as producer:
        producer.send(event)
    after, _ = apply(RegistryState({name: view.line}), event, share)
    line, version = after.line(name), getattr(event, "version", 0)
    click.echo(f"wrote {type(event).__name__} for {name} v{version}; now: primary v{line.primary}, canary "
               f"{'v' + str(line.canary) if line.canary is not None else '-'}, v{version} "
               f"{status(line, version).value}")


def _by_reason(f: Callable[..., Any]) -> Callable[..., Any]:
    f = click.option("--reason", required=True, help="Why (kept in the version's history).")(f)
    return click.option("--by", default=lambda: getpass.getuser(), show_default="the OS user",
                        help="Operator name, recorded as human:<name>.")(f)


@adapters.command("promote")
@click.argument("version", type=click.IntRange(1))
@_common
@_by_reason
@click.pass_context
def promote_command(ctx: click.Context, version: int, bootstrap: str | None, topic_prefix: str | None,
                    adapter: str | None, run_id: str | None, by: str, reason: str) -> None:
    """Make VERSION the primary now (no A/B verdict needed)."""
    from streamgrpo.lifecycle import actions

    _act(ctx, bootstrap, topic_prefix, adapter, run_id, lambda line, name: actions.promote(line, name, version, by, reason))


@adapters.command("rollback")
@click.argument("version", type=click.IntRange(1), required=False)
@click.option("--to", "to", type=click.IntRange(0), default=None,
              help="Version to restore (default: the primary for a candidate; for the primary, its nearest ancestor "
                   "that was not rolled back).")
@_common
@_by_reason
@click.pass_context
def rollback_command(ctx: click.Context, version: int | None, to: int | None, bootstrap: str | None,
                     topic_prefix: str | None, adapter: str | None, run_id: str | None, by: str,
                     reason: str) -> None:
    """Roll back VERSION (default: the canary, else the primary): it and every version above the restored one
    serve no new group, and the trainer continues from the restored version."""
    from streamgrpo.lifecycle import actions

    _act(ctx, bootstrap, topic_prefix, adapter, run_id,
         lambda line, name: actions.rollback(line, name, version, to, by, reason))


@adapters.command("approve")
@click.argument("version", type=click.IntRange(1))
@_common
@_by_reason
@click.pass_context
def approve_command(ctx: click.Context, version: int, bootstrap: str | None, topic_prefix: str | None,
                    adapter: str | None, run_id: str | None, by: str, reason: str) -> None:
    """Approve VERSION, AWAITING_APPROVAL after the A/B verdict: it becomes the primary."""
    from streamgrpo.lifecycle import actions

    _act(ctx, bootstrap, topic_prefix, adapter, run_id, lambda line, name: actions.approve(line, name, version, by, reason))


@adapters.command("reject")
@click.argument("version", type=click.IntRange(1))
@_common
@_by_reason
@click.pass_context
def reject_command(ctx: click.Context, version: int, bootstrap: str | None, topic_prefix: str | None,
                   adapter: str | None, run_id: str | None, by: str, reason: str) -> None:
    """Reject VERSION: it (and the versions above the primary trained with it) serve no new group; the trainer
    continues from the primary."""
    from streamgrpo.lifecycle import actions

    _act(ctx, bootstrap, topic_prefix, adapter, run_id, lambda line, name: actions.reject(line, name, version, by, reason))

