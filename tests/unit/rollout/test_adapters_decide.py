"""What the adapter follower does with the registry's changes, and the follower against a real (tiny) policy
without Kafka (the fold itself: tests/unit/lifecycle/test_registry.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from support.tiny_policy import build_tiny_model, build_tiny_tokenizer

from streamgrpo.avro import records as R
from streamgrpo.inference.errors import AdapterNotResidentError
from streamgrpo.inference.local import LocalPolicy
from streamgrpo.lifecycle.registry import AdapterRegistry, Announced, PrimaryChanged
from streamgrpo.rollout.adapters import AdapterFollower, loads_worth_doing


def published(version: int, uri: str = "/nowhere", sha: str = "0" * 64, name: str = "planner") -> R.AdapterPublished:
    return R.AdapterPublished(envelope=R.Envelope.new("trainer"), adapter_name=name, version=version, uri=uri,
                              sha256=sha, base_model="in-process", trainer_step=version, lineage=[])


def promoted(version: int, previous: int = 0) -> R.AdapterPromoted:
    return R.AdapterPromoted(envelope=R.Envelope.new("ab-controller"), adapter_name="planner", version=version,
                             previous_version=previous, reason="canary won")


def rolled_back(version: int, restored: int) -> R.AdapterRolledBack:
    return R.AdapterRolledBack(envelope=R.Envelope.new("ab-controller"), adapter_name="planner", version=version,
                               restored_version=restored, reason="canary lost")


def test_replay_loads_only_newest_and_primary() -> None:
    reg, changes = AdapterRegistry(canary_share=0.5), []
    for event in [published(1), published(2), promoted(2), published(3), published(4), published(5)]:
        changes += reg.apply(event)
    kept = loads_worth_doing(changes, {"planner": reg.primary("planner")}, keep_last=2)
    assert [c.announcement.version for c in kept if isinstance(c, Announced)] == [2, 4, 5]
    assert PrimaryChanged("planner", 2) in kept


def test_the_follower_keeps_the_serving_version_resident_without_a_canary(tmp_path: Path) -> None:
    """One meaning of primary: with canary_share 0 the newest published version serves, so it is protected."""
    policy = LocalPolicy.from_model(build_tiny_model(), build_tiny_tokenizer(), keep_last=1)
    follower = AdapterFollower(policy, keep_last=1, store_root=tmp_path)
    good1, sha1 = _adapter(tmp_path, 1)
    follower.handle(published(1, str(good1), sha1))
    assert follower.primary("planner") == 1 and policy.resident_versions("planner") == [1]
    outside, sha_out = _adapter(tmp_path.parent / f"{tmp_path.name}-elsewhere", 2)
    follower.handle(published(2, str(outside), sha_out))
    assert follower.refused_count == 1 and "outside the adapter store" in follower.refusals[0].reason


def _adapter(tmp: Path, seed: int) -> tuple[Path, str]:
    from peft import LoraConfig, get_peft_model

    from streamgrpo.models.adapter_store import sha256_dir

    base = build_tiny_model()  # reseeds torch itself
    torch.manual_seed(seed)
    model = get_peft_model(base, LoraConfig(r=2, target_modules=["q_proj"], init_lora_weights=False))
    out = tmp / f"v{seed}"
    model.save_pretrained(str(out))
    return out, sha256_dir(out)


def test_follower_verifies_refuses_and_loads_on_demand(tmp_path: Path) -> None:
    policy = LocalPolicy.from_model(build_tiny_model(), build_tiny_tokenizer(), keep_last=1)
    follower = AdapterFollower(policy, keep_last=1)
    good1, sha1 = _adapter(tmp_path, 1)
    good2, sha2 = _adapter(tmp_path, 2)
    follower.handle_batch([published(1, str(good1), sha1), published(2, good2.as_uri(), sha2)])
    assert policy.resident_versions("planner") == [2]  # v1 superseded in the same batch: not loaded
    follower.ensure_resident("planner", 1)  # announced -> loaded on demand after verification
    assert 1 in policy.resident_versions("planner")
    follower.handle(published(3, str(good1), sha2))  # wrong sha for those files
    assert follower.refused_count == 1 and "sha256" in follower.refusals[0].reason
    assert 3 not in policy.resident_versions("planner")
    with pytest.raises(AdapterNotResidentError):
        follower.ensure_resident("planner", 3)
    with pytest.raises(AdapterNotResidentError):
        follower.ensure_resident("planner", 7)  # never announced
    follower.handle(published(4, "s3://bucket/planner/v4", sha1))  # no fsspec / no adapter store to download to
    assert follower.refused_count == 2


def test_an_unreachable_backend_is_a_transient_failure_not_a_refusal(tmp_path: Path) -> None:
    from streamgrpo.inference.vllm import VLLMPolicy

    policy = VLLMPolicy("http://127.0.0.1:9/v1", "base", timeout=1.0, max_retries=0)  # discard port: refused
    follower = AdapterFollower(policy)
    good, sha = _adapter(tmp_path, 1)
    follower.handle(published(1, str(good), sha))
    assert follower.refused_count == 0 and len(follower.failures) == 1
    assert "failed after 1 attempts" in follower.failures[0].reason
    with pytest.raises(AdapterNotResidentError):
        follower.ensure_resident("planner", 1)  # retried on demand (still down)
    assert len(follower.failures) == 2
