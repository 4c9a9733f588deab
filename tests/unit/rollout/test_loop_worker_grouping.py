"""Pure helpers of the worker: grouping requests that arrived together, completeness, config validation."""

from __future__ import annotations

import pytest

from streamgrpo.avro import records as R
from streamgrpo.config import LoopSettings, load
from streamgrpo.errors import ConfigError
from streamgrpo.rollout.config import RolloutConfig
from streamgrpo.rollout.worker import group_requests, incomplete


def req(group: str, index: int, size: int = 3) -> R.RolloutRequest:
    env = R.Envelope.new("t", task_id="t", group_id=group, rollout_id=f"{group}-{index}")
    return R.RolloutRequest(envelope=env, question="q", source="s", rollout_index=index, group_size=size,
                            adapter_name="planner", adapter_version=0, max_turns=2, sampling=R.SamplingParams())


def test_group_requests_buckets_in_arrival_order_sorted_and_deduplicated():
    arrived = [req("b", 2), req("a", 1), req("b", 0), req("a", 0), req("b", 2), req("b", 1)]
    groups = group_requests(arrived)
    assert [[r.envelope.rollout_id for r in g] for g in groups] == [["b-0", "b-1", "b-2"], ["a-0", "a-1"]]
    assert incomplete(arrived)  # group a has 2 of 3
    assert not incomplete([req("a", 0), req("a", 1), req("a", 2)])
    assert group_requests([]) == []


def test_config_layers_and_rejects_bad_values():
    cfg = load(RolloutConfig, "rollout", environ={"STREAMGRPO_ROLLOUT__CONCURRENCY": "3"},
               overrides={"executor_mode": "model", "max_turns": None})
    assert cfg.concurrency == 3 and cfg.executor_mode == "model" and cfg.max_turns == LoopSettings().max_turns
    assert "secret" not in repr(RolloutConfig(vllm_api_key="secret"))
    with pytest.raises(ConfigError, match="verifier_mode"):
        load(RolloutConfig, "rollout", environ={}, overrides={"verifier_mode": "oracle"})
    with pytest.raises(ConfigError, match="concurrency"):
        load(RolloutConfig, "rollout", environ={}, overrides={"concurrency": 0})
    assert all(f.description for f in RolloutConfig.model_fields.values())
