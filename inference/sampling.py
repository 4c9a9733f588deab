"""Batched autoregressive sampling with exact behaviour logprobs (pure torch; no peft, no I/O).

The recorded logprob of each sampled token is ``log_softmax(logits / temperature)[token]`` over the
FULL vocabulary, computed in float32. ``top_p`` (nucleus) only truncates the distribution that is
*sampled from*; the recorded logprob stays that of the temperature-scaled full distribution, which
is exactly what the trainer recomputes from (prompt + action) tokens. ``temperature <= 0`` means
greedy decoding; the recorded logprob is then that of the untempered distribution (temperature 1).

Prompts of different lengths are LEFT padded; the attention mask hides the padding and the position
ids count real tokens only (``cumsum(mask) - 1``), so a padded row produces the same logits as the
same prompt alone (up to float rounding, ~1e-5 in float32).

A per-row logits mask (the hook for grammar-constrained decoding): ``logits_mask(row, sampled)``
returns the ``(V,)`` bool tensor of tokens ``row`` may sample next given the tokens it sampled so
far (or None: no constraint). Masked tokens get ``-inf`` logits BEFORE the log-softmax, so the
recorded logprob is that of the masked, renormalised distribution -- the one actually sampled
from -- and a trainer must replay the same mask to recompute it.

This module's :func:`sample_batch` is the transformers-forward ("eager") loop, kept as the
baseline and as the path for models the fast engine (:mod:`.engine`) cannot run; both share
:func:`sample_step`, so both record logprobs the same way.

What is covered: EOS / max_new_tokens stopping, a per-row ``stop(row, token)`` callback (used to end a
planner reply where its JSON object closes, see :mod:`.stopping`), the logits-mask hook, seeded
sampling through a ``torch.Generator``. What is not: repetition penalties, beam search,
speculative decoding, the grammar itself.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

#: ``logits_mask(row, sampled_so_far) -> (V,) bool tensor of allowed next tokens, or None (all allowed)``
LogitsMask = Callable[[int, Sequence[int]], torch.Tensor | None]


@dataclass(frozen=True)
class Sampled:
    """Per-row output of :func:`sample_batch`: sampled ids (EOS included if sampled) and their logprobs."""

    token_ids: list[int]
    logprobs: list[float]


def left_pad(prompts: Sequence[Sequence[int]], pad_id: int, device: torch.device | str = "cpu") -> tuple[
    torch.Tensor, torch.Tensor, torch.Tensor
]:
    """Left-pad ``prompts`` -> ``(input_ids, attention_mask, position_ids)``, each ``(B, T)`` int64."""
    if not prompts or any(len(p) == 0 for p in prompts):
        raise ValueError("every prompt needs at least one token")
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for row, prompt in enumerate(prompts):
        ids[row, width - len(prompt):] = torch.tensor(list(prompt), dtype=torch.long)
        mask[row, width - len(prompt):] = 1
    positions = (mask.cumsum(dim=1) - 1).clamp(min=0)
    return ids.to(device), mask.to(device), positions.to(device)


def behaviour_logprobs(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """``(B, V)`` logits -> ``(B, V)`` float32 log-probabilities of the temperature-scaled distribution."""
    scale = temperature if temperature > 0 else 1.0
    return torch.log_softmax(logits.float() / scale, dim=-1)


def nucleus_filter(logprobs: torch.Tensor, top_p: float) -> torch.Tensor:
    """Set to ``-inf`` every token outside the smallest set whose probability mass reaches ``top_p``.

    ``(B, V)`` -> ``(B, V)``; the most likely token is always kept. ``top_p >= 1`` returns the input.
    """
    if top_p >= 1.0:
        return logprobs
    sorted_lp, order = torch.sort(logprobs, dim=-1, descending=True)
    mass_before = sorted_lp.exp().cumsum(dim=-1) - sorted_lp.exp()
    drop_sorted = mass_before >= top_p
    drop_sorted[:, 0] = False
    drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
    return logprobs.masked_fill(drop, float("-inf"))


#: One generator per row (a row's draws then never depend on the other rows), or one for all, or None.
Generators = Sequence[torch.Generator] | torch.Generator | None


#: A call's seed: one for the call (row ``i`` derives its own from it), one per row, or None (unseeded).
Seed = int | Sequence[int] | None


def row_generators(seed: Seed, rows: int) -> list[torch.Generator] | None:
    """Row ``i`` of a seeded call draws from its own CPU generator (None: torch's global RNG).

    ``seed`` an int: row ``i``'s generator is seeded from ``(seed, i)``; a sequence: row ``i``'s is seeded
    with ``seed[i]`` (one per row, e.g. the rollout worker's per-trajectory seeds, :mod:`streamgrpo.rollout.seeding`).
    A row's samples then depend only on its own distributions: not on which other rows share the
    step, stop earlier, or are batched with another call -- and both engines draw the same way.
    """
    if seed is None:
        return None
    if not isinstance(seed, int):
        if len(seed) != rows:
            raise ValueError(f"{len(seed)} seeds for {rows} rows")
        return [torch.Generator().manual_seed(int(s) % (1 << 63)) for s in seed]
    return [torch.Generator().manual_seed((seed * 0x9E3779B97F4A7C15 + row) % (1 << 63)) for row in range(rows)]


def sample_step(
    logits: torch.Tensor, temperature: float, top_p: float, generator: Generators,
    allowed: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One decoding step: ``(B, V)`` logits -> sampled ids ``(B,)`` and their behaviour logprobs ``(B,)``.

    ``allowed``: ``(B, V)`` bool; disallowed tokens are removed before the softmax (see module docstring).
    """
    if allowed is not None:
        if not bool(allowed.any(dim=-1).all()):
            raise ValueError("the logits mask allows no token for some row")
        logits = logits.masked_fill(~allowed.to(logits.device), float("-inf"))
    logprobs = behaviour_logprobs(logits, temperature)
    if temperature <= 0:
        tokens = logprobs.argmax(dim=-1)
    else:
        tokens = draw(nucleus_filter(logprobs, top_p).exp(), generator)
    return tokens, logprobs.gather(-1, tokens[:, None]).squeeze(-1)


def draw(probs: torch.Tensor, generator: Generators) -> torch.Tensor:
    """One token per row of ``(B, V)`` probabilities by inverting the float64 CDF: ``(B,)`` ids.

    One uniform per row from the (CPU) generator(s), so seeded runs are identical across devices;
    ``torch.multinomial`` draws one exponential per vocabulary entry (~49k per row), which was 5-10%
    of a decode step. A zero-probability token is never returned (the CDF does not rise there).
    """
    cdf = probs.double().cumsum(dim=-1)
    total = cdf[:, -1:]
    if isinstance(generator, Sequence):
        if len(generator) != probs.shape[0]:
            raise ValueError(f"{len(generator)} generators for {probs.shape[0]} rows")
        u = torch.cat([torch.rand(1, generator=g, dtype=torch.float64) for g in generator])[:, None]
    else:
        u = torch.rand(probs.shape[0], 1, generator=generator, dtype=torch.float64)
    u = u.to(cdf.device) * total
    u = torch.minimum(u, torch.nextafter(total, torch.zeros_like(total)))  # strictly below the total mass
    return torch.searchsorted(cdf, u, right=True).squeeze(-1)


@torch.no_grad()
def sample_batch(
    model: torch.nn.Module,
    prompts: Sequence[Sequence[int]],
    *,
    temperature: float,
    top_p: float,
    max_new_tokens: int,
    eos_ids: set[int],
    pad_id: int,
    seed: Seed = None,
    device: torch.device | str = "cpu",
    stop: Callable[[int, int], bool] | None = None,
    share_prefill: bool = True,
    logits_mask: LogitsMask | None = None,
) -> list[Sampled]:
    """Sample up to ``max_new_tokens`` per prompt with a manual KV-cached decode loop.

    ``model`` is any causal LM taking ``input_ids (B, t)``, ``attention_mask (B, T_past + t)``,
    ``position_ids (B, t)`` and ``past_key_values``; rows stop at their first EOS, or after the token
    for which ``stop(row, token)`` returns True (that token is kept). ``share_prefill``: prefill each
    distinct prompt once (see :func:`prefill`). ``seed``: see :func:`row_generators`.
    """
    generator = row_generators(seed, len(prompts))
    batch = len(prompts)
    out_ids: list[list[int]] = [[] for _ in range(batch)]
    out_lp: list[list[float]] = [[] for _ in range(batch)]
    done = torch.zeros(batch, dtype=torch.bool)
    # Only the last position's logits are needed: on the prefill this avoids a (B, T, V) tensor
    # (49k vocabulary x 500-token prompts) where models support it (transformers' logits_to_keep).
    extra = {"logits_to_keep": 1} if _accepts_logits_to_keep(model) else {}
    logits, past, mask, step_pos = prefill(model, prompts, pad_id, device, extra, share=share_prefill)
    step_ids: torch.Tensor | None = None
    for step in range(max_new_tokens):
        if step > 0:
            result = model(input_ids=step_ids, attention_mask=mask, position_ids=step_pos,
                           past_key_values=past, use_cache=True, **extra)
            past, logits = result.past_key_values, result.logits[:, -1, :]
        allowed = row_masks(logits_mask, out_ids, done.tolist(), logits) if logits_mask is not None else None
        tokens, lps = sample_step(logits, temperature, top_p, generator, allowed)
        tokens_cpu, lps_cpu = tokens.cpu().tolist(), lps.cpu().tolist()
        for row in range(batch):
            if done[row]:
                continue
            out_ids[row].append(tokens_cpu[row])
            out_lp[row].append(lps_cpu[row])
            if tokens_cpu[row] in eos_ids or (stop is not None and stop(row, tokens_cpu[row])):
                done[row] = True
        if bool(done.all()):
            break
        step_ids = tokens.masked_fill(done.to(tokens.device), pad_id)[:, None]
        step_pos = step_pos[:, -1:] + 1
        mask = torch.cat([mask, torch.ones((batch, 1), dtype=mask.dtype, device=mask.device)], dim=1)
    return [Sampled(token_ids=i, logprobs=lp) for i, lp in zip(out_ids, out_lp, strict=True)]


def row_masks(logits_mask: LogitsMask, sampled: Sequence[Sequence[int]], done: Sequence[bool],
              logits: torch.Tensor) -> torch.Tensor | None:
    """``(B, V)`` allowed-token mask from the per-row hook (finished rows: everything), or None if no row is masked."""
    masks = [None if finished else logits_mask(row, sampled[row]) for row, finished in enumerate(done)]
    if all(m is None for m in masks):
        return None
    full = torch.ones(logits.shape[-1], dtype=torch.bool, device=logits.device)
    for m in masks:
        if m is not None and tuple(m.shape) != tuple(full.shape):
            raise ValueError(f"a logits mask must have shape {tuple(full.shape)} (the model's vocabulary), "
                             f"got {tuple(m.shape)}")
    return torch.stack([full if m is None else m.to(device=logits.device, dtype=torch.bool) for m in masks])


def prefill(model: torch.nn.Module, prompts: Sequence[Sequence[int]], pad_id: int, device: torch.device | str,
            extra: dict[str, Any], *, share: bool = True) -> tuple[torch.Tensor, Any, torch.Tensor, torch.Tensor]:
    """Run each DISTINCT prompt once, then give every row its prompt's cache (``share=False``: every row).

    A group's N trajectories share their first-turn prompt: prefilling it once instead of N times
    removes most of a first turn's cost (the prompt is ~500 tokens, the reply ~25). Returns the last
    position's logits ``(B, V)``, the KV cache, the attention mask and the position ids of all
    ``B = len(prompts)`` rows. The rows of one prompt get copies of the same cache, so each row then
    samples exactly as if it had been prefilled alone.
    """
    if share:
        slot: dict[tuple[int, ...], int] = {}
        row_slot = [slot.setdefault(tuple(p), len(slot)) for p in prompts]
        distinct = [list(p) for p in slot]
    else:
        row_slot, distinct = list(range(len(prompts))), [list(p) for p in prompts]
    ids, mask, positions = left_pad(distinct, pad_id, device)
    result = model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True, **extra)
    logits, past = result.logits[:, -1, :], result.past_key_values
    if len(distinct) == len(prompts):
        return logits, past, mask, positions
    index = torch.tensor(row_slot, dtype=torch.long, device=logits.device)
    if hasattr(past, "reorder_cache"):  # transformers Cache objects: index_select along the batch
        past.reorder_cache(index)
    else:  # legacy tuple-of-(key, value) caches
        past = tuple(tuple(t.index_select(0, index) for t in layer) for layer in past)
    return logits.index_select(0, index), past, mask.index_select(0, index.to(mask.device)), \
        positions.index_select(0, index.to(positions.device))


def _accepts_logits_to_keep(model: Any) -> bool:
    import inspect

    target = getattr(model, "get_base_model", lambda: model)()
    try:
        return "logits_to_keep" in inspect.signature(target.forward).parameters
    except (TypeError, ValueError):
        return False
