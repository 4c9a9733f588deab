"""Deterministic ids: the one module that makes the id of a derived event, group or rollout (pure).

Every id is a UUID v5 of a *kind* and the inputs it derives from (:func:`derived_id`), so a
redelivered input yields the same id and a consumer drops the duplicate by id. One function per id
kind; the kind strings are part of the contract (changing one changes every id of that kind, so
replayed and live events would no longer deduplicate against each other).

- groups and rollouts: :func:`group_id` (a task and its retry ``attempt``, read by :func:`attempt_of`), :func:`rollout_id`
  (rollout ``i`` of group ``g`` is always ``rollout_id(g, i)``; the window lists missing rollouts
  with it);
- events derived by the stream processors: :func:`request_event_id`, :func:`group_closed_id`,
  :func:`sample_id`, :func:`promotion_id`, :func:`rollback_id`, :func:`verdict_id` (the A/B
  controller's decisions: one per version and test);
- events of one rollout: :func:`rollout_event_id` (planner actions, tool observations and verdicts
  per turn; the completion once);
- the judge's :func:`reward_id`, the trainer's :func:`adapter_published_id`;
- :func:`human_reward_id`: a person's label of a rollout (the same label given twice is one event; a
  changed score is a new one);
- ``replay train --judge``: :func:`rejudged_reward_id`, :func:`rejudged_sample_id` (replayed and restored
  events keep their original ids; only re-scored ones get new ids);
- :func:`derived_seed`: not an id but the same idea for sampling seeds -- a stable 63-bit integer of a key
  (the rollout worker's per-draw seeds, the vLLM backend's per-request seed);
- :func:`dead_letter_id`: the record's place (catalog topic, partition, offset) only, so the same bad
  record gets the same dead letter whichever consumer finds it.

What is not covered: ids of events that are facts rather than derivations (a submitted Task, a
RewardMetrics window) are random UUIDs from :meth:`~streamgrpo.avro.records.Envelope.new`.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Mapping

_NAMESPACE = uuid.UUID("6f1c1d2e-6a7b-4a53-9a58-3d8e5e0c7f10")

#: Kinds of :func:`rollout_event_id` (one per event type a rollout emits).
ROLLOUT_EVENT_KINDS = frozenset({"planner_action", "tool_observation", "verdict", "rollout_completed"})


def derived_id(kind: str, *parts: object) -> str:
    """Deterministic UUID (v5) of ``kind`` and its inputs (the primitive behind every function here)."""
    return str(uuid.uuid5(_NAMESPACE, kind + "|" + "|".join(str(p) for p in parts)))


#: Derived seeds are non-negative 63-bit integers (a torch generator's seed, an int64 for vLLM's ``seed``).
SEED_BITS = 63


def derived_seed(key: str) -> int:
    """A stable non-negative 63-bit integer of ``key``: blake2b (8 bytes), never Python's salted ``hash()``, so
    the same key gives the same seed in every process and run. Callers choose the key's format."""
    digest = hashlib.blake2b(key.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big") & ((1 << SEED_BITS) - 1)


def attempt_of(metadata: Mapping[str, str]) -> int:
    """A task's retry ``attempt`` from its (or its requests') ``metadata["attempt"]``, the curriculum's group count
    that :func:`group_id` takes; 0 when absent or not a number."""
    try:
        return int(metadata.get("attempt", "0"))
    except ValueError:
        return 0


def group_id(task_id: str, attempt: int = 0) -> str:
    return derived_id("group", task_id, attempt)


def rollout_id(group: str, index: int) -> str:
    return derived_id("rollout", group, index)


def request_event_id(rollout: str) -> str:
    return derived_id("rollout-request", rollout)


def group_closed_id(group: str) -> str:
    return derived_id("group-closed", group)


def sample_id(rollout: str) -> str:
    return derived_id("sample", rollout)


def reward_id(rollout: str | None) -> str:
    return derived_id("reward", rollout)


def rollout_event_id(kind: str, rollout: str, turn: int | None = None) -> str:
    """Id of an event a rollout emits: per turn for actions/observations/verdicts, once for the completion."""
    if kind not in ROLLOUT_EVENT_KINDS:
        raise ValueError(f"unknown rollout event kind {kind!r}; known: {sorted(ROLLOUT_EVENT_KINDS)}")
    return derived_id(kind, rollout) if turn is None else derived_id(kind, rollout, turn)


def rejudged_reward_id(rollout: str, judge: str, rubric_hash: str) -> str:
    """A Reward re-emitted by ``replay train --judge``: one per rollout and judge (name + rubric), never equal to
    the live :func:`reward_id`, so both scores of a rollout live side by side (judge disagreement)."""
    return derived_id("rejudged-reward", rollout, judge, rubric_hash)


def rejudged_sample_id(rollout: str, judge: str, rubric_hash: str) -> str:
    """The TrainingSample of a rollout under a re-judged group (see :func:`rejudged_reward_id`)."""
    return derived_id("rejudged-sample", rollout, judge, rubric_hash)


def adapter_published_id(adapter: str, version: int) -> str:
    return derived_id("adapter_published", adapter, version)


def promotion_id(adapter: str, version: int) -> str:
    return derived_id("ab-promote", adapter, version)


def rollback_id(adapter: str, version: int) -> str:
    return derived_id("ab-rollback", adapter, version)


def verdict_id(adapter: str, version: int, action: str, test_started_ms: int) -> str:
    """An A/B verdict that neither promotes nor rolls back (``AdapterVerdict``): one per test of a version."""
    return derived_id("ab-verdict", adapter, version, action, test_started_ms)


def human_reward_id(rollout: str, labeller: str, score: float) -> str:
    """A human Reward (provenance ``human:<name>``) of ``rollout`` with ``score``."""
    return derived_id("human-reward", rollout, labeller, repr(float(score)))


def eval_group_id(task_set_hash: str, adapter: str, version: int, task_index: int) -> str:
    """The group of one task in an evaluation of ``adapter@v{version}`` (never on the bus; local ids)."""
    return derived_id("eval-group", task_set_hash, adapter, version, task_index)


def eval_rollout_id(group: str, sample: int) -> str:
    return derived_id("eval-rollout", group, sample)


def eval_request_id(group: str, sample: int) -> str:
    return derived_id("eval-request", group, sample)


def eval_task_id(task_set_hash: str, task_index: int) -> str:
    return derived_id("eval-task", task_set_hash, task_index)


def evaluation_id(task_set_hash: str, adapter: str, version: int, spec: object, trigger: str, nonce: int) -> str:
    """An EvaluationCompleted: one per evaluation run (``nonce`` separates repeated runs of the same spec)."""
    return derived_id("evaluation", task_set_hash, adapter, version, spec, trigger, nonce)


def dead_letter_id(topic: str, partition: int, offset: int) -> str:
    """Id of the dead letter of one record: its catalog topic name (no prefix), partition and offset."""
    return derived_id("dead-letter", topic, partition, offset)
