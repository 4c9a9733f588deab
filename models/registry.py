"""The adapter registry: ONE fold of ``adapter-events`` into what each adapter version is (pure).

Every service that needs to know which adapter versions exist and which one serves reads the log
through this fold: the stream processors (fan-out version choice, A/B controller), the rollout
workers (what to load and keep resident), the trainer, the evaluator and the CLI. It imports
nothing heavy (no torch, no Kafka client): :func:`apply` maps (state, event) to a new immutable
:class:`RegistryState` and the :class:`Change` it caused, if any.

Per adapter name (a :class:`Line`), with ``canary_share`` (the ``[loop]`` setting) as the policy:
- ``AdapterPublished`` announces a version (uri, sha256, base model, lineage...). ``latest`` is
  the newest published version. A version above the primary that was never rolled back becomes the
  *canary* when ``canary_share > 0``; with ``canary_share == 0`` there is no canary and it becomes
  the *primary* at once (promotion without an A/B test).
- ``AdapterPromoted`` makes its version the primary (and clears a canary at or below it).
- ``AdapterRolledBack`` marks its version rolled back (never canary or primary again); a canary
  rolled back is no longer the canary; a primary rolled back is replaced by ``restored_version``.
- The primary is the version that serves groups outside the canary share (0 = the base model).

Idempotent: a redelivered event changes nothing (an announcement is keyed by (name, version)).
What is not covered (yet): approvals and rejections (``AdapterApproved`` / ``AdapterRejected``) and
evaluation results; the lifecycle statuses of ``AdapterState`` build on this fold.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TypeAlias

from streamgrpo.avro import records as R

AdapterEvent: TypeAlias = R.AdapterPublished | R.AdapterPromoted | R.AdapterRolledBack


@dataclass(frozen=True)
class Announcement:
    """What an AdapterPublished said about one version."""

    adapter_name: str
    version: int
    uri: str
    sha256: str
    base_model: str
    parent_version: int | None = None
    trainer_step: int = 0
    lineage: tuple[R.OffsetRange, ...] = ()

    @classmethod
    def of(cls, event: R.AdapterPublished) -> Announcement:
        return cls(event.adapter_name, event.version, event.uri, event.sha256, event.base_model,
                   event.parent_version, event.trainer_step, tuple(event.lineage))


@dataclass(frozen=True)
class Line:
    """The versions of one adapter name."""

    primary: int = 0
    canary: int | None = None
    latest: int = 0
    rolled_back: frozenset[int] = frozenset()
    announced: Mapping[int, Announcement] = field(default_factory=dict)


@dataclass(frozen=True)
class RegistryState:
    """Every adapter name's :class:`Line` (immutable; replaced by :func:`apply`)."""

    lines: Mapping[str, Line] = field(default_factory=dict)

    def line(self, adapter_name: str) -> Line:
        return self.lines.get(adapter_name, Line())

    def announcement(self, adapter_name: str, version: int) -> Announcement | None:
        return self.line(adapter_name).announced.get(version)


@dataclass(frozen=True)
class Announced:
    """A version was published for the first time."""

    announcement: Announcement


@dataclass(frozen=True)
class PrimaryChanged:
    adapter_name: str
    version: int


Change: TypeAlias = Announced | PrimaryChanged


def apply(state: RegistryState, event: R.Event, canary_share: float) -> tuple[RegistryState, list[Change]]:
    """Fold one event (other event types change nothing); returns the new state and what changed."""
    if not isinstance(event, (R.AdapterPublished, R.AdapterPromoted, R.AdapterRolledBack)):
        return state, []
    line = state.line(event.adapter_name)
    new, changes = _apply_line(line, event, canary_share)
    if new == line:
        return state, []
    if new.primary != line.primary:
        changes.append(PrimaryChanged(event.adapter_name, new.primary))
    return RegistryState({**state.lines, event.adapter_name: new}), changes


def _apply_line(line: Line, event: AdapterEvent, canary_share: float) -> tuple[Line, list[Change]]:
    if isinstance(event, R.AdapterPublished):
        v = event.version
        if v in line.announced:
            return line, []
        ann = Announcement.of(event)
        new = replace(line, latest=max(line.latest, v), announced={**line.announced, v: ann})
        if v not in line.rolled_back and v > line.primary:
            if canary_share <= 0:
                new = replace(new, primary=v)
            elif line.canary is None or v > line.canary:
                new = replace(new, canary=v)
        return new, [Announced(ann)]
    if isinstance(event, R.AdapterPromoted):
        canary = None if line.canary is not None and line.canary <= event.version else line.canary
        return replace(line, primary=event.version, canary=canary), []
    v = event.version
    return replace(line, rolled_back=line.rolled_back | {v}, canary=None if line.canary == v else line.canary,
                   primary=event.restored_version if line.primary == v else line.primary), []


class AdapterRegistry:
    """A :class:`RegistryState` that folds events in place (``fold_events(registry.apply)``)."""

    def __init__(self, canary_share: float = 0.0) -> None:
        self.canary_share = canary_share
        self.state = RegistryState()

    def apply(self, event: R.Event) -> list[Change]:
        self.state, changes = apply(self.state, event, self.canary_share)
        return changes

    def line(self, adapter_name: str) -> Line:
        return self.state.line(adapter_name)

    def primary(self, adapter_name: str) -> int:
        """The serving version outside the canary share (0 = the base model)."""
        return self.state.line(adapter_name).primary
