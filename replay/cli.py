"""``streamgrpo replay restore`` and ``streamgrpo replay train`` (see :mod:`streamgrpo.replay`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

BOOTSTRAP_HELP = "Kafka bootstrap servers (default: [kafka] bootstrap or the embedded broker)."


def _kafka(ctx: click.Context, bootstrap: str | None, prefix: str | None) -> Any:
    from streamgrpo.config import KafkaSettings, load

    return load(KafkaSettings, "kafka", path=(ctx.obj or {}).get("config_path"),
                overrides={"bootstrap": bootstrap, "topic_prefix": prefix})


@click.group(context_settings={"max_content_width": 110})
def replay() -> None:
    """Replay history: restore the archive into a broker, or retrain a new adapter lineage from a range.

    The archive (written by the streams' archive agent, `[streams] archive_dir`) is the durable copy of
    the log: Kafka keeps the recent log (topics expire; the embedded broker keeps nothing across a
    restart), the archive keeps everything.
    """


@replay.command("restore")
@click.argument("archive", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--topic", "topics", multiple=True, help="Restore only this catalog topic (repeat; default: all archived).")
@click.option("--skip-present/--no-skip-present", default=True, show_default=True,
              help="Skip events whose id is already on the target topic (restoring twice publishes nothing twice).")
@click.option("--bootstrap", default=None, help=BOOTSTRAP_HELP)
@click.option("--topic-prefix", "prefix", default=None, help="Topic prefix to restore into (default: [kafka] topic_prefix).")
@click.pass_context
def restore_command(ctx: click.Context, archive: Path, topics: tuple[str, ...], skip_present: bool,
                    bootstrap: str | None, prefix: str | None) -> None:
    """Re-publish the events archived under ARCHIVE into a broker: same keys, same partitions, same
    per-partition order, same event ids and record timestamps (consumers drop duplicates by id).

    Typical use: the embedded broker (memory storage) was restarted; `streamgrpo broker up`, then
    `streamgrpo replay restore <run dir>/archive`. Into empty topics every record gets its original offset
    back (reported as 'moved 0'), so adapters' lineage offset ranges stay valid.
    """
    import pyarrow.parquet as pq

    from streamgrpo.archive.store import parts
    from streamgrpo.replay.restore import restore

    kafka = _kafka(ctx, bootstrap, prefix)
    total = sum(pq.ParquetFile(p).metadata.num_rows for p in parts(archive) if "/_ns/" not in p.as_posix())
    with click.progressbar(length=total, label="restoring", file=click.get_text_stream("stderr")) as bar:
        reports = restore(archive, kafka, list(topics) or None, skip_present=skip_present, progress=bar.update)
    for r in reports:
        click.echo(f"{r.topic}: published {r.published}, already present {r.skipped_present}, moved {r.moved}")
    click.echo(f"restored {sum(r.published for r in reports)} events into {kafka.bootstrap} "
               f"(prefix {kafka.topic_prefix!r})")


@replay.command("sync")
@click.argument("archive", type=click.Path(file_okay=False, path_type=Path))
@click.option("--bootstrap", default=None, help=BOOTSTRAP_HELP)
@click.option("--topic-prefix", "prefix", default=None, help="Topic prefix of the run (default: [kafka] topic_prefix).")
@click.pass_context
def sync_command(ctx: click.Context, archive: Path, bootstrap: str | None, prefix: str | None) -> None:
    """Copy into ARCHIVE every event on the broker's topics that it does not hold yet (one pass over every
    topic, from its start to its end now; events already archived are skipped by id, so it is safe to repeat).

    Use it before stopping an embedded broker, or to archive a run that ran without the archive agent.
    """
    from streamgrpo.analysis.snapshot import snapshot

    kafka = _kafka(ctx, bootstrap, prefix)
    n = snapshot(kafka, archive)
    click.echo(f"archived {n} new events into {archive}")


@replay.command("train", context_settings={"max_content_width": 110},
                epilog="Trainer settings are the live trainer's: [trainer] in --config / STREAMGRPO_TRAINER__<FIELD> and "
                       "[loop] (samples_per_step, adapter_store, model_cache), so a replay trains as the run did.")
@click.option("--run-name", required=True, help="Name of this replay: names its adapter family and namespace.")
@click.option("--from", "lower", default=None, help="Start: offsets '0:120,1:80', a time (ISO 8601) or a version 'v3'.")
@click.option("--to", "upper", default=None, help="End (exclusive): offsets, a time or a version 'v7' (inclusive).")
@click.option("--archive", type=click.Path(exists=True, file_okay=False, path_type=Path), default=None,
              help="Read history from this archive instead of the broker's topics.")
@click.option("--source-adapter", default=None, help="Adapter family whose samples to replay (default: [loop] adapter_name).")
@click.option("--adapter-name", default=None, help="Adapter family of the new lineage (default: <source>-<run name>).")
@click.option("--namespace", default=None, help="Topic sub-prefix for the replay's events (default: replay.<run name>.).")
@click.option("--judge", default=None, help="Re-score the range's groups with this judge (math, qa, hybrid, llm, "
              "group_relative) and train on the new advantages; Rewards and TrainingSamples go to the namespace.")
@click.option("--threads", type=click.IntRange(1), default=1, show_default=True,
              help="CPU threads for training (pinned: bitwise repeatable only with the same count).")
@click.option("--seed", type=int, default=None, help="Torch seed (default: [trainer] seed).")
@click.option("--max-steps", type=click.IntRange(1), default=None, help="Stop after this many optimizer steps.")
@click.option("--objective", type=click.Choice(["grpo", "gspo", "raft"]), default=None,
              help="Trainer objective (default: [trainer] loss). raft = rejection-sampling fine-tuning on the range's "
              "rollouts with a positive advantage (the policy's own successes), e.g. to warm-start a lineage.")
@click.option("--bootstrap", default=None, help=BOOTSTRAP_HELP)
@click.option("--topic-prefix", "prefix", default=None, help="Topic prefix of the source run (default: [kafka] topic_prefix).")
@click.pass_context
def train_command(ctx: click.Context, run_name: str, lower: str | None, upper: str | None, archive: Path | None,
                  source_adapter: str | None, adapter_name: str | None, namespace: str | None, judge: str | None,
                  threads: int, seed: int | None, max_steps: int | None, objective: str | None,
                  bootstrap: str | None, prefix: str | None) -> None:
    """Train a fresh adapter lineage on a range of TrainingSamples, without touching the live run.

    The range: --from/--to (offsets per partition, times, or adapter versions' lineage; none: everything).
    Samples are read in a canonical order (record time, partition, offset), so the same range, seed and
    settings give byte-identical adapter files on CPU, from the broker or from the archive.
    """
    from streamgrpo.config import LoopSettings, load
    from streamgrpo.judge.config import JudgeSettings
    from streamgrpo.replay.ranges import VersionBound, parse_bound, resolve
    from streamgrpo.replay.sources import ArchiveHistory, BrokerHistory, published
    from streamgrpo.replay.train import ReplayPlan, archive_namespace, replay_train
    from streamgrpo.topics import catalog
    from streamgrpo.trainer.config import TrainerConfig

    path = (ctx.obj or {}).get("config_path")
    kafka = _kafka(ctx, bootstrap, prefix)
    source = source_adapter or load(LoopSettings, "loop", path=path).adapter_name
    history = ArchiveHistory(archive) if archive is not None else BrokerHistory(kafka)
    bounds = [parse_bound(b) if b else None for b in (lower, upper)]
    lineage = published(history, source) if any(isinstance(b, VersionBound) for b in bounds) else []
    rng = resolve(bounds[0], bounds[1], lineage)
    cfg = load(TrainerConfig, "trainer", path=path, overrides={"seed": seed, "max_steps": max_steps, "loss": objective})
    plan = ReplayPlan(run_name, source, history, rng, adapter_name, namespace, judge, threads)
    result = replay_train(plan, cfg, kafka, load(JudgeSettings, "judge", path=path) if judge else None,
                          echo=click.echo)
    for ev in result.published:
        click.echo(f"  v{ev.version}: step {ev.trainer_step}, sha256 {ev.sha256[:16]}…, {ev.uri}")
    drops = ", ".join(f"{k} {v}" for k, v in sorted(result.dropped.items())) or "none"
    click.echo(f"published {len(result.published)} version(s) of {result.adapter_name} "
               f"(announced on {result.namespace_prefix}{catalog.ADAPTER_EVENTS}); dropped: {drops}; "
               f"{result.left_over} sample(s) after the last full step not trained")
    if judge and archive is not None:
        n = archive_namespace(archive, kafka.model_copy(update={"topic_prefix": result.namespace_prefix}),
                              plan.topic_namespace)
        click.echo(f"archived {n} re-emitted events under {archive}/_ns/{plan.topic_namespace}")
