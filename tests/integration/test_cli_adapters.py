"""`streamgrpo adapters` as a user runs it (real processes, real broker): list, show, manual actions, bad input."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from support.streams import synthetic_group

from streamgrpo.avro import records as R
from streamgrpo.config import KafkaSettings
from streamgrpo.topics.follow import read_topic
from streamgrpo.topics.producer import EventProducer

pytestmark = pytest.mark.broker


def cli(kafka: KafkaSettings, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, STREAMGRPO_BOOTSTRAP=kafka.bootstrap or "", STREAMGRPO_KAFKA__TOPIC_PREFIX=kafka.topic_prefix,
               STREAMGRPO_LOOP__CANARY_SHARE="0.5")
    return subprocess.run([sys.executable, "-m", "streamgrpo.cli", "adapters", *args], env=env, capture_output=True,
                          text=True, timeout=180)


def publish(v: int, parent: int | None) -> R.AdapterPublished:
    return R.AdapterPublished(R.Envelope.new("trainer"), "planner", v, f"file:///store/planner/v{v}", f"{v:064d}",
                              "base", v, [R.OffsetRange("training-samples", 0, 8 * v - 8, 8 * v - 1)],
                              parent_version=parent)


def send(kafka: KafkaSettings, *events: R.Event) -> None:
    with EventProducer(kafka, "test") as prod:
        for e in events:
            prod.send(e)


def listed(kafka: KafkaSettings) -> dict[int, dict]:
    proc = cli(kafka, "list", "--json")
    assert proc.returncode == 0, proc.stderr
    return {row["version"]: row for row in map(json.loads, proc.stdout.splitlines())}


def lifecycle_events(kafka: KafkaSettings) -> list[R.Event]:
    return [r.event for r in read_topic(kafka, "adapter-events") if r.event is not None]


def test_list_show_and_manual_actions(kafka_ns: KafkaSettings) -> None:
    g0, g3 = synthetic_group("t0", [1.0, 0.0, 0.0, 0.0], version=0), synthetic_group("t3", [1.0, 1.0, 0.0, 1.0],
                                                                                        version=3)
    send(kafka_ns, publish(1, None), publish(2, 1), publish(3, 2), *g0.rewards, *g3.rewards)
    rows = listed(kafka_ns)
    assert {v: r["status"] for v, r in rows.items()} == {0: "PRIMARY", 1: "CANDIDATE", 2: "CANDIDATE", 3: "CANARY"}
    assert rows[3]["reward_count"] == 4 and rows[3]["success_rate"] == 0.75 and rows[3]["samples_trained"] == 24
    assert rows[0]["success_rate"] == 0.25 and rows[2]["parent_version"] == 1
    table = cli(kafka_ns, "list")
    assert table.returncode == 0 and "STATUS" in table.stdout and "HELD-OUT" in table.stdout
    assert "computed from rewards/evaluations" in table.stdout

    done = cli(kafka_ns, "promote", "2", "--by", "ada", "--reason", "looks right")
    assert done.returncode == 0, done.stderr
    assert "v2 PRIMARY" in done.stdout
    promoted = lifecycle_events(kafka_ns)[-1]
    assert isinstance(promoted, R.AdapterPromoted) and (promoted.version, promoted.previous_version) == (2, 0)
    assert (promoted.decided_by, promoted.reason) == ("human:ada", "looks right")
    assert {v: r["status"] for v, r in listed(kafka_ns).items()} == {0: "RETIRED", 1: "RETIRED", 2: "PRIMARY",
                                                                     3: "CANARY"}

    back = cli(kafka_ns, "rollback", "--by", "bob", "--reason", "regressed on math")  # default: the canary
    assert back.returncode == 0, back.stderr
    rolled = lifecycle_events(kafka_ns)[-1]
    assert isinstance(rolled, R.AdapterRolledBack) and (rolled.version, rolled.restored_version) == (3, 2)
    assert rolled.decided_by == "human:bob"
    shown = cli(kafka_ns, "show", "3")
    assert shown.returncode == 0, shown.stderr
    assert "ROLLED_BACK" in shown.stdout and "v3 <- v2 <- v1 <- v0" in shown.stdout
    assert "training-samples[0] 16..23 (8)" in shown.stdout
    assert "rolled_back" in shown.stdout and "human:bob: regressed on math" in shown.stdout
    history = json.loads(cli(kafka_ns, "show", "3", "--json").stdout)["history"]
    assert [h["kind"] for h in history] == ["published", "rolled_back"]


def test_bad_actions_are_clear_errors_and_write_nothing(kafka_ns: KafkaSettings) -> None:
    send(kafka_ns, publish(1, None), publish(2, 1))
    before = len(lifecycle_events(kafka_ns))
    for args, message in [
        (("promote", "9", "--reason", "x"), "v9 was never published"),
        (("approve", "2", "--reason", "x"), "not AWAITING_APPROVAL"),
        (("rollback", "2", "--to", "2", "--reason", "x"), "is not older than v2"),
        (("reject", "2", "--reason", "  "), "a reason is required"),
        (("show", "7"), "never published"),
    ]:
        proc = cli(kafka_ns, *args)
        assert proc.returncode != 0 and message in proc.stderr, (args, proc.stderr)
    missing = cli(kafka_ns, "promote", "2")
    assert missing.returncode != 0 and "--reason" in missing.stderr
    assert len(lifecycle_events(kafka_ns)) == before
    send(kafka_ns, R.AdapterRolledBack(R.Envelope.new("ab-controller"), "planner", 2, 0, "worse"))
    again = cli(kafka_ns, "promote", "2", "--reason", "x")
    assert again.returncode != 0 and "ROLLED_BACK" in again.stderr


def test_approval_flow_and_registry_figures(kafka_ns: KafkaSettings) -> None:
    send(kafka_ns, publish(1, None),
         R.AdapterVerdict(R.Envelope.new("ab-controller"), "planner", 1, 0, "better", "await_approval", "line better"))
    state = R.AdapterState(R.Envelope.new("registry"), "planner", 1, R.AdapterStatus.AWAITING_APPROVAL,
                           R.now_utc(), groups=12, reward_count=48, reward_mean=0.5, success_rate=0.4,
                           eval_accuracy=0.31, eval_ci_low=0.2, eval_ci_high=0.4, eval_task_set="builtin:heldout")
    send(kafka_ns, state)
    rows = listed(kafka_ns)
    assert rows[1]["status"] == "AWAITING_APPROVAL" and rows[1]["reward_count"] == 48
    assert rows[1]["eval_accuracy"] == 0.31  # figures from adapter-registry, status from the fold
    done = cli(kafka_ns, "approve", "1", "--by", "human:ada", "--reason", "checked the transcripts")
    assert done.returncode == 0, done.stderr
    approved = lifecycle_events(kafka_ns)[-1]
    assert isinstance(approved, R.AdapterApproved) and approved.by == "human:ada"
    assert listed(kafka_ns)[1]["status"] == "PRIMARY"
    reject = cli(kafka_ns, "reject", "1", "--reason", "x")
    assert reject.returncode != 0 and "is the primary" in reject.stderr
