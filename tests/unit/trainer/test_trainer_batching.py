"""Batching: rows, padding, alignment, weights, micro-batch planning, admission."""

from __future__ import annotations

import pytest
import torch

from streamgrpo.avro import records as R
from streamgrpo.trainer.batching import (
    admit,
    build_batch,
    micro_batches,
    plan_micro_batches,
    sampling_mismatch,
)


def sample(turns, advantage=1.0, version=0, adapter="planner", sampling=None):
    return R.TrainingSample(
        envelope=R.Envelope.new("test"),
        turns=[R.SampleTurn(turn=i, prompt_token_ids=list(p), action_token_ids=list(a),
                            behaviour_logprobs=[-0.1 * (j + 1) for j in range(len(a))])
               for i, (p, a) in enumerate(turns)],
        advantage=advantage, reward=0.0, group_mean=0.0, group_std=1.0, group_size=2, estimator="grpo",
        adapter_name=adapter, behaviour_version=version, sampling=sampling,
    )


def test_rows_are_prompt_plus_action_with_aligned_masks_and_logprobs():
    s0 = sample([([5, 6, 7], [8, 9]), ([5], [10])], advantage=0.5)
    s1 = sample([([11, 12], [13, 14, 15])], advantage=-1.0, version=3)
    b = build_batch([s0, s1], max_seq_len=64, normalisation="rollout_mean", max_tokens=8)
    assert b.input_ids.tolist() == [[5, 6, 7, 8, 9], [5, 10, 0, 0, 0], [11, 12, 13, 14, 15]]
    assert b.attention_mask.tolist() == [[1, 1, 1, 1, 1], [1, 1, 0, 0, 0], [1, 1, 1, 1, 1]]
    assert b.action_mask.tolist() == [[False, False, False, True, True], [False, True, False, False, False],
                                      [False, False, True, True, True]]
    assert b.behaviour_logp[0].tolist() == pytest.approx([0, 0, 0, -0.1, -0.2])
    assert b.behaviour_logp[2].tolist() == pytest.approx([0, 0, -0.1, -0.2, -0.3])
    assert b.advantages.tolist() == [0.5, 0.5, -1.0]
    assert b.rollout_index.tolist() == [0, 0, 1]
    assert b.behaviour_version.tolist() == [0, 0, 3]
    # rollout 0 has 3 action tokens over 2 rows, rollout 1 has 3: each token 1/3 * 1/2
    assert b.token_weights.sum().item() == pytest.approx(1.0)
    assert b.token_weights[0, 3].item() == pytest.approx(1 / 6)
    assert b.row_weights.tolist() == pytest.approx([0.25, 0.25, 0.5])


def test_long_prompts_are_left_truncated():
    b = build_batch([sample([(list(range(1, 20)), [30, 31])])], max_seq_len=6, normalisation="rollout_mean",
                    max_tokens=8)
    assert b.input_ids.tolist() == [[16, 17, 18, 19, 30, 31]]


def test_micro_batches_respect_token_budget_and_keep_weights():
    samples = [sample([([1] * n, [2] * n)]) for n in (1, 2, 3, 4, 5, 6)]
    full = build_batch(samples, max_seq_len=64, normalisation="rollout_mean", max_tokens=8)
    parts = micro_batches(full, token_budget=16, share_prefix=False)
    assert all(p.padded_tokens <= 16 or p.input_ids.shape[0] == 1 for p in parts)
    assert sum(p.input_ids.shape[0] for p in parts) == 6
    assert sum(float(p.token_weights.sum()) for p in parts) == pytest.approx(1.0)
    assert sorted(i for p in parts for i in p.rollout_index.tolist()) == list(range(6))


def test_plan_micro_batches_gives_an_oversized_row_its_own_group():
    assert plan_micro_batches([3, 50, 3], token_budget=10) == [[0, 2], [1]]


def test_shared_prefix_plan_orders_rows_by_tokens_and_counts_the_prefix_tree():
    seqs = [[1, 2, 3, 9], [5, 5], [1, 2, 3, 4], [1, 2, 7]]
    # lexicographic: [1,2,3,4], [1,2,3,9], [1,2,7], [5,5]; tree tokens 4 + 1 + 1 = 6, then [5,5] costs 2 more
    assert plan_micro_batches([len(s) for s in seqs], token_budget=7, seqs=seqs) == [[2, 0, 3], [1]]
    assert plan_micro_batches([len(s) for s in seqs], token_budget=8, seqs=seqs) == [[2, 0, 3, 1]]


def test_admit_drops_and_counts_by_reason():
    ok = sample([([1], [2])], version=5)
    stale = sample([([1], [2])], version=1)
    other = sample([([1], [2])], adapter="other", version=5)
    empty = sample([([1], [])], version=5)
    bad = R.TrainingSample(**{**sample([([1], [2, 3])], version=5).__dict__,
                              "turns": [R.SampleTurn(0, [1], [2, 3], [-0.1])]})
    long = sample([([1], [2] * 10)], version=5)
    kept, dropped = admit([ok, stale, other, empty, bad, long], adapter_name="planner", current_version=6,
                          max_staleness=2, max_seq_len=8)
    assert kept == [ok]
    assert dict(dropped) == {"stale": 1, "other_adapter": 1, "empty": 1, "malformed": 1, "too_long": 1}


def test_samples_the_trainer_cannot_recompute_are_dropped_as_sampling_mismatch():
    """Greedy decoding (temperature 0) and a grammar constraint cannot be recomputed; a recorded
    temperature (any value > 0) and top_p can, and a sample without sampling parameters uses the default."""
    greedy = sample([([1], [2])], sampling=R.SamplingParams(0.0, 1.0, 8))
    grammar = sample([([1], [2])], sampling=R.SamplingParams(0.7, 1.0, 8, constraint="planner-json@ab12"))
    warm = sample([([1], [2])], sampling=R.SamplingParams(0.7, 0.9, 8))
    legacy = sample([([1], [2])])
    kept, dropped = admit([greedy, grammar, warm, legacy], adapter_name="planner", current_version=0,
                          max_staleness=2, max_seq_len=8)
    assert kept == [warm, legacy]
    assert dict(dropped) == {"sampling_mismatch": 2}
    assert "greedy" in str(sampling_mismatch(greedy.sampling)) and "constraint" in str(sampling_mismatch(grammar.sampling))


def test_each_row_carries_its_samples_temperature():
    warm = sample([([1, 2], [3]), ([1, 2, 3, 4], [5])], sampling=R.SamplingParams(0.7, 1.0, 8))
    legacy = sample([([1], [2])])
    b = build_batch([warm, legacy], max_seq_len=16, normalisation="rollout_mean", max_tokens=8, temperature=1.3)
    assert b.temperature.tolist() == pytest.approx([0.7, 0.7, 1.3])
    parts = micro_batches(b, token_budget=4)
    assert len(parts) == 2  # the temperatures travel with their rows
    pairs = sorted((r, round(t, 4)) for p in parts
                   for r, t in zip(p.rollout_index.tolist(), p.temperature.tolist(), strict=True))
    assert pairs == [(0, 0.7), (0, 0.7), (1, 1.3)]


def test_within_staleness_bound_is_kept():
    kept, dropped = admit([sample([([1], [2])], version=4)], adapter_name="planner", current_version=6,
                          max_staleness=2, max_seq_len=8)
    assert len(kept) == 1 and not dropped


def test_batch_tensors_have_expected_dtypes():
    b = build_batch([sample([([1], [2])])], max_seq_len=8, normalisation="dr_grpo", max_tokens=4)
    assert b.input_ids.dtype == torch.long and b.action_mask.dtype == torch.bool
    assert b.token_weights.sum().item() == pytest.approx(0.25)
