"""PNG plots of the reports where a curve says more than a table (matplotlib, Agg backend; no display).

Each function takes a report's :class:`~streamgrpo.analysis.reports.Result` and writes one PNG. An empty
result still writes a figure that says "no data", so a report's plot always exists after it ran.
What is not covered: interactive plots, styling beyond readable defaults.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from streamgrpo.analysis.reports import Result


def _figure(width: float = 7.0, height: float = 4.0) -> tuple[Any, Any]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt.subplots(figsize=(width, height), dpi=110)


def _save(fig: Any, ax: Any, path: Path, empty: bool) -> None:
    import matplotlib.pyplot as plt

    if empty:
        ax.text(0.5, 0.5, "no data in the archive", ha="center", va="center", transform=ax.transAxes)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)


def _minutes(times: list[datetime | None], start: float) -> list[float | None]:
    return [None if t is None else (t.timestamp() - start) / 60 for t in times]


def reward_by_version(result: Result, path: Path) -> None:
    """Mean reward of each version at the mean time of its rewards; held-out accuracy (95% CI) at evaluation time."""
    rows = result.records()
    fig, ax = _figure()
    stamps = [t.timestamp() for r in rows for t in (r["mean_reward_at"], r["evaluated_at"]) if t is not None]
    start = min(stamps) if stamps else 0.0
    rewarded = [r for r in rows if r["reward_mean"] is not None and r["mean_reward_at"] is not None]
    xs = _minutes([r["mean_reward_at"] for r in rewarded], start)
    ax.plot(xs, [r["reward_mean"] for r in rewarded], "o-", label="mean reward (rollouts served)")
    for x, r in zip(xs, rewarded, strict=True):
        ax.annotate(f"v{r['version']}", (x, r["reward_mean"]), textcoords="offset points", xytext=(0, 6), fontsize=8)
    evaluated = [r for r in rows if r["eval_accuracy"] is not None and r["evaluated_at"] is not None]
    if evaluated:
        ex = _minutes([r["evaluated_at"] for r in evaluated], start)
        acc = [r["eval_accuracy"] for r in evaluated]
        err = [[a - r["eval_ci_low"] for a, r in zip(acc, evaluated, strict=True)],
               [r["eval_ci_high"] - a for a, r in zip(acc, evaluated, strict=True)]]
        ax.errorbar(ex, acc, yerr=err, fmt="s--", capsize=3, label="held-out accuracy (95% CI)")
        for x, r, a in zip(ex, evaluated, acc, strict=True):
            ax.annotate(f"v{r['version']}", (x, a), textcoords="offset points", xytext=(4, -10), fontsize=8)
    ax.set_xlabel("minutes since the first reward or evaluation")
    ax.set_ylabel("reward / accuracy")
    ax.set_title("Reward and held-out accuracy per adapter version")
    if rewarded or evaluated:
        ax.legend(loc="best", fontsize=8)
    _save(fig, ax, path, not (rewarded or evaluated))


def tool_usage(result: Result, path: Path) -> None:
    """Grouped bars: calls per tool, one bar per outcome."""
    rows = result.records()
    tools = sorted({r["tool"] for r in rows})
    outcomes = sorted({r["outcome"] for r in rows})
    fig, ax = _figure()
    width = 0.8 / max(1, len(outcomes))
    for i, outcome in enumerate(outcomes):
        calls = {r["tool"]: r["calls"] for r in rows if r["outcome"] == outcome}
        ax.bar([t + i * width for t in range(len(tools))], [calls.get(t, 0) for t in tools], width, label=outcome)
    ax.set_xticks([t + width * (len(outcomes) - 1) / 2 for t in range(len(tools))], tools)
    ax.set_ylabel("tool calls")
    ax.set_title("Tool usage by rollout outcome")
    if rows:
        ax.legend(fontsize=8)
    _save(fig, ax, path, not rows)


def turns(result: Result, path: Path) -> None:
    """Histogram of planner turns per rollout, successes overlaid."""
    rows = result.records()
    fig, ax = _figure()
    ax.bar([r["turns"] for r in rows], [r["rollouts"] for r in rows], label="rollouts")
    ax.bar([r["turns"] for r in rows], [r["successes"] for r in rows], width=0.5, label="successes")
    ax.set_xlabel("planner turns")
    ax.set_ylabel("rollouts")
    ax.set_title("Turns per rollout")
    if rows:
        ax.legend(fontsize=8)
    _save(fig, ax, path, not rows)


def parse_failures(result: Result, path: Path) -> None:
    rows = result.records()
    fig, ax = _figure()
    ax.plot([r["adapter_version"] for r in rows], [r["failure_rate"] for r in rows], "o-")
    ax.set_xlabel("adapter version")
    ax.set_ylabel("share of planner actions that did not parse")
    ax.set_title("Parse failures by adapter version")
    _save(fig, ax, path, not rows)


def staleness(result: Result, path: Path) -> None:
    rows = result.records()
    fig, ax = _figure()
    xs = [r["staleness"] for r in rows]
    ax.bar(xs, [r["trained"] for r in rows], label="trained")
    ax.bar(xs, [r["dropped_stale"] for r in rows], bottom=[r["trained"] for r in rows], label="dropped (stale)")
    ax.set_xlabel("versions behind the trainer when consumed")
    ax.set_ylabel("training samples")
    ax.set_title("Staleness of training samples")
    if rows:
        ax.legend(fontsize=8)
    _save(fig, ax, path, not rows)
