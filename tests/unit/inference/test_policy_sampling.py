"""Pure sampling helpers: left padding, nucleus filter, behaviour logprobs under top-p."""

from __future__ import annotations

import math

import pytest
import torch

from streamgrpo.inference.sampling import (
    behaviour_logprobs,
    left_pad,
    nucleus_filter,
    row_generators,
    sample_step,
)


def test_left_pad_masks_padding_and_counts_positions_from_first_real_token() -> None:
    ids, mask, pos = left_pad([[5, 6, 7], [9]], pad_id=0)
    assert ids.tolist() == [[5, 6, 7], [0, 0, 9]]
    assert mask.tolist() == [[1, 1, 1], [0, 0, 1]]
    assert pos.tolist() == [[0, 1, 2], [0, 0, 0]]


def test_nucleus_filter_keeps_smallest_set_reaching_top_p() -> None:
    lp = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    kept = nucleus_filter(lp, 0.8).isfinite().tolist()[0]
    assert kept == [True, True, False, False]
    assert nucleus_filter(lp, 0.1).isfinite().tolist()[0] == [True, False, False, False]
    assert torch.equal(nucleus_filter(lp, 1.0), lp)


def test_recorded_logprob_is_the_full_temperature_scaled_distribution_even_with_top_p() -> None:
    logits = torch.tensor([[2.0, 1.0, 0.5, -1.0, -3.0]] * 64)
    gen = torch.Generator().manual_seed(0)
    tokens, lps = sample_step(logits, temperature=0.7, top_p=0.6, generator=gen)
    full = torch.log_softmax(logits[0] / 0.7, dim=-1)
    assert set(tokens.tolist()) <= {0, 1}  # only the nucleus is sampled
    for t, lp in zip(tokens.tolist(), lps.tolist(), strict=True):
        assert math.isclose(lp, full[t].item(), abs_tol=1e-6)  # not renormalised over the nucleus


def test_greedy_uses_untempered_logprobs() -> None:
    logits = torch.tensor([[0.1, 3.0, 0.2]])
    tokens, lps = sample_step(logits, temperature=0.0, top_p=1.0, generator=None)
    assert tokens.tolist() == [1]
    assert math.isclose(lps.item(), behaviour_logprobs(logits, 1.0)[0, 1].item(), abs_tol=1e-7)


def test_repeated_prompts_are_prefilled_once_and_every_row_matches_a_fresh_forward() -> None:
    from support.tiny_policy import build_tiny_model

    from streamgrpo.inference.sampling import sample_batch

    model = build_tiny_model(seed=5)
    widths: list[int] = []
    original = model.forward

    def counting_forward(*args, **kwargs):  # records the batch size of every forward call
        widths.append(int(kwargs["input_ids"].shape[0]))
        return original(*args, **kwargs)

    model.forward = counting_forward
    a, b = [10, 11, 12, 13, 14, 15, 16], [20, 21, 22]
    prompts = [a, b, a, a]
    out = sample_batch(model, prompts, temperature=1.0, top_p=1.0, max_new_tokens=10, eos_ids={-1}, pad_id=0,
                       seed=3)
    assert widths[0] == 2 and set(widths[1:]) == {4}  # the prefill ran the 2 distinct prompts only
    assert len({tuple(out[i].token_ids) for i in (0, 2, 3)}) > 1  # rows sharing a prompt still sample apart
    widths.clear()
    unshared = sample_batch(model, prompts, temperature=1.0, top_p=1.0, max_new_tokens=10, eos_ids={-1}, pad_id=0,
                            seed=3, share_prefill=False)
    assert widths[0] == 4  # every row prefilled, as before
    assert [r.token_ids for r in unshared] == [r.token_ids for r in out]  # same seed, same samples
    model.forward = original
    for prompt, row in zip(prompts, out, strict=True):
        ids = torch.tensor([prompt + row.token_ids])
        with torch.no_grad():
            logits = model(input_ids=ids).logits[0]
        fresh = torch.log_softmax(logits[len(prompt) - 1:-1], dim=-1).gather(-1, torch.tensor(row.token_ids)[:, None])
        assert torch.allclose(fresh.squeeze(-1), torch.tensor(row.logprobs), atol=1e-4)


def test_inverse_cdf_draw_follows_the_distribution_and_never_picks_a_zero_probability_token() -> None:
    from streamgrpo.inference.sampling import draw

    probs = torch.tensor([[0.5, 0.0, 0.3, 0.2, 0.0]] * 20000)
    gen = torch.Generator().manual_seed(0)
    tokens = draw(probs, gen)
    counts = torch.bincount(tokens, minlength=5).float() / len(tokens)
    assert counts[1] == 0 and counts[4] == 0
    assert torch.allclose(counts, probs[0], atol=0.01)
    again = draw(probs[:50], torch.Generator().manual_seed(0))
    assert torch.equal(again, tokens[:50])  # seeded: reproducible


def test_a_row_whose_mask_allows_nothing_is_an_error_not_a_silent_sample() -> None:
    import pytest

    logits = torch.zeros(2, 4)
    allowed = torch.tensor([[True, False, False, False], [False, False, False, False]])
    with pytest.raises(ValueError, match="allows no token"):
        sample_step(logits, 1.0, 1.0, None, allowed)


def test_per_row_seeds_give_each_row_the_generator_of_its_own_seed() -> None:
    """A row seeded s draws what a lone row seeded s draws, wherever it sits; a call-level seed differs per row."""
    def first(gens: list[torch.Generator] | None) -> list[float]:
        assert gens is not None
        return [torch.rand(1, generator=g, dtype=torch.float64).item() for g in gens]

    assert first(row_generators([7, 8], 2)) == [first(row_generators([7], 1))[0], first(row_generators([8], 1))[0]]
    assert first(row_generators([8, 7], 2)) == first(row_generators([7, 8], 2))[::-1]
    assert len(set(first(row_generators(7, 3)))) == 3 and row_generators(None, 3) is None
    with pytest.raises(ValueError, match="2 seeds for 3 rows"):
        row_generators([1, 2], 3)
