"""Whether an announced adapter version's files are in the adapter store and hash to its sha256.

The registry fold (:mod:`streamgrpo.lifecycle.registry`) cannot read files, so a forged or broken announcement that
follows its line's lineage (the next version, an announced parent) used to become the primary with files no worker
could load: every rollout worker refused it and the fan-out went on requesting new groups on it. The A/B
controller (:mod:`streamgrpo.streams.ab_controller`) checks the files of every version that may serve -- the
primary and the candidates above it -- once, through :class:`FileCheck`, and rolls back a version whose files do
not verify, with the reason; every follower of ``adapter-events`` then agrees that it never serves, and the trainer
continues from the restored version.

- A path outside the store, a scheme the store refuses or a sha256 mismatch is final at once.
- Missing files are waited for ``grace_s`` seconds from the first check (a shared file system may show the
  trainer's directory to another node late), then final.
- A remote uri (``s3://`` ...) is not checked here: the rollout workers download and verify it (logged once).
- An adapter store that is not a directory here (not mounted) checks nothing and rolls nothing back: an ERROR says
  so, once, and what to do (a store this worker cannot see must not discard every version).

What is not covered: who may write ``adapter-events`` (the k8s Kafka ACLs: the trainer, the streams workers and the
operator's CLI); a version whose files change AFTER the check (workers verify again before every load).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

from streamgrpo.lifecycle.registry import Announcement, Line
from streamgrpo.models import adapter_store as store
from streamgrpo.models.errors import AdapterIntegrityError, AdapterStoreError

log = logging.getLogger(__name__)


def problem(ann: Announcement, store_root: str | os.PathLike[str]) -> tuple[str, bool] | None:
    """Why ``ann``'s files do not verify inside ``store_root`` and whether that is final (False: files missing,
    which may still appear); None when they verify or the uri is remote (not checked here)."""
    try:
        if store.is_remote(ann.uri):
            return None
        path = store.local_path(ann.uri, store_root)
    except AdapterStoreError as exc:
        return str(exc), True
    try:
        store.verify(path, ann.sha256)
    except AdapterIntegrityError as exc:
        return str(exc), all((path / f).is_file() for f in store.REQUIRED_FILES)
    return None


def to_check(line: Line) -> list[int]:
    """The versions whose files matter now: announced, not discarded, the primary or above it (a group may start on
    them), ascending."""
    return sorted(v for v in line.announced if v >= line.primary and v not in line.discarded)


@dataclass
class FileCheck:
    """Checks each version of :func:`to_check` until it verifies or fails for good; :attr:`failed` holds the
    versions that failed for good, with the reason (read by :meth:`Lifecycle.next_events
    <streamgrpo.streams.ab_controller.Lifecycle.next_events>`)."""

    store_root: Path
    grace_s: float = 120.0
    verified: set[int] = field(default_factory=set)
    failed: dict[int, str] = field(default_factory=dict)
    missing_since: dict[int, float] = field(default_factory=dict)
    store_unseen: bool = False  # the store root was not a directory at the last check (said once)

    def pending(self, line: Line) -> list[Announcement]:
        """The announcements still to check."""
        return [line.announced[v] for v in to_check(line) if v not in self.verified and v not in self.failed]

    def check(self, ann: Announcement, now_s: float) -> None:
        """Check one announcement's files (blocking file I/O: the caller runs it off the event loop)."""
        if not self.store_root.is_dir():
            if not self.store_unseen:
                log.error("the adapter store %s is not a directory on this streams worker: adapter versions' files are "
                          "NOT checked and none is rolled back for them; mount the store (read-only is enough) at "
                          "[loop] adapter_store, or set [streams] adapter_check = false", self.store_root)
            self.store_unseen = True
            return
        self.store_unseen = False
        found = problem(ann, self.store_root)
        if found is None:
            if store.is_remote(ann.uri):
                log.info("%s@v%d: remote uri %s is not checked by the controller; rollout workers verify it "
                         "before loading", ann.adapter_name, ann.version, ann.uri)
            self.verified.add(ann.version)
            self.missing_since.pop(ann.version, None)
            return
        reason, final = found
        first = self.missing_since.setdefault(ann.version, now_s)
        if final or now_s - first >= self.grace_s:
            self.failed[ann.version] = reason if final else f"{reason} (still missing after {now_s - first:.0f} s)"
            log.error("%s@v%d: its files do not verify in the adapter store: %s", ann.adapter_name, ann.version,
                      self.failed[ann.version])
        elif first == now_s:
            log.warning("%s@v%d: %s; waiting up to %.0f s for its files", ann.adapter_name, ann.version, reason,
                        self.grace_s)
