"""A static, row-addressed KV cache for the fast local engine (pure torch; no model code).

Layout: per layer one key and one value tensor ``(rows_cap, kv_heads, len_cap, head_dim)``. Each
active row holds ONE contiguous token sequence starting at slot 0 (its prompt, then its sampled
tokens), so a row's position ids are its slot numbers and its attention mask is ``slot < length``:
no padding inside a row, no per-step concatenation, no reallocation per token. Active rows are
kept compact in ``[0, n)`` so a decode step works on plain views ``k[:n, :, :L]``.

- Rows join at any step (:meth:`RowCache.add_rows`): continuous batching across requests.
- Finished rows leave (:meth:`RowCache.remove_rows`): the last row is moved into the hole, one
  row's slots copied per removal.
- A shared prompt prefix is written once and copied to the rows that share it
  (:meth:`RowCache.copy_rows`); :class:`PrefixStore` keeps recently used prefixes across calls.

What is covered: bookkeeping and the copies. What is not: computing keys and values (``lean.py``).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import torch


class RowCache:
    """Keys/values of up to ``rows_cap`` rows x ``len_cap`` slots per layer; rows ``[0, n)`` are active."""

    def __init__(self, layers: int, kv_heads: int, head_dim: int, dtype: torch.dtype, device: torch.device,
                 rows: int = 8, length: int = 512) -> None:
        self.layers, self.kv_heads, self.head_dim = layers, kv_heads, head_dim
        self.dtype, self.device = dtype, device
        self.n = 0
        self.lengths: list[int] = []  # tokens held by each active row
        self.k: list[torch.Tensor] = []
        self.v: list[torch.Tensor] = []
        self._allocate(rows, length)

    @property
    def rows_cap(self) -> int:
        return int(self.k[0].shape[0])

    @property
    def len_cap(self) -> int:
        return int(self.k[0].shape[2])

    def _allocate(self, rows: int, length: int) -> None:
        shape = (rows, self.kv_heads, length, self.head_dim)
        old_k, old_v, used = self.k, self.v, max(self.lengths, default=0)
        self.k = [torch.zeros(shape, dtype=self.dtype, device=self.device) for _ in range(self.layers)]
        self.v = [torch.zeros(shape, dtype=self.dtype, device=self.device) for _ in range(self.layers)]
        for new, old in zip(self.k + self.v, old_k + old_v, strict=False):
            new[: self.n, :, :used].copy_(old[: self.n, :, :used])

    def reserve(self, rows: int, length: int) -> None:
        """Make room for ``rows`` active rows of up to ``length`` slots (grows by doubling, keeps content)."""
        if rows <= self.rows_cap and length <= self.len_cap:
            return
        new_rows = self.rows_cap
        while new_rows < rows:
            new_rows *= 2
        new_len = max(self.len_cap, -(-length // 64) * 64)
        self._allocate(new_rows, new_len)

    def add_rows(self, count: int, length: int) -> int:
        """Append ``count`` empty rows (room for ``length`` slots each); returns the first new row index."""
        self.reserve(self.n + count, length)
        first = self.n
        self.n += count
        self.lengths.extend([0] * count)
        return first

    def remove_rows(self, rows: Sequence[int]) -> list[tuple[int, int]]:
        """Drop ``rows``; the last active rows move into the holes. Returns the moves ``(from, to)``."""
        moves: list[tuple[int, int]] = []
        for row in sorted(set(rows), reverse=True):
            last = self.n - 1
            if row != last:
                self.copy_rows(last, [row], self.lengths[last])
                self.lengths[row] = self.lengths[last]
                moves.append((last, row))
            self.lengths.pop()
            self.n -= 1
        return moves

    def copy_rows(self, src: int, dst: Sequence[int], length: int) -> None:
        """Copy slots ``[0, length)`` of row ``src`` into each row of ``dst``."""
        if not dst or length <= 0:
            return
        if list(dst) == list(range(dst[0], dst[0] + len(dst))):
            target = slice(dst[0], dst[0] + len(dst))
            for t in self.k + self.v:
                t[target, :, :length] = t[src: src + 1, :, :length]
            return
        index = torch.tensor(list(dst), device=self.device)
        for t in self.k + self.v:
            t[index, :, :length] = t[src: src + 1, :, :length]

    def write_prefix(self, row: int, prefix: CachedPrefix, length: int) -> None:
        """Put the first ``length`` slots of a stored prefix into ``row``."""
        for t, p in zip(self.k, prefix.k, strict=True):
            t[row, :, :length] = p[:, :length]
        for t, p in zip(self.v, prefix.v, strict=True):
            t[row, :, :length] = p[:, :length]

    def read_prefix(self, row: int, tokens: Sequence[int]) -> CachedPrefix:
        """A copy of ``row``'s first ``len(tokens)`` slots, to keep in a :class:`PrefixStore`."""
        length = len(tokens)
        return CachedPrefix(tuple(tokens), [t[row, :, :length].clone() for t in self.k],
                            [t[row, :, :length].clone() for t in self.v])


@dataclass(frozen=True)
class CachedPrefix:
    """Keys/values of one token prefix: per layer ``(kv_heads, len(tokens), head_dim)``."""

    tokens: tuple[int, ...]
    k: list[torch.Tensor]
    v: list[torch.Tensor]


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix of two token sequences."""
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


class PrefixStore:
    """LRU of :class:`CachedPrefix` per model key (base or adapter version), bounded in total tokens.

    Keys and values depend on the weights that computed them, so a prefix is only reused under the
    same ``key`` (an adapter version's LoRA changes the keys/values of every layer it targets).
    """

    def __init__(self, max_tokens: int) -> None:
        self.max_tokens = max_tokens
        self._entries: OrderedDict[tuple[Hashable, tuple[int, ...]], CachedPrefix] = OrderedDict()
        self._tokens = 0
        self.hits = 0
        self.reused_tokens = 0

    def lookup(self, key: Hashable, tokens: Sequence[int]) -> tuple[CachedPrefix | None, int]:
        """The stored prefix sharing the most leading tokens with ``tokens`` and that count (0: none)."""
        best, best_len = None, 0
        for (k, _), entry in self._entries.items():
            if k != key:
                continue
            shared = common_prefix(entry.tokens, tokens)
            if shared > best_len:
                best, best_len = entry, shared
        if best is not None:
            self._entries.move_to_end((key, best.tokens))
            self.hits += 1
            self.reused_tokens += best_len
        return best, best_len

    def add(self, key: Hashable, prefix: CachedPrefix) -> None:
        if self.max_tokens <= 0 or len(prefix.tokens) > self.max_tokens:
            return
        slot = (key, prefix.tokens)
        if slot in self._entries:
            self._entries.move_to_end(slot)
            return
        self._entries[slot] = prefix
        self._tokens += len(prefix.tokens)
        while self._tokens > self.max_tokens:
            _, dropped = self._entries.popitem(last=False)
            self._tokens -= len(dropped.tokens)

    def drop(self, key: Hashable) -> None:
        """Forget every prefix computed under ``key`` (its adapter version was unloaded)."""
        for slot in [s for s in self._entries if s[0] == key]:
            self._tokens -= len(self._entries.pop(slot).tokens)
