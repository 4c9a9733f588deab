"""``streamgrpo eval``: held-out accuracy of the agent as it is served, per adapter version.

Thin shell over :mod:`.runner` (the agent loop + correctness judge) and :mod:`.adapters` (which
versions, verified files). Settings come from the same sections the services read: ``[rollout]``
(policy, tools, roles), ``[loop]`` (adapter name, max_turns), ``[streams]`` (max_new_tokens, top_p
of rollouts), ``[judge]`` (routing by task source). Results are printed (table, JSON or CSV) and
published as ``EvaluationCompleted`` events on ``evaluations`` when a broker is reachable.
"""

from __future__ import annotations

import csv
import io
import json
import sys
from pathlib import Path
from typing import Any

import click

from streamgrpo.topics import catalog

FORMATS = ("table", "json", "csv")


@click.command("eval", context_settings={"max_content_width": 110})
@click.option("--tasks", "task_source", default="builtin:heldout", show_default=True,
              help="Task file (JSONL/CSV/Parquet, the same loaders as `submit`) or a built-in split "
                   "(builtin:heldout, builtin:train, builtin).")
@click.option("--kind", type=click.Choice(["auto", "generic", "deepmath", "nq"]), default="auto", show_default=True,
              help="Row layout of a task file (as in `submit`).")
@click.option("--limit", type=click.IntRange(1), default=None, help="Evaluate the first N tasks only.")
@click.option("--adapter", "adapters", multiple=True, metavar="NAME@vN",
              help="Adapter version to evaluate (repeatable): verified against its AdapterPublished event (on the "
                   "broker, else in the run's event archive), else taken from --store. v0 = the base model.")
@click.option("--adapter-dir", "adapter_dirs", multiple=True, type=click.Path(exists=True, file_okay=False,
              path_type=Path), help="A peft adapter directory to evaluate (repeatable).")
@click.option("--all-versions", is_flag=True, help=f"Every published version ({catalog.ADAPTER_EVENTS}, else the store).")
@click.option("--base/--no-base", "include_base", default=None,
              help="Also evaluate the base model (default: only when nothing else is asked, or with --all-versions).")
@click.option("--store", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Adapter store root (default: [loop] adapter_store); announced adapters load only "
                   "from it.")
@click.option("--samples", type=click.IntRange(1, 64), default=1, show_default=True,
              help="Rollouts per task (k): reports mean@k and pass@k.")
@click.option("--temperature", type=click.FloatRange(0, 5), default=None,
              help="Planner temperature (default 0 = greedy; with --samples > 1 default 1.0).")
@click.option("--batch-size", type=click.IntRange(1, 512), default=16, show_default=True,
              help="Tasks run at once (one batched planner call per turn).")
@click.option("--seed", type=int, default=0, show_default=True, help="Sampling seed (temperature > 0).")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="table", show_default=True)
@click.option("--output", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Also write the results (in --format) to this file.")
@click.option("--publish/--no-publish", default=None,
              help="Publish EvaluationCompleted events (default: when a broker is reachable).")
@click.option("--bootstrap", default=None, help="Kafka bootstrap servers (overrides [kafka] bootstrap).")
@click.option("--run", "run_id", default=None, metavar="ID",
              help="A `streamgrpo run`: its adapter store, and its broker while it runs, else its event archive "
                   "(each adapter's sha256 is checked against its archived AdapterPublished event).")
@click.pass_context
def eval_command(ctx: click.Context, task_source: str, kind: str, limit: int | None, adapters: tuple[str, ...],
                 adapter_dirs: tuple[Path, ...], all_versions: bool, include_base: bool | None, store: Path | None,
                 samples: int, temperature: float | None, batch_size: int, seed: int, fmt: str,
                 output: Path | None, publish: bool | None, bootstrap: str | None, run_id: str | None) -> None:
    """Evaluate the agent as it is served -- the base model and/or adapter versions -- on held-out tasks,
    judged by correctness alone, greedy by default.

    Prints per version: accuracy with its 95% confidence interval (Wilson; mean@k with a between-task
    interval for --samples > 1, plus pass@k), answered rate, parse-failure rate, tool calls, turns and
    planner tokens per task, seconds; then each version's paired difference from the first one.

    \b
    Examples:
      streamgrpo eval                                  # the base model on the built-in held-out split
      streamgrpo eval --adapter planner@v5 --base      # v5 vs the base model, with the paired difference
      streamgrpo eval --all-versions --store ~/.streamgrpo/runs/<id>/adapters
      streamgrpo eval --tasks my_heldout.jsonl --adapter-dir ./v5 --samples 4
    """
    from streamgrpo.evaluation.session import EvalSession

    archive = None
    if run_id is not None:
        bootstrap, store, archive = _from_run(ctx, run_id, bootstrap, store)
    session = EvalSession.from_config((ctx.obj or {}).get("config_path"), bootstrap=bootstrap, store=store)
    session.archive = archive
    rows = session.load_tasks(task_source, kind=kind, limit=limit)
    targets = session.targets(adapters, adapter_dirs, all_versions=all_versions,
                              include_base=bool(include_base) or (all_versions and include_base is None))
    runs = session.run(targets, rows, task_source=task_source, samples=samples, temperature=temperature,
                       batch_size=batch_size, seed=seed, progress=_progress)
    text = render(runs, fmt)
    click.echo(text)
    if output is not None:
        output.write_text(text + "\n")
    if publish is not False:
        note = session.publish(runs, required=bool(publish))
        click.echo(note, err=True)


def _from_run(ctx: click.Context, run_id: str, bootstrap: str | None, store: Path | None,
              ) -> tuple[str | None, Path | None, Path | None]:
    """(bootstrap, store, archive) of run ``run_id``: its broker while it is live, else its event archive."""
    from streamgrpo import config
    from streamgrpo.config import BrokerSettings
    from streamgrpo.runs import find

    run = find(config.load(BrokerSettings, "broker", path=(ctx.obj or {}).get("config_path")).home, run_id)
    store = store or Path(run.run_dir) / "adapters"
    if run.live():
        return bootstrap or run.bootstrap, store, None
    return bootstrap, store, run.archive


def _progress(label: str) -> Any:
    def show(done: int, total: int, accuracy: float) -> None:
        click.echo(f"\r{label}: {done}/{total} tasks, accuracy so far {accuracy:.3f}", nl=done == total, err=True)

    return show


def table_rows(runs: list[Any]) -> list[dict[str, Any]]:
    from streamgrpo.evaluation.core import paired_difference

    out = []
    for i, run in enumerate(runs):
        s = run.summary
        row = {"version": run.label, "tasks": s.tasks, "k": s.samples_per_task, "accuracy": round(s.accuracy, 4),
               "ci_low": round(s.ci_low, 4), "ci_high": round(s.ci_high, 4),
               "pass_at_k": None if s.pass_at_k is None else round(s.pass_at_k, 4),
               "answered": round(s.answered_rate, 4), "parse_fail": round(s.parse_failure_rate, 4),
               "tools_per_task": round(s.tool_calls_per_task, 3), "turns": round(s.mean_turns, 3),
               "tokens_per_task": round(s.tokens_per_task, 1), "seconds": round(run.seconds, 1),
               "per_kind": {k: round(v, 4) for k, v in s.per_kind.items()}}
        if i > 0:
            d = paired_difference(runs[0].outcomes, run.outcomes)
            row.update(vs=runs[0].label, diff=round(d.mean, 4), diff_ci_low=round(d.ci_low, 4),
                       diff_ci_high=round(d.ci_high, 4))
        out.append(row)
    return out


def render(runs: list[Any], fmt: str) -> str:
    rows = table_rows(runs)
    if fmt == "json":
        return json.dumps(rows, indent=2)
    if fmt == "csv":
        buf = io.StringIO()
        flat = [{k: (json.dumps(v) if isinstance(v, dict) else v) for k, v in r.items()} for r in rows]
        keys = list(dict.fromkeys(k for r in flat for k in r))
        writer = csv.DictWriter(buf, fieldnames=keys)
        writer.writeheader()
        writer.writerows(flat)
        return buf.getvalue().rstrip("\n")
    head = ["version", "accuracy [95% CI]", "answered", "parse fail", "tools/task", "turns", "tokens/task", "s",
            "vs first [95% CI]"]
    lines = [head]
    for r in rows:
        diff = f"{r['diff']:+.3f} [{r['diff_ci_low']:+.3f}, {r['diff_ci_high']:+.3f}]" if "diff" in r else "-"
        lines.append([r["version"], f"{r['accuracy']:.3f} [{r['ci_low']:.3f}, {r['ci_high']:.3f}]",
                      f"{r['answered']:.3f}", f"{r['parse_fail']:.3f}", f"{r['tools_per_task']:.2f}",
                      f"{r['turns']:.2f}", f"{r['tokens_per_task']:.1f}", f"{r['seconds']:.0f}", diff])
    widths = [max(len(str(line[i])) for line in lines) for i in range(len(head))]
    text = "\n".join("  ".join(str(c).ljust(w) for c, w in zip(line, widths, strict=True)) for line in lines)
    kinds = "; ".join(f"{r['version']}: " + ", ".join(f"{k} {v:.2f}" for k, v in r["per_kind"].items()) for r in rows)
    k = rows[0]["k"] if rows else 1
    return f"{text}\n\naccuracy per kind -- {kinds}\n({rows[0]['tasks'] if rows else 0} tasks, {k} sample(s) each)"


@click.command("evaluator", context_settings={"max_content_width": 110})
@click.option("--bootstrap", default=None, help="Kafka bootstrap servers (overrides [kafka] bootstrap).")
@click.pass_context
def evaluator_command(ctx: click.Context, bootstrap: str | None) -> None:
    """Evaluate newly published adapter versions on a fixed held-out sample and publish the results
    (EvaluationCompleted on `evaluations`): the base model at start, then the newest version (at most once per
    interval_s when set). `streamgrpo run` starts it. Settings: [evaluator] (tasks, limit, sample, every, interval_s,
    include_base, batch_size, nice, poll_s, metrics_port), and the agent's [rollout] / [loop]."""
    import signal
    import threading

    from streamgrpo import config, metrics
    from streamgrpo.evaluation.service import EvaluatorSettings, serve
    from streamgrpo.evaluation.session import EvalSession

    path = (ctx.obj or {}).get("config_path")
    settings = config.load(EvaluatorSettings, "evaluator", path=path)
    metrics.start("evaluator", settings.metrics_port)
    session = EvalSession.from_config(path, bootstrap=bootstrap)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    serve(settings, session, stop)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(eval_command())
