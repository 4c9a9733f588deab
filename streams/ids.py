"""Deterministic ids of the events the stream processors derive (pure).

Every id is :func:`R.derived_id` of its inputs, so a redelivered input yields the same id and a
consumer drops the duplicate. The window relies on :func:`rollout_id` to list the missing
rollouts of a timed-out group: rollout ``i`` of group ``g`` is always ``rollout_id(g, i)``.
"""

from __future__ import annotations

from streamgrpo.avro import records as R


def group_id(task_id: str, attempt: int = 0) -> str:
    return R.derived_id("group", task_id, attempt)


def rollout_id(group: str, index: int) -> str:
    return R.derived_id("rollout", group, index)


def request_event_id(rollout: str) -> str:
    return R.derived_id("rollout-request", rollout)


def group_closed_id(group: str) -> str:
    return R.derived_id("group-closed", group)


def sample_id(rollout: str) -> str:
    return R.derived_id("sample", rollout)


def dead_letter_id(topic: str, partition: int, offset: int) -> str:
    return R.derived_id("dead-letter", topic, partition, offset)
