"""The event path's overhead per trainer step: what Kafka costs the trainer, next to the step itself. One JSON line.

Samples are REALISTIC: ``bench_trainer_step.py``'s generator rolls out built-in training tasks with SmolLM2 as the
rollout worker does by default (grammar-constrained replies) and keeps one optimizer step's worth (``--samples``,
default ``samples_per_step`` 8) of TrainingSamples with their sampled actions and true behaviour logprobs
(``--samples-file`` reuses a file it wrote). On the embedded broker (or
``--bootstrap``), for each of ``--steps`` steps the benchmark produces those samples to ``training-samples`` (fresh
event ids, keyed by group as the window keys them; not timed), then runs the trainer's own code with its real
consumer, each part timed:

- ``collect``: :func:`streamgrpo.trainer.loop.collect` -- poll, Avro decode, dedup and staleness bookkeeping and the
  replay of each sample's grammar of one step's samples, which are already on the broker (what remains is the
  event path's cost, fetch latency included);
- ``publish``: :func:`~streamgrpo.trainer.loop.publish` -- the adapter (SmolLM2 LoRA at the trainer's defaults)
  written to the store with its optimizer state and sha256, then AdapterPublished produced and flushed;
  ``announce`` times that produce + flush alone (the same event sent once more; its id makes it idempotent);
- ``commit``: the consumer's offset commit;
- ``train_step``: one :func:`~streamgrpo.trainer.loop.train_step` on the same samples with TrainerConfig's
  defaults, for scale (it is not part of the event path).

The first step (its consumer joins the group: half the session timeout on Tansu) is reported apart; the figures
are medians over the other steps. ``overhead_share`` = (collect + publish + commit) / (that + train step).

    python bench/bench_trainer_events.py [--steps 5] [--samples-file FILE] [--bootstrap HOST:PORT]

Not covered: the trainer's wait for samples that do not exist yet (that is rollout time, not overhead), the
rollback follower, GPU.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

import _paths  # noqa: F401 - bench/ on sys.path
from bench_trainer_step import read_samples

from streamgrpo.avro import records as R
from streamgrpo.config import KafkaSettings
from streamgrpo.topics.admin import ensure


def fresh(samples: list[R.TrainingSample], step: int) -> list[R.TrainingSample]:
    """The step's copies: new event ids (the trainer would drop repeats), sampled by the trainer's current version."""
    return [replace(s, envelope=replace(s.envelope, event_id=str(uuid.uuid4())), behaviour_version=step)
            for s in samples]


async def measure(kafka: KafkaSettings, samples: list[R.TrainingSample], steps: int, store: Path) -> dict[str, Any]:
    from streamgrpo.topics.consumer import EventConsumer
    from streamgrpo.topics.producer import EventProducer
    from streamgrpo.trainer.config import TrainerConfig
    from streamgrpo.trainer.loop import (
        SAMPLES_TOPIC,
        SERVICE,
        TrainerState,
        build_training,
        collect,
        publish,
        train_step,
    )

    cfg = TrainerConfig(adapter_store=store, samples_per_step=len(samples), metrics_port=0)
    state = TrainerState(*build_training(cfg, None))
    rows: list[dict[str, float]] = []
    with EventProducer(kafka, "bench") as feeder, EventProducer(kafka, SERVICE) as producer:
        async with EventConsumer(kafka, cfg.group_id, [SAMPLES_TOPIC], SERVICE, dlq=producer,
                                 commit_on_revoke=False) as consumer:
            for step in range(steps):
                for s in fresh(samples, state.version):
                    feeder.send(s)
                feeder.flush()
                t0 = time.perf_counter()
                got = await collect(consumer, state, cfg)
                t1 = time.perf_counter()
                if got is None or len(got) != len(samples):
                    raise RuntimeError(f"step {step}: collected {got and len(got)} of {len(samples)} samples "
                                       f"(dropped: {dict(state.dropped)})")
                state.last_metrics = await asyncio.to_thread(train_step, state, got, cfg)
                t2 = time.perf_counter()
                event = await asyncio.to_thread(publish, producer, state, cfg)
                t3 = time.perf_counter()
                await consumer.commit()
                t4 = time.perf_counter()
                producer.send(event)
                producer.flush()
                t5 = time.perf_counter()
                rows.append({"collect_ms": (t1 - t0) * 1e3, "train_step_s": t2 - t1, "publish_ms": (t3 - t2) * 1e3,
                             "commit_ms": (t4 - t3) * 1e3, "announce_ms": (t5 - t4) * 1e3})
                print(f"[bench_trainer_events] step {step + 1}/{steps}: " + ", ".join(
                    f"{k} {v:.1f}" for k, v in rows[-1].items()), file=sys.stderr, flush=True)
    rest = rows[1:] or rows
    med = {k: round(statistics.median(r[k] for r in rest), 1 if k.endswith("ms") else 2) for k in rows[0]}
    overhead_s = (med["collect_ms"] + med["publish_ms"] + med["commit_ms"]) / 1e3
    return {
        "first_step": {k: round(v, 1 if k.endswith("ms") else 2) for k, v in rows[0].items()},
        "median_after_first": med, "steps_in_median": len(rest),
        "event_path_s_per_step": round(overhead_s, 3),
        "overhead_share": round(overhead_s / (overhead_s + med["train_step_s"]), 4),
        "adapter_bytes": sum(f.stat().st_size for f in store.rglob("*") if f.is_file()) // max(steps, 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--samples", type=int, default=8, help="samples per step (the default samples_per_step)")
    ap.add_argument("--samples-file", default=None, help="samples written by bench_trainer_step.py (Avro, base64 lines)")
    ap.add_argument("--bootstrap", default=None, help="your broker instead of the embedded one")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="streamgrpo-trainer-events-"))
    path = Path(args.samples_file) if args.samples_file else work / "samples.b64"
    data: dict[str, Any] = {"samples_file": str(path)}
    if not args.samples_file:
        print("[bench_trainer_events] generating realistic samples (SmolLM2 rollouts) ...", file=sys.stderr, flush=True)
        out = subprocess.run([sys.executable, str(Path(__file__).with_name("bench_trainer_step.py")),
                              "--samples", str(args.samples), "--constrain", "auto", "--generate-only", str(path)],
                             check=True, stdout=subprocess.PIPE, text=True)
        data = json.loads(out.stdout.strip().splitlines()[-1])
    samples = read_samples(path)[: args.samples]
    prefix = f"trainev{uuid.uuid4().hex[:8]}."
    result: dict[str, Any] = {"bench": "trainer_events", "cpus": os.cpu_count(), "samples_per_step": len(samples),
                              "steps": args.steps, "data": {k: v for k, v in data.items() if k != "advantages"}}
    if args.bootstrap:
        kafka = KafkaSettings(bootstrap=args.bootstrap, session_timeout_ms=3000, topic_prefix=prefix)
        ensure(kafka)
        result |= asyncio.run(measure(kafka, samples, args.steps, work / "adapters"))
    else:
        from streamgrpo.topics.broker import EmbeddedBroker

        with EmbeddedBroker(work / "broker") as broker:
            kafka = KafkaSettings(bootstrap=broker.bootstrap, session_timeout_ms=3000, topic_prefix=prefix)
            ensure(kafka)
            result |= asyncio.run(measure(kafka, samples, args.steps, work / "adapters"))
    result["load_avg_1m_end"] = round(os.getloadavg()[0], 2)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
