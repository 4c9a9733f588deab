"""Adapter follower: read ``adapter-events``, verify each announced adapter, hot-swap it into the policy.

Functional core: :func:`decide` maps (state, event) to a new :class:`FollowerState` and at most one
action (:class:`Load` or :class:`SetPrimary`); it does no I/O. Imperative shell:
:class:`AdapterFollower` resolves the uri, verifies the sha256 with the trainer's adapter store
(:func:`streamgrpo.models.adapter_store.verify`) and calls ``policy.load_adapter``.
:func:`follow` is the Kafka wiring (an :class:`~streamgrpo.topics.consumer.EventConsumer`).

Guarantees:
- An adapter is loaded only if its directory hashes to the announced sha256. A mismatch, a missing
  file or an unresolvable uri is logged at ERROR with the reason, counted and listed in
  :attr:`AdapterFollower.refusals`; nothing is loaded and the worker keeps serving what it served.
- Every worker sees every event: the consumer group id is unique per follower instance
  (``rollout-adapters-<uuid>``) and reads the topic FROM THE BEGINNING, so a new worker learns the
  whole history (published versions, current primary after promotions/rollbacks). Offsets are not
  committed (a unique group has no one to resume for). Replaying loads at most ``keep_last``
  versions per batch plus the primary; other announced versions are remembered and loaded on
  demand by :meth:`AdapterFollower.ensure_resident`.
- Hot swap never pulls a version from under in-flight work: the loop passes the version
  explicitly on each call, and pins it for a trajectory (:meth:`AdapterFollower.pinned`); the policy
  never evicts a pinned or primary version.

Not covered: object stores without ``fsspec`` (only local paths and ``file://`` URIs otherwise),
deleting refused files, choosing which version a group uses (the fan-out does that).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TypeAlias
from urllib.parse import unquote, urlparse

from streamgrpo.avro import records as R
from streamgrpo.rollout.errors import (
    AdapterLoadError,
    AdapterNotResidentError,
    AdapterRefusedError,
    PolicyError,
)
from streamgrpo.rollout.policy.base import PlannerPolicy

log = logging.getLogger(__name__)

AdapterEvent: TypeAlias = R.AdapterPublished | R.AdapterPromoted | R.AdapterRolledBack


# ---------------------------------------------------------------------------------------------
# functional core
@dataclass(frozen=True)
class Announcement:
    """What an AdapterPublished said about one version."""

    adapter_name: str
    version: int
    uri: str
    sha256: str
    base_model: str


@dataclass(frozen=True)
class Load:
    announcement: Announcement


@dataclass(frozen=True)
class SetPrimary:
    adapter_name: str
    version: int


Action: TypeAlias = Load | SetPrimary


@dataclass(frozen=True)
class FollowerState:
    """Everything learnt from ``adapter-events`` so far (immutable; replaced by :func:`decide`)."""

    announced: dict[tuple[str, int], Announcement] = field(default_factory=dict)
    primary: dict[str, int] = field(default_factory=dict)


def decide(state: FollowerState, event: AdapterEvent, follow: str | None = None) -> tuple[FollowerState, Action | None]:
    """Fold one event into the state. ``follow`` restricts to one adapter name (None: all names).

    Dedup key: (adapter_name, version) for AdapterPublished (a redelivery yields no action);
    promotions/rollbacks are idempotent (same primary -> no action).
    """
    if follow is not None and event.adapter_name != follow:
        return state, None
    if isinstance(event, R.AdapterPublished):
        key = (event.adapter_name, event.version)
        if key in state.announced:
            return state, None
        ann = Announcement(event.adapter_name, event.version, event.uri, event.sha256, event.base_model)
        return replace(state, announced={**state.announced, key: ann}), Load(ann)
    target = event.version if isinstance(event, R.AdapterPromoted) else event.restored_version
    if state.primary.get(event.adapter_name) == target:
        return state, None
    return replace(state, primary={**state.primary, event.adapter_name: target}), SetPrimary(event.adapter_name, target)


def loads_worth_doing(actions: list[Action], primary: dict[str, int], keep_last: int) -> list[Action]:
    """Drop :class:`Load` actions a batch would evict right away (all but the newest ``keep_last`` per
    name, unless primary); order is kept. Used when replaying history."""
    newest: dict[str, list[int]] = {}
    for a in actions:
        if isinstance(a, Load):
            newest.setdefault(a.announcement.adapter_name, []).append(a.announcement.version)
    keep = {(n, v) for n, vs in newest.items() for v in sorted(vs)[-keep_last:]}
    keep |= set(primary.items())
    return [a for a in actions if not isinstance(a, Load)
            or (a.announcement.adapter_name, a.announcement.version) in keep]


# ---------------------------------------------------------------------------------------------
# imperative shell
@dataclass(frozen=True)
class Refusal:
    adapter_name: str
    version: int
    uri: str
    reason: str


class AdapterFollower:
    """Applies adapter events to a :class:`PlannerPolicy` (thread-safe; see module docstring)."""

    def __init__(self, policy: PlannerPolicy, *, adapter_name: str | None = None, download_dir: Path | None = None,
                 keep_last: int = 4) -> None:
        self.policy = policy
        self.adapter_name = adapter_name
        self.download_dir = download_dir
        self.keep_last = keep_last
        self.state = FollowerState()
        self.refusals: list[Refusal] = []  # final refusals (integrity, unloadable files)
        self.failures: list[Refusal] = []  # transient load failures (backend down); retried on demand
        self.loaded: list[tuple[str, int]] = []
        self._cond = threading.Condition()

    # -- queries ------------------------------------------------------------------------------
    @property
    def refused_count(self) -> int:
        return len(self.refusals)

    def primary(self, adapter_name: str) -> int:
        """Current primary version (0 = base model until a promotion says otherwise)."""
        return self.state.primary.get(adapter_name, 0)

    def available(self, adapter_name: str) -> list[int]:
        return self.policy.resident_versions(adapter_name)

    # -- event handling -------------------------------------------------------------------------
    def handle(self, event: AdapterEvent) -> None:
        self.handle_batch([event])

    def handle_batch(self, events: list[AdapterEvent]) -> None:
        actions: list[Action] = []
        for event in events:
            self.state, action = decide(self.state, event, self.adapter_name)
            if action is not None:
                actions.append(action)
        for action in loads_worth_doing(actions, self.state.primary, self.keep_last):
            if isinstance(action, Load):
                self._load(action.announcement)
            else:
                log.info("primary of %s is now v%d", action.adapter_name, action.version)
                self.policy.protect(action.adapter_name, {action.version})
        with self._cond:
            self._cond.notify_all()

    def _load(self, ann: Announcement) -> bool:
        try:
            path = self._verified_path(ann)
            self.policy.load_adapter(ann.adapter_name, ann.version, path)
        except (AdapterRefusedError, AdapterLoadError) as exc:  # final: immutable version, bad bytes/files
            self.refusals.append(Refusal(ann.adapter_name, ann.version, ann.uri, str(exc)))
            log.error("REFUSED adapter %s@v%d from %s: %s (still serving %s)", ann.adapter_name, ann.version,
                      ann.uri, exc, self.policy.resident_versions(ann.adapter_name) or "the base model")
            return False
        except PolicyError as exc:  # transient (backend unavailable): not a refusal, ensure_resident retries
            self.failures.append(Refusal(ann.adapter_name, ann.version, ann.uri, str(exc)))
            log.error("could not load adapter %s@v%d now: %s (will retry on demand)", ann.adapter_name,
                      ann.version, exc)
            return False
        base = getattr(self.policy, "base_model", None)
        if base is not None and base != ann.base_model:
            log.warning("adapter %s@v%d was trained on %r, this policy serves %r", ann.adapter_name, ann.version,
                        ann.base_model, base)
        self.loaded.append((ann.adapter_name, ann.version))
        log.info("adapter %s@v%d verified and loaded", ann.adapter_name, ann.version)
        return True

    def _verified_path(self, ann: Announcement) -> Path:
        from streamgrpo.models.adapter_store import verify
        from streamgrpo.models.errors import AdapterIntegrityError

        path = self._resolve(ann)
        try:
            verify(path, ann.sha256)
        except AdapterIntegrityError as exc:
            raise AdapterRefusedError(str(exc)) from exc
        return path

    def _resolve(self, ann: Announcement) -> Path:
        """Local path of the announced uri (plain path / ``file://``; other schemes need fsspec)."""
        parsed = urlparse(ann.uri)
        if parsed.scheme in ("", "file"):
            return Path(unquote(parsed.path) if parsed.scheme else ann.uri)
        try:
            import fsspec
        except ImportError as exc:
            raise AdapterRefusedError(f"uri scheme {parsed.scheme!r} needs `pip install fsspec` "
                                      "(and its protocol package); or publish a local/file:// uri") from exc
        if self.download_dir is None:
            raise AdapterRefusedError(f"uri {ann.uri!r} is remote; set a download_dir for the follower")
        target = self.download_dir / ann.adapter_name / f"v{ann.version}"
        shutil.rmtree(target, ignore_errors=True)
        try:
            fs, remote = fsspec.core.url_to_fs(ann.uri)
            fs.get(remote.rstrip("/") + "/", str(target) + "/", recursive=True)
        except (OSError, ValueError) as exc:
            raise AdapterRefusedError(f"cannot download {ann.uri}: {exc}") from exc
        return target

    # -- serving helpers --------------------------------------------------------------------------
    def ensure_resident(self, adapter_name: str, version: int) -> None:
        """Load an announced-but-evicted version on demand; raise :class:`AdapterNotResidentError` if it was
        never announced, was refused, or fails verification now."""
        if version == 0 or version in self.policy.resident_versions(adapter_name):
            return
        ann = self.state.announced.get((adapter_name, version))
        refused = any((r.adapter_name, r.version) == (adapter_name, version) for r in self.refusals)
        if ann is None or refused or not self._load(ann):
            raise AdapterNotResidentError(
                f"{adapter_name}@v{version} is not available here (announced: {ann is not None}, refusals: "
                f"{[r.reason for r in self.refusals if (r.adapter_name, r.version) == (adapter_name, version)]})")

    def wait_announced(self, adapter_name: str, version: int, timeout_s: float) -> bool:
        """Block until ``adapter_name@v{version}`` was announced (True) or ``timeout_s`` passed (False)."""
        with self._cond:
            return self._cond.wait_for(lambda: version == 0 or (adapter_name, version) in self.state.announced,
                                       timeout=timeout_s)

    def pin(self, adapter_name: str, version: int) -> None:
        self.policy.pin(adapter_name, version)

    def unpin(self, adapter_name: str, version: int) -> None:
        self.policy.unpin(adapter_name, version)

    @contextlib.contextmanager
    def pinned(self, adapter_name: str, version: int) -> Iterator[None]:
        """Load on demand if needed, then keep the version resident for the block (a trajectory/group)."""
        self.ensure_resident(adapter_name, version)
        with self.policy.pinned(adapter_name, version):
            yield


async def follow(follower: AdapterFollower, kafka: object, stop: asyncio.Event | threading.Event, *,
                 service: str = "rollout", group_prefix: str = "rollout-adapters") -> None:
    """Consume ``adapter-events`` from the beginning under a unique group id until ``stop`` is set.

    ``kafka`` is a :class:`~streamgrpo.config.KafkaSettings`; ``stop`` may be a ``threading.Event``
    (when the follower runs in its own thread). Loading runs in a worker thread (it reads files and
    touches weights) so the event loop stays responsive.
    """
    from streamgrpo.topics.consumer import EventConsumer

    group_id = f"{group_prefix}-{uuid.uuid4().hex[:12]}"
    async with EventConsumer(kafka, group_id=group_id, topics=["adapter-events"], service=service,  # type: ignore[arg-type]
                             from_beginning=True) as consumer:
        while not stop.is_set():
            batch = await consumer.poll(max_records=100, timeout_ms=250)
            events = [r.event for r in batch if isinstance(r.event, AdapterEvent)]
            if events:
                await asyncio.to_thread(follower.handle_batch, events)  # type: ignore[arg-type]
