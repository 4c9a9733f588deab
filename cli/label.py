"""``streamgrpo label``: a person's reward for a rollout (or a file of them), as a Reward with provenance ``human:<name>``.

The reward goes to ``rewards`` like a judge's (:func:`streamgrpo.topics.sdk.label_rollouts`): while the
rollout's group is still open the advantage window uses it AHEAD of the judge's reward (an override);
after the group closed it is recorded but changes no advantage (the command says which). Metrics,
the A/B test and ``adapters`` figures keep human rewards apart from the judge's.

Input: ``ROLLOUT_ID SCORE`` for one label, or ``--file`` with JSON lines ``{"rollout_id": ..., "score":
...}``. Every label is checked before anything is written (score a number from 0 to 1, rollout known
on ``rollouts``, one labeller); one bad label is an error listing every problem, and nothing is written.
What is not covered: labels for rollouts no longer on the ``rollouts`` topic (beyond its retention).
"""

from __future__ import annotations

import getpass
import json
from pathlib import Path
from typing import TYPE_CHECKING

import click

from streamgrpo.config import KafkaSettings
from streamgrpo.topics import catalog

if TYPE_CHECKING:
    from streamgrpo.avro.records import Task


def read_labels(path: Path) -> list[tuple[str, float]]:
    """``(rollout_id, score)`` per JSON line; a LabelError names every bad line (nothing is read half)."""
    from streamgrpo.topics.sdk import LabelError

    out, problems = [], []
    for n, text in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not text.strip():
            continue
        try:
            obj = json.loads(text)
            rollout, score = obj["rollout_id"], obj["score"]
            if not isinstance(rollout, str) or not rollout or isinstance(score, bool) or not isinstance(score, (int, float)):
                raise TypeError("rollout_id must be a non-empty string and score a number")
            out.append((rollout, float(score)))
        except (ValueError, KeyError, TypeError) as exc:
            problems.append(f"line {n}: {exc.__class__.__name__}: {exc} (want {{\"rollout_id\": \"...\", \"score\": 0.8}})")
    if problems:
        raise LabelError(f"{path}: " + "; ".join(problems) + "; nothing was written")
    return out


def _open_groups(kafka: KafkaSettings, groups: set[str]) -> set[str]:
    """The groups among ``groups`` with no GroupClosed on ``groups`` yet."""
    from streamgrpo.avro import records as R
    from streamgrpo.topics.follow import read_topic

    closed = {r.event.envelope.group_id for r in read_topic(kafka, catalog.GROUPS) if isinstance(r.event, R.GroupClosed)}
    return groups - closed


@click.command()
@click.argument("rollout_id", required=False)
@click.argument("score", type=float, required=False)
@click.option("--file", "file", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help='JSON lines {"rollout_id": "...", "score": 0.8}, all written or none.')
@click.option("--by", default=lambda: getpass.getuser(), show_default="the OS user",
              help="Labeller, recorded as the judge name human:<name>.")
@click.option("--bootstrap", default=None, help="Kafka bootstrap host:port (default: [kafka] settings / the latest "
              "live `streamgrpo run` / the embedded broker).")
@click.option("--topic-prefix", default=None, help="Topic prefix ([kafka] topic_prefix).")
@click.option("--run", "run_id", default=None, metavar="ID",
              help="A live `streamgrpo run` (default: the latest live one when no Kafka is configured).")
@click.option("--as-demo", is_flag=True, help="Also promote each rollout labelled correct to a demonstration: a new "
              "task whose steps are the rollout's own planner replies, executed through the real tools, judged and "
              "trained on by likelihood (README: Demonstrations).")
@click.pass_context
def label(ctx: click.Context, rollout_id: str | None, score: float | None, file: Path | None, by: str,
          bootstrap: str | None, topic_prefix: str | None, run_id: str | None, as_demo: bool) -> None:
    """Reward ROLLOUT_ID with SCORE (0 = wrong .. 1 = right) as a person, or every label in --file.

    The window uses a human reward ahead of the judge's while the rollout's group is open; it is kept
    apart from judge rewards in metrics, the A/B test and `streamgrpo adapters`.
    """
    from streamgrpo.runs import locate_configured
    from streamgrpo.topics.sdk import Label, LabelError, label_rollouts

    if file is not None and rollout_id is not None:
        raise click.UsageError("give ROLLOUT_ID SCORE or --file, not both")
    if file is None and (rollout_id is None or score is None):
        raise click.UsageError("give ROLLOUT_ID and SCORE (or --file FILE)")
    pairs = read_labels(file) if file is not None else [(str(rollout_id), float(score or 0.0))]
    if not pairs:
        raise LabelError(f"{file}: no labels in the file; nothing was written")
    kafka, run = locate_configured((ctx.obj or {}).get("config_path"), run_id, bootstrap=bootstrap,
                                   topic_prefix=topic_prefix)
    if run is not None and not run.live():
        raise LabelError(f"run {run.run_id} has finished: its groups are closed, a label would change nothing")
    demos = _demo_tasks(kafka, pairs, by) if as_demo else []  # checked before anything is written
    rewards = label_rollouts(kafka, [Label(r, s) for r, s in pairs], by)
    still_open = _open_groups(kafka, {r.envelope.group_id or "" for r in rewards})
    for r in rewards:
        effect = ("its group is open: the window uses it ahead of the judge's" if r.envelope.group_id in still_open
                  else "its group already closed: recorded, no advantage changes")
        click.echo(f"labelled rollout {r.envelope.rollout_id} (adapter v{r.adapter_version}) {r.score:g} as "
                   f"{r.judge.name}: {effect}")
    if demos:
        from streamgrpo.topics.producer import EventProducer

        with EventProducer(kafka, "label") as producer:
            for task in demos:
                producer.send(task)
        for rollout, task in zip([r for r, _ in pairs], demos, strict=True):
            steps = task.demonstration.steps if task.demonstration is not None else []
            click.echo(f"rollout {rollout} promoted to demonstration task {task.envelope.task_id} ({len(steps)} "
                       "steps): it is executed, judged and trained on like any demonstration")


def _demo_tasks(kafka: KafkaSettings, pairs: list[tuple[str, float]], by: str) -> list[Task]:
    """``--as-demo``: the demonstration Task of each labelled rollout (:mod:`streamgrpo.topics.demo_label`); a
    LabelError before anything is written when one cannot be a demonstration."""
    from streamgrpo.topics.demo_label import demonstration_for
    from streamgrpo.topics.sdk import LabelError, find_rollouts

    found = find_rollouts(kafka, {r for r, _ in pairs})
    out: list[Task] = []
    for rollout, score in pairs:
        if rollout not in found:
            raise LabelError(f"unknown rollout {rollout!r}: no RolloutCompleted with that id on `{catalog.ROLLOUTS}`")
        out.append(demonstration_for(kafka, found[rollout], score, by))
    return out
