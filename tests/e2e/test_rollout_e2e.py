"""End to end on SmolLM2-135M: the seed question through `streamgrpo ask`, and a `streamgrpo rollout` worker
process serving one group over the real broker. Slow on CPU (minutes)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from streamgrpo.avro import records as R
from streamgrpo.config import KafkaSettings
from streamgrpo.topics.follow import read_topic
from streamgrpo.topics.producer import EventProducer

SEED = "Calculate 12 squared, and then find a major historical event in that year"
CLI = [sys.executable, "-m", "streamgrpo.cli"]


@pytest.mark.slow
@pytest.mark.model
def test_ask_seed_question_runs_and_shows_every_step() -> None:
    proc = subprocess.run([*CLI, "ask", "--max-turns", "2", "--max-new-tokens", "40", SEED],
                          capture_output=True, text=True, timeout=1500)
    out = proc.stdout
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert out.startswith(f"Question: {SEED}")
    for marker in ("Analysis [", "Turn 1", "  plan     [", "  verdict  ", "Final answer ["):
        assert marker in out, f"missing {marker!r} in:\n{out}"


@pytest.mark.slow
@pytest.mark.model
def test_ask_json_prints_decodable_events_with_one_completion() -> None:
    proc = subprocess.run([*CLI, "ask", "--json", "--roles", "model-free", "--max-turns", "2",
                           "--max-new-tokens", "40", SEED], capture_output=True, text=True, timeout=1500)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert "analysis" in lines[0]
    events = [R.EVENT_TYPES[f"streamgrpo.events.{x['type']}"].from_avro(x["event"]) for x in lines[1:]]
    completed = [e for e in events if isinstance(e, R.RolloutCompleted)]
    assert len(completed) == 1 and completed[0].status is not R.RolloutStatus.ERROR
    actions = [e for e in events if isinstance(e, R.PlannerAction)]
    assert len(actions) == completed[0].turns >= 1
    assert all(len(a.action_token_ids) == len(a.behaviour_logprobs) > 0 for a in actions)


@pytest.mark.slow
@pytest.mark.model
@pytest.mark.broker
def test_rollout_command_serves_a_group_over_the_broker(kafka_ns: KafkaSettings) -> None:
    n = 4
    sampling = R.SamplingParams(temperature=1.0, top_p=1.0, max_new_tokens=40)
    requests = [R.RolloutRequest(
        envelope=R.Envelope.new("e2e", task_id="t-e2e", group_id="g-e2e", rollout_id=f"r-{i}"), question=SEED,
        source="builtin", rollout_index=i, group_size=n, adapter_name="planner", adapter_version=0, max_turns=2,
        sampling=sampling) for i in range(n)]
    with EventProducer(kafka_ns, "e2e") as prod:
        for r in requests:
            prod.send(r)
    env = {**os.environ, "STREAMGRPO_KAFKA__TOPIC_PREFIX": kafka_ns.topic_prefix}
    proc = subprocess.run([*CLI, "rollout", "--bootstrap", str(kafka_ns.bootstrap), "--max-rollouts", str(n),
                           "--no-follow", "--concurrency", "1"], capture_output=True, text=True, timeout=1500, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"rollouts={n}" in proc.stdout
    done = [r.event for r in read_topic(kafka_ns, "rollouts", timeout_s=20)]
    assert sorted(e.envelope.rollout_id for e in done) == [f"r-{i}" for i in range(n)]
    actions = [r.event for r in read_topic(kafka_ns, "planner-actions", timeout_s=20)]
    assert len(actions) == sum(e.turns for e in done)
