"""``streamgrpo run``: the whole loop on one machine, as supervised child processes.

Brings up the embedded broker (unless ``--bootstrap`` names one), ensures topics, starts the
stream processors, the judge, rollout worker(s) and the trainer as child processes of this one,
submits the built-in task set (or ``--tasks FILE``), and shows a live progress line built from
the events themselves (tasks done, mean reward per adapter version, trainer step, loss, adapters
published and picked up). A child that dies is restarted (with backoff) and the run says so; a child
that exits "misconfigured" (exit status 78, a ConfigError such as a missing bubblewrap) is not restarted:
the run prints its error line and stops. If the embedded broker dies, the run says so, stops its children, writes
a report that says the run failed (no final evaluation) and exits with a non-zero status (a BrokerError).
It stops after ``--duration`` or on Ctrl-C, shuts every child down (SIGTERM, then SIGKILL after a
grace period) and writes a report directory: ``summary.json``, ``summary.md``, and
``reward_per_version.png`` (:mod:`~streamgrpo.cli.report`).

What is not covered: multi-machine deployment (see k8s/); durability of the embedded broker
(memory only: a run's events live as long as the run, the report and adapter store remain).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from streamgrpo import config, runs
from streamgrpo.cli.progress import Progress, RunTracker
from streamgrpo.cli.report import heldout_change, write_report
from streamgrpo.cli.supervision import Child, Supervisor, broker_death
from streamgrpo.config import KafkaSettings
from streamgrpo.lifecycle.liveness import Liveness

log = logging.getLogger(__name__)


def _children(cfg: RunSettings, exe: list[str], evaluator: bool) -> list[Child]:
    kids = [Child("streams", exe + ["streams"]), Child("judge", exe + ["judge"])]
    kids += [Child(f"rollout-{i}", exe + ["rollout"]) for i in range(cfg.rollout_workers)]
    kids.append(Child("trainer", exe + ["trainer"]))
    if evaluator:
        kids.append(Child("evaluator", exe + ["evaluator"]))
    return kids


@dataclass(frozen=True)
class RunSettings:
    duration_s: float
    rollout_workers: int
    home: Path
    tasks: str
    group_size: int
    limit: int | None
    bootstrap: str | None
    config_path: str | None
    until_version: int | None = None
    final_eval: bool = True
    policy: str = "local"
    demos: str = "auto"  # demonstrations submitted before the tasks (auto: the built-in expert's with builtin tasks)
    demo_passes: int = 1


def _write_config(cfg: RunSettings, run_dir: Path, environ: Mapping[str, str] | None = None) -> Path:
    """The run's TOML: the user's file (if any) with the run's paths added where unset, and admission sized
    to the rollout workers it starts (groups in flight = workers x concurrency, the concurrency the workers
    will run: the user's file, then ``STREAMGRPO_ROLLOUT__CONCURRENCY``)."""
    import tomllib

    from streamgrpo.rollout.config import RolloutConfig

    base: dict[str, Any] = {}
    if cfg.config_path:
        base = tomllib.loads(Path(cfg.config_path).read_text())
    concurrency = config.load(RolloutConfig, "rollout", path=cfg.config_path, environ=environ).concurrency
    base.setdefault("streams", {}).setdefault("max_groups_in_flight", max(1, cfg.rollout_workers * concurrency))
    merged = merge_run_defaults(base, run_dir=run_dir, home=cfg.home)
    path = run_dir / "streamgrpo.toml"
    path.write_text(to_toml(merged))
    return path


def archive_dir(config_file: Path, environ: Mapping[str, str] | None = None) -> Path:
    """Where the run's services write the event archive: ``[streams] archive_dir`` of the run's file (the run's
    default ``<run dir>/archive``, or the user's own) as the services load it, environment included."""
    from streamgrpo.streams.config import StreamsSettings

    return Path(config.load(StreamsSettings, "streams", path=config_file, environ=environ).archive_dir).absolute()


#: Settings the run fills in unless the user's file sets them (strings are templates over run_dir and home).
#: Each run gets its own adapter store (one [loop] setting: the trainer writes it, the workers read it)
#: and Faust state, while the converted model is cached once under <home>/models.
RUN_DEFAULTS: dict[str, dict[str, Any]] = {
    "kafka": {"session_timeout_ms": 6000},  # the embedded broker answers joins after half of it
    "loop": {"home": "{home}", "adapter_store": "{run_dir}/adapters", "model_cache": "{home}/models",
             "run_id": "{run_id}"},  # each service reports it on /status: `status` tells another run's apart
    "trainer": {"run_name": "{run_id}"},
    "streams": {"data_dir": "{run_dir}/streams", "archive_dir": "{run_dir}/archive",
                # ~2 groups a minute on a 2-core CPU: a test ends (promotes if not worse, else restarts) after 4 min
                "ab_max_duration_s": 240.0},
}


def merge_run_defaults(base: dict[str, Any], *, run_dir: Path, home: Path) -> dict[str, Any]:
    merged = {k: dict(v) if isinstance(v, dict) else v for k, v in base.items()}
    for section, values in RUN_DEFAULTS.items():
        sec = merged.setdefault(section, {})
        for key, value in values.items():
            if isinstance(value, str):
                value = value.format(run_dir=run_dir, home=home, run_id=run_dir.name)
            sec.setdefault(key, value)
    return merged


def to_toml(data: dict[str, Any]) -> str:
    """A TOML writer for streamgrpo's config: top-level sections as tables; values may be scalars, lists, and
    nested tables or lists of tables (``[judge] routes``, ``[judge.hybrid]``, ``[[rollout.tools.mcp_servers]]``),
    written inline so that ``tomllib`` reads back the same structure."""

    def value(v: Any) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, (int, float)):
            return repr(v)
        if isinstance(v, (list, tuple)):
            return "[" + ", ".join(value(x) for x in v) + "]"
        if isinstance(v, dict):
            return "{ " + ", ".join(f"{json.dumps(str(k))} = {value(x)}" for k, x in v.items()) + " }"
        return json.dumps(str(v))

    lines = [f"{k} = {value(v)}" for k, v in data.items() if not isinstance(v, dict)]
    for section, table in data.items():
        if isinstance(table, dict):
            lines += ["", f"[{section}]"] + [f"{k} = {value(v)}" for k, v in table.items()]
    return "\n".join(lines) + "\n"


def execute(cfg: RunSettings) -> Path:
    """Run the loop; returns the report directory."""
    from streamgrpo.errors import RunFailed
    from streamgrpo.topics.admin import ensure
    from streamgrpo.topics.broker import EmbeddedBroker
    from streamgrpo.topics.errors import BrokerError

    run_id, run_dir = new_run_dir(cfg.home)
    broker_log = run_dir / "run" / "broker.log"
    broker = None
    failure: str | None = None
    stalled: list[str] = []  # stalls the progress line raised ([loop] liveness_s): the report fails, exit 2
    bootstrap = cfg.bootstrap
    if bootstrap is None:
        broker = EmbeddedBroker(run_dir, die_with_owner=True)  # not left running if run is SIGKILLed
        bootstrap = broker.start().bootstrap
        click.echo(f"embedded broker up on {bootstrap} (memory storage; log {run_dir / 'run' / 'broker.log'})")
    from streamgrpo.config import KafkaSettings

    kafka = config.load(KafkaSettings, "kafka", path=cfg.config_path, overrides={"bootstrap": bootstrap})
    from streamgrpo.topics.broker_logs import watch as watch_broker

    watch_broker(kafka)  # this process's own clients (progress line, submit) log an outage in bounded lines too
    try:
        config_file = _write_config(cfg, run_dir)
        runs.register(cfg.home, runs.RunRecord(run_id, bootstrap, kafka.topic_prefix, str(run_dir), os.getpid(),
                                               time.time(), archive_dir=str(archive_dir(config_file))))
        click.echo(f"run {run_id} (registered in {runs.record_path(cfg.home, run_id)}: `streamgrpo status`, "
                   f"`adapters list`, `label`, `tail` find it; afterwards `adapters list --run {run_id}`)")
        report = ensure(kafka)
        click.echo(f"topics: {len(report.created)} created, {len(report.ok)} ok")
        env = dict(os.environ, STREAMGRPO_BOOTSTRAP=bootstrap, STREAMGRPO_CONFIG=str(config_file),
                   PYTHONUNBUFFERED="1")
        from streamgrpo.evaluation.service import EvaluatorSettings

        evaluator = config.load(EvaluatorSettings, "evaluator", path=config_file)
        children = _children(cfg, [sys.executable, "-m", "streamgrpo.cli"], evaluator.enabled)
        if cfg.policy == "vllm":
            children.insert(0, _start_vllm(env, run_dir / "logs"))
        sup = Supervisor(children, env, run_dir / "logs")
        sup.start_all()
        click.echo(f"started {', '.join(c.name for c in sup.children)} (logs in {run_dir / 'logs'})")
        tracker = RunTracker(kafka, progress_for(config_file))
        tracker.start()
        d = _submit_demos(cfg, kafka)
        n = _submit(cfg, kafka)
        demos = f"{d} demonstration(s) ({demo_source(cfg.demos, cfg.tasks)}) then " if d else ""
        click.echo(f"submitted {demos}{n} task(s) x group size {cfg.group_size}")
        failure = _watch(sup, tracker, cfg.duration_s, cfg.until_version,
                         lambda: broker_death(broker.proc if broker else None, broker_log))
    finally:
        click.echo("\nstopping children ...")
        if "sup" in locals():
            sup.stop_all(grace_s=5.0 if failure else 20.0)  # without a broker nothing is left to deliver
        if "tracker" in locals():
            tracker.stop()
        report_dir = run_dir / "report"
        if "tracker" in locals() and cfg.final_eval and "config_file" in locals() and failure is None:
            final_evaluation(config_file, kafka, tracker.progress)
        if "tracker" in locals():
            stalled = tracker.progress.liveness.seen
            verdict = failure or (f"the run stalled: {stalled[0]}" if stalled else None)
            write_report(tracker.progress, report_dir, sup.children if "sup" in locals() else [], verdict)
            click.echo(f"report: {report_dir}")
        if broker is not None and broker_death(broker.proc, broker_log) is None:
            broker.stop()
        runs.mark_finished(cfg.home, run_id)
    if failure is not None:
        raise BrokerError(f"the run failed: {failure}; report {report_dir}")
    if stalled:
        raise RunFailed(f"the run stalled: {'; '.join(stalled)}; report {report_dir}")
    return report_dir


def new_run_dir(home: Path) -> tuple[str, Path]:
    """A fresh ``<home>/runs/<id>`` (id = the start time; a suffix when two runs start in one second)."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for n in range(1, 1000):
        run_id = stamp if n == 1 else f"{stamp}-{n}"
        try:
            (home / "runs" / run_id).mkdir(parents=True)
        except FileExistsError:
            continue
        (home / "runs" / run_id / "logs").mkdir()
        return run_id, home / "runs" / run_id
    raise click.ClickException(f"cannot create a run directory under {home / 'runs'}")


def _start_vllm(env: dict[str, str], log_dir: Path) -> Child:
    """Start the planner's vLLM server first (stopped last), point the rollout workers at it, wait until it serves."""
    from streamgrpo.inference import vllm_server
    from streamgrpo.rollout import vllm_serve

    env.update(vllm_server.rollout_env(f"http://127.0.0.1:{vllm_server.free_port()}/v1"))
    server = Child("vllm", [sys.executable, "-m", "streamgrpo.rollout.vllm_serve"])
    server.start(env, log_dir)
    try:
        vllm_serve.wait_for_run(env, alive=server.alive, log_path=server.log_path, echo=click.echo)
    except BaseException:
        server.stop(grace_s=20)
        raise
    return server


def _submit(cfg: RunSettings, kafka: KafkaSettings) -> int:
    from streamgrpo.tasks.reader import read_rows
    from streamgrpo.topics.producer import EventProducer
    from streamgrpo.topics.sdk import publish_rows

    with EventProducer(kafka, "submit") as producer:
        report = publish_rows(read_rows(cfg.tasks), producer, group_size=cfg.group_size,
                              skip_invalid=True, limit=cfg.limit)
    return report.published


def _submit_demos(cfg: RunSettings, kafka: KafkaSettings) -> int:
    """Publish ``cfg.demos`` (``demo_passes`` times, each pass its own tasks) ahead of the tasks: the warm start."""
    source = demo_source(cfg.demos, cfg.tasks)
    if source is None or cfg.demo_passes < 1:
        return 0
    from streamgrpo.tasks.reader import read_demo_rows
    from streamgrpo.topics.producer import EventProducer
    from streamgrpo.topics.sdk import publish_rows

    published = 0
    with EventProducer(kafka, "submit") as producer:
        for _ in range(cfg.demo_passes):
            report = publish_rows(read_demo_rows(source), producer, group_size=1, skip_invalid=True)
            published += report.published
            for n, reason in report.rejected[:5]:
                click.echo(f"demonstration row {n} rejected: {reason}", err=True)
    return published


def demo_source(demos: str, tasks: str) -> str | None:
    """The demonstrations ``run --demos`` submits: ``auto`` is the built-in expert's (``builtin:train``) when the tasks
    are the built-in training split (they demonstrate its tools and corpus), none for a task file of your own."""
    if demos == "auto":
        return "builtin:train" if tasks in ("builtin:train", "builtin:train-wide") else None
    return None if demos == "none" else demos


def _watch(sup: Supervisor, tracker: RunTracker, duration_s: float, until_version: int | None,
           broker_gone: Callable[[], str | None]) -> str | None:
    """Show progress and supervise until the duration ends or a stop; returns why the run failed (its broker
    died: ``broker_gone``), or None."""
    deadline = time.monotonic() + duration_s
    stop = threading.Event()

    def _sigterm(*_: object) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, _sigterm)
    tty = sys.stdout.isatty()
    last_line, last_print = "", 0.0
    try:
        while time.monotonic() < deadline and not stop.is_set():
            if (gone := broker_gone()) is not None:
                logging.getLogger("aiokafka").setLevel(logging.CRITICAL)  # no retry can reach it: no reconnect flood
                click.echo(f"\nstopping: {gone}; the run failed")
                tracker.progress.notes.append(gone)
                return gone
            for msg in sup.check():
                click.echo(f"\n[supervisor] {msg}")
                tracker.progress.notes.append(msg)
            if sup.misconfigured:
                click.echo(f"\nstopping: {', '.join(c.name for c in sup.misconfigured)} cannot start with this "
                           "configuration (see above); fix it and start the run again")
                break
            if until_version is not None and tracker.progress.serving_version >= until_version:
                click.echo(f"\nrollouts served by adapter v{tracker.progress.serving_version}: stopping (--until-version)")
                break
            remaining = deadline - time.monotonic()
            line = f"{tracker.progress.line()} | {remaining:4.0f}s left"
            if tty:
                click.echo(f"\r{line} ", nl=False)
            elif line.split(" | ")[:-1] != last_line.split(" | ")[:-1] or time.monotonic() - last_print > 30:
                click.echo(line)  # logs and pipes: a full line when something changed, at least every 30 s
                last_line, last_print = line, time.monotonic()
            stop.wait(2.0)
    except KeyboardInterrupt:
        click.echo("\ninterrupted")
    return None


def progress_for(config_file: Path) -> Progress:
    """The run's progress fold with the loop's settings: ``[loop] canary_share`` and ``[streams] success_threshold``
    (the progress line counts successes as the streams' metrics and the A/B test do)."""
    from streamgrpo.streams.config import StreamsSettings

    loop = config.load(config.LoopSettings, "loop", path=config_file)
    streams = config.load(StreamsSettings, "streams", path=config_file)
    return Progress(canary_share=loop.canary_share, success_threshold=streams.success_threshold,
                    liveness=Liveness(loop.liveness_s))


def final_evaluation(config_file: Path, kafka: Any, progress: Progress) -> None:
    """The base model and the last adapter on the FULL held-out split, greedy; published (trigger
    ``run-final``) and added to the report. Runs after the children stopped, so it has the CPU."""
    from streamgrpo.avro import records as R
    from streamgrpo.errors import StreamGRPOError
    from streamgrpo.evaluation.adapters import base_target, from_event
    from streamgrpo.evaluation.service import EvaluatorSettings
    from streamgrpo.evaluation.session import EvalSession

    settings = config.load(EvaluatorSettings, "evaluator", path=config_file)
    session = EvalSession.from_config(str(config_file), bootstrap=kafka.bootstrap)
    events = session.events() or []
    from streamgrpo.lifecycle.registry import AdapterRegistry

    registry = AdapterRegistry(session.loop.canary_share)
    for e in events:
        registry.apply(e)
    line = registry.line(session.loop.adapter_name)  # a rolled-back version is not the run's result
    published = {e.version: e for e in events if isinstance(e, R.AdapterPublished)
                 and e.adapter_name == session.loop.adapter_name and line.serves(e.version)}
    targets = [base_target(session.loop.adapter_name)]
    warm = [v for v, e in published.items() if e.metrics.get("warm_start") and v < max(published)]
    for version in ([max(warm)] if warm else []) + ([max(published)] if published else []):
        try:  # the warm start's last version (demonstrations alone), then the last adapter
            targets.append(from_event(published[version], session.store))
        except StreamGRPOError as exc:
            click.echo(f"final evaluation: v{version} does not verify ({exc}); not evaluated")
    rows = session.load_tasks(settings.tasks)
    click.echo(f"final evaluation on {len(rows)} held-out tasks ({settings.tasks}): "
               + ", ".join(t.label for t in targets))
    spec = session.spec(settings.tasks, batch_size=settings.batch_size)

    def show(label: str) -> Any:
        return lambda done, total, acc: click.echo(f"\r  {label}: {done}/{total} tasks, accuracy {acc:.3f}",
                                                   nl=done == total)

    runs = [session.run_one(t, rows, spec, show) for t in targets]
    session.publish(runs, required=False, trigger="run-final")
    for r in runs:
        progress.apply(r.run.event(session.judge.info, trigger="run-final", service="run"))
    if len(runs) >= 2:
        progress.heldout_change = heldout_change(runs[0].run.outcomes, runs[-1].run.outcomes)
        click.echo(f"held-out change, last adapter vs base: {progress.heldout_change['line']}")
    if len(runs) == 3:  # the gains apart: demonstrations alone, and what GRPO added on top of them
        progress.heldout_parts = {"warm_start": {"version": targets[1].label, **heldout_change(
                                      runs[0].run.outcomes, runs[1].run.outcomes)},
                                  "grpo_on_warm_start": {"version": targets[2].label, **heldout_change(
                                      runs[1].run.outcomes, runs[2].run.outcomes)}}
        for name, part in progress.heldout_parts.items():
            click.echo(f"held-out change, {name.replace('_', ' ')} ({part['version']}): {part['line']}")


@click.command()
@click.option("--duration", type=float, default=600, show_default=True, help="Seconds to run before stopping.")
@click.option("--tasks", default="builtin:train", show_default=True,
              help="Task file (JSONL/CSV/Parquet), or `builtin:train` (the built-in training split; its "
                   "held-out split, `builtin:heldout`, is kept for `streamgrpo eval`), or `builtin:train-wide` "
                   "(the training split plus 320 extra arithmetic tasks: fresh numbers, more wordings; the same "
                   "held-out split).")
@click.option("--group-size", "-n", type=click.IntRange(2, 64), default=8, show_default=True,
              help="GRPO group size N (8: the untrained planner solves ~1 in 4 built-in arithmetic tasks, and a group trains only when its rollouts differ; bench/probe_signal.py).")
@click.option("--limit", type=int, default=None, help="Submit at most this many tasks.")
@click.option("--rollout-workers", type=click.IntRange(1, 16), default=1, show_default=True,
              help="Rollout worker processes (each loads the model).")
@click.option("--home", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="State directory for runs, adapters and the model cache (default $STREAMGRPO_HOME, ~/.streamgrpo).")
@click.option("--bootstrap", default=None, help="Use this Kafka instead of starting the embedded broker.")
@click.option("--until-version", type=click.IntRange(1), default=None,
              help="Stop early once a rollout served by this adapter version (or newer) has completed.")
@click.option("--final-eval/--no-final-eval", default=True, show_default=True,
              help="At the end, evaluate the base model and the last adapter on the full held-out split "
                   "([evaluator] tasks) and put the result in the report.")
@click.option("--policy", type=click.Choice(["local", "vllm"]), default="local", show_default=True,
              help="Planner backend of the rollout workers. 'vllm' starts and supervises a local vLLM server "
                   "(`make setup-vllm` installs it; [rollout] vllm_* settings) and loads each published adapter "
                   "into it.")
@click.option("--demos", default="auto", show_default=True,
              help="Demonstrations submitted ahead of the tasks, executed through the real tools and trained on by "
                   "likelihood first (the warm start): `auto` (the built-in expert's 298 when --tasks is the built-in "
                   "training split, none for a task file of yours), `builtin:train`, a JSONL file (`streamgrpo submit "
                   "--demos` format), or `none`.")
@click.option("--demo-passes", type=click.IntRange(0, 16), default=1, show_default=True,
              help="How many times the demonstrations are submitted (each pass is trained on once).")
@click.pass_context
def run(ctx: click.Context, duration: float, tasks: str, group_size: int, limit: int | None, rollout_workers: int,
        home: Path | None, bootstrap: str | None, until_version: int | None, final_eval: bool, policy: str,
        demos: str, demo_passes: int) -> None:
    """Run the whole training loop locally and write a report.

    Starts (as supervised child processes): the stream processors, the judge, rollout worker(s)
    and the trainer; submits the tasks; prints a live progress line; stops after --duration or
    Ctrl-C; writes <home>/runs/<id>/report/ with a reward-per-version plot and a summary.
    Children's logs are in <home>/runs/<id>/logs/. Settings for every service come from --config
    (sections [rollout], [judge], [streams], [trainer]); the run adds its own paths.
    """
    from streamgrpo import config
    from streamgrpo.config import BrokerSettings

    broker = config.load(BrokerSettings, "broker", path=(ctx.obj or {}).get("config_path"),
                         overrides={"home": home})
    cfg = RunSettings(duration, rollout_workers, broker.home, tasks, group_size, limit, bootstrap,
                      (ctx.obj or {}).get("config_path"), until_version, final_eval, policy, demos, demo_passes)
    execute(cfg)
