"""Adapter follower: read ``adapter-events``, verify each announced adapter, hot-swap it into the policy.

Functional core: the one fold of ``adapter-events`` (:mod:`streamgrpo.lifecycle.registry`) says what
changed: a version announced (load it) or a new primary (keep it resident); :func:`loads_worth_doing`
drops loads a replayed batch would evict at once. Imperative shell: :class:`AdapterFollower`
resolves the uri inside the adapter store (``[loop] adapter_store``), verifies the sha256
(:func:`streamgrpo.models.adapter_store.verify`) and calls ``policy.load_adapter``. :func:`follow`
is the Kafka wiring: the project's log follower (:class:`~streamgrpo.topics.follow.LogFollower`).

Guarantees:
- An adapter is loaded only if its directory hashes to the announced sha256 and lies inside the
  adapter store. A mismatch, a missing file, a path outside the store, an unresolvable uri (a remote
  scheme whose fsspec package is not installed included) or any unexpected error while loading one
  announcement is logged at ERROR with the reason, counted and listed in :attr:`AdapterFollower.refusals`;
  nothing is loaded and the worker keeps serving what it served and following later announcements. A
  remote download that fails (network) is not a refusal: it is retried when a group asks for the version.
- Every worker sees every event: the follower reads the topic FROM THE BEGINNING on every partition
  without a consumer group, so a new worker learns the whole history (published versions, current
  primary after promotions/rollbacks). Replaying loads at most ``keep_last`` versions per batch plus
  the primary; other announced versions are remembered and loaded on demand by
  :meth:`AdapterFollower.ensure_resident`.
- Hot swap never pulls a version from under in-flight work: the loop passes the version
  explicitly on each call, and pins it for a trajectory (:meth:`AdapterFollower.pinned`); the policy
  never evicts a pinned or primary version. "Primary" means what it means everywhere (the registry):
  the version serving groups outside the canary share, so with ``canary_share = 0`` (recorded by the trainer as
  ``AdapterPublished.auto_promote``) the newest
  published version.
- A rolled-back or rejected version starts no new group here: :meth:`AdapterFollower.serving_version`
  gives the worker the primary instead, for the whole group (groups already running finish on it).

- Paths are resolved by the adapter store's one resolver: a name that is not one path component, a path
  or symlink leading outside the store, a local or chained fsspec URL (``local://``,
  ``simplecache::file://``) and a version directory holding a symlink are refusals.

Not covered: object stores without ``fsspec`` (only local paths and ``file://`` URIs otherwise;
remote adapters are downloaded into ``<adapter_store>/.downloads``), deleting refused files,
choosing which version a group uses (the fan-out does that).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from streamgrpo import metrics
from streamgrpo.avro import records as R
from streamgrpo.config import KafkaSettings
from streamgrpo.inference.base import PlannerPolicy
from streamgrpo.inference.errors import AdapterLoadError, AdapterNotResidentError, PolicyError
from streamgrpo.lifecycle.registry import AdapterRegistry, Announced, Announcement, Change, PrimaryChanged
from streamgrpo.models.errors import AdapterIntegrityError
from streamgrpo.rollout.errors import AdapterRefusedError
from streamgrpo.topics import catalog
from streamgrpo.topics.follow import LogFollower, StopSignal
from streamgrpo.topics.received import Received

log = logging.getLogger(__name__)


# ---------------------------------------------------------------------------------------------
# functional core (the fold itself is streamgrpo.lifecycle.registry)
def loads_worth_doing(changes: Sequence[Change], primary: dict[str, int], keep_last: int) -> list[Change]:
    """Drop announcements a batch would evict right away (all but the newest ``keep_last`` per name, unless
    primary); order is kept. Used when replaying history."""
    newest: dict[str, list[int]] = {}
    for c in changes:
        if isinstance(c, Announced):
            newest.setdefault(c.announcement.adapter_name, []).append(c.announcement.version)
    keep = {(n, v) for n, vs in newest.items() for v in sorted(vs)[-keep_last:]}
    keep |= set(primary.items())
    return [c for c in changes if not isinstance(c, Announced)
            or (c.announcement.adapter_name, c.announcement.version) in keep]


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

    def __init__(self, policy: PlannerPolicy, *, adapter_name: str | None = None, store_root: Path | None = None,
                 keep_last: int = 4, canary_share: float = 0.0) -> None:
        self.policy = policy
        self.adapter_name = adapter_name
        self.store_root = store_root.resolve() if store_root is not None else None
        self.keep_last = keep_last
        self.registry = AdapterRegistry(canary_share)
        self.refusals: list[Refusal] = []  # final refusals (integrity, unloadable files)
        self.failures: list[Refusal] = []  # transient load failures (backend down); retried on demand
        self.loaded: list[tuple[str, int]] = []
        self._cond = threading.Condition()

    # -- queries ------------------------------------------------------------------------------
    @property
    def refused_count(self) -> int:
        return len(self.refusals)

    def primary(self, adapter_name: str) -> int:
        """Current primary version (0 = the base model), as the registry defines it."""
        return self.registry.primary(adapter_name)

    def serving_version(self, adapter_name: str, version: int) -> int:
        """What a NEW group asked to run on ``version`` runs on: that version, or the primary when it was rolled
        back or rejected (a discarded version serves no new group; groups already running finish on it)."""
        line = self.registry.line(adapter_name)
        return version if line.serves(version) else line.primary

    def available(self, adapter_name: str) -> list[int]:
        return self.policy.resident_versions(adapter_name)

    # -- event handling -------------------------------------------------------------------------
    def handle(self, event: R.Event) -> None:
        self.handle_batch([event])

    def handle_batch(self, events: Sequence[R.Event]) -> None:
        changes: list[Change] = []
        for event in events:
            changes += [c for c in self.registry.apply(event) if self._follows(c)]
        primary = {name: line.primary for name, line in self.registry.state.lines.items() if line.primary}
        for change in loads_worth_doing(changes, primary, self.keep_last):
            if isinstance(change, Announced):
                self._load(change.announcement)
            elif isinstance(change, PrimaryChanged):
                log.info("primary of %s is now v%d", change.adapter_name, change.version)
                self.policy.protect(change.adapter_name, {change.version})
        with self._cond:
            self._cond.notify_all()

    def _follows(self, change: Change) -> bool:
        name = change.announcement.adapter_name if isinstance(change, Announced) else change.adapter_name
        return self.adapter_name is None or name == self.adapter_name

    def _load(self, ann: Announcement) -> bool:
        m = metrics.current()
        try:
            with m.timer(metrics.ADAPTER_LOAD_DURATION):
                path = self._verified_path(ann)
                self.policy.load_adapter(ann.adapter_name, ann.version, path)
        except (AdapterRefusedError, AdapterLoadError) as exc:  # final: immutable version, bad bytes/files
            m.inc(metrics.ADAPTER_LOADS, outcome="checksum_mismatch" if isinstance(exc.__cause__, AdapterIntegrityError)
                  else "error")
            self.refusals.append(Refusal(ann.adapter_name, ann.version, ann.uri, str(exc)))
            log.error("REFUSED adapter %s@v%d from %s: %s (still serving %s)", ann.adapter_name, ann.version,
                      ann.uri, exc, self.policy.resident_versions(ann.adapter_name) or "the base model")
            return False
        except PolicyError as exc:  # transient (backend unavailable): not a refusal, ensure_resident retries
            m.inc(metrics.ADAPTER_LOADS, outcome="error")
            self.failures.append(Refusal(ann.adapter_name, ann.version, ann.uri, str(exc)))
            log.error("could not load adapter %s@v%d now: %s (will retry on demand)", ann.adapter_name,
                      ann.version, exc)
            return False
        except Exception as exc:  # noqa: BLE001 - one announcement never stops the follower: refused, with the trace
            m.inc(metrics.ADAPTER_LOADS, outcome="error")
            self.refusals.append(Refusal(ann.adapter_name, ann.version, ann.uri, f"{type(exc).__name__}: {exc}"))
            log.exception("REFUSED adapter %s@v%d from %s: unexpected %s (still serving %s)", ann.adapter_name,
                          ann.version, ann.uri, type(exc).__name__,
                          self.policy.resident_versions(ann.adapter_name) or "the base model")
            return False
        base = getattr(self.policy, "base_model", None)
        if base is not None and base != ann.base_model:
            log.warning("adapter %s@v%d was trained on %r, this policy serves %r", ann.adapter_name, ann.version,
                        ann.base_model, base)
        self.loaded.append((ann.adapter_name, ann.version))
        m.inc(metrics.ADAPTER_LOADS, outcome="ok")
        m.set(metrics.ADAPTERS_RESIDENT, len(self.policy.resident_versions(ann.adapter_name)))
        log.info("adapter %s@v%d verified and loaded", ann.adapter_name, ann.version)
        return True

    def _verified_path(self, ann: Announcement) -> Path:
        from streamgrpo.models.adapter_store import verify
        from streamgrpo.models.errors import AdapterStoreError

        try:
            path = self._resolve(ann)
            verify(path, ann.sha256)
        except (AdapterIntegrityError, AdapterStoreError) as exc:
            raise AdapterRefusedError(str(exc)) from exc
        return path

    def _resolve(self, ann: Announcement) -> Path:
        """Local path of the announced uri: the store's one resolver (:func:`~streamgrpo.models.adapter_store.
        local_path`, confined to the store when there is one); object-store uris are downloaded into
        ``<store>/.downloads/<name>/v<version>`` with fsspec."""
        from streamgrpo.models import adapter_store as store

        if not store.is_remote(ann.uri):
            return store.local_path(ann.uri, self.store_root)
        try:
            import fsspec
        except ImportError as exc:
            raise AdapterRefusedError(f"uri {ann.uri!r} needs `pip install fsspec` (and its protocol package); "
                                      "or publish a local/file:// uri") from exc
        if self.store_root is None:
            raise AdapterRefusedError(f"uri {ann.uri!r} is remote; the follower needs an adapter store to download to")
        target = store.version_dir(self.store_root / ".downloads", ann.adapter_name, ann.version)
        shutil.rmtree(target, ignore_errors=True)
        try:
            fs, remote = fsspec.core.url_to_fs(ann.uri)
        except (ImportError, ValueError) as exc:  # e.g. s3:// without s3fs installed: never loadable here
            raise AdapterRefusedError(f"uri {ann.uri!r}: {type(exc).__name__}: {exc}") from exc
        try:
            fs.get(remote.rstrip("/") + "/", str(target) + "/", recursive=True)
        except Exception as exc:  # noqa: BLE001 - any backend's error (OSError, httpx, botocore...): retried on demand
            raise PolicyError(f"cannot download {ann.uri} now: {type(exc).__name__}: {exc}") from exc
        return target

    # -- serving helpers --------------------------------------------------------------------------
    def ensure_resident(self, adapter_name: str, version: int) -> None:
        """Load an announced-but-evicted version on demand; raise :class:`AdapterNotResidentError` if it was
        never announced, was refused, or fails verification now."""
        if version == 0 or version in self.policy.resident_versions(adapter_name):
            return
        ann = self.registry.state.announcement(adapter_name, version)
        refused = any((r.adapter_name, r.version) == (adapter_name, version) for r in self.refusals)
        if ann is None or refused or not self._load(ann):
            raise AdapterNotResidentError(
                f"{adapter_name}@v{version} is not available here (announced: {ann is not None}, refusals: "
                f"{[r.reason for r in self.refusals if (r.adapter_name, r.version) == (adapter_name, version)]})")

    def wait_announced(self, adapter_name: str, version: int, timeout_s: float) -> bool:
        """Block until ``adapter_name@v{version}`` was announced (True) or ``timeout_s`` passed (False)."""
        with self._cond:
            return self._cond.wait_for(
                lambda: version == 0 or self.registry.state.announcement(adapter_name, version) is not None,
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


async def follow(follower: AdapterFollower, kafka: KafkaSettings, stop: StopSignal) -> None:
    """Follow ``adapter-events`` from the beginning until ``stop`` is set (``asyncio.Event`` or, when the
    follower runs in its own thread, ``threading.Event``). Loading runs in a worker thread (it reads files
    and touches weights) so the event loop stays responsive."""

    async def handle(batch: list[Received]) -> None:
        events = [r.event for r in batch if r.event is not None]
        if events:
            await asyncio.to_thread(follower.handle_batch, events)

    await LogFollower(kafka, [catalog.ADAPTER_EVENTS], handle).run(stop)
