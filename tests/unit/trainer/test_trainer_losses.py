"""Losses and the off-policy correction against hand-computed values."""

from __future__ import annotations

import math

import pytest
import torch

from streamgrpo.trainer.losses import LossConfig, LossInputs, build_loss
from streamgrpo.trainer.losses.gspo import sequence_log_ratio
from streamgrpo.trainer.losses.kl import k1, k2, k3
from streamgrpo.trainer.losses.normalisation import dr_grpo, rollout_mean, row_weights

BEHAVIOUR = {"correction": "behaviour"}  # PPO ratio against the behaviour logprobs (the estimator before TIS)


def _inputs(logp, blogp, adv, mask=None, rollout=None, ref=None, norm="rollout_mean", max_tokens=4, prox=None):
    logp = torch.tensor(logp, dtype=torch.float32, requires_grad=True) if not torch.is_tensor(logp) else logp
    blogp = torch.tensor(blogp, dtype=torch.float32)
    mask = torch.ones_like(blogp, dtype=torch.bool) if mask is None else torch.tensor(mask)
    rollout = torch.arange(blogp.shape[0]) if rollout is None else torch.tensor(rollout)
    n = int(rollout.max()) + 1
    tw = (rollout_mean if norm == "rollout_mean" else dr_grpo)(mask, rollout, n, max_tokens)
    return LossInputs(logp, blogp, torch.tensor(adv, dtype=torch.float32), mask, tw, row_weights(rollout, n),
                      None if ref is None else torch.tensor(ref, dtype=torch.float32),
                      None if prox is None else torch.tensor(prox, dtype=torch.float32))


def test_grpo_clips_above_for_positive_advantage():
    # ratios e^{0.5}=1.65 (clipped to 1.2), e^{-0.5}=0.61 (not clipped for A>0: min picks it)
    inp = _inputs([[0.5, -0.5]], [[0.0, 0.0]], [1.0])
    out = build_loss("grpo")(inp, LossConfig(eps_low=0.2, eps_high=0.2, **BEHAVIOUR))
    expected = -(1.2 + math.exp(-0.5)) / 2
    assert out.loss.item() == pytest.approx(expected, rel=1e-5)
    assert out.clipped.item() == 1 and out.tokens.item() == 2
    out.loss.backward()
    g = inp.logp.grad[0]
    assert g[0].item() == 0.0  # clipped token: no gradient
    assert g[1].item() == pytest.approx(-math.exp(-0.5) / 2, rel=1e-5)


def test_grpo_clips_below_for_negative_advantage_and_asymmetric_eps():
    inp = _inputs([[0.5, -0.5]], [[0.0, 0.0]], [-2.0])
    out = build_loss("grpo")(inp, LossConfig(eps_low=0.1, eps_high=0.3, **BEHAVIOUR))
    # A<0: -min(r*A, clip(r)*A) = max(r, clip(r)) * 2 -> token0: max(1.6487, 1.3)=1.6487 ; token1: max(.6065, .9)=.9
    expected = (math.exp(0.5) * 2 + 0.9 * 2) / 2
    assert out.loss.item() == pytest.approx(expected, rel=1e-5)
    assert out.clipped.item() == 1
    out.loss.backward()
    assert inp.logp.grad[0, 1].item() == 0.0
    assert inp.logp.grad[0, 0].item() == pytest.approx(math.exp(0.5) * 2 / 2, rel=1e-5)


@pytest.mark.parametrize("name", ["grpo", "gspo"])
def test_zero_advantage_gives_zero_policy_gradient(name):
    inp = _inputs([[0.3, -0.2, 0.1]], [[0.0, 0.1, 0.0]], [0.0])
    out = build_loss(name)(inp, LossConfig())
    out.loss.backward()
    assert out.pg_loss.item() == 0.0
    assert torch.count_nonzero(inp.logp.grad) == 0


def test_gspo_sequence_ratio_and_clipping():
    logp = [[0.2, 0.4, 0.0], [0.01, 0.01, 0.0]]
    blogp = [[0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]
    mask = [[True, True, False], [True, True, False]]
    seq = sequence_log_ratio(torch.tensor(logp), torch.tensor(blogp), torch.tensor(mask))
    assert seq.tolist() == pytest.approx([0.3, 0.01], rel=1e-5)
    inp = _inputs(logp, blogp, [1.0, 1.0], mask=mask)
    out = build_loss("gspo")(inp, LossConfig(eps_low=0.05, eps_high=0.05, **BEHAVIOUR))
    # row0 ratio e^0.3 = 1.35 clipped to 1.05, row1 e^0.01 unclipped; two rollouts -> mean
    assert out.loss.item() == pytest.approx(-(1.05 + math.exp(0.01)) / 2, rel=1e-5)
    assert out.clipped.item() == 2  # both action tokens of row 0


def test_kl_estimators_by_hand():
    logp, ref = torch.tensor([-1.0]), torch.tensor([-1.5])
    assert k1(logp, ref).item() == pytest.approx(0.5)
    assert k2(logp, ref).item() == pytest.approx(0.125)
    assert k3(logp, ref).item() == pytest.approx(math.exp(-0.5) - 1 + 0.5)
    assert k3(logp, logp).item() == 0.0


def test_kl_term_is_added_with_its_coefficient():
    inp = _inputs([[-1.0, -1.0]], [[-1.0, -1.0]], [0.0], ref=[[-1.5, -0.5]])
    out = build_loss("grpo")(inp, LossConfig(kl_coef=0.1, kl_estimator="k2"))
    assert out.kl.item() == pytest.approx(0.125)
    assert out.loss.item() == pytest.approx(0.0125)


def test_per_rollout_averaging_one_turn_and_five_turns_weigh_equally():
    # rollout 0: one row, advantage +1 ; rollout 1: five rows, advantage -1 ; ratio = 1 everywhere
    rollout = [0, 1, 1, 1, 1, 1]
    inp = _inputs([[0.0, 0.0]] * 6, [[0.0, 0.0]] * 6, [1.0] + [-1.0] * 5, rollout=rollout)
    out = build_loss("grpo")(inp, LossConfig())
    assert out.loss.item() == pytest.approx(0.0, abs=1e-6)  # -(+1)/2 - (-1)/2
    assert inp.token_weights[0].sum().item() == pytest.approx(0.5)
    assert inp.token_weights[1:].sum().item() == pytest.approx(0.5)
    assert inp.row_weights.tolist() == pytest.approx([0.5] + [0.1] * 5)


def test_dr_grpo_normalisation_divides_by_a_constant():
    # one rollout with 3 action tokens (of 4), max_tokens = 10: loss = -sum(r*A)/10
    mask = [[True, True, True, False]]
    inp = _inputs([[0.0] * 4], [[0.0] * 4], [2.0], mask=mask, norm="dr_grpo", max_tokens=10)
    out = build_loss("grpo")(inp, LossConfig())
    assert out.loss.item() == pytest.approx(-3 * 2.0 / 10)
    # a rollout_mean weighting of the same data is length-independent: -A
    out2 = build_loss("grpo")(_inputs([[0.0] * 4], [[0.0] * 4], [2.0], mask=mask), LossConfig())
    assert out2.loss.item() == pytest.approx(-2.0)


def test_unknown_names_are_rejected():
    with pytest.raises(KeyError, match="grpo"):
        build_loss("ppo2")


def test_tis_weights_each_token_by_the_capped_ratio_of_trainer_to_sampler():
    """One update per batch (no prox given): ratio 1, no clipping, gradient -w * A * token weight, with
    w = min(exp(logp - behaviour), C): tokens the sampler found likelier than the trainer count less,
    and a token far likelier under the trainer is truncated at C (and counted)."""
    logp = [[-1.0, -1.0, -1.0]]
    blogp = [[-1.1, -0.8, -3.0]]  # w = e^0.1, e^-0.2, e^2 = 7.39 -> capped at 2
    inp = _inputs(logp, blogp, [1.5])
    out = build_loss("grpo")(inp, LossConfig(correction="tis", tis_cap=2.0, eps_low=0.2, eps_high=0.2))
    w = [math.exp(0.1), math.exp(-0.2), 2.0]
    assert out.loss.item() == pytest.approx(-1.5 * sum(w) / 3, rel=1e-5)
    assert out.clipped.item() == 0 and out.truncated.item() == 1
    assert out.is_weight.item() == pytest.approx(sum(w), rel=1e-5)
    out.loss.backward()
    assert inp.logp.grad[0].tolist() == pytest.approx([-1.5 * x / 3 for x in w], rel=1e-5)


def test_tis_clips_the_ratio_against_the_trainers_own_recomputation():
    """With a prox policy (several updates on one batch), the PPO clip acts on logp - prox, not on the
    sampler's logprobs, and the weight uses prox."""
    inp = _inputs([[0.5, 0.0]], [[0.0, 0.0]], [1.0], prox=[[0.0, 0.1]])
    out = build_loss("grpo")(inp, LossConfig(correction="tis", tis_cap=5.0, eps_low=0.2, eps_high=0.2))
    # token0: r = e^0.5 -> clipped at 1.2, w = e^0 = 1 ; token1: r = e^-0.1, w = e^0.1
    assert out.loss.item() == pytest.approx(-(1.2 + math.exp(-0.1) * math.exp(0.1)) / 2, rel=1e-5)
    assert out.clipped.item() == 1
    out.loss.backward()
    assert inp.logp.grad[0, 0].item() == 0.0
    assert inp.logp.grad[0, 1].item() == pytest.approx(-1.0 / 2, rel=1e-5)


def test_gspo_tis_uses_one_length_normalised_weight_per_row():
    logp = [[-1.0, -1.0, 0.0]]
    blogp = [[-1.2, -1.4, 0.0]]
    mask = [[True, True, False]]
    inp = _inputs(logp, blogp, [1.0], mask=mask)
    out = build_loss("gspo")(inp, LossConfig(correction="tis", tis_cap=2.0))
    w = math.exp((0.2 + 0.4) / 2)
    assert out.loss.item() == pytest.approx(-w, rel=1e-5)
    assert out.truncated.item() == 0 and out.is_weight.item() == pytest.approx(2 * w, rel=1e-5)
    capped = build_loss("gspo")(_inputs(logp, [[-3.0, -3.0, 0.0]], [1.0], mask=mask), LossConfig(tis_cap=2.0))
    assert capped.loss.item() == pytest.approx(-2.0) and capped.truncated.item() == 2


def test_behaviour_correction_has_unit_weights():
    out = build_loss("grpo")(_inputs([[-1.0]], [[-3.0]], [1.0]), LossConfig(**BEHAVIOUR))
    assert out.is_weight.item() == 1.0 and out.truncated.item() == 0


def test_unknown_correction_is_rejected():
    with pytest.raises(KeyError, match="tis"):
        build_loss("grpo")(_inputs([[0.0]], [[0.0]], [1.0]), LossConfig(correction="vtrace"))


def test_raft_is_the_likelihood_of_positive_advantage_rows_only():
    """Rows: a correct rollout (A > 0), a wrong one (A < 0), a zero-advantage one; weights per rollout mean."""
    inp = _inputs([[-0.5, -1.5], [-2.0, -0.1], [-0.3, -0.3]], [[0.0, 0.0]] * 3, [1.2, -0.8, 0.0])
    out = build_loss("raft")(inp, LossConfig(kl_coef=0.0))
    assert out.loss.item() == pytest.approx((0.5 + 1.5) / 2 / 3, rel=1e-6)  # token mean, then mean over 3 rollouts
    assert out.clipped.item() == 0 and out.is_weight.item() == out.tokens.item() == 6
    out.loss.backward()
    grad = inp.logp.grad
    assert torch.allclose(grad[0], torch.full((2,), -1 / 6))  # raises the likelihood of the correct rollout
    assert torch.count_nonzero(grad[1:]) == 0  # wrong and zero-advantage rollouts: no gradient at all


def test_raft_coef_mixes_the_raft_term_into_a_policy_gradient_step():
    args = ([[-0.5, -1.5], [-2.0, -0.1]], [[-0.5, -1.5], [-2.0, -0.1]], [1.0, -1.0])
    plain = build_loss("grpo")(_inputs(*args), LossConfig(**BEHAVIOUR))
    mixed = build_loss("grpo")(_inputs(*args), LossConfig(raft_coef=0.5, **BEHAVIOUR))
    raft = build_loss("raft")(_inputs(*args), LossConfig(raft_coef=0.5))  # alone: the coefficient is not applied
    assert raft.loss.item() == pytest.approx((0.5 + 1.5) / 2 / 2, rel=1e-6)
    assert mixed.loss.item() == pytest.approx(plain.loss.item() + 0.5 * raft.loss.item(), rel=1e-6)
    assert mixed.pg_loss.item() == pytest.approx(plain.pg_loss.item())
