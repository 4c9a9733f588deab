"""`streamgrpo label ROLLOUT_ID 1.0 --as-demo` (real broker, a real process): a served call a person says is right
becomes a demonstration task whose steps are the rollout's own planner replies; a rollout labelled wrong, or one
whose reply did not parse, is refused before anything is written."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from streamgrpo.avro import records as R
from streamgrpo.config import KafkaSettings
from streamgrpo.topics.follow import read_topic
from streamgrpo.topics.producer import EventProducer

pytestmark = pytest.mark.broker
SP = R.SamplingParams(0.7, 1.0, 48)


def cli(kafka: KafkaSettings, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, STREAMGRPO_BOOTSTRAP=kafka.bootstrap or "", STREAMGRPO_KAFKA__TOPIC_PREFIX=kafka.topic_prefix)
    return subprocess.run([sys.executable, "-m", "streamgrpo.cli", "label", *args], env=env, capture_output=True,
                          text=True, timeout=180)


def served(kafka: KafkaSettings, rid: str, replies: list[str], answer: str) -> None:
    """A served call (its task has no ground truth) with ``replies`` as its planner actions."""
    env = {"task_id": f"task-{rid}", "group_id": f"g-{rid}", "rollout_id": rid}
    events: list[R.Event] = [R.Task(R.Envelope.new("serve", task_id=env["task_id"]), "What is 17 times 23?", "mcp", 1)]
    for turn, text in enumerate(replies, 1):
        events.append(R.PlannerAction(R.Envelope.new("rollout", turn=turn, **env), [1, 2], text, [3], [-0.1], "planner",
                                      4, SP, R.ParseStatus.STRICT, "h", 5))
    events.append(R.RolloutCompleted(R.Envelope.new("rollout", **env), "What is 17 times 23?", "mcp", answer,
                                     len(replies), R.RolloutStatus.ANSWERED, 1, "planner", 4, 9))
    with EventProducer(kafka, "test") as prod:
        for e in events:
            prod.send(e)


def demo_tasks(kafka: KafkaSettings) -> list[R.Task]:
    return [r.event for r in read_topic(kafka, "tasks") if isinstance(r.event, R.Task) and r.event.demonstration]


def test_a_rollout_labelled_right_becomes_a_demonstration_of_its_own_replies(kafka_ns: KafkaSettings) -> None:
    served(kafka_ns, "r-good", ['tool": "calculator", "input": "17*23"}', 'answer": "391"}'], "391")
    proc = cli(kafka_ns, "r-good", "1", "--by", "ada", "--as-demo")
    assert proc.returncode == 0, proc.stderr
    assert "promoted to demonstration task" in proc.stdout
    (task,) = demo_tasks(kafka_ns)
    assert task.demonstration == R.Demonstration(['{"tool": "calculator", "input": "17*23"}', '{"answer": "391"}'],
                                                 "label:r-good:ada")
    assert (task.question, task.source, task.ground_truths, task.group_size) == ("What is 17 times 23?", "mcp",
                                                                                ["391"], 1)


@pytest.mark.parametrize(("replies", "score", "words"), [
    (['tool": "calculator", "input": "17*23"}', 'answer": "391"}'], "0.2", "only a rollout labelled correct"),
    (['tool": "calculator", "input": "17*23"}', "I think it is 391"], "1", "not a planner reply"),
])
def test_a_rollout_that_cannot_be_a_demonstration_is_refused_and_nothing_is_written(
        kafka_ns: KafkaSettings, replies: list[str], score: str, words: str) -> None:
    served(kafka_ns, "r-bad", replies, "391")
    proc = cli(kafka_ns, "r-bad", score, "--by", "ada", "--as-demo")
    assert proc.returncode != 0 and words in proc.stderr, proc.stderr
    assert demo_tasks(kafka_ns) == []
    assert [r for r in read_topic(kafka_ns, "rewards") if r.event is not None] == []  # the label was not written
