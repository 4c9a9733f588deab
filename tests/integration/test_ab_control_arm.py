"""A/B at default staleness does not starve its control arm: real broker, real stream processors, real trainer.

`streamgrpo streams` (fan-out, advantage window, A/B controller) runs with ``canary_share`` 0.5 and the default
``max_staleness`` 1; the real trainer (tiny Llama, LoRA) trains 4 samples a step and publishes every step with
``canary_share`` 0.5, so no version becomes primary on publication and the line runs ahead of the primary (v0):
from v2 on, a primary's sample is more than ``max_staleness`` behind. This test plays the rollout workers and the
judge (model-free: one planner turn per rollout of tiny-vocabulary tokens; rewards 1, 0, 1, 0 in every group, so
both arms have variance and equal outcomes: the test never decides and the primary stays v0).

Measured from the log: the trainer drops NO sample as stale, the primary's groups keep coming while the line is
ahead (both arms get groups) and close as ``control_arm`` groups without samples, with their rewards judged.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from support.simulated import SimulatedWorkersAndJudge, completed_and_reward, place
from support.streams import WorkerProcess
from support.tiny_model import tiny_model

from streamgrpo.avro import ids
from streamgrpo.avro import records as R
from streamgrpo.config import KafkaSettings
from streamgrpo.topics.follow import read_topic
from streamgrpo.topics.producer import EventProducer
from streamgrpo.trainer.config import TrainerConfig
from streamgrpo.trainer.loop import run_trainer

pytestmark = [pytest.mark.broker, pytest.mark.timeout(600)]

STEPS = 10
SETTINGS = {"canary_share": 0.5, "max_staleness": 1, "samples_per_step": 4, "max_groups_in_flight": 4,
            "ab_max_groups": 100_000, "ab_max_duration_s": 100_000, "tick_interval_s": 0.3,
            "registry_interval_s": 1.0, "group_timeout_s": 300, "metrics_port": 0}


def answer(group: list[R.RolloutRequest]) -> list[R.Event]:
    """One planner action per rollout (tiny-vocabulary tokens), then rewards 1, 0, 1, 0 ... in every group."""
    out: list[R.Event] = []
    for req in group:
        i, rid = req.rollout_index, req.envelope.rollout_id or ""
        out.append(R.PlannerAction(
            R.Envelope.new("sim", event_id=ids.derived_id("action", rid, 1), turn=1, **place(req)), [5, 6, 7 + i], "a",
            [20 + i, 30, 40], [-1.5, -2.0, -2.5], req.adapter_name, req.adapter_version, req.sampling,
            R.ParseStatus.STRICT, "h", 1, is_final=True))
        out += completed_and_reward(req, float(i % 2 == 0))
    return out


@pytest.fixture(scope="module")
def tiny_base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    model, tok = tiny_model(0)
    path = tmp_path_factory.mktemp("tiny-base")
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


def test_ab_at_default_staleness_drops_nothing_stale_and_keeps_both_arms(kafka_ns: KafkaSettings, tmp_path: Path,
                                                                          tiny_base: Path) -> None:
    worker = WorkerProcess(kafka_ns, "fanout,window,ab", tmp_path / "data",
                           {**SETTINGS, "adapter_store": tmp_path / "store"})  # the trainer's store
    sim = SimulatedWorkersAndJudge(kafka_ns, answer)
    sim.thread.start()
    cfg = TrainerConfig(base_model=str(tiny_base), adapter_store=tmp_path / "store", device="cpu", lora_rank=4,
                        lora_alpha=8, samples_per_step=4, max_staleness=1, canary_share=0.5, publish_every=1,
                        micro_batch_tokens=128, idle_exit_s=120.0, poll_timeout_ms=200, lr=1e-3, max_steps=STEPS,
                        run_name="ab-control-arm")  # a consumer group of its own on the shared test broker
    try:
        with EventProducer(kafka_ns, "test") as prod:
            for n in range(60):
                prod.send(R.Task(R.Envelope.new("test", task_id=f"task-{n}"), "2+2?", "sim", 4))
        published = asyncio.run(run_trainer(cfg, kafka_ns))
    finally:
        sim.stop.set()
        worker.stop()
    drops = {p.version: dict(p.drops or {}) for p in published}
    assert [p.version for p in published] == list(range(1, STEPS + 1)), (drops, worker.log_text()[-3000:])
    lifecycle = [r.event for r in read_topic(kafka_ns, "adapter-events") if r.event is not None]
    assert not [e for e in lifecycle if isinstance(e, (R.AdapterPromoted, R.AdapterRolledBack))]  # primary: v0

    assert all(d.get("stale", 0) == 0 for d in drops.values()), drops

    line_ahead_ms = next(r.timestamp_ms for r in read_topic(kafka_ns, "adapter-events")
                         if isinstance(r.event, R.AdapterPublished) and r.event.version == 2)
    arms: dict[str, set[str]] = {"control": set(), "line": set()}
    for r in read_topic(kafka_ns, "rollout-requests"):
        if isinstance(r.event, R.RolloutRequest) and r.timestamp_ms > line_ahead_ms:
            arms["control" if r.event.adapter_version == 0 else "line"].add(r.event.envelope.group_id or "")
    assert len(arms["control"]) >= 2 and len(arms["line"]) >= 2, arms  # both arms get groups with the line ahead

    closed = {r.event.envelope.group_id: r.event for r in read_topic(kafka_ns, "groups")
              if isinstance(r.event, R.GroupClosed)}
    control = [closed[g] for g in arms["control"] if g in closed]
    assert control and all((c.reason, c.trains, c.samples) == ("control_arm", False, 0) for c in control), control
    assert all(c.received == 4 and c.reward_std > 0 for c in control)  # judged for the comparison
    samples = [r.event for r in read_topic(kafka_ns, "training-samples") if isinstance(r.event, R.TrainingSample)]
    assert not [s for s in samples if s.envelope.group_id in arms["control"]]
