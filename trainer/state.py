"""The trainer's state: everything that changes while training, and how it is built or resumed.

- :class:`TrainerState`: weights, optimizer and scheduler, the version the weights are, the step count, the
  committed offsets, the lineage consumed since the latest stored version, drops, dedup ids, the intake;
- :func:`build_training`: model, optimizer and scheduler from a stored adapter (with its optimizer/scheduler
  state) or a fresh adapter;
- :func:`resume`: the newest stored adapter of ``adapter_name``, or a fresh one.

Its own module so that :mod:`~streamgrpo.trainer.loop` and :mod:`~streamgrpo.trainer.rollback` (which restores
the primary's weights into the state) both import it and not each other. Not covered: what to train (the loop).
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from streamgrpo.lifecycle.registry import AdapterRegistry
from streamgrpo.models import adapter_store as store
from streamgrpo.models.grammar import GrammarReplay
from streamgrpo.topics.dedup import RecentIds
from streamgrpo.trainer.config import TrainerConfig
from streamgrpo.trainer.errors import TrainerError
from streamgrpo.trainer.intake import Intake
from streamgrpo.trainer.lineage import Lineage
from streamgrpo.trainer.model import load_policy
from streamgrpo.trainer.schedules import build_scheduler
from streamgrpo.trainer.step import build_optimizer

log = logging.getLogger(__name__)


@dataclass
class TrainerState:
    """Everything that changes while training."""

    model: Any
    optimizer: torch.optim.Optimizer
    scheduler: Any
    version: int = 0  # the version the weights are (0: fresh adapter); the next publication's parent
    published: int = 0  # highest version number stored (the next publication is published + 1)
    registry: AdapterRegistry | None = None  # the adapter-events fold (rollbacks), fed by rollback.follow
    step: int = 0
    committed: dict[str, int] = field(default_factory=dict)  # "topic:partition" -> next offset
    lineage: Lineage = field(default_factory=Lineage)  # consumed since the latest stored version
    dropped: Counter[str] = field(default_factory=Counter)
    seen: RecentIds = field(default_factory=RecentIds)
    last_metrics: dict[str, float] = field(default_factory=dict)
    replay: GrammarReplay | None = None  # built at the first sample sampled under a grammar
    intake: Intake = field(default_factory=Intake)  # polled, not yet taken into a step



def build_training(cfg: TrainerConfig, path: Path | None) -> tuple[Any, torch.optim.Optimizer, Any]:
    """Model, optimizer and scheduler: the adapter stored at ``path`` with its optimizer/scheduler state, or a
    fresh adapter (``path`` None)."""
    model = load_policy(cfg.model_spec(), adapter_dir=path)
    optimizer = build_optimizer(model, cfg.lr, cfg.weight_decay)
    scheduler = build_scheduler(optimizer, cfg.lr_schedule, warmup_steps=cfg.warmup_steps,
                                total_steps=cfg.schedule_steps, min_ratio=cfg.min_lr_ratio)
    saved = (store.load_trainer_state(path) if path is not None else None) or {}
    if "optimizer" in saved:
        optimizer.load_state_dict(saved["optimizer"])
    if "scheduler" in saved:
        scheduler.load_state_dict(saved["scheduler"])
    return model, optimizer, scheduler


def resume(cfg: TrainerConfig) -> TrainerState:
    """Load the newest stored adapter + optimizer state, or start a fresh adapter."""
    torch.manual_seed(cfg.seed)
    found = store.latest(cfg.adapter_store, cfg.adapter_name)
    if found is not None and found[1].base_model != cfg.base_model:
        raise TrainerError(f"{found[0]} was trained on base model {found[1].base_model!r}, not {cfg.base_model!r}; "
                           "use another adapter_name or adapter_store")
    state = TrainerState(*build_training(cfg, found[0] if found else None))
    if found is not None:
        path, manifest = found
        state.version, state.step, state.committed = manifest.version, manifest.trainer_step, dict(manifest.committed)
        state.published = manifest.version
        log.info("resumed %s v%d (step %d) from %s", cfg.adapter_name, state.version, state.step, path)
    return state
