"""A logged trajectory promoted to a demonstration (``streamgrpo label ROLLOUT_ID 1.0 --as-demo``).

A rollout that a person labels correct (score >= :data:`~streamgrpo.lifecycle.stats.SUCCESS_THRESHOLD`) is turned
into a new Task whose ``demonstration`` gives the rollout's own planner replies, read from ``planner-actions`` in
turn order, with source ``label:<rollout_id>:<labeller>``. It is then executed through the real tools and judged
like any demonstration (a step the grammar refuses, a failed tool call or a wrong answer is a dead letter), so a
label cannot smuggle a trajectory into training that does not replay. The new task takes the original task's
question, source and ground truths (read from ``tasks``); a task without a ground truth (a served call) takes the
labelled rollout's final answer as its truth: the person said it is right.

What is covered: the promotion, all or nothing (a LabelError says why nothing was written). What is not covered:
rollouts beyond the topics' retention, replies that were not JSON objects (a FAILED parse: refused).
"""

from __future__ import annotations

import json
from typing import Any

from streamgrpo.avro import provenance
from streamgrpo.avro.records import Demonstration, PlannerAction, RolloutCompleted, RolloutStatus, Task
from streamgrpo.config import KafkaSettings
from streamgrpo.lifecycle.stats import SUCCESS_THRESHOLD
from streamgrpo.topics import catalog
from streamgrpo.topics.sdk import LabelError, labeller, make_task

#: The response prefix the planner's replies start with by default (``[rollout] response_prefix``); an action text
#: recorded without it (the continuation after the forced prefix) gets it back.
DEFAULT_PREFIX = '{"'


def _events(kafka: KafkaSettings, topic: str, kind: type, key: str, value: str) -> list[Any]:
    from streamgrpo.topics.follow import iter_topic

    return [r.event for r in iter_topic(kafka, topic, timeout_s=10.0)
            if isinstance(r.event, kind) and getattr(getattr(r.event, "envelope", None), key, None) == value]


def steps_of(actions: list[PlannerAction]) -> list[str]:
    """The planner replies of ``actions`` (one rollout's), in turn order, as demonstration steps (LabelError if one
    did not parse: it cannot be given back as a reply)."""
    from streamgrpo.tasks.demos import check_steps, step_text

    steps = []
    for a in sorted(actions, key=lambda a: int(a.envelope.turn or 0)):
        text = a.action_text.strip()
        text = text if text.startswith("{") else DEFAULT_PREFIX + text
        try:
            steps.append(step_text(json.loads(text)))
        except (ValueError, TypeError) as exc:
            raise LabelError(f"turn {a.envelope.turn} of the rollout is not a planner reply a demonstration can "
                             f"give ({exc}): {a.action_text[:80]!r}") from exc
    try:
        check_steps(steps)
    except ValueError as exc:
        raise LabelError(f"the rollout's replies are not a demonstration: {exc}") from exc
    return steps


def demonstration_task(done: RolloutCompleted, actions: list[PlannerAction], task: Task | None, score: float,
                       by: str) -> Task:
    """The Task that demonstrates rollout ``done`` (pure; LabelError when it cannot be one)."""
    who = labeller(by)
    if not score >= SUCCESS_THRESHOLD:
        raise LabelError(f"only a rollout labelled correct (score >= {SUCCESS_THRESHOLD}) can become a demonstration; "
                         f"{done.envelope.rollout_id} was labelled {score:g}")
    if done.status is not RolloutStatus.ANSWERED:
        raise LabelError(f"rollout {done.envelope.rollout_id} ended {done.status.value}, not with an answer")
    truths = list(task.ground_truths) if task is not None and task.ground_truths else [done.final_answer]
    question = task.question if task is not None else done.question
    source = task.source if task is not None else done.source
    demo = Demonstration(steps_of(actions), f"label:{done.envelope.rollout_id}:{provenance.bare(who)}")
    return make_task(question, source=source, group_size=1, ground_truths=truths, service="label",
                     metadata=dict(task.metadata) if task is not None else {}, demonstration=demo)


def demonstration_for(kafka: KafkaSettings, done: RolloutCompleted, score: float, by: str) -> Task:
    """The demonstration Task of the labelled rollout ``done``, its planner actions and task read from the topics
    (nothing is written; LabelError when it cannot be one)."""
    rollout = done.envelope.rollout_id or ""
    actions = _events(kafka, catalog.PLANNER_ACTIONS, PlannerAction, "rollout_id", rollout)
    if not actions:
        raise LabelError(f"rollout {rollout} has no planner actions on `{catalog.PLANNER_ACTIONS}`")
    tasks = _events(kafka, catalog.TASKS, Task, "task_id", done.envelope.task_id or "")
    return demonstration_task(done, actions, tasks[0] if tasks else None, score, by)
