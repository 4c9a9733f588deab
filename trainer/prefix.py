"""Shared-prefix forward: a prompt prefix that several rows share is computed ONCE, with gradients.

The rows of one optimizer batch share long prompt prefixes: every planner prompt starts with the
same system prompt, the rows of one rollout group share the question, and a group's first-turn rows
share their whole prompt. :func:`plan` builds a prefix tree (radix tree) over the rows' tokens; each
tree node's span of tokens is run through the decoder once (batch 1), with the key/value cache of
its ancestors, and the rows below attend to that cache. Every row's own remaining tokens (the
"leaf" part, which always contains every position whose hidden state predicts an action token) are
run batched per node, with the node's cache expanded over the rows. Gradients flow into the shared
spans through the cached keys and values, so the loss and its gradient are the same function of the
weights as with each row computed alone (the equivalence test compares both, values and gradients).

Cost: the tokens computed are those of the tree (each shared span once) instead of the sum of the
rows; attention of the leaf tokens to the shared span is the only per-row cost of the prefix.

What is covered: causal LMs whose decoder takes ``past_key_values`` (transformers ``DynamicCache``)
and ``position_ids``, and uses full attention in every layer. What is not: sliding-window or hybrid
attention (:func:`supported` says no, and the caller takes the padded path), left padding.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

#: A subtree whose sharing saves fewer tokens than this is not worth a forward call of its own.
MIN_SAVED_TOKENS = 16
#: Leaves of one node are batched while padding stays under this fraction of the real tokens.
MAX_PADDING = 0.25


@dataclass(frozen=True)
class Node:
    """A span ``[start, end)`` of tokens shared by ``rows``; ``leaves`` finish from ``end`` at this node."""

    start: int
    end: int
    rows: tuple[int, ...]
    children: tuple[Node, ...]
    leaves: tuple[int, ...]

    def computed_tokens(self, lengths: Sequence[int]) -> int:
        """Tokens the decoder runs for this subtree (shared spans once, leaves their suffix)."""
        own = self.end - self.start
        return own + sum(c.computed_tokens(lengths) for c in self.children) + \
            sum(lengths[r] - self.end for r in self.leaves)


def _common_length(seqs: Sequence[Sequence[int]], rows: Sequence[int], depth: int, limit: int) -> int:
    """Largest ``end <= limit`` such that every row of ``rows`` has the same tokens in ``[depth, end)``."""
    first = seqs[rows[0]]
    end = depth
    while end < limit and all(seqs[r][end] == first[end] for r in rows[1:]):
        end += 1
    return end


def _build(seqs: Sequence[Sequence[int]], limits: Sequence[int], rows: tuple[int, ...], depth: int) -> Node:
    end = _common_length(seqs, rows, depth, min(limits[r] for r in rows)) if len(rows) > 1 else depth
    leaves = [r for r in rows if limits[r] <= end]
    clusters: dict[int, list[int]] = {}
    for r in rows:
        if limits[r] > end:
            clusters.setdefault(seqs[r][end], []).append(r)
    children = []
    for cluster in clusters.values():
        if len(cluster) < 2:
            leaves.extend(cluster)
            continue
        child = _build(seqs, limits, tuple(cluster), end)
        saved = (len(child.rows) - 1) * (child.end - child.start)
        if child.children or saved >= MIN_SAVED_TOKENS:
            children.append(child)
        else:
            leaves.extend(cluster)
    return Node(depth, end, rows, tuple(children), tuple(sorted(leaves)))


def plan(seqs: Sequence[Sequence[int]], limits: Sequence[int]) -> Node:
    """The prefix tree of ``seqs``; row ``i`` shares at most its first ``limits[i]`` tokens (positions
    from ``limits[i]`` on are computed in its leaf). The root's span is the prefix of all rows."""
    if not seqs:
        raise ValueError("no rows to plan")
    root = _build(seqs, limits, tuple(range(len(seqs))), 0)
    if (len(root.rows) - 1) * (root.end - root.start) < MIN_SAVED_TOKENS and not root.children:
        return Node(0, 0, root.rows, (), root.rows)
    return root


def common_length(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix of ``a`` and ``b``."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def shared_tokens_cost(seqs: Sequence[Sequence[int]]) -> int:
    """Tokens of the prefix tree of ``seqs`` (each distinct prefix once): ``len(s0) + sum(len(si) -
    lcp(s(i-1), si))`` over the rows in lexicographic order. A lower bound of the tokens :func:`plan`'s
    tree computes (it does not share spans too short to be worth a forward call)."""
    ordered = sorted(tuple(s) for s in seqs)
    return sum(len(s) - (common_length(ordered[i - 1], s) if i else 0) for i, s in enumerate(ordered))


def supported(decoder: Any) -> bool:
    """Whether :func:`forward` applies: full attention in every layer (no sliding window / hybrid)."""
    config = getattr(decoder, "config", None)
    if config is None:
        return False
    layer_types = getattr(config, "layer_types", None)
    full = layer_types is None or all(t == "full_attention" for t in layer_types)
    return bool(full and not getattr(config, "sliding_window", None))


def _cache(kv: Sequence[tuple[Tensor, Tensor]] | None, batch: int) -> Any:
    from transformers import DynamicCache

    if kv is None:
        return DynamicCache()
    return DynamicCache([(k.expand(batch, -1, -1, -1), v.expand(batch, -1, -1, -1)) for k, v in kv])


def _key_values(cache: Any) -> list[tuple[Tensor, Tensor]]:
    try:
        return [(layer.keys, layer.values) for layer in cache.layers]
    except AttributeError as exc:  # another cache layout: the caller must take the padded path
        raise TypeError(f"unsupported key/value cache {type(cache).__name__}: {exc}") from exc


def _leaf_batches(leaves: Sequence[int], lengths: Sequence[int], end: int) -> list[list[int]]:
    """Leaves sorted by length, cut where padding would exceed :data:`MAX_PADDING` of the real tokens."""
    order = sorted(leaves, key=lambda r: lengths[r])
    batches: list[list[int]] = []
    for r in order:
        if batches:
            group = batches[-1] + [r]
            real = sum(lengths[g] - end for g in group)
            if len(group) * (lengths[r] - end) <= (1 + MAX_PADDING) * real:
                batches[-1] = group
                continue
        batches.append([r])
    return batches


def forward(decoder: Any, input_ids: Tensor, lengths: Sequence[int], root: Node) -> dict[int, tuple[int, Tensor]]:
    """Run ``decoder`` over the tree -> ``{row: (first position, hidden states (L, H))}``: each row's last
    hidden states from its leaf's first position to its end. ``input_ids`` (B, T): right-padded rows."""
    out: dict[int, tuple[int, Tensor]] = {}
    _run(decoder, input_ids, lengths, root, None, out)
    return out


def _run(decoder: Any, ids: Tensor, lengths: Sequence[int], node: Node, kv: list[tuple[Tensor, Tensor]] | None,
         out: dict[int, tuple[int, Tensor]]) -> None:
    device = ids.device
    if node.end > node.start:
        span = ids[node.rows[0], node.start:node.end][None]  # (1, S)
        positions = torch.arange(node.start, node.end, device=device)[None]
        mask = torch.ones((1, node.end), dtype=torch.long, device=device)
        result = decoder(input_ids=span, attention_mask=mask, position_ids=positions,
                         past_key_values=_cache(kv, 1), use_cache=True)
        kv = _key_values(result.past_key_values)
    for child in node.children:
        _run(decoder, ids, lengths, child, kv, out)
    for batch in _leaf_batches(node.leaves, lengths, node.end):
        width = max(lengths[r] for r in batch) - node.end
        rows = torch.tensor(batch, device=device)
        suffix = ids[rows, node.end:node.end + width]  # (n, W), right padding included
        mask = torch.zeros((len(batch), node.end + width), dtype=torch.long, device=device)
        for i, r in enumerate(batch):
            mask[i, :lengths[r]] = 1
        positions = torch.arange(node.end, node.end + width, device=device)[None].expand(len(batch), -1)
        past = _cache(kv, len(batch)) if kv is not None else None
        hidden = decoder(input_ids=suffix, attention_mask=mask, position_ids=positions, past_key_values=past,
                         use_cache=past is not None).last_hidden_state
        for i, r in enumerate(batch):
            out[r] = (node.end, hidden[i, :lengths[r] - node.end])
