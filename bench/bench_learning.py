"""Learning on the built-in tasks: `streamgrpo run` with the product's defaults, judged on the held-out split.

    python bench/bench_learning.py [DURATION_S] [--runs N] [--plot OUT.png]   # default 1800 s (30 min), 1 run
    python bench/bench_learning.py 1800 --seeds 2 --set rollout.planner_examples=analysis   # one setting changed
    python bench/bench_learning.py 1800 --seeds 0 1 2 --tasks builtin:train-wide   # another training task set
    python bench/bench_learning.py --plot-reports OUT.png REPORT_DIR...       # the plot of earlier runs

Run i (0, 1, 2, ...) sets the trainer's seed and the rollout worker's sampling seed to i
(`STREAMGRPO_TRAINER__SEED`, `STREAMGRPO_ROLLOUT__SAMPLING_SEED`); `--seeds` names the seeds instead. Each
planner draw then follows (i, task, attempt, sample, turn), so run i of two arms that differ in one setting
starts from the same LoRA initialisation and draws the same random numbers for the same task (common random
numbers: the rollouts diverge only where the arms' policies do). `--set SECTION.FIELD=VALUE` changes a setting
for every run (as `STREAMGRPO_SECTION__FIELD`; `--set rollout.sampling_seed=...` overrides the sampling seed);
the result records it under "settings". `--tasks NAME` is passed to every run as `streamgrpo run --tasks NAME` (a
built-in split such as `builtin:train-wide`, or a task file); the result records the task set the runs trained
on under "tasks" (`run`'s own default when `--tasks` is not given). The held-out evaluation is the same either way.

Each run is the real loop (embedded broker, streams, judge, one rollout worker, trainer, evaluator) with
every setting at its default, for DURATION_S; then `run`'s final evaluation scores the base model and the
last adapter on the FULL held-out split (`builtin:heldout`, greedy, correctness only, never trained on).
Prints one JSON line: per run the two held-out accuracies with their 95 % intervals, the paired difference,
the loop-closure figures (publication -> first rollout, stale share) and the training-reward table; and the
mean over runs. Accuracy is REPORTED here, never asserted.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from statistics import mean
from typing import Any


def one_run(duration_s: int, index: int, settings: dict[str, str] | None = None,
            tasks: str | None = None) -> dict[str, object]:
    home = Path(tempfile.mkdtemp(prefix=f"streamgrpo-learning-{index}-")) / "home"
    return {"seed": index, **run_and_summarise(home, duration_s, run_env(index, settings or {}), tasks=tasks)}


def run_command(home: Path, duration_s: int, final_eval: bool = True, tasks: str | None = None) -> list[str]:
    """The `streamgrpo run` command line of one run; ``tasks`` None leaves `run`'s default task set."""
    cmd = [sys.executable, "-m", "streamgrpo.cli", "run", "--duration", str(duration_s), "--home", str(home)]
    return cmd + ([] if final_eval else ["--no-final-eval"]) + ([] if tasks is None else ["--tasks", tasks])


def task_set(tasks: str | None) -> str:
    """The task set a run trains on: ``tasks``, else `streamgrpo run`'s default for ``--tasks``."""
    if tasks is not None:
        return tasks
    from streamgrpo.cli.run import run

    [default] = [p.default for p in run.params if p.name == "tasks"]
    return str(default)


def check_tasks(tasks: str) -> None:
    """Raise ``DatasetError`` when ``tasks`` names no file and no built-in split (before any run starts)."""
    from streamgrpo.tasks.reader import read_rows

    read_rows(tasks)


def run_env(index: int, settings: dict[str, str]) -> dict[str, str]:
    """Run ``index``'s environment: trainer seed and rollout sampling seed ``index``, then the ``--set`` settings
    (which may override the sampling seed, never the trainer seed)."""
    return {"STREAMGRPO_ROLLOUT__SAMPLING_SEED": str(index), **setting_env(settings),
            "STREAMGRPO_TRAINER__SEED": str(index)}


def setting_env(settings: dict[str, str]) -> dict[str, str]:
    """``{"rollout.planner_examples": "analysis"}`` -> ``{"STREAMGRPO_ROLLOUT__PLANNER_EXAMPLES": "analysis"}``."""
    out = {}
    for key, value in settings.items():
        section, sep, name = key.partition(".")
        if not sep or not section or not name:
            raise ValueError(f"--set {key}={value}: write SECTION.FIELD=VALUE, e.g. rollout.planner_examples=analysis")
        out[f"STREAMGRPO_{section.upper()}__{name.upper()}"] = value
    return out


def run_and_summarise(home: Path, duration_s: int, env: dict[str, str], final_eval: bool = True,
                      tasks: str | None = None) -> dict[str, object]:
    """One `streamgrpo run` under ``home`` with ``env`` added to this process's environment (and ``--tasks
    tasks`` unless None); :func:`summarise` of the report it wrote."""
    before = set(home.glob("runs/*/report"))
    subprocess.run(run_command(home, duration_s, final_eval, tasks), check=True, stdout=subprocess.DEVNULL,
                   env={**os.environ, **env})
    [report] = set(home.glob("runs/*/report")) - before
    return summarise(report)


def summarise(report: Path) -> dict[str, object]:
    summary = json.loads((report / "summary.json").read_text())
    final = {e["version"]: e for e in summary["evaluations"] if e["trigger"] == "run-final"}
    base = final.get(0)
    last = final.get(max(final)) if final and max(final) > 0 else None
    rows = ["| adapter version | rewards | mean training reward | success rate |", "|---|---|---|---|"]
    for v, s in sorted(summary["per_version"].items(), key=lambda kv: int(kv[0])):
        rows.append(f"| v{v} | {s['count']} | {s['mean_reward']:.3f} | {s['success_rate']:.3f} |")
    loop = summary["loop"]
    return {
        "heldout_base": base and {k: round(base[k], 3) for k in ("accuracy", "ci_low", "ci_high")},
        "heldout_last": last and {"version": last["version"], **{k: round(last[k], 3)
                                                               for k in ("accuracy", "ci_low", "ci_high")}},
        "heldout_gain": round(last["accuracy"] - base["accuracy"], 3) if base and last else None,
        "heldout_tasks": base["tasks"] if base else None,
        "heldout_change": summary.get("heldout_change") and {
            k: v for k, v in summary["heldout_change"].items() if k in ("mean", "ci_low", "ci_high", "line")},
        "per_kind_change": summary.get("heldout_change") and {
            k: round(v["mean"], 3) for k, v in summary["heldout_change"]["per_kind"].items()},
        "rollouts": summary["rollouts"], "groups": summary["groups"], "groups_training": summary["groups_training"],
        "training_samples": summary["training_samples"], "adapters_published": summary["adapters_published"],
        "publish_to_first_rollout_s": loop["publish_to_first_rollout_s"],
        "trainer_steps_to_first_rollout_max": loop["trainer_steps_to_first_rollout"]["max"],
        "stale_share": round(loop["stale_share"], 3), "never_served": loop["never_served"],
        "report": str(report), "reward_table": "\n".join(rows),
    }


def changed(settings: dict[str, str] | None) -> str:
    """The ``--set`` settings as "SECTION.FIELD = VALUE, ..." ("" when none)."""
    return ", ".join(f"{k} = {v}" for k, v in (settings or {}).items())


def plot_runs(reports: list[Path], path: Path, changed: str = "", tasks: str | None = None) -> None:
    """Held-out accuracy of every run over wall time: the in-loop evaluator's sample per version (lines) and the
    end-of-run evaluation of the base model and the last adapter on the full split (squares), one colour a run.
    ``changed``: the settings the runs changed (``--set``, as "SECTION.FIELD = VALUE, ..."), named in the title;
    ``tasks``: the ``--tasks`` they trained on (None: `run`'s default)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5))
    for i, report in enumerate(reports):
        summary = json.loads((report / "summary.json").read_text())
        colour = f"C{i}"
        loop = [e for e in summary["evaluations"] if e["trigger"] == "run-evaluator"]
        if loop:
            ax.plot([e["t"] / 60 for e in loop], [e["accuracy"] for e in loop], "o-", color=colour, markersize=3,
                    label=f"run {i}: in-loop sample (n={loop[0]['tasks']}) per adapter version")
        final = sorted((e for e in summary["evaluations"] if e["trigger"] == "run-final"), key=lambda e: e["version"])
        if final:
            end = max(e["t"] for e in final) / 60
            for e, x in zip(final, (0.0, end), strict=False):
                ax.errorbar([x], [e["accuracy"]], yerr=[[e["accuracy"] - e["ci_low"]], [e["ci_high"] - e["accuracy"]]],
                            fmt="s", color=colour, capsize=3, markersize=6)
            ax.annotate(f"v{final[-1]['version']}", (end, final[-1]["accuracy"]), textcoords="offset points",
                        xytext=(6, 0), fontsize=8, color=colour)
    ax.set_xlabel("minutes since the run started (squares: full held-out split, base at 0, last adapter at the end)")
    ax.set_ylabel("held-out accuracy (correctness only, greedy)")
    ax.set_ylim(-0.02, 0.5)
    what = f"with {changed}" if changed else "with the defaults"
    if tasks:
        what += f", tasks {tasks}"
    ax.set_title(f"Held-out accuracy, {len(reports)} runs of `streamgrpo run` {what} (95% CI)",
                 fontsize=9 if changed or tasks else 12, wrap=True)
    ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(duration_s: int = 1800, runs: int = 1, plot: Path | None = None, seeds: list[int] | None = None,
         settings: dict[str, str] | None = None, tasks: str | None = None) -> dict[str, object]:
    seeds = list(range(runs)) if seeds is None else seeds
    results = [one_run(duration_s, i, settings, tasks) for i in seeds]
    if plot is not None:
        plot_runs([Path(str(r["report"])) for r in results], plot, changed(settings), tasks)
    return aggregate(results, duration_s, settings, tasks)


def aggregate(results: list[dict[str, object]], duration_s: int, settings: dict[str, str] | None = None,
              tasks: str | None = None) -> dict[str, Any]:
    """The benchmark's JSON line from per-run summaries (each :func:`summarise`'s dict plus its ``seed``);
    ``tasks``: the ``--tasks`` the runs were given (None: `run`'s default), recorded under "tasks"."""
    gains = [r["heldout_gain"] for r in results if r["heldout_gain"] is not None]
    return {
        "bench": "learning", "duration_s": duration_s, "runs": len(results), "seeds": [r["seed"] for r in results],
        "settings": changed(settings) or "every setting at its default",
        "tasks": task_set(tasks),
        "mean_heldout_base": round(mean(r["heldout_base"]["accuracy"] for r in results if r["heldout_base"]), 3)
        if any(r["heldout_base"] for r in results) else None,
        "mean_heldout_last": round(mean(r["heldout_last"]["accuracy"] for r in results if r["heldout_last"]), 3)
        if any(r["heldout_last"] for r in results) else None,
        "mean_heldout_gain": round(mean(gains), 3) if gains else None,
        "heldout_gain_range": [min(gains), max(gains)] if gains else None,
        "seeds_with_ci_above_zero": sum(1 for r in results if r.get("heldout_change")
                                        and r["heldout_change"]["ci_low"] > 0),
        "per_run": [{k: v for k, v in r.items() if k != "reward_table"} for r in results],
        "table": results[-1]["reward_table"],
    }


def cli() -> None:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("duration_s", nargs="?", type=int, default=1800, help="seconds each run lasts (default 1800)")
    ap.add_argument("--runs", type=int, default=1, help="runs one after another, run i with trainer seed i")
    ap.add_argument("--seeds", type=int, nargs="+", metavar="SEED", help="the trainer seeds to run (instead of --runs)")
    ap.add_argument("--set", dest="settings", action="append", default=[], metavar="SECTION.FIELD=VALUE",
                    help="change one setting for every run (repeatable), e.g. rollout.planner_examples=analysis")
    ap.add_argument("--tasks", metavar="NAME", help="the task set every run trains on (`streamgrpo run --tasks NAME`, "
                    "e.g. builtin:train-wide; default: run's own default)")
    ap.add_argument("--plot", type=Path, help="write the held-out curves of the runs to this PNG")
    ap.add_argument("--summarise", type=Path, metavar="REPORT_DIR", help="only summarise an existing run's report")
    ap.add_argument("--aggregate", nargs="+", metavar="SEED=REPORT_DIR",
                    help="only aggregate runs already made (one per seed) into the benchmark's JSON line")
    ap.add_argument("--plot-reports", nargs="+", type=Path, metavar=("OUT.png", "REPORT_DIR"),
                    help="only plot existing runs: OUT.png REPORT_DIR...")
    a = ap.parse_args()
    settings = {}
    for item in a.settings:
        key, sep, value = item.partition("=")
        if not sep:
            ap.error(f"--set {item}: write SECTION.FIELD=VALUE")
        settings[key] = value
    if a.summarise:
        print(json.dumps(summarise(a.summarise)))
    elif a.aggregate:
        runs = []
        for item in a.aggregate:
            seed, sep, report = item.partition("=")
            if not sep or not seed.isdigit():
                ap.error(f"--aggregate {item}: write SEED=REPORT_DIR")
            runs.append({"seed": int(seed), **summarise(Path(report))})
        print(json.dumps(aggregate(runs, a.duration_s, settings, a.tasks)))
    elif a.plot_reports:
        if len(a.plot_reports) < 2:
            ap.error("--plot-reports needs OUT.png and at least one REPORT_DIR")
        plot_runs(a.plot_reports[1:], a.plot_reports[0], changed(settings), a.tasks)
    else:
        try:
            setting_env(settings)
        except ValueError as exc:
            ap.error(str(exc))
        if a.tasks is not None:
            from streamgrpo.tasks.datasets import DatasetError

            try:
                check_tasks(a.tasks)
            except DatasetError as exc:
                ap.error(f"--tasks {a.tasks}: {exc}")
        print(json.dumps(main(a.duration_s, a.runs, a.plot, a.seeds, settings, a.tasks)))


if __name__ == "__main__":
    cli()
