"""Learning on the built-in tasks: `streamgrpo run` with the product's defaults, judged on the held-out split.

    python bench/bench_learning.py [DURATION_S] [--runs N]     # default 1800 s (30 min), 1 run

Run i (0, 1, 2, ...) sets the trainer's seed to i (`STREAMGRPO_TRAINER__SEED`); sampling in the rollout
worker is not seeded, so runs differ in their rollouts as well as in their LoRA initialisation.

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


def one_run(duration_s: int, index: int) -> dict[str, object]:
    work = Path(tempfile.mkdtemp(prefix=f"streamgrpo-learning-{index}-"))
    home = work / "home"
    env = {**os.environ, "STREAMGRPO_TRAINER__SEED": str(index)}
    subprocess.run([sys.executable, "-m", "streamgrpo.cli", "run", "--duration", str(duration_s), "--home", str(home)],
                   check=True, stdout=subprocess.DEVNULL, env=env)
    return {"seed": index, **summarise(next(home.glob("runs/*/report")))}


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
        "rollouts": summary["rollouts"], "adapters_published": summary["adapters_published"],
        "publish_to_first_rollout_s": loop["publish_to_first_rollout_s"],
        "trainer_steps_to_first_rollout_max": loop["trainer_steps_to_first_rollout"]["max"],
        "stale_share": round(loop["stale_share"], 3), "never_served": loop["never_served"],
        "report": str(report), "reward_table": "\n".join(rows),
    }


def main(duration_s: int = 1800, runs: int = 1) -> dict[str, object]:
    results = [one_run(duration_s, i) for i in range(runs)]
    gains = [r["heldout_gain"] for r in results if r["heldout_gain"] is not None]
    return {
        "bench": "learning", "duration_s": duration_s, "runs": runs, "settings": "every setting at its default",
        "mean_heldout_base": round(mean(r["heldout_base"]["accuracy"] for r in results if r["heldout_base"]), 3)
        if any(r["heldout_base"] for r in results) else None,
        "mean_heldout_last": round(mean(r["heldout_last"]["accuracy"] for r in results if r["heldout_last"]), 3)
        if any(r["heldout_last"] for r in results) else None,
        "mean_heldout_gain": round(mean(gains), 3) if gains else None,
        "heldout_gain_range": [min(gains), max(gains)] if gains else None,
        "per_run": [{k: v for k, v in r.items() if k != "reward_table"} for r in results],
        "table": results[-1]["reward_table"],
    }


if __name__ == "__main__":
    args = sys.argv[1:]
    if args and args[0] == "--summarise":  # an existing run's report directory
        print(json.dumps(summarise(Path(args[1]))))
        sys.exit(0)
    n = int(args[args.index("--runs") + 1]) if "--runs" in args else 1
    positional = [a for i, a in enumerate(args) if a != "--runs" and (i == 0 or args[i - 1] != "--runs")]
    print(json.dumps(main(int(positional[0]) if positional else 1800, n)))
