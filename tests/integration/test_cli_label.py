"""`streamgrpo label` and the SDK call (real broker): human rewards with provenance, all or nothing, bad input."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.streams import synthetic_group

from streamgrpo.avro import ids
from streamgrpo.avro import records as R
from streamgrpo.config import KafkaSettings
from streamgrpo.topics.follow import read_topic
from streamgrpo.topics.producer import EventProducer
from streamgrpo.topics.sdk import Label, LabelError, label_rollouts

pytestmark = pytest.mark.broker


def cli(kafka: KafkaSettings, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, STREAMGRPO_BOOTSTRAP=kafka.bootstrap or "", STREAMGRPO_KAFKA__TOPIC_PREFIX=kafka.topic_prefix)
    return subprocess.run([sys.executable, "-m", "streamgrpo.cli", "label", *args], env=env, capture_output=True,
                          text=True, timeout=180)


def rewards(kafka: KafkaSettings) -> list[R.Reward]:
    return [r.event for r in read_topic(kafka, "rewards") if isinstance(r.event, R.Reward)]


@pytest.fixture
def rollouts(kafka_ns: KafkaSettings) -> tuple[list[str], list[str]]:
    """Two groups' rollouts on `rollouts`: the first group still open, the second closed."""
    open_group = synthetic_group("open", [1.0, 0.0, 1.0, 0.0], version=2)
    closed_group = synthetic_group("closed", [1.0, 0.0], version=1)
    closed = R.GroupClosed(R.Envelope.new("streams", group_id=closed_group.group_id), R.GroupStatus.COMPLETE, 2, 2,
                           0.5, 0.5, "grpo", True, "complete", 1)
    with EventProducer(kafka_ns, "test") as prod:
        for e in [*open_group.completions, *closed_group.completions, closed]:
            prod.send(e)
    return open_group.rollout_ids, closed_group.rollout_ids


def test_label_one_rollout(kafka_ns: KafkaSettings, rollouts: tuple[list[str], list[str]]) -> None:
    proc = cli(kafka_ns, rollouts[0][1], "0.9", "--by", "ada")
    assert proc.returncode == 0, proc.stderr
    assert "human:ada" in proc.stdout and "its group is open" in proc.stdout
    [reward] = rewards(kafka_ns)
    assert reward.judge.name == "human:ada" and reward.score == 0.9 and reward.status == R.RewardStatus.OK
    assert (reward.envelope.rollout_id, reward.adapter_version, reward.group_size) == (rollouts[0][1], 2, 4)
    assert reward.event_id == ids.human_reward_id(rollouts[0][1], "human:ada", 0.9)
    late = cli(kafka_ns, rollouts[1][0], "1", "--by", "ada")
    assert late.returncode == 0 and "already closed" in late.stdout


def test_bad_labels_are_errors_and_nothing_is_written(kafka_ns: KafkaSettings, rollouts: tuple[list[str], list[str]],
                                                      tmp_path: Path) -> None:
    for args, message in [
        (("no-such-rollout", "1.0"), "unknown rollout 'no-such-rollout'"),
        ((rollouts[0][0], "1.5"), "out of range"),
        (("--", rollouts[0][0], "-0.1"), "out of range"),  # `--`: a negative number is not an option
        ((rollouts[0][0], "0.5", "--by", "human:"), "name is empty"),
        ((rollouts[0][0],), "give ROLLOUT_ID and SCORE"),
    ]:
        proc = cli(kafka_ns, *args)
        assert proc.returncode != 0 and message in proc.stderr, (args, proc.stderr)
    labels = tmp_path / "labels.jsonl"
    labels.write_text("\n".join([json.dumps({"rollout_id": rollouts[0][0], "score": 1.0}),
                                 json.dumps({"rollout_id": rollouts[0][1], "score": 2}),  # out of range
                                 "{broken"]) + "\n")
    proc = cli(kafka_ns, "--file", str(labels))
    assert proc.returncode != 0 and "line 3" in proc.stderr
    labels.write_text("\n".join([json.dumps({"rollout_id": rollouts[0][0], "score": 1.0}),
                                 json.dumps({"rollout_id": rollouts[0][1], "score": 2})]) + "\n")
    proc = cli(kafka_ns, "--file", str(labels))
    assert proc.returncode != 0 and "label 2" in proc.stderr and "nothing was written" in proc.stderr
    assert rewards(kafka_ns) == []
    labels.write_text("\n".join(json.dumps({"rollout_id": r, "score": 0.25}) for r in rollouts[0]) + "\n")
    proc = cli(kafka_ns, "--file", str(labels), "--by", "bob")
    assert proc.returncode == 0, proc.stderr
    assert sorted(r.envelope.rollout_id for r in rewards(kafka_ns)) == sorted(rollouts[0])


def test_sdk_label_call(kafka_ns: KafkaSettings, rollouts: tuple[list[str], list[str]]) -> None:
    sent = label_rollouts(kafka_ns, [Label(rollouts[0][2], 1.0)], by="ada")
    assert [r.judge.name for r in sent] == ["human:ada"] and rewards(kafka_ns) == sent
    with pytest.raises(LabelError, match="unknown rollout"):
        label_rollouts(kafka_ns, [Label(rollouts[0][3], 1.0), Label("nope", 1.0)], by="ada")
    with pytest.raises(LabelError, match="no labels"):
        label_rollouts(kafka_ns, [], by="ada")
    assert len(rewards(kafka_ns)) == 1
