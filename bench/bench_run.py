"""Throughput of the whole loop: `streamgrpo run` rollouts per minute at each rollout-worker concurrency.

    python bench/bench_run.py --duration 600 --concurrency 2 4

One `streamgrpo run --no-final-eval` per value of ``--concurrency`` (``STREAMGRPO_ROLLOUT__CONCURRENCY``;
`run` sizes admission to it), one after the other, every other setting at its default: embedded broker,
streams, judge, one rollout worker, trainer and in-loop evaluator sharing this machine's cores. The first
value is the baseline. Prints one JSON line: per run the rollouts, groups (and how many trained), trainer
samples, adapters published, rollouts per minute, the stale share and the loop-closure figures from the
run's own report (``summary.json``); and each run's rollouts per minute over the baseline's.

What is covered: the product's `run` as a user starts it (one process tree, real parts). What is not:
several workers, vLLM (`--policy vllm`), learning (``bench_learning.py`` evaluates held-out accuracy).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from bench_learning import run_and_summarise


def one_run(home: Path, duration_s: int, concurrency: int) -> dict[str, object]:
    """One `streamgrpo run` with ``concurrency``; its figures read from the report it wrote."""
    start = time.time()
    summary = run_and_summarise(home, duration_s, {"STREAMGRPO_ROLLOUT__CONCURRENCY": str(concurrency)},
                                final_eval=False)
    wall = time.time() - start
    return {
        "concurrency": concurrency, "rollouts_per_min": round(float(str(summary["rollouts"])) / (duration_s / 60), 2),
        **{k: summary[k] for k in ("rollouts", "groups", "groups_training", "training_samples", "adapters_published",
                                   "stale_share", "never_served", "publish_to_first_rollout_s",
                                   "trainer_steps_to_first_rollout_max")},
        "wall_s": round(wall, 1), "load_avg_1m_end": round(os.getloadavg()[0], 2),
    }


def table(runs: list[dict[str, object]]) -> str:
    keys = ["rollouts", "rollouts_per_min", "groups", "groups_training", "training_samples", "adapters_published",
            "stale_share", "publish_to_first_rollout_s", "trainer_steps_to_first_rollout_max", "wall_s"]
    lines = ["| | " + " | ".join(f"concurrency {r['concurrency']}" for r in runs) + " |", "|---|" + "---|" * len(runs)]
    lines += [f"| {k} | " + " | ".join(str(r[k]) for r in runs) + " |" for k in keys]
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--duration", type=int, default=600, help="seconds each `streamgrpo run` runs (default 600)")
    ap.add_argument("--concurrency", type=int, nargs="+", default=[2, 4],
                    help="rollout-worker concurrency of each run; the first is the baseline (default: 2 4)")
    args = ap.parse_args()
    home = Path(tempfile.mkdtemp(prefix="streamgrpo-bench-run-")) / "home"  # one model cache for every run
    runs = []
    for concurrency in args.concurrency:
        print(f"[bench_run] concurrency {concurrency}: {args.duration} s ...", file=sys.stderr, flush=True)
        runs.append(one_run(home, args.duration, concurrency))
    base = float(str(runs[0]["rollouts_per_min"])) or 1e-9
    print(json.dumps({
        "bench": "run_throughput", "duration_s": args.duration, "cpus": os.cpu_count(),
        "runs": {f"concurrency {r['concurrency']}": r for r in runs},
        "rollouts_per_min_vs_first": [round(float(str(r["rollouts_per_min"])) / base, 2) for r in runs],
        "table": table(runs),
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
