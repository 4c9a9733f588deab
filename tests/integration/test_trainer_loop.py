"""The trainer loop on the real broker: publish samples -> train -> AdapterPublished -> commit."""

from __future__ import annotations

import asyncio
from collections import defaultdict

import pytest
from support.samples import make_samples
from support.tiny_model import tiny_model

from streamgrpo.avro import records as R
from streamgrpo.models import adapter_store as store
from streamgrpo.topics.follow import read_topic
from streamgrpo.topics.producer import EventProducer
from streamgrpo.trainer.config import TrainerConfig
from streamgrpo.trainer.loop import run_trainer

pytestmark = pytest.mark.broker


@pytest.fixture(scope="module")
def tiny_base(tmp_path_factory):
    model, tok = tiny_model(0)
    path = tmp_path_factory.mktemp("tiny-base")
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path, model, tok


def trainer_config(tiny_base, store_root, **kw):
    kw.setdefault("max_staleness", 4)  # these samples are all of version 0; staleness has its own test
    return TrainerConfig(base_model=str(tiny_base[0]), adapter_store=store_root, device="cpu", lora_rank=4,
                         lora_alpha=8, samples_per_step=2, publish_every=1, micro_batch_tokens=128,
                         idle_exit_s=3.0, poll_timeout_ms=200, lr=1e-3, **kw)


def publish_samples(kafka, samples, key=None):
    with EventProducer(kafka, "test") as prod:
        for s in samples:
            prod.send(s, key=key)


def adapter_events(kafka):
    return {r.event.version: r.event for r in read_topic(kafka, "adapter-events")
            if isinstance(r.event, R.AdapterPublished)}


def covered_offsets(events):
    seen = defaultdict(list)
    for ev in events:
        for r in ev.lineage:
            seen[(r.topic, r.partition)].extend(range(r.start, r.end + 1))
    return seen


def partition_offsets(kafka):
    out = defaultdict(list)
    for r in read_topic(kafka, "training-samples"):
        out[(r.topic, r.partition)].append(r.offset)
    return out


def test_loop_trains_publishes_with_lineage_and_commits(kafka_ns, tiny_base, tmp_path, monkeypatch):
    _, model, tok = tiny_base
    monkeypatch.setenv("STREAMGRPO_HEARTBEAT_FILE", str(tmp_path / "trainer.hb"))
    publish_samples(kafka_ns, make_samples(tok, 6, seed=1, model=model))
    cfg = trainer_config(tiny_base, tmp_path, max_steps=3, kl_coef=0.01)

    published = asyncio.run(run_trainer(cfg, kafka_ns))

    assert [e.version for e in published] == [1, 2, 3]
    assert (tmp_path / "trainer.hb").exists()  # the liveness file was written by the loop
    events = adapter_events(kafka_ns)
    assert sorted(events) == [1, 2, 3]
    assert [events[v].parent_version for v in (1, 2, 3)] == [None, 1, 2]
    for v, ev in events.items():
        path = store.verify_and_load_path(ev.uri, ev.sha256)  # raises on a wrong sha256
        assert path == tmp_path / "planner" / f"v{v}"
        assert ev.trainer_step == v and ev.base_model == str(tiny_base[0])
        assert {"loss", "kl", "clip_frac", "tokens"} <= set(ev.metrics)
    covered = covered_offsets(events.values())
    assert covered == partition_offsets(kafka_ns)  # all 6 samples, each exactly once, in order per partition
    assert sum(len(v) for v in covered.values()) == 6

    # offsets were committed: the same group resumes at v3 and finds nothing left to train
    again = asyncio.run(run_trainer(cfg.model_copy(update={"max_steps": 10}), kafka_ns))
    assert again == []


def test_loop_drops_stale_samples_and_counts_them(kafka_ns, tiny_base, tmp_path):
    _, _, tok = tiny_base
    cfg = trainer_config(tiny_base, tmp_path, max_steps=1, max_staleness=0)
    fresh = make_samples(tok, 2, seed=2)
    publish_samples(kafka_ns, fresh)
    asyncio.run(run_trainer(cfg, kafka_ns))  # -> v1, so samples of version 0 are now 1 behind
    stale = make_samples(tok, 2, seed=3, behaviour_version=0)
    good = make_samples(tok, 1, seed=5, behaviour_version=1)[0]
    malformed = R.TrainingSample(**{**good.__dict__, "envelope": R.Envelope.new("test"),
                                    "turns": [R.SampleTurn(0, [5, 6], [7, 8], [-0.5])]})  # 2 tokens, 1 logprob
    greedy = R.TrainingSample(**{**good.__dict__, "envelope": R.Envelope.new("test"),
                                 "sampling": R.SamplingParams(0.0, 1.0, 16)})  # its logprobs cannot be recomputed
    current = make_samples(tok, 2, seed=4, behaviour_version=1)
    publish_samples(kafka_ns, stale + [malformed, greedy] + current, key="one-partition")  # one partition, in order
    published = asyncio.run(run_trainer(cfg.model_copy(update={"max_steps": 2}), kafka_ns))
    assert [e.version for e in published] == [2]
    assert published[0].metrics["dropped_stale"] == 2.0
    assert published[0].metrics["dropped_malformed"] == 1.0
    assert published[0].metrics["dropped_sampling_mismatch"] == 1.0
    # contract v4: the same facts as typed fields (the metric keys stay for v3 readers for one release)
    assert published[0].drops == {"stale": 2, "malformed": 1, "sampling_mismatch": 1}
    assert published[0].samples_dequeued == 6 and published[0].max_staleness == cfg.max_staleness
    assert sum(r.end - r.start + 1 for r in published[0].lineage) == 6  # consumed 6, trained 2
    letters = [r.event for r in read_topic(kafka_ns, "dead-letters")]
    assert [(d.reason_code, d.source_topic) for d in letters] == [("trainer_malformed", "training-samples"),
                                                                  ("trainer_sampling_mismatch", "training-samples")]
