"""Where a trained adapter's gain holds: the tasks it trained on, new numbers in the same phrasings, other phrasings.

    python bench/bench_transfer.py STORE VERSION [--tasks 48]
    # e.g. STORE = <home>/runs/<id>/adapters/planner (a `streamgrpo run`'s adapter store)

Evaluates the base model and adapter ``VERSION`` (greedy, correctness only, the default answer path) on three
arithmetic sets and prints one JSON line with each set's accuracies and paired difference [95 % CI]:

- ``train``: the first ``--tasks`` arithmetic tasks of the built-in TRAIN split (phrasings and numbers the run
  trained on: what the policy fitted);
- ``fresh_numbers``: the train split's six phrasings ("What is a * b - c?", "... divided by ...") with operands
  that no train task uses (does the skill hold for new numbers?), with the per-phrasing counts;
- ``heldout``: the held-out split's arithmetic tasks (other phrasings, other numbers: "Multiply 778 by 74.",
  "Subtract 363 from the product of 378 and 84.") -- what `run`'s final evaluation counts.

Run it alone on the machine for its timing; the accuracies do not depend on load.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path
from typing import Any


def fresh_rows(n: int, seed: int = 7) -> list[Any]:
    from streamgrpo.tasks.builtin import ARITHMETIC_TEMPLATES, SOURCE, _train_numbers
    from streamgrpo.tasks.datasets import TaskRow

    taken = _train_numbers()
    rng = random.Random(seed)
    small = [x for x in range(12, 100) if x not in taken]
    large = [x for x in range(101, 1000) if x not in taken]
    rows = []
    for i in range(n):
        _, make = ARITHMETIC_TEMPLATES[i % len(ARITHMETIC_TEMPLATES)]
        question, answer = make(rng.choice(large), rng.choice(small), rng.choice(large))
        rows.append(TaskRow(question=question, ground_truths=[str(answer)], source=SOURCE,
                            metadata={"kind": "arithmetic", "difficulty": "fresh", "row_id": f"fresh-{i:04d}"}))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("store", type=Path, help="adapter store of the line: <store>/v<VERSION>/ holds the adapter")
    ap.add_argument("version", type=int)
    ap.add_argument("--tasks", type=int, default=48, help="tasks of the train and fresh-numbers sets")
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    import torch

    torch.set_num_threads(a.threads)
    from streamgrpo.config import LoopSettings
    from streamgrpo.evaluation.core import paired_difference
    from streamgrpo.evaluation.judging import CorrectnessJudge
    from streamgrpo.evaluation.runner import EvalSpec, evaluate
    from streamgrpo.judge.config import JudgeSettings
    from streamgrpo.rollout.config import RolloutConfig
    from streamgrpo.rollout.runtime import build_context, build_policy
    from streamgrpo.tasks.builtin import ARITHMETIC_TEMPLATES, heldout_tasks, train_tasks

    sets = {
        "train": [r for r in train_tasks() if r.metadata["kind"] == "arithmetic"][: a.tasks],
        "fresh_numbers": fresh_rows(a.tasks),
        "heldout": [r for r in heldout_tasks() if r.metadata["kind"] == "arithmetic"],
    }
    cfg = RolloutConfig(policy="local")
    policy = build_policy(cfg)
    ctx = build_context(cfg, policy)
    judge = CorrectnessJudge(JudgeSettings())
    spec = EvalSpec(task_set="transfer", max_new_tokens=64, max_turns=LoopSettings().max_turns, batch_size=16)
    base = {name: evaluate(ctx, rows, spec, judge, adapter_name="planner", version=0) for name, rows in sets.items()}
    policy.load_adapter("planner", a.version, a.store / f"v{a.version}")
    last = {name: evaluate(ctx, rows, spec, judge, adapter_name="planner", version=a.version)
            for name, rows in sets.items()}
    out: dict[str, Any] = {"bench": "transfer", "version": a.version}
    for name in sets:
        d = paired_difference(base[name].outcomes, last[name].outcomes)
        out[name] = {"tasks": len(sets[name]), "base": round(base[name].summary.accuracy, 3),
                     "adapter": round(last[name].summary.accuracy, 3),
                     "diff": [round(d.mean, 3), round(d.ci_low, 3), round(d.ci_high, 3)]}
    per = [[0, 0] for _ in ARITHMETIC_TEMPLATES]
    for i, (b, t) in enumerate(zip(base["fresh_numbers"].outcomes, last["fresh_numbers"].outcomes, strict=True)):
        per[i % len(ARITHMETIC_TEMPLATES)][0] += int(b.correct)
        per[i % len(ARITHMETIC_TEMPLATES)][1] += int(t.correct)
    out["fresh_numbers"]["per_phrasing_base_adapter"] = {ARITHMETIC_TEMPLATES[k][1](1, 2, 3)[0]: v
                                                         for k, v in enumerate(per)}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
