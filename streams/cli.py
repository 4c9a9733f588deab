"""Command ``streamgrpo streams``: run a Faust worker (``streamgrpo analyse`` lives in ``streamgrpo.analysis.cli``).

The worker is started programmatically (``faust.Worker(app).execute_from_commandline()``) on an app
built by :func:`~streamgrpo.streams.app.create_app` from the layered settings; there is no
module-level app and no ``faust -A``. Several workers with the same app id share the partitions.
"""

from __future__ import annotations

from typing import Any

import click

from streamgrpo.topics.catalog import (
    ADAPTER_EVENTS,
    ADAPTER_REGISTRY,
    GROUPS,
    REWARD_METRICS,
    REWARDS,
    ROLLOUT_REQUESTS,
    ROLLOUTS,
    TASKS,
    TRAINING_SAMPLES,
)

STREAMS_EPILOG = f"""\b
Agents (--only): fanout ({TASKS} -> {ROLLOUT_REQUESTS}, admission/pacing), window ({REWARDS} + planner
actions + {ROLLOUTS} -> {GROUPS} + {TRAINING_SAMPLES}), metrics ({REWARDS} -> {REWARD_METRICS} and reward gauges),
ab (A/B test of the newest version against the primary: promote / roll back / await approval on
{ADAPTER_EVENTS}, AdapterState on {ADAPTER_REGISTRY}; one leader: the worker holding {ADAPTER_EVENTS}),
archive (every topic -> Parquet for `analyse`).

\b
Settings: section [streams] of the TOML file, env STREAMGRPO_STREAMS__<FIELD>
(e.g. STREAMGRPO_STREAMS__ESTIMATOR=rloo, STREAMGRPO_STREAMS__GROUP_TIMEOUT_S=120).
"""


def _settings(ctx: click.Context, **overrides: Any) -> tuple[Any, Any]:
    from streamgrpo.config import KafkaSettings, load
    from streamgrpo.streams.config import StreamsSettings

    path = (ctx.obj or {}).get("config_path")
    kafka_over: dict[str, Any] = {k: overrides.pop(k) for k in ("bootstrap", "topic_prefix") if k in overrides}
    kafka = load(KafkaSettings, "kafka", path=path, overrides=kafka_over)
    if not kafka.bootstrap:
        from streamgrpo.topics.clients import bootstrap

        kafka = kafka.model_copy(update={"bootstrap": bootstrap(kafka)})
    return load(StreamsSettings, "streams", path=path, overrides=overrides), kafka


@click.command(epilog=STREAMS_EPILOG)
@click.option("--only", default=None, help="Comma-separated agents to run (default: all, or streams.agents).")
@click.option("--bootstrap", default=None, help="Kafka host:port (default: kafka.bootstrap or the embedded broker).")
@click.option("--topic-prefix", default=None, help="Prefix of every topic name (isolates runs on one cluster).")
@click.option("--estimator", default=None, help="Advantage estimator: grpo, dr_grpo or rloo.")
@click.option("--group-timeout", "group_timeout_s", type=float, default=None, help="Seconds before an incomplete group times out.")
@click.option("--partial-policy", type=click.Choice(["score", "drop"]), default=None, help="What a timed-out group does.")
@click.option("--processing-guarantee", type=click.Choice(["at_least_once", "exactly_once"]), default=None,
              help="Faust guarantee; exactly_once needs Apache Kafka (not the embedded broker).")
@click.option("--archive-dir", type=click.Path(file_okay=False), default=None, help="Parquet archive root.")
@click.option("--data-dir", type=click.Path(file_okay=False), default=None, help="Faust data directory.")
@click.option("--loglevel", default="warning", show_default=True, help="Faust worker log level.")
@click.pass_context
def streams(ctx: click.Context, only: str | None, loglevel: str, **opts: Any) -> None:
    """Run one Faust worker with all stream processors, or the subset named by --only.

    Start several workers with the same settings to scale: they share the consumer group and split
    the partitions (tables follow their partitions through the changelog topics).
    """
    import faust

    from streamgrpo import metrics
    from streamgrpo.streams.app import create_app

    if only:
        opts["agents"] = [a.strip() for a in only.split(",") if a.strip()]
    settings, kafka = _settings(ctx, **opts)
    from streamgrpo.topics.broker_logs import watch as watch_broker

    watch_broker(kafka)  # bounded, rate-limited client logs while the broker is unreachable
    metrics.start("streams", settings.metrics_port)
    app = create_app(settings, kafka)
    worker = faust.Worker(app, loglevel=loglevel, override_logging=False, quiet=True, redirect_stdouts=False)
    worker.execute_from_commandline()
