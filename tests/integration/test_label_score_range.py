"""Issue 38, findings 5 and 6 at the writers: `streamgrpo label` and the SDK refuse a score that is not a finite
number in [0, 1] (NaN, inf, -5, 1e308), say why, and write nothing (real broker)."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from support.streams import synthetic_group

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
def rollout(kafka_ns: KafkaSettings) -> str:
    group = synthetic_group("range", [1.0, 0.0])
    with EventProducer(kafka_ns, "test") as prod:
        for done in group.completions:
            prod.send(done)
    return group.rollout_ids[0]


def test_the_sdk_refuses_non_finite_and_out_of_range_scores(kafka_ns: KafkaSettings, rollout: str) -> None:
    for score, message in [(math.nan, "not a finite number"), (math.inf, "not a finite number"),
                           (-5.0, "from 0 (wrong) to 1 (right)"), (1e308, "from 0 (wrong) to 1 (right)")]:
        with pytest.raises(LabelError, match=re.escape(message)):
            label_rollouts(kafka_ns, [Label(rollout, score)], by="ada")
    assert rewards(kafka_ns) == []


def test_label_refuses_nan_on_the_command_line_and_in_a_file(kafka_ns: KafkaSettings, rollout: str,
                                                             tmp_path: Path) -> None:
    proc = cli(kafka_ns, rollout, "nan", "--by", "ada")
    assert proc.returncode != 0 and "not a finite number" in proc.stderr, proc.stderr
    labels = tmp_path / "labels.jsonl"
    labels.write_text(json.dumps({"rollout_id": rollout, "score": 0.5}) + "\n" + f'{{"rollout_id": "{rollout}", '
                      '"score": NaN}\n')
    proc = cli(kafka_ns, "--file", str(labels), "--by", "ada")
    assert proc.returncode != 0 and "not a finite number" in proc.stderr and "nothing was written" in proc.stderr
    assert rewards(kafka_ns) == []
