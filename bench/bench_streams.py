"""Benchmark of the advantage window on the embedded broker (or --bootstrap): prints one JSON line.

Measures, through a real ``streamgrpo streams --only window`` worker subprocess:
- ``rewards_per_s``: a burst of rewards for groups whose planner actions and completions were
  already consumed (the worker's committed offsets reached their end); rate = rewards / (last TrainingSample's record time - first Reward's record time);
- ``latency_ms_p50/p99``: paced groups (one group's rewards every ``--pace-ms``); per group, the time
  from its last Reward's record timestamp to its last TrainingSample's record timestamp.
Record timestamps are the producers' CreateTime on this one machine (same clock).

Usage: python bench/bench_streams.py [--groups 300] [--group-size 8] [--paced-groups 100] [--pace-ms 50]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import uuid
from contextlib import ExitStack
from pathlib import Path

import _paths  # noqa: F401 - tests/ on sys.path for support.streams
from support.streams import SyntheticGroup, WorkerProcess, synthetic_group

from streamgrpo.config import KafkaSettings
from streamgrpo.topics.admin import ensure
from streamgrpo.topics.follow import read_topic
from streamgrpo.topics.producer import EventProducer


def groups(prefix: str, n: int, size: int) -> list[SyntheticGroup]:
    return [synthetic_group(f"{prefix}-{i}", [((i * 7 + j * 3) % 5) / 4 for j in range(size)],
                            turns=[1 + (i + j) % 3 for j in range(size)]) for i in range(n)]


def wait_samples(kafka: KafkaSettings, n: int, timeout_s: float) -> list:
    deadline = time.monotonic() + timeout_s
    got: list = []
    while time.monotonic() < deadline:
        got = read_topic(kafka, "training-samples", timeout_s=20)
        if len({r.event.event_id for r in got}) >= n:
            break
        time.sleep(0.5)
    return got


def wait_consumed(kafka: KafkaSettings, group: str, topics: list[str], timeout_s: float) -> None:
    """Block until the worker's consumer group has committed the end of ``topics`` (backlog drained)."""
    from confluent_kafka import Consumer, TopicPartition

    from streamgrpo.topics.clients import client_config
    from streamgrpo.topics.follow import log_bounds

    consumer = Consumer(client_config(kafka, **{"group.id": group, "enable.auto.commit": False}))
    try:
        deadline = time.monotonic() + timeout_s
        ends = {tp: end for tp, (_, end) in log_bounds(kafka, [f"{kafka.topic_prefix}{t}" for t in topics]).items()}
        while time.monotonic() < deadline:
            committed = {(tp.topic, tp.partition): tp.offset
                         for tp in consumer.committed([TopicPartition(t, p) for t, p in ends], timeout=10)}
            if all(committed[tp] >= end for tp, end in ends.items()):
                return
            time.sleep(0.5)
        sys.exit(f"worker did not drain {topics} within {timeout_s}s")
    finally:
        consumer.close()


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bootstrap", default=None, help="Existing Kafka (default: start an embedded Tansu broker).")
    ap.add_argument("--groups", type=int, default=300)
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--paced-groups", type=int, default=100)
    ap.add_argument("--pace-ms", type=float, default=50.0)
    ap.add_argument("--estimator", default="grpo")
    ap.add_argument("--commit-interval", type=float, default=1.0, help="streams.commit_interval_s of the worker.")
    ap.add_argument("--verbose", action="store_true", help="Print the worker's log tail to stderr.")
    args = ap.parse_args()
    with ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-streams-")))
        bootstrap = args.bootstrap
        if bootstrap is None:
            from streamgrpo.topics.broker import EmbeddedBroker

            bootstrap = stack.enter_context(EmbeddedBroker(tmp / "broker")).bootstrap
        kafka = KafkaSettings(bootstrap=bootstrap, topic_prefix=f"bench{uuid.uuid4().hex[:6]}.")
        ensure(kafka)
        worker = WorkerProcess(kafka, "window", tmp / "data", {"estimator": args.estimator, "group_timeout_s": 600,
                                                               "commit_interval_s": args.commit_interval})
        stack.callback(worker.stop)
        size = args.group_size
        burst, paced = groups("burst", args.groups, size), groups("paced", args.paced_groups, size)
        warm = groups("warm", 1, size)
        with EventProducer(kafka, "bench") as prod:
            for g in [*warm, *burst, *paced]:
                for e in [*g.actions, *g.completions]:
                    prod.send(e)
            for e in warm[0].rewards:
                prod.send(e)
        if not wait_samples(kafka, size, 120):
            sys.exit(f"worker produced no samples; log:\n{worker.log_text()[-3000:]}")
        wait_consumed(kafka, f"{kafka.topic_prefix}streamgrpo-streams", ["planner-actions", "rollouts"], 600)
        # burst: every reward at once
        with EventProducer(kafka, "bench") as prod:
            for g in burst:
                for e in g.rewards:
                    prod.send(e)
        samples = wait_samples(kafka, size * (1 + args.groups), 600)
        rewards = read_topic(kafka, "rewards", timeout_s=20)
        burst_ids = {g.group_id for g in burst}
        r_ts = [r.timestamp_ms for r in rewards if r.event.envelope.group_id in burst_ids]
        s_ts = [r.timestamp_ms for r in samples if r.event.envelope.group_id in burst_ids]
        rate = len(r_ts) / max(1e-3, (max(s_ts) - min(r_ts)) / 1000)
        # paced: one group's rewards every pace_ms
        with EventProducer(kafka, "bench") as prod:
            for g in paced:
                for e in g.rewards:
                    prod.send(e)
                prod.flush()
                time.sleep(args.pace_ms / 1000)
        samples = wait_samples(kafka, size * (1 + args.groups + args.paced_groups), 600)
        rewards = read_topic(kafka, "rewards", timeout_s=20)
        last_reward: dict[str, int] = {}
        last_sample: dict[str, int] = {}
        for r in rewards:
            g = r.event.envelope.group_id
            last_reward[g] = max(last_reward.get(g, 0), r.timestamp_ms)
        for r in samples:
            g = r.event.envelope.group_id
            last_sample[g] = max(last_sample.get(g, 0), r.timestamp_ms)
        lat = [last_sample[g.group_id] - last_reward[g.group_id] for g in paced if g.group_id in last_sample]
        if args.verbose:
            print(worker.log_text()[-4000:], file=sys.stderr)
        print(json.dumps({
            "bench": "streams_window", "broker": "embedded-tansu" if args.bootstrap is None else args.bootstrap,
            "estimator": args.estimator, "group_size": size, "commit_interval_s": args.commit_interval, "burst_groups": args.groups,
            "burst_rewards": len(r_ts), "rewards_per_s": round(rate, 1),
            "paced_groups": len(lat), "pace_ms": args.pace_ms,
            "latency_ms_p50": pct(lat, 0.5), "latency_ms_p99": pct(lat, 0.99),
            "latency_ms_mean": round(statistics.fmean(lat), 1),
            "samples_distinct": len({r.event.event_id for r in samples}), "samples_raw": len(samples),
        }))


if __name__ == "__main__":
    main()
