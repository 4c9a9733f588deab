"""Canned reports: named SQL over the views (``streamgrpo analyse --report NAME``), some with a PNG plot.

Each :class:`Report` is one query over :mod:`.views` and the per-topic views, with named parameters
(``$adapter``, ``$threshold``, ``$version``, ``$limit``) and an optional plot from :mod:`.plots`.
Outcomes: a rollout's judge reward (the first non-human Reward) is a ``success`` when OK and
``score >= threshold`` (the streams' ``success_threshold``, 0.5 by default), a ``failure`` when OK and
lower, ``error`` when the judge could not score it, ``unscored`` when no reward was archived.
Adding a report = adding an entry to :data:`REPORTS`.

What is not covered: reports across archives (point ``--archive-dir`` at one archive at a time).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from streamgrpo.analysis import plots
from streamgrpo.archive.errors import ArchiveError
from streamgrpo.avro import provenance


@dataclass(frozen=True)
class Result:
    columns: list[str]
    rows: list[tuple[Any, ...]]

    def records(self) -> list[dict[str, Any]]:
        return [dict(zip(self.columns, r, strict=True)) for r in self.rows]


@dataclass(frozen=True)
class Report:
    name: str
    doc: str
    sql: str
    params: tuple[str, ...] = ()
    plot: Callable[[Result, Path], None] | None = None
    required: tuple[str, ...] = field(default_factory=tuple)


_JUDGE = provenance.JUDGE_SQL
#: One row per completed rollout with its outcome (see the module docstring).
OUTCOMES = f"""outcomes AS (
    SELECT c.rollout_id, c.group_id, c.adapter_name, c.adapter_version, c.status, c.turns,
           CASE WHEN r.status IS NULL THEN 'unscored' WHEN r.status = 'ERROR' THEN 'error'
                WHEN r.score >= $threshold THEN 'success' ELSE 'failure' END AS outcome
    FROM rollouts c
    LEFT JOIN (SELECT rollout_id, arg_min(score, event_time) AS score, arg_min(status, event_time) AS status
               FROM rewards WHERE {_JUDGE} GROUP BY 1) r ON r.rollout_id = c.rollout_id
    WHERE c.adapter_name = $adapter)"""

REPORTS: dict[str, Report] = {r.name: r for r in (
    Report("reward-by-version", "Reward and held-out accuracy per adapter version over time.", f"""
        SELECT v.version, v.published_at, v.rollouts, v.rewards, v.reward_mean, s.success_rate, s.mean_reward_at,
               v.eval_accuracy, v.eval_ci_low, v.eval_ci_high, v.evaluated_at, v.samples_trained
        FROM adapter_versions v
        LEFT JOIN (SELECT adapter_version AS version,
                          avg(CASE WHEN status = 'OK' AND score >= $threshold THEN 1.0 ELSE 0.0 END) AS success_rate,
                          to_timestamp(avg(epoch(event_time))) AS mean_reward_at
                   FROM rewards WHERE adapter_name = $adapter AND {_JUDGE} GROUP BY 1) s ON s.version = v.version
        WHERE v.adapter_name = $adapter ORDER BY v.version""", ("adapter", "threshold"), plots.reward_by_version),
    Report("tool-usage", "Tool calls by tool and by the outcome of the rollout that made them.", f"""
        WITH {OUTCOMES}
        SELECT t.tool, o.outcome, count(*) AS calls, count(DISTINCT t.rollout_id) AS rollouts,
               count(*) FILTER (WHERE t.error IS NOT NULL) AS tool_errors
        FROM tool_observations t JOIN outcomes o ON o.rollout_id = t.rollout_id
        GROUP BY 1, 2 ORDER BY 1, 2""", ("adapter", "threshold"), plots.tool_usage),
    Report("turns", "Planner turns per rollout: how many rollouts took each number of turns, and how they ended.",
           f"""
        WITH {OUTCOMES}
        SELECT turns, count(*) AS rollouts, count(*) FILTER (WHERE outcome = 'success') AS successes,
               count(*) FILTER (WHERE status = 'MAX_TURNS') AS max_turns, count(*) / sum(count(*)) OVER () AS share
        FROM outcomes GROUP BY 1 ORDER BY 1""", ("adapter", "threshold"), plots.turns),
    Report("parse-failures", "Planner actions whose structured output did not parse (or was repaired), per version.",
           """
        SELECT adapter_version, count(*) AS actions, count(*) FILTER (WHERE parse_status = 'FAILED') AS failed,
               count(*) FILTER (WHERE parse_status = 'REPAIRED') AS repaired,
               count(*) FILTER (WHERE parse_status = 'FAILED') / count(*) AS failure_rate
        FROM planner_actions WHERE adapter_name = $adapter GROUP BY 1 ORDER BY 1""", ("adapter",),
           plots.parse_failures),
    Report("false-stops", "Verifier false stops: rollouts the verifier stopped whose answer was then judged wrong.", f"""
        WITH {OUTCOMES}
        SELECT o.adapter_version, count(*) FILTER (WHERE v.stops > 0) AS stopped,
               count(*) FILTER (WHERE v.stops > 0 AND o.outcome = 'failure') AS false_stops,
               count(*) FILTER (WHERE v.stops > 0 AND o.outcome = 'failure')
                   / nullif(count(*) FILTER (WHERE v.stops > 0), 0) AS false_stop_rate
        FROM outcomes o
        LEFT JOIN (SELECT rollout_id, count(*) FILTER (WHERE decision = 'STOP') AS stops FROM verdicts GROUP BY 1) v
               ON v.rollout_id = o.rollout_id
        GROUP BY 1 ORDER BY 1""", ("adapter", "threshold")),
    Report("no-tool-answers", "Rollouts answered without any tool call, per version, and how often they were right.",
           f"""
        WITH {OUTCOMES},
        calls AS (SELECT rollout_id, count(*) AS n FROM tool_observations GROUP BY 1)
        SELECT o.adapter_version, count(*) FILTER (WHERE o.status = 'ANSWERED') AS answered,
               count(*) FILTER (WHERE o.status = 'ANSWERED' AND c.n IS NULL) AS without_tools,
               avg(CASE WHEN o.outcome = 'success' THEN 1.0 ELSE 0.0 END)
                   FILTER (WHERE o.status = 'ANSWERED' AND c.n IS NULL) AS success_without_tools,
               avg(CASE WHEN o.outcome = 'success' THEN 1.0 ELSE 0.0 END)
                   FILTER (WHERE o.status = 'ANSWERED' AND c.n IS NOT NULL) AS success_with_tools
        FROM outcomes o LEFT JOIN calls c ON c.rollout_id = o.rollout_id
        GROUP BY 1 ORDER BY 1""", ("adapter", "threshold")),
    Report("judge-disagreement", "Where two judges (or one judge in two namespaces, e.g. `replay train --judge`) "
           "scored the same rollout: how far apart, and how often they agree on success.", """
        WITH r AS (SELECT rollout_id, namespace, judge.name AS judge, arg_min(score, event_time) AS score
                   FROM all_rewards WHERE status = 'OK' GROUP BY 1, 2, 3)
        SELECT a.namespace AS namespace_a, a.judge AS judge_a, b.namespace AS namespace_b, b.judge AS judge_b,
               count(*) AS rollouts, avg(abs(a.score - b.score)) AS mean_abs_diff,
               max(abs(a.score - b.score)) AS max_abs_diff,
               avg(CASE WHEN (a.score >= $threshold) = (b.score >= $threshold) THEN 1.0 ELSE 0.0 END)
                   AS success_agreement,
               corr(a.score, b.score) AS correlation
        FROM r a JOIN r b ON a.rollout_id = b.rollout_id
             AND (a.namespace < b.namespace OR (a.namespace = b.namespace AND a.judge < b.judge))
        GROUP BY 1, 2, 3, 4 ORDER BY rollouts DESC""", ("threshold",)),
    Report("staleness", "Staleness of the samples each version consumed (trainer version minus the sampling "
           "version): trained, and dropped as stale.", """
        SELECT staleness, count(*) FILTER (WHERE drop_reason IS NULL) AS trained,
               count(*) FILTER (WHERE drop_reason = 'stale') AS dropped_stale,
               count(*) FILTER (WHERE drop_reason IS NULL) / sum(count(*) FILTER (WHERE drop_reason IS NULL)) OVER ()
                   AS share_trained
        FROM sample_lineage WHERE adapter_name = $adapter GROUP BY 1 ORDER BY 1""", ("adapter",), plots.staleness),
    Report("slowest-groups", "Groups by wall time from their first request to their close (or last completion).", """
        WITH g AS (SELECT group_id, any_value(task_id) AS task_id, any_value(question) AS question,
                          min(requested_at) AS requested_at, count(*) AS rollouts, count(status) AS completed,
                          max(duration_ms) AS slowest_rollout_ms, max(completed_at) AS last_completed_at
                   FROM trajectories WHERE adapter_name = $adapter GROUP BY 1)
        SELECT g.group_id, g.task_id, g.question, g.rollouts, g.completed, c.status, c.reason,
               epoch(coalesce(c.event_time, g.last_completed_at)) - epoch(g.requested_at) AS wall_s,
               g.slowest_rollout_ms
        FROM g LEFT JOIN groups c ON c.group_id = g.group_id
        ORDER BY wall_s DESC NULLS LAST, g.group_id LIMIT $limit""", ("adapter", "limit")),
    Report("lineage", "The exact TrainingSample events that trained adapter version --version (through the "
           "archive: AdapterPublished lineage, minus what the trainer dropped).", """
        SELECT sample_id, task_id, group_id, rollout_id, kafka_partition, kafka_offset, behaviour_version,
               staleness, reward, advantage
        FROM sample_lineage WHERE adapter_name = $adapter AND trained_version = $version AND drop_reason IS NULL
        ORDER BY kafka_partition, kafka_offset""", ("adapter", "version"), required=("version",)),
    Report("adapters", "Every adapter version: publication, samples trained, rollouts served, reward and "
           "held-out accuracy.", """
        SELECT * FROM adapter_versions WHERE adapter_name = $adapter ORDER BY version""", ("adapter",)),
)}


def run_report(con: Any, name: str, params: dict[str, Any]) -> Result:
    """Run report ``name`` on a connection from :func:`streamgrpo.analysis.views.connect`."""
    import duckdb

    report = REPORTS.get(name)
    if report is None:
        raise ArchiveError(f"unknown report {name!r}; choose one of: {', '.join(REPORTS)}")
    missing = [p for p in report.required if params.get(p) is None]
    if missing:
        raise ArchiveError(f"report {name} needs --{' --'.join(missing)}")
    try:
        cur = con.execute(report.sql, {p: params[p] for p in report.params})
        return Result([d[0] for d in cur.description or []], cur.fetchall())
    except duckdb.Error as exc:
        raise ArchiveError(f"report {name} failed: {exc}") from exc
