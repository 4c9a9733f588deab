"""Learning on the built-in tasks: one `streamgrpo run` on this machine, then its reward curve.

    python bench/bench_learning.py [DURATION_S]      # default 1260 s (21 min)

Runs the real loop (embedded broker, streams, judge, one rollout worker, trainer) with the
settings below, then prints one JSON line: per-adapter-version reward, adapters published, the
run's report directory and plot. Reward is REPORTED here, never asserted (see the e2e test for
what is asserted about the loop).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

SETTINGS = """[loop]
max_turns = 2
samples_per_step = 8

[streams]
max_new_tokens = 40

[trainer]
lr = 1e-4
micro_batch_tokens = 2048
"""


def main(duration_s: int = 1260) -> dict[str, object]:
    work = Path(tempfile.mkdtemp(prefix="streamgrpo-learning-"))
    cfg = work / "settings.toml"
    cfg.write_text(SETTINGS)
    home = work / "home"
    subprocess.run([sys.executable, "-m", "streamgrpo.cli", "--config", str(cfg), "run", "--duration", str(duration_s),
                    "--group-size", "4", "--home", str(home)], check=True, stdout=subprocess.DEVNULL)
    report = next(home.glob("runs/*/report"))
    return summarise(report, duration_s)


def summarise(report: Path, duration_s: int) -> dict[str, object]:
    summary = json.loads((report / "summary.json").read_text())
    rows = ["| adapter version | rewards | mean reward | success rate |", "|---|---|---|---|"]
    for v, s in sorted(summary["per_version"].items(), key=lambda kv: int(kv[0])):
        rows.append(f"| v{v} | {s['count']} | {s['mean_reward']:.3f} | {s['success_rate']:.3f} |")
    return {
        "bench": "learning", "duration_s": duration_s, "group_size": 4, "settings": SETTINGS.replace("\n", " "),
        "tasks_submitted": summary["tasks"], "rollouts": summary["rollouts"], "groups": summary["groups"],
        "groups_training": summary["groups_training"], "training_samples": summary["training_samples"],
        "adapters_published": summary["adapters_published"], "serving_version": summary["serving_version"],
        "trainer_steps": summary["adapters"][-1]["step"] if summary["adapters"] else 0,
        "report": str(report), "table": "\n".join(rows),
    }


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--summarise":  # an existing run's report directory
        print(json.dumps(summarise(Path(sys.argv[2]), int(sys.argv[3]))))
    else:
        print(json.dumps(main(int(sys.argv[1]) if len(sys.argv) > 1 else 1260)))
