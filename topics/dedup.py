"""The one bounded de-duplication set of the project: the ids seen most recently.

Delivery is at-least-once everywhere, so every consumer drops a redelivered record by its id (an
event id, a rollout id, a dead letter id). :class:`RecentIds` remembers the last ``capacity`` ids
(least recently *added* evicted first) in O(1) per check.

What is not covered: ids older than ``capacity`` additions are forgotten, so a duplicate that arrives
that late passes; size ``capacity`` to the window in which redeliveries happen (a rebalance, a
restart), not to the whole history.
"""

from __future__ import annotations

from collections import OrderedDict


class RecentIds:
    """A bounded set of recently seen ids."""

    def __init__(self, capacity: int = 100_000) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        self._ids: OrderedDict[str, None] = OrderedDict()

    def seen(self, key: str) -> bool:
        """True if ``key`` was seen before; remembers it otherwise."""
        if key in self._ids:
            return True
        self.add(key)
        return False

    def add(self, key: str) -> None:
        self._ids[key] = None
        if len(self._ids) > self.capacity:
            self._ids.popitem(last=False)

    def __contains__(self, key: object) -> bool:
        return key in self._ids

    def __len__(self) -> int:
        return len(self._ids)
