"""The trainer obeys rollbacks: it continues from the primary's weights and optimizer state.

The trainer follows ``adapter-events`` through the one registry fold
(:class:`~streamgrpo.lifecycle.registry.AdapterRegistry`, in :attr:`TrainerState.registry`, fed by
:func:`follower` in the background; the trainer starts training once it has caught up). Pure rules on that fold:

- :func:`restore_target`: when the version the trainer's weights are (``TrainerState.version``) was
  rolled back or rejected -- with everything above the restored primary, see the registry -- the
  trainer continues from the primary: :func:`restore` loads its stored adapter and optimizer/scheduler
  state (the base model with a fresh adapter for version 0), keeps the step count, the committed
  offsets and the version numbering, so its next publication is a NEW version whose parent is the
  primary. It is checked before collecting a step and again before publishing one: a step computed
  on weights that were rolled back meanwhile is not published (its samples count as consumed).
- :func:`drop_reason_for`: the drop rule of :mod:`streamgrpo.lifecycle.pacing` on this fold: a sample
  produced by a rolled-back or rejected version is dropped (``rolled_back``); staleness is counted along
  the lineage (publications between the sample's version and the trainer's weights), so after a rollback
  the primary's samples are fresh again.

What is not covered: restoring the exact RNG state of the primary's run; garbage collection of the
discarded versions' files (they stay in the adapter store, immutable).
"""

from __future__ import annotations

import logging

from streamgrpo.avro import records as R
from streamgrpo.config import KafkaSettings
from streamgrpo.lifecycle import pacing
from streamgrpo.lifecycle.registry import Line, ancestors
from streamgrpo.models import adapter_store as store
from streamgrpo.topics import catalog
from streamgrpo.topics.follow import LogFollower, fold_events
from streamgrpo.trainer.config import TrainerConfig
from streamgrpo.trainer.state import TrainerState, build_training

log = logging.getLogger(__name__)


def restore_target(line: Line, current: int) -> int | None:
    """The version to continue from when the trainer's weights (``current``) were discarded, else None."""
    return line.primary if current and not line.serves(current) else None


def versions_behind(line: Line, current: int, behaviour: int) -> int:
    """:func:`streamgrpo.lifecycle.pacing.versions_behind` along ``current``'s parent chain in ``line``."""
    return pacing.versions_behind(current, behaviour, ancestors(line, current))


def drop_reason_for(sample: R.TrainingSample, line: Line | None, current: int, *, max_staleness: int) -> str | None:
    """``rolled_back`` or ``stale`` by the pacing rule along the lineage (None: the version check passes; the
    caller checks the rest; also None without a ``line``: the caller checks by version numbers)."""
    if line is None:
        return None
    return pacing.drop_reason(sample.behaviour_version, current, max_staleness, discarded=line.discarded,
                              chain=ancestors(line, current))


def restore(state: TrainerState, cfg: TrainerConfig, version: int) -> None:
    """Replace the trainer's weights, optimizer and scheduler with those stored for ``version`` (0: a fresh adapter
    on the base model); the step count, committed offsets and version numbering stay."""
    path = store.version_dir(cfg.adapter_store, cfg.adapter_name, version) if version else None
    if path is not None and not path.is_dir():
        raise FileNotFoundError(f"the primary {cfg.adapter_name}@v{version} is not in the adapter store "
                                f"{cfg.adapter_store}; the trainer cannot continue from it")
    state.model, state.optimizer, state.scheduler = build_training(cfg, path)
    old, state.version = state.version, version
    log.warning("v%d was rolled back: continuing from the primary v%d (weights and optimizer state); the next "
                "adapter's parent is v%d", old, version, version)


def check_rollback(state: TrainerState, cfg: TrainerConfig) -> bool:
    """Restore the primary if the trainer's weights were discarded; True when it did."""
    if state.registry is None:
        return False
    target = restore_target(state.registry.line(cfg.adapter_name), state.version)
    if target is None:
        return False
    restore(state, cfg, target)
    return True


def follower(state: TrainerState, kafka: KafkaSettings) -> LogFollower:
    """A follower that folds ``adapter-events`` into ``state.registry`` (run it with ``.run(stop)``; its
    ``caught_up`` says when the whole history was folded)."""
    assert state.registry is not None
    return LogFollower(kafka, [catalog.ADAPTER_EVENTS], fold_events(state.registry.apply))
