"""Which adapter versions stay resident: pins, protection and the keep-last-K eviction rule.

The eviction decision is a pure function (:func:`evictable`); :class:`AdapterSlots` is the small
thread-safe bookkeeping every backend shares (resident set, pin counts, protected versions).
In-flight work pins the version it started with (:meth:`AdapterSlots.pin`), so a hot swap never
unloads a version under a running trajectory; the primary version (from the A/B controller) is
protected so a rollback target is never evicted.

What is covered: the decision and the counters. What is not: loading/unloading weights (the
backend does that with the list :meth:`AdapterSlots.to_evict` returns).
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Iterable, Sequence
from itertools import count

from streamgrpo.inference.errors import AdapterInUseError, AdapterNotResidentError


def evictable(load_order: Sequence[int], keep_last: int, protected: Iterable[int]) -> list[int]:
    """Versions to unload: all but the ``keep_last`` most recently LOADED, minus the ``protected`` ones.

    ``load_order`` lists resident versions oldest load first. Versions normally arrive in increasing
    order, so this keeps the newest versions; an old version loaded on demand counts as recent
    (it is about to be used), instead of being evicted by its own load.

    >>> evictable([1, 2, 3, 4, 5], keep_last=2, protected=[1, 3])
    [2]
    >>> evictable([4, 5, 2], keep_last=2, protected=[])
    [4]
    """
    keep = set(load_order[-keep_last:]) if keep_last > 0 else set()
    keep |= set(protected)
    return sorted(v for v in load_order if v not in keep)


class AdapterSlots:
    """Thread-safe resident/pinned/protected bookkeeping per adapter name. Version 0 (base) is implicit."""

    def __init__(self, keep_last: int) -> None:
        if keep_last < 1:
            raise ValueError(f"keep_last must be >= 1, got {keep_last}")
        self.keep_last = keep_last
        self._lock = threading.Lock()
        self._resident: dict[str, dict[int, int]] = defaultdict(dict)  # version -> load sequence number
        self._seq = count()
        self._pins: dict[tuple[str, int], int] = defaultdict(int)
        self._protected: dict[str, set[int]] = defaultdict(set)

    def add(self, name: str, version: int) -> None:
        with self._lock:
            self._resident[name][version] = next(self._seq)

    def remove(self, name: str, version: int) -> None:
        """Forget a resident version; raises :class:`AdapterInUseError` if it is pinned."""
        with self._lock:
            if self._pins.get((name, version), 0) > 0:
                raise AdapterInUseError(
                    f"{name}@v{version} is pinned by {self._pins[(name, version)]} in-flight call(s); "
                    "unpin it (let the trajectories finish) before unloading"
                )
            self._resident[name].pop(version, None)

    def is_resident(self, name: str, version: int) -> bool:
        with self._lock:
            return version == 0 or version in self._resident[name]

    def versions(self, name: str) -> list[int]:
        with self._lock:
            return sorted(self._resident[name])

    def pin(self, name: str, version: int) -> None:
        """Count one user of ``name@v{version}``; raises :class:`AdapterNotResidentError` if not resident."""
        if version == 0:
            return
        with self._lock:
            if version not in self._resident[name]:
                raise AdapterNotResidentError(
                    f"{name}@v{version} is not resident (resident: {sorted(self._resident[name])}); "
                    "wait for the adapter follower to load it, or serve a resident version"
                )
            self._pins[(name, version)] += 1

    def unpin(self, name: str, version: int) -> None:
        if version == 0:
            return
        with self._lock:
            count = self._pins.get((name, version), 0)
            if count <= 0:
                raise ValueError(f"{name}@v{version} is not pinned; unpin() without a matching pin()")
            if count == 1:
                del self._pins[(name, version)]
            else:
                self._pins[(name, version)] = count - 1

    def pin_count(self, name: str, version: int) -> int:
        with self._lock:
            return self._pins.get((name, version), 0)

    def protect(self, name: str, versions: Iterable[int]) -> None:
        """Replace the protected set of ``name`` (e.g. ``{primary}``): never evicted while protected."""
        with self._lock:
            self._protected[name] = {v for v in versions if v != 0}

    def to_evict(self, name: str) -> list[int]:
        """Resident versions beyond the newest ``keep_last`` that are neither pinned nor protected."""
        with self._lock:
            pinned = {v for (n, v), c in self._pins.items() if n == name and c > 0}
            order = sorted(self._resident[name], key=self._resident[name].__getitem__)
            return evictable(order, self.keep_last, pinned | self._protected[name])
