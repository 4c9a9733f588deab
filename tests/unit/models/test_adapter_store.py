"""Adapter store: atomic immutable versions, sha256, verify, latest, exact resume."""

from __future__ import annotations

import json

import pytest
import torch
from support.samples import make_samples
from support.tiny_model import tiny_model

from streamgrpo.avro import records as R
from streamgrpo.models import adapter_store as store
from streamgrpo.models.errors import AdapterIntegrityError, AdapterStoreError
from streamgrpo.trainer.model import ModelSpec, attach_lora

SPEC = ModelSpec(base_model="unused", lora_rank=4, lora_alpha=8, device="cpu")


def policy(random_b=True):
    model = attach_lora(tiny_model(0)[0], SPEC)
    if random_b:
        with torch.no_grad():
            for name, p in model.named_parameters():
                if "lora_B" in name:
                    p.normal_(0.0, 0.05, generator=torch.Generator().manual_seed(1))
    model.train()
    return model, None


def samples(tok, seed):
    return make_samples(tok, 6, seed=seed)


def manifest(version, parent=None, step=1):
    return store.Manifest(adapter_name="planner", version=version, parent_version=parent, base_model="tiny",
                          trainer_step=step, lineage=[R.OffsetRange("training-samples", 0, 0, 3)],
                          committed={"training-samples:0": 4})


def test_sha256_dir_covers_names_and_bytes(tmp_path):
    (tmp_path / "a").write_bytes(b"xy")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b").write_bytes(b"z")
    h = store.sha256_dir(tmp_path)
    assert len(h) == 64 and h == store.sha256_dir(tmp_path)
    (tmp_path / "sub" / "b").write_bytes(b"Z")
    assert store.sha256_dir(tmp_path) != h
    (tmp_path / "sub" / "b").write_bytes(b"z")
    (tmp_path / "a").rename(tmp_path / "c")
    assert store.sha256_dir(tmp_path) != h


def test_write_verify_latest_and_immutability(tmp_path):
    model, _ = policy()
    path, sha = store.write_version(tmp_path, manifest(1), model, {"optimizer": {"x": torch.ones(2)}})
    assert path == tmp_path / "planner" / "v1"
    assert {"adapter_config.json", "adapter_model.safetensors", "manifest.json", "trainer_state.pt"} <= {
        p.name for p in path.iterdir()}
    assert not [p for p in (tmp_path / "planner").iterdir() if p.name.startswith(".")]  # no temp dirs left
    assert store.verify_and_load_path(path.as_uri(), sha) == path
    assert store.verify_and_load_path(str(path), sha) == path
    with pytest.raises(AdapterStoreError, match="immutable"):
        store.write_version(tmp_path, manifest(1), model)
    store.write_version(tmp_path, manifest(2, parent=1, step=2), model)
    found = store.latest(tmp_path, "planner")
    assert found is not None and found[1].version == 2 and found[1].parent_version == 1
    assert store.versions(tmp_path, "planner") == [1, 2]
    assert store.latest(tmp_path, "nothing") is None
    assert json.loads((path / "manifest.json").read_text())["committed"] == {"training-samples:0": 4}
    assert json.loads((path / "manifest.json").read_text())["lineage"] == [
        {"topic": "training-samples", "partition": 0, "start": 0, "end": 3}]  # the stored shape is unchanged
    assert store.Manifest.read(path).lineage == [R.OffsetRange("training-samples", 0, 0, 3)]


def test_verify_refuses_tampered_or_incomplete_adapters(tmp_path):
    model, _ = policy()
    path, sha = store.write_version(tmp_path, manifest(1), model)
    with pytest.raises(AdapterIntegrityError, match="sha256"):
        store.verify(path, "0" * 64)
    weights = path / "adapter_model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1
    weights.write_bytes(bytes(data))
    with pytest.raises(AdapterIntegrityError):
        store.verify(path, sha)
    weights.unlink()
    with pytest.raises(AdapterIntegrityError, match="missing"):
        store.verify(path, sha)
    with pytest.raises(AdapterIntegrityError):
        store.verify(tmp_path / "nope", sha)
    with pytest.raises(AdapterStoreError, match="file://"):
        store.verify_and_load_path("s3://bucket/x", sha)


def test_resume_from_store_continues_exactly(tmp_path):
    """Two steps in one go == one step, store, reload (adapter + optimizer), one more step."""
    from streamgrpo.trainer.batching import build_batch, micro_batches
    from streamgrpo.trainer.losses import LossConfig, build_loss
    from streamgrpo.trainer.step import StepConfig, build_optimizer, optimizer_step

    cfg = StepConfig(loss=build_loss("grpo"), loss_config=LossConfig(kl_coef=0.01))

    def batch(seed):
        _, tok = tiny_model(0)
        return micro_batches(build_batch(samples(tok, seed=seed), max_seq_len=128, normalisation="rollout_mean",
                                         max_tokens=32), 96)

    a, _ = policy(random_b=False)
    opt_a = build_optimizer(a, 1e-2)
    optimizer_step(a, opt_a, None, batch(1), cfg)
    path, _ = store.write_version(tmp_path, manifest(1), a, {"optimizer": opt_a.state_dict()})
    optimizer_step(a, opt_a, None, batch(2), cfg)

    base, _ = tiny_model(0)
    b = attach_lora(base, SPEC, adapter_dir=path)
    b.train()
    opt_b = build_optimizer(b, 1e-2)
    opt_b.load_state_dict(store.load_trainer_state(path)["optimizer"])
    optimizer_step(b, opt_b, None, batch(2), cfg)
    pa = {n: p for n, p in a.named_parameters() if p.requires_grad}
    pb = {n: p for n, p in b.named_parameters() if p.requires_grad}
    assert pa.keys() == pb.keys()
    for n in pa:
        torch.testing.assert_close(pa[n], pb[n], rtol=1e-5, atol=1e-7)
