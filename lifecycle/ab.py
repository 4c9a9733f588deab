"""The A/B decision, as pure functions on per-group outcomes (no clock, no I/O).

The test (newest-vs-primary, see :mod:`streamgrpo.lifecycle.registry`): the *canary arm* is every
group served by the training line under test (the versions above the primary still in the test,
pooled since the test started), the *control arm* every group the primary served since then. A
group's outcome is its success share (:mod:`streamgrpo.lifecycle.stats`), a number in [0, 1]; the
group, never the rollout, is the unit (rollouts of one group share a task and are not independent).

Decision rule (:func:`decide`), evaluated after every group:

1. **Guardrails** (:func:`guardrail`): the canary arm's rollout-error, judge-failure or
   parse-failure rate is at least its limit AND exceeds the primary's by ``margin``, with at least
   ``min_rollouts`` judged rollouts (``min_actions`` planner actions for parse failures) -> roll back
   at once. A safety limit, not a test: it catches a broken adapter long before a test could.
2. **Sequential test**: a mixture sequential probability ratio test (mSPRT; Johari, Pekelis & Walsh,
   "Always Valid Inference", 2017) on the difference of mean outcomes, ``d = canary - control``.
   With ``V`` the variance of the estimate (per-arm variances over group counts) and a normal mixing
   distribution ``d ~ N(0, tau^2)``, ``tau = mde``, the likelihood ratio is
   ``L = sqrt(V / (V + tau^2)) * exp(tau^2 d^2 / (2 V (V + tau^2)))``. Once both arms have
   ``min_groups`` groups, ``L >= 1 / alpha`` decides: promote when ``d > 0``, roll back when ``d < 0``.
   Stated error rate: under equal arms the chance of EVER deciding (promotion or rollback, however
   often it looks) is at most ``alpha`` for normal outcomes with known variance; here the variance is
   estimated (each arm's sample variance, shrunk towards the Bernoulli bound ``m(1-m)`` by two
   pseudo-groups) and outcomes are discrete, so the rate is MEASURED by simulation
   (``python bench/bench_ab.py``: 1,000 runs per scenario, in BENCHMARKS.md). ``p_value = min(1, 1/L)``
   is the always-valid p-value at this look.
3. **Maximum duration**: once the canary arm has ``max_groups`` groups or the test is
   ``max_duration_s`` old without a decision, the verdict is *no significant difference*: if the
   estimate is not worse than ``-max_loss`` the newest version is promoted ("not_worse": the primary
   follows training, which keeps going), otherwise a fresh test of the newest version starts
   ("worse_estimate", older candidates retired). A max-duration promotion is not a "better" verdict.
4. Promotions wait for a person when ``require_approval`` (action ``await_approval``), and, with an
   ``eval_gate``, for held-out accuracies of both versions: a candidate worse than the primary by more
   than the gate is not promoted (a fresh test starts instead).

What is not covered: several candidate lines at once (newest-vs-primary only), stratification by
task kind, the time the guardrail's counts span (they are the versions' lifetime counts).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

from streamgrpo.lifecycle.stats import Arm, VersionStats

Action = Literal["wait", "promote", "rollback", "await_approval", "restart"]
#: guardrail name -> VersionStats rate it reads
GUARDED = {"error": "rollout_errors", "judge_failure": "judge_failures", "parse_failure": "parse_failures"}


@dataclass(frozen=True)
class Guardrails:
    """Safety limits on the canary arm (rates of judged rollouts; parse failures per planner action)."""

    min_rollouts: int = 8
    min_actions: int = 32
    margin: float = 0.25
    max_rate: dict[str, float] = field(default_factory=lambda: {"error": 0.5, "judge_failure": 0.5,
                                                                "parse_failure": 0.8})


@dataclass(frozen=True)
class ABPolicy:
    alpha: float = 0.05
    mde: float = 0.1
    min_groups: int = 4
    max_groups: int = 200
    max_duration_s: float = 1800.0
    max_loss: float = 0.05
    require_approval: bool = False
    eval_gate: float | None = None
    guardrails: Guardrails = field(default_factory=Guardrails)


@dataclass(frozen=True)
class ABInput:
    """What the decision looks at (gathered by the controller from the two folds)."""

    canary: Arm
    control: Arm
    canary_counts: VersionStats  # the candidates' counts pooled
    control_counts: VersionStats  # the primary's
    age_s: float
    candidate_eval: float | None = None
    primary_eval: float | None = None


@dataclass(frozen=True)
class Verdict:
    action: Action
    verdict: str  # better | worse | guardrail | not_worse | worse_estimate | held_out_worse | "" (wait)
    reason: str
    metrics: dict[str, float]


@dataclass(frozen=True)
class ABStatistics:
    estimate: float  # canary mean - control mean
    std_error: float
    log_lr: float  # log of the mixture likelihood ratio L
    p_value: float  # always-valid: min(1, 1 / L)
    p_better: float  # normal approximation of P(canary > control)


def arm_variance(arm: Arm) -> float:
    """Variance of one group outcome: the sample variance shrunk towards the Bernoulli bound m(1-m) of the smoothed
    mean m = (sum + 1) / (n + 2) by two pseudo-groups (never 0, conservative for small n)."""
    m = (arm.total + 1.0) / (arm.n + 2.0)
    bound = m * (1.0 - m)
    squares = max(0.0, arm.total_sq - arm.total * arm.total / arm.n) if arm.n else 0.0
    return (squares + 2.0 * bound) / (max(arm.n - 1, 0) + 2.0)


def msprt(canary: Arm, control: Arm, tau: float) -> ABStatistics:
    """The mixture SPRT statistic of the module docstring (both arms need at least one group)."""
    if canary.n < 1 or control.n < 1:
        raise ValueError("msprt needs at least one group per arm")
    v = arm_variance(canary) / canary.n + arm_variance(control) / control.n
    d = canary.mean - control.mean
    t2 = tau * tau
    log_lr = 0.5 * math.log(v / (v + t2)) + t2 * d * d / (2.0 * v * (v + t2))
    p_value = min(1.0, math.exp(-log_lr))
    p_better = 0.5 * (1.0 + math.erf(d / math.sqrt(2.0 * v)))
    return ABStatistics(d, math.sqrt(v), log_lr, p_value, p_better)


def guardrail(canary: VersionStats, control: VersionStats, g: Guardrails) -> str | None:
    """Why the canary arm must be rolled back at once, or None (see the module docstring)."""
    for name, counter in GUARDED.items():
        enough = canary.actions >= g.min_actions if counter == "parse_failures" else canary.rewards >= g.min_rollouts
        rate, base = canary.rate(counter), control.rate(counter)
        if enough and rate >= g.max_rate[name] and rate - base >= g.margin:
            return (f"guardrail {name} rate {rate:.2f} >= {g.max_rate[name]:.2f} and {rate - base:+.2f} over the "
                    f"primary's {base:.2f}")
    return None


def _metrics(inp: ABInput, policy: ABPolicy, stats: ABStatistics | None) -> dict[str, float]:
    out = {"canary_groups": float(inp.canary.n), "control_groups": float(inp.control.n),
           "canary_success": inp.canary.mean, "control_success": inp.control.mean, "age_s": inp.age_s,
           "alpha": policy.alpha, "mde": policy.mde}
    for name, counter in GUARDED.items():
        out[f"canary_{name}_rate"] = inp.canary_counts.rate(counter)
        out[f"control_{name}_rate"] = inp.control_counts.rate(counter)
    if stats is not None:
        out.update(estimate=stats.estimate, std_error=stats.std_error, log_lr=stats.log_lr,
                   log_lr_threshold=math.log(1.0 / policy.alpha), p_value=stats.p_value, p_better=stats.p_better)
    return out


def decide(inp: ABInput, policy: ABPolicy) -> Verdict:
    """The verdict of the test now (see the module docstring)."""
    stats = None
    if inp.canary.n >= policy.min_groups and inp.control.n >= policy.min_groups:
        stats = msprt(inp.canary, inp.control, policy.mde)
    metrics = _metrics(inp, policy, stats)
    arms = (f"canary {inp.canary.mean:.3f} over {inp.canary.n} groups vs primary {inp.control.mean:.3f} over "
            f"{inp.control.n}")
    tripped = guardrail(inp.canary_counts, inp.control_counts, policy.guardrails)
    if tripped is not None:
        return Verdict("rollback", "guardrail", tripped, metrics)
    if stats is not None and stats.log_lr >= math.log(1.0 / policy.alpha):
        test = f"{arms}: difference {stats.estimate:+.3f}, always-valid p {stats.p_value:.4f} < alpha {policy.alpha}"
        if stats.estimate < 0:
            return Verdict("rollback", "worse", f"worse: {test}", metrics)
        return _promotion(inp, policy, "better", f"better: {test}", metrics)
    ended = inp.canary.n >= policy.max_groups or inp.age_s >= policy.max_duration_s
    if not ended:
        need = f"both arms need {policy.min_groups} groups" if stats is None else f"p {stats.p_value:.3f}"
        return Verdict("wait", "", f"testing: {arms}; {need}", metrics)
    estimate = inp.canary.mean - inp.control.mean if inp.canary.n and inp.control.n else 0.0
    limit = (f"maximum duration ({inp.canary.n}/{policy.max_groups} canary groups, {inp.age_s:.0f}/"
             f"{policy.max_duration_s:.0f} s) without a significant difference: {arms}, estimate {estimate:+.3f}")
    if estimate >= -policy.max_loss:
        return _promotion(inp, policy, "not_worse", f"not worse: {limit} >= -max_loss {policy.max_loss}", metrics)
    return Verdict("restart", "worse_estimate", f"{limit} < -max_loss {policy.max_loss}: fresh test", metrics)


def _promotion(inp: ABInput, policy: ABPolicy, verdict: str, reason: str, metrics: dict[str, float]) -> Verdict:
    """Promote, or wait for a person (``require_approval``) or for held-out evaluations (``eval_gate``)."""
    if policy.eval_gate is not None:
        if inp.candidate_eval is None or inp.primary_eval is None:
            return Verdict("wait", "", f"{reason}; waiting for held-out evaluations of both versions (eval gate)",
                           metrics)
        metrics = {**metrics, "candidate_heldout": inp.candidate_eval, "primary_heldout": inp.primary_eval}
        if inp.candidate_eval < inp.primary_eval - policy.eval_gate:
            return Verdict("restart", "held_out_worse", f"{reason}; but held-out accuracy {inp.candidate_eval:.3f} "
                           f"< primary's {inp.primary_eval:.3f} - gate {policy.eval_gate}: not promoted", metrics)
    if policy.require_approval:
        return Verdict("await_approval", verdict, f"{reason}; waiting for `streamgrpo adapters approve`", metrics)
    return Verdict("promote", verdict, reason, metrics)
