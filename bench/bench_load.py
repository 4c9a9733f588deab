"""Load: the event path's ceiling with a model-free policy (no model, no trainer). Prints one JSON line.

A scripted driver in this process plays the rollout workers: it follows ``rollout-requests`` and, for each
request, at once produces the PlannerAction and the RolloutCompleted a worker would (the right answer for even
rollout indexes, so every group has reward variance and trains), so the services downstream see rollouts as
fast as the broker delivers requests. The real services run as subprocesses: ``streamgrpo streams --only
fanout,window`` (admission opened wide: nothing trains here) and ``streamgrpo judge`` (math judge). ``--tasks``
Tasks are submitted in one burst once both services are up.

Per stage, from record timestamps (CreateTime of the producing process; one machine, one clock):
- ``fanout``: RolloutRequests/s = requests / (last request - first task);
- ``driver``: the scripted policy's rollouts/s (last completion - first request);
- ``judge``: Rewards/s = rewards / (last reward - first completion);
- ``window``: TrainingSamples/s = samples / (last sample - first reward);
- ``end_to_end``: rollouts/s from the first Task to the last TrainingSample.
Each stage starts while the one before is still producing, so a stage's rate is bounded by the slower of it and
its input; the end-to-end rate is the ceiling of the event path on this machine.
``events_per_rollout``: records the path writes per rollout (request, action, completion, reward, sample, and
the group's share of its GroupClosed).

Usage: python bench/bench_load.py [--tasks 200] [--group-size 4] [--bootstrap HOST:PORT]
Not covered: tool calls, several turns (one action per rollout), the trainer's consumption.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import _paths  # noqa: F401 - tests/ on sys.path for support.streams
from support.streams import WorkerProcess

from streamgrpo.avro import ids
from streamgrpo.avro import records as R
from streamgrpo.config import KafkaSettings
from streamgrpo.topics.admin import ensure
from streamgrpo.topics.follow import iter_topic, read_topic
from streamgrpo.topics.producer import EventProducer


def rollout_events(req: R.RolloutRequest, truth: str) -> list[R.Event]:
    """What a one-turn rollout of ``req`` writes: its PlannerAction and RolloutCompleted."""
    env = req.envelope
    rid = str(env.rollout_id)
    answer = truth if req.rollout_index % 2 == 0 else "-1"
    common = dict(task_id=env.task_id, group_id=env.group_id, rollout_id=rid)
    action = R.PlannerAction(
        envelope=R.Envelope.new("load", event_id=ids.rollout_event_id("planner_action", rid, 1), turn=1, **common),
        prompt_token_ids=list(range(200)), action_text=json.dumps({"answer": answer}),
        action_token_ids=list(range(12)), behaviour_logprobs=[-0.5] * 12, adapter_name=req.adapter_name,
        adapter_version=req.adapter_version, sampling=req.sampling, parse_status=R.ParseStatus.STRICT,
        prompt_hash="load", latency_ms=0, is_final=True)
    done = R.RolloutCompleted(
        envelope=R.Envelope.new("load", event_id=ids.rollout_event_id("rollout_completed", rid), **common),
        question=req.question, source=req.source, final_answer=answer, turns=1, status=R.RolloutStatus.ANSWERED,
        group_size=req.group_size, adapter_name=req.adapter_name, adapter_version=req.adapter_version, duration_ms=0)
    return [action, done]


def drive(kafka: KafkaSettings, truths: dict[str, str], expected: int, done: threading.Event) -> None:
    """The scripted policy: answer every request until ``expected`` were answered (or ``done`` is set)."""
    answered = 0
    with EventProducer(kafka, "load") as producer:
        for rec in iter_topic(kafka, "rollout-requests", follow=True, timeout_s=600):
            if isinstance(rec.event, R.RolloutRequest):
                for ev in rollout_events(rec.event, truths[str(rec.event.envelope.task_id)]):
                    producer.send(ev)
                answered += 1
            if answered >= expected or done.is_set():
                break
        producer.flush()


def rate(n: int, start_ms: int, end_ms: int) -> float:
    return round(n / max((end_ms - start_ms) / 1000, 1e-3), 1)


def math_tasks(service: str, n: int, group_size: int) -> tuple[list[R.Task], dict[str, str]]:
    """``n`` one-line math Tasks ("What is i plus 1?", source ``math``) and their truths by task id."""
    tasks = [R.Task(R.Envelope.new(service, task_id=f"{service}-{i}"), f"What is {i} plus 1?", "math", group_size,
                    [str(i + 1)]) for i in range(n)]
    return tasks, {str(t.envelope.task_id): t.ground_truths[0] for t in tasks}


def submit(kafka: KafkaSettings, service: str, tasks: list[R.Task]) -> None:
    with EventProducer(kafka, service) as producer:
        for t in tasks:
            producer.send(t)
        producer.flush()


@contextmanager
def event_path(kafka: KafkaSettings, work: Path, streams_settings: dict[str, object]) -> Iterator[None]:
    """The real ``streamgrpo streams --only fanout,window`` (with ``streams_settings``) and ``streamgrpo judge`` as
    subprocesses on ``kafka``, logging under ``work``; stopped on exit."""
    env = dict(os.environ, STREAMGRPO_KAFKA__TOPIC_PREFIX=kafka.topic_prefix, STREAMGRPO_KAFKA__SESSION_TIMEOUT_MS="3000",
               STREAMGRPO_JUDGE__METRICS_PORT="0")
    streams = WorkerProcess(kafka, "fanout,window", work / "streams", {**streams_settings, "metrics_port": 0},
                            log_path=work / "streams.log")
    with open(work / "judge.log", "wb") as log:
        judge = subprocess.Popen([sys.executable, "-m", "streamgrpo.cli", "judge", "--bootstrap", str(kafka.bootstrap)],
                                 env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        yield
    finally:
        streams.stop()
        judge.terminate()
        judge.wait(30)


def measure(kafka: KafkaSettings, work: Path, n_tasks: int, group_size: int, timeout_s: float) -> dict[str, object]:
    with event_path(kafka, work, {"max_groups_in_flight": 100_000, "samples_per_step": 4096,
                                  "max_staleness": 100_000}):
        time.sleep(20)  # both consumers joined (Tansu answers a join after half the session timeout)
        tasks, truths = math_tasks("load", n_tasks, group_size)
        done = threading.Event()
        driver = threading.Thread(target=drive, args=(kafka, truths, n_tasks * group_size, done), daemon=True)
        driver.start()
        submit(kafka, "load", tasks)
        expected = n_tasks * group_size
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and len(read_topic(kafka, "training-samples")) < expected:
            time.sleep(2)
        done.set()
    got = {t: read_topic(kafka, t) for t in ("tasks", "rollout-requests", "planner-actions", "rollouts", "rewards",
                                              "groups", "training-samples")}
    ts = {t: sorted(r.timestamp_ms for r in recs) for t, recs in got.items()}
    first, last = (lambda t: ts[t][0] if ts[t] else 0), (lambda t: ts[t][-1] if ts[t] else 0)
    rollouts = len(got["rollouts"])
    records = sum(len(v) for k, v in got.items() if k != "tasks")
    return {
        "tasks": n_tasks, "group_size": group_size, "rollouts": rollouts, "samples": len(got["training-samples"]),
        "groups_closed": len(got["groups"]), "complete": len(got["training-samples"]) >= expected,
        "per_stage_per_s": {
            "fanout_requests": rate(len(got["rollout-requests"]), first("tasks"), last("rollout-requests")),
            "driver_rollouts": rate(rollouts, first("rollout-requests"), last("rollouts")),
            "judge_rewards": rate(len(got["rewards"]), first("rollouts"), last("rewards")),
            "window_samples": rate(len(got["training-samples"]), first("rewards"), last("training-samples")),
        },
        "end_to_end_rollouts_per_s": rate(len(got["training-samples"]), first("tasks"), last("training-samples")),
        "events_per_rollout": round(records / max(rollouts, 1), 2),
        "event_path_records_per_s": rate(records, first("tasks"), last("training-samples")),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", type=int, default=200)
    ap.add_argument("--group-size", type=int, default=4)
    ap.add_argument("--timeout-s", type=float, default=300.0)
    ap.add_argument("--bootstrap", default=None, help="your broker instead of the embedded one")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="streamgrpo-load-"))
    prefix = f"load{uuid.uuid4().hex[:8]}."
    if args.bootstrap:
        kafka = KafkaSettings(bootstrap=args.bootstrap, session_timeout_ms=3000, topic_prefix=prefix)
        ensure(kafka)
        print(json.dumps(measure(kafka, work, args.tasks, args.group_size, args.timeout_s)))
        return
    from streamgrpo.topics.broker import EmbeddedBroker

    with EmbeddedBroker(work / "broker") as broker:
        kafka = KafkaSettings(bootstrap=broker.bootstrap, session_timeout_ms=3000, topic_prefix=prefix)
        ensure(kafka)
        print(json.dumps(measure(kafka, work, args.tasks, args.group_size, args.timeout_s)))


if __name__ == "__main__":
    main()
