"""Grammar-constrained planner replies vs free sampling + repair, measured with the product's `streamgrpo eval`.

The same held-out tasks are evaluated with ``[rollout] constrain`` = ``off`` (free sampling, then the
parser's repair: the behaviour before) and ``auto`` (every reply sampled under the planner grammar,
models/grammar.py), each in its own `streamgrpo eval` process (env ``STREAMGRPO_ROLLOUT__CONSTRAIN``),
greedy (k = 1) and sampled (k samples per task at a temperature). Reports per setting the eval's own
figures: accuracy with its 95% interval, answered rate, parse-failure rate (share of planner
actions that did not parse), tool calls, turns and planner tokens per task, seconds.

    python bench/bench_constrain.py --limit 32 --samples 4 --temperature 0.7

Prints one JSON object. Not covered: held-out accuracy after training (a training run per setting).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODES = ("off", "auto")
FIELDS = ("accuracy", "ci_low", "ci_high", "answered", "parse_fail", "tools_per_task", "turns", "tokens_per_task",
          "seconds")


def run_eval(mode: str, limit: int, samples: int, temperature: float) -> dict[str, object]:
    """One `streamgrpo eval` of the base model in its own process -> its JSON row."""
    with tempfile.TemporaryDirectory(prefix="bench_constrain_") as tmp:
        out = Path(tmp) / "eval.json"
        cmd = [str(Path(sys.executable).parent / "streamgrpo"), "eval", "--limit", str(limit), "--no-publish",
               "--samples", str(samples), "--temperature", str(temperature), "--format", "json", "--output", str(out)]
        env = dict(os.environ, STREAMGRPO_ROLLOUT__CONSTRAIN=mode, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"streamgrpo eval ({mode}) failed: {proc.stderr[-2000:]}")
        (row,) = json.loads(out.read_text())
    return {k: row[k] for k in FIELDS}


def table(results: dict[str, dict[str, dict[str, object]]]) -> str:
    lines = ["| eval | constrain | accuracy [95% CI] | answered | parse fail | tools/task | turns | tokens/task | s |",
             "|---|---|---|---|---|---|---|---|---|"]
    for setting, by_mode in results.items():
        for mode, r in by_mode.items():
            lines.append(f"| {setting} | {mode} | {r['accuracy']:.3f} [{r['ci_low']:.3f}, {r['ci_high']:.3f}] | "
                         f"{r['answered']:.3f} | {r['parse_fail']:.3f} | {r['tools_per_task']:.2f} | "
                         f"{r['turns']:.2f} | {r['tokens_per_task']:.1f} | {r['seconds']:.0f} |")
    return "\n".join(lines)


def main(argv: list[str]) -> dict[str, object]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--limit", type=int, default=32, help="held-out tasks (the first N)")
    parser.add_argument("--samples", type=int, default=4, help="rollouts per task of the sampled eval (0: skip it)")
    parser.add_argument("--temperature", type=float, default=0.7, help="temperature of the sampled eval")
    args = parser.parse_args(argv)
    settings = {"greedy k=1": (1, 0.0)}
    if args.samples > 0:
        settings[f"T={args.temperature} k={args.samples}"] = (args.samples, args.temperature)
    results: dict[str, dict[str, dict[str, object]]] = {}
    for name, (k, temperature) in settings.items():
        results[name] = {}
        for mode in MODES:
            print(f"[constrain] {name} constrain={mode} ...", file=sys.stderr, flush=True)
            results[name][mode] = run_eval(mode, args.limit, k, temperature)
    return {"bench": "constrain", "tasks": args.limit, "results": results, "table": table(results)}


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1:])))
