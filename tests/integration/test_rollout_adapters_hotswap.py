"""Adapter hot swap over the real broker: publish -> verify -> load mid-run; tampered / missing adapters refused."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import pytest
import torch
from support.tiny_policy import build_tiny_model, build_tiny_tokenizer

from streamgrpo.avro import records as R
from streamgrpo.config import KafkaSettings
from streamgrpo.inference.errors import AdapterNotResidentError
from streamgrpo.inference.local import LocalPolicy
from streamgrpo.models.adapter_store import Manifest, write_version
from streamgrpo.rollout.adapters import AdapterFollower, follow
from streamgrpo.topics.producer import EventProducer

NAME = "planner"
PROMPT = [1, 34, 32, 18, 31, 100, 21, 22, 2, 100, 1, 14, 32, 32]


def store_version(root: Path, version: int) -> tuple[Path, str]:
    """Write a real peft LoRA for the tiny model through the trainer's adapter store -> (dir, sha256)."""
    from peft import LoraConfig, get_peft_model

    base = build_tiny_model()
    torch.manual_seed(100 + version)
    model = get_peft_model(base, LoraConfig(r=4, lora_alpha=32, target_modules=["q_proj", "v_proj"],
                                            init_lora_weights=False))
    manifest = Manifest(adapter_name=NAME, version=version, parent_version=version - 1, base_model="in-process",
                        trainer_step=version)
    return write_version(root, manifest, model)


def published(version: int, uri: str, sha: str) -> R.AdapterPublished:
    return R.AdapterPublished(envelope=R.Envelope.new("trainer"), adapter_name=NAME, version=version, uri=uri,
                              sha256=sha, base_model="in-process", trainer_step=version, lineage=[],
                              parent_version=version - 1)


def wait_until(predicate, timeout_s: float = 60.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.05)


@pytest.mark.broker
def test_follower_hot_swaps_verified_adapters_and_refuses_bad_ones(kafka_ns: KafkaSettings, tmp_path: Path) -> None:
    policy = LocalPolicy.from_model(build_tiny_model(), build_tiny_tokenizer(), keep_last=2)
    # with a canary (A/B on): a published version is a canary until promoted, so the primary only moves with
    # the AdapterPromoted below (without a canary every published version would be primary at once)
    follower = AdapterFollower(policy, adapter_name=NAME, canary_share=0.5)
    stop = threading.Event()
    follower_thread = threading.Thread(target=lambda: asyncio.run(follow(follower, kafka_ns, stop)), daemon=True)
    follower_thread.start()

    served: list[int] = []
    worker_stop = threading.Event()

    def worker() -> None:  # a rollout worker: always serves the current primary, pinned for the call
        sampling = R.SamplingParams(temperature=1.0, max_new_tokens=4)
        while not worker_stop.is_set():
            version = follower.primary(NAME)
            with follower.pinned(NAME, version):
                (gen,) = policy.generate([PROMPT], sampling, adapter_name=NAME, adapter_version=version)
            served.append(gen.adapter_version)

    worker_thread = threading.Thread(target=worker, daemon=True)
    worker_thread.start()
    try:
        wait_until(lambda: len(served) >= 3)
        v1_dir, v1_sha = store_version(tmp_path / "store", 1)
        v2_dir, v2_sha = store_version(tmp_path / "store", 2)
        blob = v2_dir / "adapter_model.safetensors"
        data = bytearray(blob.read_bytes())
        data[-1] ^= 0x01  # tamper AFTER hashing
        blob.write_bytes(bytes(data))
        with EventProducer(kafka_ns, service="trainer") as producer:
            producer.send(published(1, v1_dir.as_uri(), v1_sha))
            producer.send(R.AdapterPromoted(envelope=R.Envelope.new("ab-controller"), adapter_name=NAME, version=1,
                                            previous_version=0, reason="test"))
            producer.send(published(2, str(v2_dir), v2_sha))
            producer.send(published(3, str(tmp_path / "store" / NAME / "v3"), v1_sha))  # never written
            producer.flush()
        wait_until(lambda: follower.refused_count == 2 and follower.primary(NAME) == 1)
        count_at_swap = len(served)
        wait_until(lambda: len(served) >= count_at_swap + 3)
    finally:
        worker_stop.set()
        worker_thread.join(timeout=30)
        stop.set()
        follower_thread.join(timeout=30)

    assert served[0] == 0 and served[-1] == 1  # swapped mid-run
    first_v1 = served.index(1)
    assert set(served[:first_v1]) == {0} and set(served[first_v1:]) == {1}  # never back, never another version
    assert policy.resident_versions(NAME) == [1]
    reasons = {r.version: r.reason for r in follower.refusals}
    assert set(reasons) == {2, 3}
    assert "sha256" in reasons[2]
    assert "does not exist" in reasons[3] or "missing" in reasons[3]
    with pytest.raises(AdapterNotResidentError):
        policy.generate([PROMPT], R.SamplingParams(max_new_tokens=2), adapter_name=NAME, adapter_version=2)
