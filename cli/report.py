"""The report of ``streamgrpo run``: ``summary.json``, ``summary.md`` and its plots, and the held-out change of the
last adapter against the base model (``run`` calls :func:`write_report` when it stops, failed or not).

What is not covered: the figures themselves (the run's :class:`~streamgrpo.cli.progress.Progress` fold computes
them); a report of a run that is still going (``streamgrpo status`` shows that).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from streamgrpo.cli.progress import Progress
from streamgrpo.cli.supervision import Child


def heldout_change(base: Any, last: Any) -> dict[str, Any]:
    """Paired difference (last - base) on the same held-out tasks, overall and per task kind, with 95 % CIs."""
    from streamgrpo.evaluation.core import paired_difference

    def one(a: Any, b: Any) -> dict[str, Any]:
        d = paired_difference(a, b)
        return {"tasks": d.tasks, "mean": d.mean, "ci_low": d.ci_low, "ci_high": d.ci_high,
                "base_only": d.a_only, "last_only": d.b_only}

    overall = one(base, last)
    kinds = sorted({o.kind for o in base})
    per_kind = {k: one([o for o in base if o.kind == k], [o for o in last if o.kind == k]) for k in kinds}
    line = (f"{overall['mean'] * 100:+.1f} points [{overall['ci_low'] * 100:+.1f}, {overall['ci_high'] * 100:+.1f}] "
            f"(paired, {overall['tasks']} tasks; " + ", ".join(f"{k} {v['mean'] * 100:+.1f}"
                                                               for k, v in per_kind.items()) + ")")
    return {**overall, "per_kind": per_kind, "line": line}


def write_report(progress: Progress, out: Path, children: list[Child], failure: str | None = None) -> None:
    """summary.json, summary.md, the reward-per-version plot and the held-out accuracy plot; a failed run
    (``failure``: why) says so first in both."""
    from streamgrpo.cli.progress import lifecycle_lines, plot_heldout

    out.mkdir(parents=True, exist_ok=True)
    summary = {"failed": failure, **progress.summary()} if failure else progress.summary()
    summary["restarts"] = {c.name: c.restarts for c in children}
    (out / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
    plot = out / "reward_per_version.png"
    progress.plot(plot)
    lines = ["# streamgrpo run report", ""]
    lines += [f"**RUN FAILED**: {failure}. The figures below cover the run up to then.", ""] if failure else []
    lines += [f"![reward per adapter version]({plot.name})", ""]
    if plot_heldout(progress.evaluations, progress.started, out / "heldout_accuracy.png"):
        lines += ["![held-out accuracy per adapter version](heldout_accuracy.png)", ""]
    alarms = summary["health"]["alarms"]
    lines += [*(f"- **ALARM**: {a}" for a in alarms), ""] if alarms else []
    lines += _heldout_lines(summary) + _loop_lines(summary["loop"]) + lifecycle_lines(summary["lifecycle"])
    lines += [f"- {k}: {v}" for k, v in summary.items() if not isinstance(v, (dict, list))]
    lines += ["", "| adapter version | rewards | mean reward | success rate |", "|---|---|---|---|"]
    for v, s in sorted(summary["per_version"].items(), key=lambda kv: int(kv[0])):
        lines.append(f"| v{v} | {s['count']} | {s['mean_reward']:.3f} | {s['success_rate']:.3f} |")
    (out / "summary.md").write_text("\n".join(lines) + "\n")


def _heldout_lines(summary: dict[str, Any]) -> list[str]:
    final = [e for e in summary["evaluations"] if e["trigger"] == "run-final"]
    if not final:
        return []
    out = ["## Held-out accuracy at the end of the run (full split, greedy, correctness only)", "",
           "| version | accuracy | 95% CI | answered | parse failures |", "|---|---|---|---|---|"]
    out += [f"| v{e['version']} | {e['accuracy']:.3f} | [{e['ci_low']:.3f}, {e['ci_high']:.3f}] | "
            f"{e['answered_rate']:.3f} | {e['parse_failure_rate']:.3f} |" for e in final]
    change = summary.get("heldout_change")
    if change:
        out += ["", f"**Change, last adapter vs base model: {change['line']}**"]
    parts = summary.get("heldout_parts") or {}
    if parts:
        out += ["", f"- demonstrations alone (warm start, {parts['warm_start']['version']} vs base): "
                    f"{parts['warm_start']['line']}",
                f"- GRPO on top of the warm start (last adapter vs {parts['warm_start']['version']}): "
                f"{parts['grpo_on_warm_start']['line']}"]
    demos = summary.get("demonstrations") or {}
    if demos.get("requested"):
        rejected = ", ".join(f"{k} {n}" for k, n in sorted(demos["rejected"].items())) or "none"
        versions = demos["warm_start_versions"]
        span = f"v{min(versions)}-v{max(versions)}" if versions else "none published"
        out += ["", f"- demonstrations: {demos['requested']} requested, {demos['executed']} executed, "
                    f"{demos['trained']} trained on; dead-lettered: {rejected}; warm-start versions: {span}"]
    return out + [""]


def _loop_lines(loop: dict[str, Any]) -> list[str]:
    delay, steps = loop["publish_to_first_rollout_s"], loop["trainer_steps_to_first_rollout"]
    def fmt(v: float | None) -> str:
        return "-" if v is None else f"{v:.0f}"

    return ["## Loop closure", "",
            f"- adapters published {loop['versions_published']}, served {loop['versions_served']}"
            f" (never served: {loop['never_served'] or 'none'}"
            + (f"; {loop['warm_start_versions']} warm-start versions, trained on demonstrations, not counted"
               if loop.get("warm_start_versions") else "") + ")",
            f"- publication -> first rollout completed on it: p50 {fmt(delay['p50'])} s, p95 {fmt(delay['p95'])} s;"
            f" trainer steps in between: p50 {fmt(steps['p50'])}, max {fmt(steps['max'])}",
            f"- samples dropped as stale: {loop['samples_dropped_stale']:.0f} ({100 * loop['stale_share']:.1f} %)"
            + "".join(f"; {reason}: {n:.0f}" for reason, n in sorted(loop.get("samples_dropped", {}).items())
                      if reason != "stale"),
            f"- A/B control arm judged for the comparison only (no samples, outside the stale share):"
            f" {loop.get('control_arm_groups', 0)} groups, {loop.get('control_arm_rollouts', 0)} rollouts", ""]
