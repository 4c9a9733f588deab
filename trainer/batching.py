"""TrainingSample list -> padded tensors for the loss (pure: no model, no I/O).

One row per planner turn: ``prompt_token_ids + action_token_ids``; only the action tokens are
trained (``action_mask``), and their behaviour log-probs are placed at the same positions. Every
row carries its rollout's advantage and the index of its rollout, and aggregation weights are
computed over the WHOLE optimizer batch (per rollout first, then over rollouts: see
``losses.normalisation``), so the micro-batches returned by :func:`micro_batches` are additive
shares of one loss and gradient accumulation is exact.

Each row is recomputed with its own sample's temperature (``TrainingSample.sampling``; samples
written before it existed use the configured temperature), and, when it was sampled under a grammar
(``sampling.constraint``, see :mod:`streamgrpo.models.grammar`), with the same allowed-token masks:
``replay(constraint, action_ids, turn)`` gives the bitmask before each action token (``Batch.grammar_bits``)
and the recomputation sets the other tokens' logits to ``-inf`` before the log-softmax, as the
sampler did, so the importance ratio compares the same (masked, renormalised) distributions.

Admission (:func:`admit`): samples of another adapter, too stale (the rule of
:mod:`streamgrpo.lifecycle.pacing`: more than ``max_staleness`` versions behind), malformed (logprob/token count mismatch, empty), too long, or sampled in a way the
trainer cannot recompute (``sampling_mismatch``: greedy decoding, whose recorded logprobs are not
those of the choice made, or a grammar ``constraint`` this code does not know or builds differently) are
dropped and counted by reason; within the staleness bound the off-policy correction of the loss
(``losses.correction``) handles them. ``top_p`` is accepted: the recorded logprobs are those of the
full tempered distribution (the contract of ``SamplingParams``), exactly what is recomputed.

Micro-batches (:func:`micro_batches`) with ``share_prefix``: rows in lexicographic token order, so
rows that share a prompt prefix land in the same micro-batch, and the budget counts the tokens of
their prefix tree (what :mod:`~streamgrpo.trainer.prefix` computes), not padded tokens.

Demonstrations (``TrainingSample.demo_source`` set): their rows carry ``demo`` and advantage 0, so the
policy-gradient term ignores them and the likelihood term of :mod:`~streamgrpo.trainer.losses.base` trains them;
they are never dropped as stale (no ratio is taken against their behaviour logprobs, which are 0.0: given tokens).

Not covered: truncating actions (too-long actions drop the sample; only prompts are left-truncated).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from streamgrpo.avro.records import SamplingParams, TrainingSample
from streamgrpo.lifecycle import pacing
from streamgrpo.models.grammar import ActionGrammar
from streamgrpo.trainer.losses.normalisation import build_normalisation, row_weights
from streamgrpo.trainer.prefix import common_length


@dataclass(frozen=True)
class Row:
    """One planner turn, ready to pad."""

    input_ids: tuple[int, ...]
    prompt_len: int
    behaviour_logp: tuple[float, ...]  # one per action token
    advantage: float
    rollout: int  # index of the sample in the optimizer batch
    behaviour_version: int
    temperature: float = 1.0  # the sampling temperature the behaviour logprobs were recorded at
    constraint: str | None = None  # the grammar the action was sampled under (SamplingParams.constraint)
    turn: int | None = None  # the planner turn (1-based): a grammar may force an answer from some turn on
    demo: bool = False  # given by a demonstration: trained by likelihood, no policy-gradient term (advantage 0)

#: ``replay(constraint, action_ids, turn) -> (A, W)`` int32 allowed-token bitmask before each action token
Replay = Callable[[str, Sequence[int], "int | None"], Tensor]


@dataclass(frozen=True)
class Batch:
    """Padded tensors of some rows (a micro-batch, or the whole optimizer batch).

    input_ids:         (B, T) long, right-padded with ``pad_id``
    attention_mask:    (B, T) long
    action_mask:       (B, T) bool, True at trained action tokens
    behaviour_logp:    (B, T) float, behaviour log-prob at action positions, 0 elsewhere
    advantages:        (B,)   float
    rollout_index:     (B,)   long, row -> sample index in the optimizer batch
    token_weights:     (B, T) float, aggregation weights (sum to 1 over the optimizer batch)
    row_weights:       (B,)   float, aggregation weights of rows (sum to 1 over the optimizer batch)
    behaviour_version: (B,)   long
    temperature:       (B,)   float, each row's sampling temperature (recompute with it)
    grammar_bits:      (B, A, W) int32, allowed-token bitmask before each of a row's A action tokens
                       (all ones for unconstrained rows); (B, 0, 0) when no row is constrained
    demo:              (B,)   bool, the row's turn was given by a demonstration (likelihood term only)
    """

    input_ids: Tensor
    attention_mask: Tensor
    action_mask: Tensor
    behaviour_logp: Tensor
    advantages: Tensor
    rollout_index: Tensor
    token_weights: Tensor
    row_weights: Tensor
    behaviour_version: Tensor
    temperature: Tensor
    grammar_bits: Tensor
    demo: Tensor

    @property
    def padded_tokens(self) -> int:
        return int(self.input_ids.numel())


def sampling_mismatch(sampling: SamplingParams | None) -> str | None:
    """Why behaviour logprobs recorded with ``sampling`` cannot be recomputed (``None`` if they can)."""
    if sampling is None:
        return None  # written before samples carried it: the configured temperature applies
    if not (math.isfinite(sampling.temperature) and sampling.temperature > 0):
        return f"greedy or invalid temperature {sampling.temperature}: its logprobs are not those of the choice made"
    if sampling.constraint is not None:
        try:
            ActionGrammar.from_descriptor(sampling.constraint)
        except ValueError as exc:
            return f"sampled under grammar constraint {sampling.constraint!r}, which the trainer cannot replay: {exc}"
    return None


def drop_reason(
    sample: TrainingSample, *, adapter_name: str, current_version: int | None, max_staleness: int, max_seq_len: int
) -> str | None:
    """Why ``sample`` cannot be trained now (``None`` if it can): ``other_adapter``, ``stale`` (the pacing rule by
    version numbers; ``current_version`` None: staleness was checked along the lineage already),
    ``sampling_mismatch``, ``empty``, ``malformed`` or ``too_long``."""
    if sample.adapter_name != adapter_name:
        return "other_adapter"
    if current_version is not None and sample.demo_source is None and (
            reason := pacing.drop_reason(sample.behaviour_version, current_version, max_staleness)):
        return reason  # a demonstration is never stale: its turns were given, no policy's ratio is taken
    if sampling_mismatch(sample.sampling) is not None:
        return "sampling_mismatch"
    if not sample.turns or not any(t.action_token_ids for t in sample.turns):
        return "empty"
    for turn in sample.turns:
        if len(turn.action_token_ids) != len(turn.behaviour_logprobs) or not turn.prompt_token_ids:
            return "malformed"
        if len(turn.action_token_ids) >= max_seq_len:
            return "too_long"
    return None


def admit(
    samples: Sequence[TrainingSample], *, adapter_name: str, current_version: int, max_staleness: int,
    max_seq_len: int,
) -> tuple[list[TrainingSample], Counter[str]]:
    """Split ``samples`` into those to train and a count of the dropped ones by reason."""
    kept: list[TrainingSample] = []
    dropped: Counter[str] = Counter()
    for s in samples:
        reason = drop_reason(s, adapter_name=adapter_name, current_version=current_version,
                             max_staleness=max_staleness, max_seq_len=max_seq_len)
        if reason is None:
            kept.append(s)
        else:
            dropped[reason] += 1
    return kept, dropped


def to_rows(samples: Sequence[TrainingSample], max_seq_len: int, temperature: float = 1.0) -> list[Row]:
    """One :class:`Row` per turn with an action; prompts longer than fits are left-truncated. Each row
    gets its sample's sampling temperature, or ``temperature`` for a sample that records none."""
    rows: list[Row] = []
    for index, s in enumerate(samples):
        temp = float(s.sampling.temperature) if s.sampling is not None else temperature
        constraint = s.sampling.constraint if s.sampling is not None else None
        demo = s.demo_source is not None
        for turn in s.turns:
            if not turn.action_token_ids:
                continue
            keep = max(1, max_seq_len - len(turn.action_token_ids))
            prompt = tuple(turn.prompt_token_ids[-keep:])
            rows.append(Row(prompt + tuple(turn.action_token_ids), len(prompt), tuple(turn.behaviour_logprobs),
                            0.0 if demo else float(s.advantage), index, int(s.behaviour_version), temp, constraint,
                            int(turn.turn), demo))
    return rows


def grammar_bits(rows: Sequence[Row], replay: Replay | None) -> Tensor:
    """``(B, A, W)`` int32 allowed-token bitmasks of the rows' action tokens (see :class:`Batch`)."""
    constrained = {i: r for i, r in enumerate(rows) if r.constraint is not None}
    if not constrained:
        return torch.zeros((len(rows), 0, 0), dtype=torch.int32)
    if replay is None:
        raise ValueError("rows sampled under a grammar constraint need a replay function to recompute them")
    masks = {i: replay(str(r.constraint), r.input_ids[r.prompt_len:], r.turn) for i, r in constrained.items()}
    width = max(len(r.input_ids) - r.prompt_len for r in rows)
    words = next(iter(masks.values())).shape[-1]
    out = torch.full((len(rows), width, words), -1, dtype=torch.int32)
    for i, bits in masks.items():
        out[i, :bits.shape[0]] = bits
    return out


def collate(rows: Sequence[Row], pad_id: int = 0, replay: Replay | None = None) -> Batch:
    """Pad ``rows`` into a :class:`Batch` with ZERO weights (see :func:`with_weights`); ``replay``
    recomputes the grammar masks of constrained rows."""
    width = max(len(r.input_ids) for r in rows)
    b = len(rows)
    input_ids = torch.full((b, width), pad_id, dtype=torch.long)
    attention = torch.zeros((b, width), dtype=torch.long)
    action = torch.zeros((b, width), dtype=torch.bool)
    blogp = torch.zeros((b, width), dtype=torch.float32)
    for i, r in enumerate(rows):
        n = len(r.input_ids)
        input_ids[i, :n] = torch.tensor(r.input_ids, dtype=torch.long)
        attention[i, :n] = 1
        action[i, r.prompt_len:n] = True
        blogp[i, r.prompt_len:n] = torch.tensor(r.behaviour_logp, dtype=torch.float32)
    return Batch(
        input_ids=input_ids, attention_mask=attention, action_mask=action, behaviour_logp=blogp,
        advantages=torch.tensor([r.advantage for r in rows], dtype=torch.float32),
        rollout_index=torch.tensor([r.rollout for r in rows], dtype=torch.long),
        token_weights=torch.zeros((b, width), dtype=torch.float32),
        row_weights=torch.zeros(b, dtype=torch.float32),
        behaviour_version=torch.tensor([r.behaviour_version for r in rows], dtype=torch.long),
        temperature=torch.tensor([r.temperature for r in rows], dtype=torch.float32),
        grammar_bits=grammar_bits(rows, replay),
        demo=torch.tensor([r.demo for r in rows], dtype=torch.bool),
    )


def with_weights(batch: Batch, n_rollouts: int, normalisation: str, max_tokens: int) -> Batch:
    """``batch`` (the WHOLE optimizer batch) with its aggregation weights filled in."""
    tw = build_normalisation(normalisation)(batch.action_mask, batch.rollout_index, n_rollouts, max_tokens)
    rw = row_weights(batch.rollout_index, n_rollouts)
    return Batch(**{**batch.__dict__, "token_weights": tw, "row_weights": rw})


def take(batch: Batch, index: Sequence[int]) -> Batch:
    """Rows ``index`` of ``batch``, trimmed to their longest row."""
    idx = torch.tensor(list(index), dtype=torch.long)
    width = int(batch.attention_mask[idx].sum(dim=1).max())
    out = {}
    for name, value in batch.__dict__.items():
        value = value[idx]
        out[name] = value[:, :width] if value.dim() == 2 else value
    return Batch(**out)


def plan_micro_batches(lengths: Sequence[int], token_budget: int,
                       seqs: Sequence[Sequence[int]] | None = None) -> list[list[int]]:
    """Group row indices into micro-batches of at most ``token_budget`` tokens; a row longer than the
    budget gets a group of its own.

    Without ``seqs``: rows sorted by length, a group costs rows x longest row (padded tokens). With the
    rows' tokens ``seqs``: rows in lexicographic order (shared prefixes adjacent), a group costs the
    tokens of its prefix tree (:func:`~streamgrpo.trainer.prefix.shared_tokens_cost`)."""
    if seqs is None:
        order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    else:
        order = sorted(range(len(lengths)), key=lambda i: tuple(seqs[i]))
    groups: list[list[int]] = []
    current: list[int] = []
    tree = 0  # tokens of the current group's prefix tree (rows in lexicographic order)
    for i in order:
        if seqs is None:
            cost = (len(current) + 1) * lengths[i]
        else:
            cost = tree + lengths[i] - (common_length(seqs[current[-1]], seqs[i]) if current else 0)
        if current and cost > token_budget:
            groups.append(current)
            current, cost = [], lengths[i]
        current.append(i)
        tree = cost
    if current:
        groups.append(current)
    return groups


def build_batch(
    samples: Sequence[TrainingSample], *, max_seq_len: int, normalisation: str, max_tokens: int, pad_id: int = 0,
    temperature: float = 1.0, replay: Replay | None = None,
) -> Batch:
    """Admitted samples of ONE optimizer step -> the weighted, padded :class:`Batch` (``temperature``:
    for samples that record no sampling parameters; ``replay``: for samples sampled under a grammar)."""
    rows = to_rows(samples, max_seq_len, temperature)
    if not rows:
        raise ValueError("no trainable rows: admit() the samples first")
    return with_weights(collate(rows, pad_id, replay), len(samples), normalisation, max_tokens)


def micro_batches(batch: Batch, token_budget: int, share_prefix: bool = True) -> list[Batch]:
    """Split the optimizer ``batch`` into micro-batches of at most ``token_budget`` tokens: padded tokens,
    or with ``share_prefix`` the tokens of each micro-batch's prefix tree (see :func:`plan_micro_batches`)."""
    lengths = [int(n) for n in batch.attention_mask.sum(dim=1).tolist()]
    seqs = [batch.input_ids[i, :n].tolist() for i, n in enumerate(lengths)] if share_prefix else None
    return [take(batch, group) for group in plan_micro_batches(lengths, token_budget, seqs)]
