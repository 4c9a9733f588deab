"""The one bounded dedup set."""

from __future__ import annotations

import pytest

from streamgrpo.topics.dedup import RecentIds


def test_recent_ids_forget_the_oldest() -> None:
    ids = RecentIds(capacity=2)
    assert not ids.seen("a") and ids.seen("a")
    ids.seen("b")
    ids.seen("c")  # evicts "a"
    assert not ids.seen("a") and "c" in ids and len(ids) == 2


def test_capacity_must_be_positive() -> None:
    with pytest.raises(ValueError):
        RecentIds(0)
