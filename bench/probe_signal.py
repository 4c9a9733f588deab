"""How much training signal the untrained planner's rollouts carry, by temperature and group size.

    python bench/probe_signal.py [--kind arithmetic] [--tasks 10] [--group 8] [--temperature 0.7 1.0]

Samples ``--group`` rollouts of each of the first ``--tasks`` training tasks of ``--kind`` (the built-in TRAIN
split, never the held-out one) with the product's rollout defaults (LocalPolicy, grammar-constrained replies,
the default answer path), judges every final answer with the default ``correct`` judge, and prints one JSON
line per temperature:

- ``correct``: share of rollouts judged correct;
- ``groups_with_variance``: share of groups with at least one correct and one wrong rollout (only those train
  under GRPO), and the same share expected for smaller group sizes, computed from each task's observed pass
  rate (1 - p^k - (1-p)^k);
- ``restated``: rollouts whose answer is the question's arithmetic restated (an unevaluated expression, which
  the math judge alone would score as correct and the ``correct`` judge refuses);
- ``tools``: planner actions by tool (``answer`` for the answer turn); ``seconds``.

Run it alone on the machine for timings; the shares do not depend on load.
"""

from __future__ import annotations

import argparse
import collections
import json
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kind", default="arithmetic", help="task kind: arithmetic, lookup, two_step or history")
    ap.add_argument("--tasks", type=int, default=10, help="first N training tasks of the kind")
    ap.add_argument("--group", type=int, default=8, help="rollouts per task")
    ap.add_argument("--temperature", type=float, nargs="+", default=[0.7, 1.0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--planner-examples", choices=["fixed", "analysis"], default="fixed",
                    help="[rollout] planner_examples: the planner prompt's worked example")
    a = ap.parse_args()

    import torch

    torch.set_num_threads(a.threads)
    from streamgrpo.avro import records as R
    from streamgrpo.config import LoopSettings
    from streamgrpo.judge.scorers import build_scorer
    from streamgrpo.judge.scorers.base import Candidate
    from streamgrpo.judge.scorers.correct import unevaluated_expression
    from streamgrpo.rollout.config import RolloutConfig
    from streamgrpo.rollout.loop import run_groups
    from streamgrpo.rollout.runtime import build_context, build_policy
    from streamgrpo.streams.fanout import FanoutPolicy, fan_out
    from streamgrpo.tasks.builtin import train_tasks

    cfg = RolloutConfig(policy="local", planner_examples=a.planner_examples)
    policy = build_policy(cfg)
    ctx = build_context(cfg, policy)
    scorer = build_scorer("correct")
    rows = [r for r in train_tasks() if r.metadata["kind"] == a.kind][: a.tasks]
    max_turns = LoopSettings().max_turns
    for temperature in a.temperature:
        fan = FanoutPolicy("planner", max_turns, R.SamplingParams(temperature, 1.0, 64), 1 << 30, 1 << 30, 1)
        tasks = [R.Task(envelope=R.Envelope.new("probe", task_id=f"probe-{i}"), question=r.question,
                        source=r.source, group_size=a.group, ground_truths=list(r.ground_truths),
                        metadata=dict(r.metadata)) for i, r in enumerate(rows)]
        by_id = {t.envelope.task_id: t for t in tasks}
        events: list[object] = []
        t0 = time.monotonic()
        run_groups([fan_out(t, 0, fan) for t in tasks], ctx, events.append)
        seconds = time.monotonic() - t0
        tools: collections.Counter[str] = collections.Counter()
        per_task: dict[str, list[bool]] = collections.defaultdict(list)
        restated = 0
        for ev in events:
            if isinstance(ev, R.PlannerAction):
                tools[ev.tool or ("answer" if ev.is_final else "invalid")] += 1
            elif isinstance(ev, R.RolloutCompleted):
                task = by_id[ev.envelope.task_id]
                score = scorer.score(Candidate(task.question, ev.final_answer, tuple(task.ground_truths)))
                per_task[task.envelope.task_id].append(bool(score.correct))
                restated += unevaluated_expression(ev.final_answer)
        rates = [sum(v) / len(v) for v in per_task.values()]
        n = sum(len(v) for v in per_task.values())

        def expected(k: int, rates: list[float] = rates) -> float:
            return round(sum(1 - p**k - (1 - p) ** k for p in rates) / max(1, len(rates)), 3)

        print(json.dumps({
            "kind": a.kind, "planner_examples": a.planner_examples, "tasks": len(rows), "group": a.group, "temperature": temperature,
            "correct": round(sum(sum(v) for v in per_task.values()) / max(1, n), 3),
            "groups_with_variance": round(sum(0 < sum(v) < len(v) for v in per_task.values()) / max(1, len(per_task)), 3),
            "expected_groups_with_variance": {k: expected(k) for k in (2, 4, 8, 16)},
            "per_task_pass": [round(p, 2) for p in rates], "restated": restated,
            "tools": dict(tools), "seconds": round(seconds, 1)}), flush=True)


if __name__ == "__main__":
    main()
