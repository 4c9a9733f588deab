"""Joined views over the archive: a trajectory end to end, what trained each adapter version, and each version.

On top of the per-topic views of :mod:`streamgrpo.archive.duck` (columns documented by the Avro
contract), :func:`connect` adds the views of :data:`VIEWS`; every column of every one is documented
in its :class:`View` (``streamgrpo analyse --describe VIEW``; ``docs/analysis.md`` lists them all and a
test keeps it in step with this module).

The chain: ``tasks`` -> ``rollout_requests`` -> ``planner_actions`` / ``tool_observations`` /
``verdicts`` (``trajectory_steps``, one row per turn) -> ``rollouts`` -> ``rewards`` -> ``groups`` ->
``training_samples`` -> ``sample_lineage`` (the adapter version whose AdapterPublished lineage covers
the sample's offset, and whether that trainer actually trained it) -> ``adapter_versions``;
``trajectories`` is one row per rollout with all of it.

"Trained" (``sample_lineage.drop_reason IS NULL``) follows the trainer's admission exactly where the
events say enough: a record inside a version's lineage was trained unless it belongs to another adapter
family (``other_adapter``), a trainer dead-lettered it (its reason code, e.g. ``trainer_malformed``), it
is a second copy of an event id (the views keep the first), or the drop rule of
:mod:`streamgrpo.lifecycle.pacing` refused it (the same rule, as SQL): ``rolled_back`` when its version is
on a branch the trainer left (not the trainer's weights, not one of their ancestors, a published version
of a line that had a rollback or rejection: the trainer continues from the primary and drops what the
discarded versions sampled), ``stale`` when it was more than the trainer's ``max_staleness`` versions
behind the weights along their lineage (the trainer records the setting as ``AdapterPublished.max_staleness``;
before contract v4 in its metrics: :func:`streamgrpo.lifecycle.published.max_staleness_sql` reads both).
What is not covered: versions published with ``publish_every`` > 1 get the lineage of all their steps
(still exact); a trainer restart that forgot the ids it had seen may train a second copy the view hides; the
samples of a step that a rollback discarded before it was published count as trained by the next version;
several trainers publishing into one adapter name.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from streamgrpo.archive import duck
from streamgrpo.avro import provenance
from streamgrpo.lifecycle import pacing, published
from streamgrpo.topics import catalog


@dataclass(frozen=True)
class View:
    name: str
    doc: str
    columns: dict[str, str]  # column -> what it holds
    sql: str


_JUDGE_REWARDS = f"SELECT * FROM rewards WHERE {provenance.JUDGE_SQL}"

TRAJECTORY_STEPS = View(
    "trajectory_steps",
    "One row per planner turn: the action, the tool call it made and the verifier's verdict on it.",
    {
        "task_id": "Task of the rollout.", "group_id": "Group of the rollout.", "rollout_id": "The rollout.",
        "turn": "Planner turn (1-based).", "adapter_name": "Adapter family that planned the turn.",
        "adapter_version": "Adapter version that actually served the turn.",
        "parse_status": "STRICT, REPAIRED or FAILED (the planner's structured output).",
        "planned_tool": "Tool the planner chose (NULL: none or unparsed).", "is_final": "The planner chose to answer.",
        "action_text": "Text the planner generated.", "action_tokens": "Number of generated tokens.",
        "latency_ms": "Generation latency of the turn.", "tool": "Tool that ran (NULL: no tool call this turn).",
        "command": "Command the executor ran.", "output": "Tool output (bounded).",
        "tool_error": "Tool error, if any.", "tool_ms": "Tool run time.",
        "decision": "Verifier verdict: STOP or CONTINUE (NULL: none recorded).",
        "verdict": "Verifier's analysis.", "acted_at": "Event time of the planner action.",
    },
    """
    SELECT p.task_id, p.group_id, p.rollout_id, p.turn, p.adapter_name, p.adapter_version, p.parse_status,
           p.tool AS planned_tool, p.is_final, p.action_text, len(p.action_token_ids) AS action_tokens, p.latency_ms,
           o.tool, o.command, o.output, o.error AS tool_error, o.duration_ms AS tool_ms,
           v.decision, v.analysis AS verdict, p.event_time AS acted_at
    FROM planner_actions p
    LEFT JOIN tool_observations o ON o.rollout_id = p.rollout_id AND o.turn = p.turn
    LEFT JOIN verdicts v ON v.rollout_id = p.rollout_id AND v.turn = p.turn
    """,
)

SAMPLE_LINEAGE = View(
    "sample_lineage",
    "One row per TrainingSample inside an AdapterPublished lineage: the version it went into and whether it "
    "was trained (drop_reason NULL) or dropped, and why.",
    {
        "sample_id": "TrainingSample event id.", "task_id": "Task of the rollout.", "group_id": "Group.",
        "rollout_id": "Rollout the sample trains on.", "kafka_partition": "Partition of the sample record.",
        "kafka_offset": "Offset of the sample record.", "adapter_name": "Adapter family of the trainer.",
        "sample_adapter": "Adapter family that produced the sample.",
        "behaviour_version": "Version that sampled the rollout.", "advantage": "Trajectory advantage.",
        "reward": "Reward of the rollout.", "trained_version": "Version whose lineage covers the record.",
        "parent_version": "Version the trainer continued from (NULL: fresh adapter).",
        "published_at": "When trained_version was announced.",
        "staleness": "Versions the sample lagged behind the trainer's weights (parent_version, 0 for a fresh "
                     "adapter), counted along their lineage (lifecycle.pacing.versions_behind).",
        "drop_reason": "NULL when trained; else other_adapter, rolled_back, stale or the trainer's dead-letter "
                       "reason code.",
    },
    f"""
    WITH RECURSIVE published AS (
        SELECT adapter_name, version, nullif(parent_version, 0) AS parent FROM adapter_published),
    chain AS (  -- every version's ancestors as announced, 1 = its parent (a forged cycle stops at the count)
        SELECT adapter_name, version AS head, parent AS ancestor, 1 AS depth FROM published WHERE parent IS NOT NULL
        UNION ALL
        SELECT c.adapter_name, c.head, p.parent, c.depth + 1
        FROM chain c JOIN published p ON p.adapter_name = c.adapter_name AND p.version = c.ancestor
        WHERE p.parent IS NOT NULL AND c.depth < (SELECT count(*) FROM published)),
    depths AS (SELECT adapter_name, head, ancestor, min(depth) AS depth FROM chain GROUP BY ALL),
    roots AS (SELECT adapter_name, head, count(*) + 1 AS depth FROM depths GROUP BY ALL),  -- where 0 sits
    left_lines AS (  -- adapters with a rollback or rejection: the trainer left a branch there
        SELECT DISTINCT adapter_name FROM (SELECT adapter_name FROM adapter_rolled_back
                                           UNION ALL SELECT adapter_name FROM adapter_rejected)),
    ranges AS (
        SELECT adapter_name, version, parent_version, event_time AS published_at,
               {published.max_staleness_sql("max_staleness", "metrics")} AS max_staleness, unnest(lineage) AS rng
        FROM adapter_published),
    trainer_letters AS (
        SELECT source_partition, source_offset, any_value(reason_code) AS reason_code FROM dead_letters
        WHERE source_topic = '{catalog.TRAINING_SAMPLES}' AND consumer LIKE 'trainer.%' GROUP BY 1, 2),
    placed AS (
        SELECT s.event_id AS sample_id, s.task_id, s.group_id, s.rollout_id, s.kafka_partition, s.kafka_offset,
               r.adapter_name, s.adapter_name AS sample_adapter, s.behaviour_version, s.advantage, s.reward,
               r.version AS trained_version, r.parent_version, r.published_at, r.max_staleness,
               coalesce(r.parent_version, 0) AS weights, d.reason_code
        FROM training_samples s
        JOIN ranges r ON r.rng.topic = '{catalog.TRAINING_SAMPLES}' AND r.rng."partition" = s.kafka_partition
                     AND s.kafka_offset BETWEEN r.rng."start" AND r.rng."end"
        LEFT JOIN trainer_letters d ON d.source_partition = s.kafka_partition AND d.source_offset = s.kafka_offset),
    measured AS (
        SELECT x.*, CASE WHEN x.behaviour_version = 0 THEN coalesce(o.depth, 1) ELSE a.depth END AS depth,
               (x.behaviour_version <> x.weights AND a.depth IS NULL AND x.behaviour_version <> 0
                AND l.adapter_name IS NOT NULL AND b.version IS NOT NULL) AS left_behind
        FROM placed x
        LEFT JOIN depths a ON a.adapter_name = x.adapter_name AND a.head = x.weights
                          AND a.ancestor = x.behaviour_version
        LEFT JOIN roots o ON o.adapter_name = x.adapter_name AND o.head = x.weights
        LEFT JOIN left_lines l ON l.adapter_name = x.adapter_name
        LEFT JOIN published b ON b.adapter_name = x.adapter_name AND b.version = x.behaviour_version)
    SELECT sample_id, task_id, group_id, rollout_id, kafka_partition, kafka_offset, adapter_name, sample_adapter,
           behaviour_version, advantage, reward, trained_version, parent_version, published_at,
           CAST({pacing.versions_behind_sql("weights", "behaviour_version", "depth")} AS INTEGER) AS staleness,
           CASE WHEN sample_adapter <> adapter_name THEN 'other_adapter'
                WHEN reason_code IS NOT NULL THEN reason_code
                ELSE {pacing.drop_reason_sql("left_behind", pacing.versions_behind_sql(
                      "weights", "behaviour_version", "depth"), "max_staleness")}
           END AS drop_reason
    FROM measured
    """,
)

TRAJECTORIES = View(
    "trajectories",
    "One row per requested rollout, end to end: task, request, planner turns, tool calls, verdicts, completion, "
    "reward, group, advantage, TrainingSample and the adapter version it trained.",
    {
        "task_id": "Task.", "question": "Task question.", "source": "Task source (kind).",
        "ground_truths": "Accepted answers of the task.", "group_id": "Group.", "rollout_id": "Rollout.",
        "rollout_index": "Index of the rollout in its group.", "group_size": "N of the group.",
        "adapter_name": "Adapter family.", "requested_version": "Adapter version chosen for the group.",
        "requested_at": "When the request was made.", "served_version": "Version that served the rollout.",
        "status": "ANSWERED, MAX_TURNS or ERROR (NULL: never completed).", "final_answer": "The answer.",
        "turns": "Planner turns taken.", "duration_ms": "Rollout wall time.", "completed_at": "Completion time.",
        "actions": "Planner actions recorded.", "parse_failures": "Planner actions that did not parse.",
        "tool_calls": "Tool observations recorded.", "tool_errors": "Tool calls that failed.",
        "tools": "Distinct tools called.", "stops": "STOP verdicts.", "continues": "CONTINUE verdicts.",
        "reward": "Judge score (NULL: not scored).", "reward_status": "OK or ERROR.", "judge": "Judge name.",
        "reward_error": "Why the judge could not score.", "group_status": "COMPLETE or TIMED_OUT.",
        "group_trains": "Whether the group produced samples.", "group_reason": "Why the group closed as it did.",
        "sample_id": "TrainingSample event id (NULL: no sample).", "advantage": "Trajectory advantage.",
        "sample_partition": "Partition of the sample record.", "sample_offset": "Offset of the sample record.",
        "trained_version": "Adapter version the sample trained (NULL: not trained, or not yet).",
        "demo_source": "Where the rollout's demonstration came from (its planner replies were given, not sampled; "
                       "trained by likelihood); NULL: sampled by the policy.",
    },
    f"""
    WITH t AS (SELECT task_id, arg_min(question, event_time) AS question, arg_min(source, event_time) AS source,
                      arg_min(ground_truths, event_time) AS ground_truths FROM tasks GROUP BY 1),
    a AS (SELECT rollout_id, count(*) AS actions, count(*) FILTER (WHERE parse_status = 'FAILED') AS parse_failures
          FROM planner_actions GROUP BY 1),
    o AS (SELECT rollout_id, count(*) AS tool_calls, count(*) FILTER (WHERE error IS NOT NULL) AS tool_errors,
                 list(DISTINCT tool ORDER BY tool) AS tools FROM tool_observations GROUP BY 1),
    v AS (SELECT rollout_id, count(*) FILTER (WHERE decision = 'STOP') AS stops,
                 count(*) FILTER (WHERE decision = 'CONTINUE') AS continues FROM verdicts GROUP BY 1),
    r AS (SELECT rollout_id, arg_min(score, event_time) AS score, arg_min(status, event_time) AS status,
                 arg_min(judge.name, event_time) AS judge, arg_min(error, event_time) AS error
          FROM ({_JUDGE_REWARDS}) GROUP BY 1),
    l AS (SELECT sample_id, min(trained_version) AS trained_version FROM sample_lineage
          WHERE drop_reason IS NULL GROUP BY 1)
    SELECT q.task_id, t.question, t.source, t.ground_truths, q.group_id, q.rollout_id, q.rollout_index, q.group_size,
           q.adapter_name, q.adapter_version AS requested_version, q.event_time AS requested_at,
           c.adapter_version AS served_version, c.status, c.final_answer, c.turns, c.duration_ms,
           c.event_time AS completed_at, coalesce(a.actions, 0) AS actions,
           coalesce(a.parse_failures, 0) AS parse_failures, coalesce(o.tool_calls, 0) AS tool_calls,
           coalesce(o.tool_errors, 0) AS tool_errors, coalesce(o.tools, []) AS tools, coalesce(v.stops, 0) AS stops,
           coalesce(v.continues, 0) AS continues, r.score AS reward, r.status AS reward_status, r.judge,
           r.error AS reward_error, g.status AS group_status, g.trains AS group_trains, g.reason AS group_reason,
           s.event_id AS sample_id, s.advantage, s.kafka_partition AS sample_partition,
           s.kafka_offset AS sample_offset, l.trained_version, c.demo_source
    FROM rollout_requests q
    LEFT JOIN t ON t.task_id = q.task_id
    LEFT JOIN rollouts c ON c.rollout_id = q.rollout_id
    LEFT JOIN a ON a.rollout_id = q.rollout_id
    LEFT JOIN o ON o.rollout_id = q.rollout_id
    LEFT JOIN v ON v.rollout_id = q.rollout_id
    LEFT JOIN r ON r.rollout_id = q.rollout_id
    LEFT JOIN groups g ON g.group_id = q.group_id
    LEFT JOIN training_samples s ON s.rollout_id = q.rollout_id
    LEFT JOIN l ON l.sample_id = s.event_id
    """,
)

ADAPTER_VERSIONS = View(
    "adapter_versions",
    "One row per adapter version seen anywhere (0 = the base model): publication, what it trained on, the "
    "rollouts it served with their rewards, and its latest held-out evaluation.",
    {
        "adapter_name": "Adapter family.", "version": "Version (0 = base model).",
        "parent_version": "Version it continued from.", "published_at": "AdapterPublished time (NULL for 0).",
        "trainer_step": "Optimizer steps taken when stored.", "sha256": "Checksum of the stored adapter.",
        "samples_trained": "TrainingSamples it trained (sample_lineage, drop_reason NULL).",
        "lineage_records": "Sample records inside its lineage (trained or dropped).",
        "rollouts": "Rollouts it served (RolloutCompleted).", "rewards": "OK judge rewards of those rollouts.",
        "reward_mean": "Mean OK judge reward.", "first_reward_at": "First reward of a rollout it served.",
        "last_reward_at": "Last reward of a rollout it served.",
        "eval_accuracy": "Held-out accuracy of the latest EvaluationCompleted.",
        "eval_ci_low": "Its 95% CI, low.", "eval_ci_high": "Its 95% CI, high.",
        "eval_task_set": "Task set of that evaluation.", "evaluated_at": "When it was evaluated.",
        "evaluations": "EvaluationCompleted events of the version.",
    },
    f"""
    WITH k AS (SELECT adapter_name, adapter_version AS version FROM rollouts
               UNION SELECT adapter_name, adapter_version FROM evaluations
               UNION SELECT adapter_name, version FROM adapter_published),
    s AS (SELECT adapter_name, adapter_version AS version, count(*) AS rollouts FROM rollouts GROUP BY 1, 2),
    r AS (SELECT adapter_name, adapter_version AS version, count(*) FILTER (WHERE status = 'OK') AS rewards,
                 avg(score) FILTER (WHERE status = 'OK') AS reward_mean, min(event_time) AS first_reward_at,
                 max(event_time) AS last_reward_at FROM ({_JUDGE_REWARDS}) GROUP BY 1, 2),
    e AS (SELECT adapter_name, adapter_version AS version, arg_max(accuracy, event_time) AS eval_accuracy,
                 arg_max(ci_low, event_time) AS eval_ci_low, arg_max(ci_high, event_time) AS eval_ci_high,
                 arg_max(task_set, event_time) AS eval_task_set, max(event_time) AS evaluated_at,
                 count(*) AS evaluations FROM evaluations GROUP BY 1, 2),
    t AS (SELECT adapter_name, trained_version AS version, count(*) FILTER (WHERE drop_reason IS NULL) AS samples_trained,
                 count(*) AS lineage_records FROM sample_lineage GROUP BY 1, 2)
    SELECT k.adapter_name, k.version, p.parent_version, p.event_time AS published_at, p.trainer_step, p.sha256,
           coalesce(t.samples_trained, 0) AS samples_trained, coalesce(t.lineage_records, 0) AS lineage_records,
           coalesce(s.rollouts, 0) AS rollouts, coalesce(r.rewards, 0) AS rewards, r.reward_mean,
           r.first_reward_at, r.last_reward_at, e.eval_accuracy, e.eval_ci_low, e.eval_ci_high, e.eval_task_set,
           e.evaluated_at, coalesce(e.evaluations, 0) AS evaluations
    FROM k
    LEFT JOIN adapter_published p ON p.adapter_name = k.adapter_name AND p.version = k.version
    LEFT JOIN s ON s.adapter_name = k.adapter_name AND s.version = k.version
    LEFT JOIN r ON r.adapter_name = k.adapter_name AND r.version = k.version
    LEFT JOIN e ON e.adapter_name = k.adapter_name AND e.version = k.version
    LEFT JOIN t ON t.adapter_name = k.adapter_name AND t.version = k.version
    """,
)

#: The joined views, in creation order (later ones read earlier ones).
VIEWS: tuple[View, ...] = (TRAJECTORY_STEPS, SAMPLE_LINEAGE, TRAJECTORIES, ADAPTER_VERSIONS)


def add_views(con: Any) -> None:
    for v in VIEWS:
        con.execute(f'CREATE VIEW "{v.name}" AS {v.sql}')


def connect(root: Path) -> Any:
    """DuckDB over the archive at ``root``: the per-topic views plus :data:`VIEWS`."""
    import duckdb

    from streamgrpo.archive.errors import ArchiveError

    con = duck.connect(root)
    try:
        add_views(con)
    except duckdb.Error as exc:
        con.close()
        raise ArchiveError(f"cannot create the joined views over {root}: {exc}") from exc
    return con
