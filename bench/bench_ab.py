"""The A/B test's error rates and speed, by simulation of the pure decision core (no broker, no model).

    python bench/bench_ab.py [--runs 1000] [--seed 1]

Each run is one test of a candidate line against the primary with the product's defaults
(``[streams] ab_*``, ``[loop] canary_share``): groups arrive one at a time, each goes to the canary
with probability ``canary_share``; a group of 4 rollouts draws its task's success probability from
Beta(p*2, (1-p)*2) (tasks differ a lot: some always solved, some never) and its outcome is the
success share. Every rollout also fails with a small probability (ERROR reward 2%, judge failure 1%)
and makes two planner actions that fail to parse half the time (the base SmolLM2's rate), so the
guardrails run on realistic counts. After every group :func:`streamgrpo.lifecycle.ab.decide` looks
(one look per group: the most looks a test gets). A run ends at the first decision or at the maximum
duration (``ab_max_groups`` canary groups).

Printed (one JSON object): per scenario, the share of runs that promoted as "better", rolled back
(test or guardrail), or reached the maximum duration (then promoted as "not worse", or restarted),
and the groups (both arms) to a test or guardrail decision. ``run_profile`` repeats three scenarios
with the maximum duration `streamgrpo run` reaches on this CPU (about 4 canary groups).
Under equal arms a "better" promotion is a false promotion: its rate must stay at or below
``ab_alpha``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import statistics
import sys
import time

from streamgrpo.lifecycle.ab import ABInput, ABPolicy, decide
from streamgrpo.lifecycle.stats import Arm, VersionStats
from streamgrpo.streams.ab_controller import policy_from
from streamgrpo.streams.config import StreamsSettings

GROUP_SIZE, TURNS, HETEROGENEITY = 4, 2, 2.0
#: What `streamgrpo run` gets on this 2-core CPU: ~2 groups a minute, half of them canary, so its 240 s maximum
#: duration (`ab_max_duration_s`) ends a test after about 4 canary groups.
RUN_CANARY_GROUPS = 4


def group(rng: random.Random, p: float, parse_failure: float, counts: VersionStats) -> float:
    """One group's outcome; adds its rollouts and actions to ``counts``."""
    a, b = max(p * HETEROGENEITY, 1e-3), max((1 - p) * HETEROGENEITY, 1e-3)
    p_task = rng.betavariate(a, b)
    successes = 0
    for _ in range(GROUP_SIZE):
        counts.rewards += 1
        roll = rng.random()
        if roll < 0.02:
            counts.rollout_errors += 1
        elif roll < 0.03:
            counts.judge_failures += 1
        else:
            counts.ok += 1
            successes += rng.random() < p_task
        counts.actions += TURNS
        counts.parse_failures += sum(rng.random() < parse_failure for _ in range(TURNS))
    return successes / GROUP_SIZE


def one_run(rng: random.Random, p_canary: float, p_control: float, share: float, policy: ABPolicy,
            parse_canary: float = 0.5) -> tuple[str, int]:
    arms, counts = [Arm(), Arm()], [VersionStats(), VersionStats()]
    n = 0
    while arms[0].n < policy.max_groups:
        i = 0 if rng.random() < share else 1
        x = group(rng, p_canary if i == 0 else p_control, parse_canary if i == 0 else 0.5, counts[i])
        arms[i] = arms[i].add(x)
        n += 1
        verdict = decide(ABInput(arms[0], arms[1], counts[0], counts[1], age_s=0.0), policy)
        if verdict.action != "wait":
            return verdict.verdict, n
    raise AssertionError("the maximum duration always ends a test")


def scenario(name: str, runs: int, seed: int, p_canary: float, p_control: float, share: float, policy: ABPolicy,
             **kw: float) -> dict[str, object]:
    rng = random.Random(seed)
    outcomes = [one_run(rng, p_canary, p_control, share, policy, **kw) for _ in range(runs)]
    kinds = [k for k, _ in outcomes]
    decided = [n for k, n in outcomes if k in ("better", "worse", "guardrail")]
    out: dict[str, object] = {
        "p_canary": p_canary, "p_control": p_control,
        "promoted_better": kinds.count("better") / runs, "rolled_back_worse": kinds.count("worse") / runs,
        "rolled_back_guardrail": kinds.count("guardrail") / runs,
        "max_duration_promoted_not_worse": kinds.count("not_worse") / runs,
        "max_duration_restarted": kinds.count("worse_estimate") / runs,
    }
    if decided:
        ordered = sorted(decided)
        out["groups_to_decision_p50"] = statistics.median(ordered)
        out["groups_to_decision_p90"] = ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]
    return out


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args(argv)
    settings = StreamsSettings()
    policy, share = policy_from(settings), settings.canary_share
    started = time.time()
    cases: list[tuple[str, float, float, dict[str, float]]] = [
        ("equal_p0.1", 0.1, 0.1, {}), ("equal_p0.3", 0.3, 0.3, {}), ("equal_p0.5", 0.5, 0.5, {}),
        ("better_+0.1", 0.4, 0.3, {}), ("better_+0.2", 0.5, 0.3, {}), ("better_+0.4", 0.6, 0.2, {}),
        ("worse_-0.1", 0.2, 0.3, {}), ("worse_-0.2", 0.1, 0.3, {}), ("worse_-0.4", 0.1, 0.5, {}),
        ("broken_parser_0.95", 0.3, 0.3, {"parse_canary": 0.95}),
    ]
    scenarios = {name: scenario(name, args.runs, args.seed + i, pc, pp, share, policy, **kw)
                 for i, (name, pc, pp, kw) in enumerate(cases)}
    run_policy = dataclasses.replace(policy, max_groups=RUN_CANARY_GROUPS)
    run_profile = {name: scenario(name, args.runs, args.seed + 100 + i, pc, pp, share, run_policy)
                   for i, (name, pc, pp, _) in enumerate(cases) if name in ("equal_p0.3", "better_+0.4", "worse_-0.4")}
    equal = [s for n, s in scenarios.items() if n.startswith("equal")]
    false_promotion = max(float(s["promoted_better"]) for s in equal)  # type: ignore[arg-type]
    false_decision = max(float(s["promoted_better"]) + float(s["rolled_back_worse"])  # type: ignore[arg-type]
                         + float(s["rolled_back_guardrail"]) for s in equal)  # type: ignore[arg-type]
    result = {
        "runs_per_scenario": args.runs, "seed": args.seed, "canary_share": share, "alpha": policy.alpha,
        "mde": policy.mde, "min_groups": policy.min_groups, "max_groups": policy.max_groups,
        "group_size": GROUP_SIZE,
        "false_promotion_rate_max": false_promotion, "false_decision_rate_max": false_decision,
        "false_promotion_at_or_below_alpha": false_promotion <= policy.alpha,
        "seconds": round(time.time() - started, 1),
        "scenarios": scenarios,
        "run_profile_canary_groups": RUN_CANARY_GROUPS,
        "run_profile": run_profile,
    }
    print(json.dumps(result))
    return 0 if false_promotion <= policy.alpha else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
