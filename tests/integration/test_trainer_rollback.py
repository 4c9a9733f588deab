"""The trainer obeys a rollback (real broker, tiny model): it continues from the primary's weights and optimizer
state, its next adapter names the primary as parent, and samples of rolled-back versions are not trained."""

from __future__ import annotations

import asyncio
import time

import pytest
import torch
from safetensors.torch import load_file
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


def config(tiny_base, root, **kw) -> TrainerConfig:
    return TrainerConfig(base_model=str(tiny_base[0]), adapter_store=root, device="cpu", lora_rank=4, lora_alpha=8,
                         samples_per_step=2, publish_every=1, micro_batch_tokens=128, idle_exit_s=kw.pop("idle", 3.0),
                         poll_timeout_ms=200, lr=1e-2, max_staleness=4, canary_share=0.5, **kw)


def send(kafka, *events) -> None:
    with EventProducer(kafka, "test") as prod:
        for e in events:
            prod.send(e, key="one-partition" if isinstance(e, R.TrainingSample) else None)


def published(kafka) -> dict[int, R.AdapterPublished]:
    return {r.event.version: r.event for r in read_topic(kafka, "adapter-events")
            if isinstance(r.event, R.AdapterPublished)}


def optimizer_steps(root, version: int) -> int:
    saved = store.load_trainer_state(store.version_dir(root, "planner", version))
    return max(int(v["step"]) for v in saved["optimizer"]["state"].values())


def weights(root, version: int) -> dict[str, torch.Tensor]:
    return load_file(str(store.version_dir(root, "planner", version) / "adapter_model.safetensors"))


def test_after_a_rollback_the_next_adapter_continues_from_the_primary(kafka_ns, tiny_base, tmp_path) -> None:
    _, model, tok = tiny_base
    send(kafka_ns, *make_samples(tok, 4, seed=1, model=model))
    assert [e.version for e in asyncio.run(run_trainer(config(tiny_base, tmp_path, max_steps=2), kafka_ns))] == [1, 2]
    send(kafka_ns, R.AdapterPromoted(R.Envelope.new("test"), "planner", 1, 0, "better", decided_by="human:ada"),
         R.AdapterRolledBack(R.Envelope.new("test"), "planner", 2, 1, "worse", decided_by="human:ada"))
    # a restarted trainer resumes from its newest stored version (v2), sees the rollback and continues from v1
    send(kafka_ns, *make_samples(tok, 2, seed=2, behaviour_version=2, model=model),
         *make_samples(tok, 2, seed=3, behaviour_version=1, model=model))
    out = asyncio.run(run_trainer(config(tiny_base, tmp_path, max_steps=3), kafka_ns))
    assert [(e.version, e.parent_version) for e in out] == [(3, 1)]
    assert out[0].metrics["dropped_rolled_back"] == 2.0  # v2's samples are not trained on
    assert out[0].drops == {"rolled_back": 2} and out[0].samples_dequeued == 4  # the typed fields (contract v4)
    adam_steps = {v: optimizer_steps(tmp_path, v) for v in (1, 2, 3)}
    assert adam_steps == {1: 1, 2: 2, 3: 2}  # v3's optimizer continued from v1's state (1 step), not v2's (2)
    assert out[0].trainer_step == 3  # the trainer's own step count goes on


def test_restore_loads_exactly_the_primarys_weights_and_optimizer_state(tiny_base, tmp_path) -> None:
    from streamgrpo.trainer.loop import publish
    from streamgrpo.trainer.rollback import restore
    from streamgrpo.trainer.state import TrainerState, build_training

    cfg = config(tiny_base, tmp_path)

    class Sink:
        def send(self, event: object) -> None: ...
        def flush(self) -> None: ...

    state = TrainerState(*build_training(cfg, None))
    for _ in range(2):
        with torch.no_grad():
            for p in state.model.parameters():
                if p.requires_grad:
                    p.add_(0.01)
        publish(Sink(), state, cfg)  # type: ignore[arg-type]
    assert (state.version, state.published) == (2, 2)
    restore(state, cfg, 1)
    assert (state.version, state.published) == (1, 2)
    from peft import get_peft_model_state_dict

    live, stored = get_peft_model_state_dict(state.model), weights(tmp_path, 1)
    assert live.keys() == stored.keys() and all(torch.equal(live[k], stored[k]) for k in stored)
    assert not all(torch.equal(live[k], weights(tmp_path, 2)[k]) for k in stored)
    restore(state, cfg, 0)  # the base model: a fresh adapter (LoRA B is zero)
    assert state.version == 0 and all(float(v.abs().sum()) == 0 for k, v in state.model.state_dict().items()
                                      if "lora_B" in k)
    with pytest.raises(FileNotFoundError):
        restore(state, cfg, 7)


def test_a_rollback_while_training_discards_the_step_and_restores_the_primary(kafka_ns, tiny_base, tmp_path) -> None:
    _, _, tok = tiny_base
    send(kafka_ns, *make_samples(tok, 4, seed=4))

    async def scenario() -> list[R.AdapterPublished]:
        task = asyncio.create_task(run_trainer(config(tiny_base, tmp_path, max_steps=4, idle=30.0), kafka_ns))
        deadline = time.monotonic() + 120
        while len(published(kafka_ns)) < 2 and time.monotonic() < deadline:
            await asyncio.sleep(0.5)
        await asyncio.to_thread(send, kafka_ns, R.AdapterRolledBack(R.Envelope.new("test"), "planner", 1, 0, "bad",
                                                                    decided_by="human:ada"))
        await asyncio.sleep(2.0)  # the trainer's follower folds it
        await asyncio.to_thread(send, kafka_ns, *make_samples(tok, 4, seed=5, behaviour_version=0))
        return await asyncio.wait_for(task, timeout=240)

    out = asyncio.run(scenario())
    assert [(e.version, e.parent_version) for e in out[:2]] == [(1, None), (2, 1)]
    after = out[2:]
    assert after and after[0].version == 3 and after[0].parent_version is None  # continued from the base model (v0)
    assert all(e.parent_version in (None, 3) for e in after)
