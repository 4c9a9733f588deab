"""Scaling: do more rollout workers add throughput under admission? Prints one JSON line per setting.

Issue 21 found that autoscaling added nothing: the fan-out lets at most ``(1 + max_staleness) x
samples_per_step`` requests wait or run (the admission budget, :mod:`streamgrpo.lifecycle.pacing`), and at the
default step (8) that is 16 requests -- less than one worker's batch -- so a second worker gets no groups. The
gpu overlay now sizes the trainer's step for its workers (k8s/README.md, "Scaling on lag"). This bench runs the
loop's event path at both paces with 1, 2 and 3 workers and measures rollouts/s.

What runs: the embedded broker; the real ``streamgrpo streams --only fanout,window`` (admission at the pace
under test, ``[streams] max_groups_in_flight`` = the row's workers x concurrency, the rule the validator holds an
overlay to for its maxReplicaCount: the gpu overlay's 12 is the 3-worker row's,
``[loop] canary_share`` 0) and ``streamgrpo judge`` as subprocesses; in this process, ``--workers``
scripted rollout workers and a scripted trainer:

- a worker is a member of one consumer group on ``rollout-requests`` (as the real workers are, so the
  partitions are shared out as in a cluster). Like the real worker it runs up to ``--concurrency`` groups at
  once; each group is held ``--group-s`` seconds from when the worker took it (its generation: on a GPU server
  concurrent groups share batches, so the time barely depends on how many run), then each request's
  PlannerAction and RolloutCompleted are written (the right answer for even rollout indexes, so every group has
  reward variance) and the worker commits;
- the trainer consumes ``training-samples`` in a group of its own: it drops a sample more than
  ``max_staleness`` versions behind (the trainer's rule), and every ``samples_per_step`` samples it holds
  ``--step-s`` seconds and announces the next version (a real file and its sha256, the lineage of the offsets
  it took, its dequeued and dropped counts) -- what admission reads to free the budget.

Per setting: rollouts/s over ``--measure-s`` seconds after ``--warmup-s`` seconds from the first completion,
from the records' timestamps; versions published; samples dropped as stale. The workers and the trainer only
sleep, so the figure is what admission and the event path allow, not what a model computes.

Usage: python bench/bench_scaling.py [--workers 1 2 3] [--steps 8 64 96] [--group-s 6] [--step-s 2]
       [--measure-s 45] [--warmup-s 10] [--concurrency 4] [--group-size 8] [--tasks 600]
       [--max-groups-in-flight N]
Not covered: KEDA itself (the replicas are started by hand), model time, the evaluator, A/B.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import tempfile
import threading
import time
import uuid
from pathlib import Path

import _paths  # noqa: F401 - tests/ on sys.path for support.streams
from bench_load import event_path, math_tasks, rollout_events, submit

from streamgrpo.avro import records as R
from streamgrpo.config import KafkaSettings
from streamgrpo.lifecycle.pacing import Pacing
from streamgrpo.topics.admin import ensure
from streamgrpo.topics.consumer import EventConsumer
from streamgrpo.topics.follow import read_topic
from streamgrpo.topics.producer import EventProducer

MAX_STALENESS = 1


async def _worker(kafka: KafkaSettings, truths: dict[str, str], stop: threading.Event, concurrency: int,
                  group_size: int, group_s: float) -> None:
    group = f"rollout-{kafka.topic_prefix}"  # one group per setting: no member of an earlier one lingers
    async with EventConsumer(kafka, group, ["rollout-requests"], "bench-worker") as consumer:
        with EventProducer(kafka, "bench-worker") as producer:
            running: set[asyncio.Task[None]] = set()

            async def one(requests: list[R.RolloutRequest]) -> None:
                await asyncio.sleep(group_s)  # the group's generation
                for req in requests:
                    for event in rollout_events(req, truths[str(req.envelope.task_id)]):
                        producer.send(event)
                producer.flush()

            while not stop.is_set():
                if len(running) >= concurrency:  # as many groups as [rollout] concurrency at once
                    done, running = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
                else:
                    groups: dict[str, list[R.RolloutRequest]] = {}
                    free = (concurrency - len(running)) * group_size  # a whole group per free slot
                    for rec in await consumer.poll(max_records=free, timeout_ms=200):
                        if isinstance(rec.event, R.RolloutRequest):
                            groups.setdefault(str(rec.event.envelope.group_id), []).append(rec.event)
                    running |= {asyncio.create_task(one(reqs)) for reqs in groups.values()}
                    done = {t for t in running if t.done()}
                    running -= done
                if done:
                    await consumer.commit()  # a bench shortcut: commits what was polled, in flight or not
            for task in running:
                task.cancel()


async def _trainer(kafka: KafkaSettings, store: Path, stop: threading.Event, samples_per_step: int,
                   step_s: float, out: dict[str, int]) -> None:
    version, taken, stale = 0, 0, 0
    ranges: dict[tuple[str, int], list[int]] = {}
    async with EventConsumer(kafka, f"trainer-{kafka.topic_prefix}", ["training-samples"], "bench-trainer",
                             commit_on_revoke=False) as consumer:
        with EventProducer(kafka, "bench-trainer") as producer:
            while not stop.is_set():
                for rec in await consumer.poll(max_records=samples_per_step, timeout_ms=500):
                    span = ranges.setdefault((rec.topic, rec.partition), [rec.offset, rec.offset])
                    span[1] = rec.offset + 1
                    if not isinstance(rec.event, R.TrainingSample):
                        continue
                    if version - rec.event.behaviour_version > MAX_STALENESS:
                        stale += 1
                    else:
                        taken += 1
                if taken < samples_per_step:
                    continue
                await asyncio.sleep(step_s)  # one optimizer step
                version += 1
                weights = store / f"v{version}.bin"
                weights.write_bytes(os.urandom(64))
                lineage = [R.OffsetRange(t, p, a, b) for (t, p), (a, b) in sorted(ranges.items())]
                producer.send(R.AdapterPublished(
                    envelope=R.Envelope.new("bench-trainer"), adapter_name="planner", version=version,
                    uri=weights.as_uri(), sha256=hashlib.sha256(weights.read_bytes()).hexdigest(),
                    base_model="scripted", trainer_step=version, lineage=lineage, parent_version=version - 1,
                    drops={"stale": stale}, samples_dequeued=sum(b - a for a, b in ranges.values()),
                    max_staleness=MAX_STALENESS, auto_promote=True))
                producer.flush()
                await consumer.commit()
                out["versions"], out["stale"] = version, out.get("stale", 0) + stale
                out["trained"] = out.get("trained", 0) + taken
                taken, stale, ranges = 0, 0, {}


def _thread(coro_fn, *args) -> threading.Thread:  # type: ignore[no-untyped-def]
    thread = threading.Thread(target=lambda: asyncio.run(coro_fn(*args)), daemon=True)
    thread.start()
    return thread


def measure(kafka: KafkaSettings, work: Path, *, workers: int, samples_per_step: int, args: argparse.Namespace
            ) -> dict[str, object]:
    stop = threading.Event()
    trained: dict[str, int] = {}
    store = work / "store"
    store.mkdir(parents=True, exist_ok=True)
    tasks, truths = math_tasks("scaling", args.tasks, args.group_size)
    groups = args.max_groups_in_flight or workers * args.concurrency  # the validator's rule at this many workers
    with event_path(kafka, work, {"samples_per_step": samples_per_step, "max_staleness": MAX_STALENESS,
                                  "max_groups_in_flight": groups, "canary_share": 0}):
        threads = [_thread(_worker, kafka, truths, stop, args.concurrency, args.group_size, args.group_s)
                   for _ in range(workers)]
        threads.append(_thread(_trainer, kafka, store, stop, samples_per_step, args.step_s, trained))
        try:
            time.sleep(20)  # every consumer joined (Tansu answers a join after half the session timeout)
            submit(kafka, "scaling", tasks)
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and not read_topic(kafka, "rollouts", limit=1):
                time.sleep(1)
            time.sleep(args.warmup_s + args.measure_s + args.group_s + 3)  # the window's last groups finish too
        finally:
            stop.set()
            for thread in threads:
                thread.join(30)
    stamps = sorted(r.timestamp_ms for r in read_topic(kafka, "rollouts") if isinstance(r.event, R.RolloutCompleted))
    start = (stamps[0] if stamps else 0) + int(args.warmup_s * 1000)
    end = start + int(args.measure_s * 1000)
    done = sum(start <= s < end for s in stamps)
    budget = Pacing(MAX_STALENESS, samples_per_step).admission_budget
    return {"workers": workers, "samples_per_step": samples_per_step, "admission_budget": budget,
            "max_groups_in_flight": groups,
            "worker_batch": args.concurrency * args.group_size, "rollouts_measured": done,
            "rollouts_per_s": round(done / args.measure_s, 2), "versions": trained.get("versions", 0),
            "samples_trained": trained.get("trained", 0), "samples_stale": trained.get("stale", 0),
            "complete_window": bool(stamps) and stamps[-1] >= end}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2, 3], help="scripted rollout workers")
    ap.add_argument("--steps", type=int, nargs="+", default=[8, 64, 96],
                    help="[loop] samples_per_step to compare (8: the default; 96: the gpu overlay's)")
    ap.add_argument("--group-s", type=float, default=6.0, help="seconds a worker holds one group (its generation)")
    ap.add_argument("--step-s", type=float, default=2.0, help="seconds of one trainer step")
    ap.add_argument("--measure-s", type=float, default=45.0)
    ap.add_argument("--warmup-s", type=float, default=10.0)
    ap.add_argument("--concurrency", type=int, default=4, help="[rollout] concurrency: groups per worker batch")
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--tasks", type=int, default=600, help="tasks submitted (enough to keep every setting busy)")
    ap.add_argument("--max-groups-in-flight", type=int, default=0,
                    help="[streams] max_groups_in_flight (default 0: each row's workers x concurrency)")
    args = ap.parse_args()
    from streamgrpo.topics.broker import EmbeddedBroker

    work = Path(tempfile.mkdtemp(prefix="streamgrpo-scaling-"))
    rows = []
    with EmbeddedBroker(work / "broker") as broker:
        for step in args.steps:
            for n in args.workers:
                kafka = KafkaSettings(bootstrap=broker.bootstrap, session_timeout_ms=3000,
                                      topic_prefix=f"scale{uuid.uuid4().hex[:8]}.")
                ensure(kafka)
                rows.append(measure(kafka, work / f"s{step}-w{n}", workers=n, samples_per_step=step, args=args))
                print(json.dumps(rows[-1]), flush=True)
    print(json.dumps(summary(rows, args)), flush=True)


def summary(rows: list[dict[str, object]], args: argparse.Namespace) -> dict[str, object]:
    """One object for bench/run_all.py: rollouts/s by pace and worker count, and the gain over one worker."""
    def pace(r: dict[str, object]) -> str:
        return f"samples_per_step {r['samples_per_step']} (budget {r['admission_budget']})"

    def workers(r: dict[str, object]) -> str:
        return f"{r['workers']} worker{'s' if r['workers'] != 1 else ''}"

    one = {pace(r): float(r["rollouts_per_s"]) for r in rows if r["workers"] == 1}  # type: ignore[arg-type]
    glance = {f"step {r['samples_per_step']}: rollouts/s (x one worker; samples stale)": {
        workers(x): f"{x['rollouts_per_s']} ({float(x['rollouts_per_s']) / one[pace(x)]:.2f}x; {x['samples_stale']})"  # type: ignore[arg-type]
        for x in rows if pace(x) == pace(r)} for r in rows if one.get(pace(r))}
    return {
        "at_a_glance": glance,
        "rollouts_per_s": {pace(r): {workers(x): x["rollouts_per_s"] for x in rows if pace(x) == pace(r)}
                           for r in rows},
        "vs_one_worker": {pace(r): {workers(x): round(float(x["rollouts_per_s"]) / one[pace(r)], 2)  # type: ignore[arg-type]
                                    for x in rows if pace(x) == pace(r)} for r in rows if one.get(pace(r))},
        "samples_stale": {pace(r): {workers(x): x["samples_stale"] for x in rows if pace(x) == pace(r)} for r in rows},
        "versions_published": {pace(r): {workers(x): x["versions"] for x in rows if pace(x) == pace(r)} for r in rows},
        "complete_windows": all(bool(r["complete_window"]) for r in rows),
        "group_s": args.group_s, "step_s": args.step_s, "measure_s": args.measure_s, "worker_batch":
            args.concurrency * args.group_size, "max_staleness": MAX_STALENESS,
        "max_groups_in_flight": args.max_groups_in_flight or "workers x concurrency",
    }


if __name__ == "__main__":
    main()
