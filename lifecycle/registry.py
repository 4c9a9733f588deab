"""The adapter registry: ONE fold of ``adapter-events`` into the lifecycle of every adapter version (pure).

Every service that needs to know which adapter versions exist and which one serves reads the log
through this fold: the stream processors (fan-out version choice, A/B controller and registry
publisher), the rollout workers (what to load, what never to start a group on), the trainer (what
to continue from after a rollback), the evaluator and the CLI. It imports nothing heavy (no torch,
no Kafka client): :func:`apply` maps (state, event) to a new immutable :class:`RegistryState` and
the :class:`Change` list it caused. The live statistics (rewards, parse failures, held-out
accuracy) are a second fold beside this one, :mod:`streamgrpo.lifecycle.stats`; only ``adapter-events``
decide a status, so every service that follows that one topic agrees on who serves.

Per adapter name (a :class:`Line`), with ``canary_share`` (the ``[loop]`` setting) as the policy:

- ``AdapterPublished`` announces a version, unless it does not follow the line's lineage
  (:mod:`~streamgrpo.lifecycle.lineage_check`: a version below 1, a self, newer or unknown parent, a
  version not newer than the newest or far past it, an announced version with another sha256): then it changes
  nothing and the fold returns a :class:`Refused` change that says why. A version above the primary
  whose publisher decided ``auto_promote`` (the trainer's ``canary_share == 0``: no A/B test) becomes the
  primary at once. Otherwise it is a *candidate*: the candidates are the
  versions above the primary that are not rolled back, rejected, retired or awaiting approval, and
  the newest of them (or of those awaiting approval) is the *canary* that serves the canary share.
  Every reader applies the recorded decision, whatever its own ``canary_share``, so every fold of one log
  agrees on the primary and the canary; the reader's ``canary_share`` decides only for announcements
  written before contract v4, which do not record it (:func:`streamgrpo.lifecycle.published.promotes`).
  The candidates form the *training line under test*: the A/B test pools their groups since
  :attr:`Line.test_since` against the primary's groups since then, and a verdict acts on the newest.
  A version whose parent was rolled back or rejected is born rolled back (it was trained from
  discarded weights; the A/B controller also writes the event that says so).
- An announcement whose typed facts are out of their domain (:func:`streamgrpo.lifecycle.published.out_of_domain`:
  a negative ``samples_dequeued``, ``max_staleness``, drop count...) is refused the same way: every reader counts
  ``samples_dequeued`` into the trainer's queue, so one forged count would stall admission for good.
- A lifecycle action (promote, roll back, approve, reject, verdict) is refused (a :class:`Refused` change, nothing
  else) when it names a version never announced (a negative one, v0 for all but a rollback's restored version) or,
  for promote / roll back / approve / reject, when its writer may not act
  (:mod:`~streamgrpo.lifecycle.writers`: neither the A/B controller nor the trainer, and no operator identity).
- ``AdapterPromoted`` makes its version the primary (older candidates become retired).
- ``AdapterApproved`` of a version awaiting approval promotes it; otherwise it is only history.
- ``AdapterRolledBack`` restores ``restored_version`` as the primary and rolls back its version and
  EVERY published version above the restored one: they were trained from the discarded weights, and
  the trainer continues from the restored primary. ``AdapterRejected`` (a person) does the same with
  the current primary restored; the named version is REJECTED, the others ROLLED_BACK.
- ``AdapterVerdict`` ends a test without promoting or rolling back: ``await_approval`` parks its
  version for a person (older candidates retired), ``restart`` retires the older candidates and
  starts a fresh test of its version.
- A rolled-back or rejected version is never primary or canary again; a promotion or approval of one
  is ignored (kept in its history).

Statuses (:func:`status`): PRIMARY, REJECTED, ROLLED_BACK, AWAITING_APPROVAL, CANARY, RETIRED (below
the primary or retired by a verdict), CANDIDATE (an older version of the line under test, no longer
serving; its groups still count in the test). Version 0 is the base model.
Idempotent: a redelivered event changes nothing (events are keyed by id; an announcement by version).
Every refusal is logged (WARNING) and counted (:attr:`AdapterRegistry.refused`, by event type); the readers that hold
the raw record dead-letter it (the streams follower, :mod:`streamgrpo.streams.refusals`).
What is not covered: a version's live statistics (:mod:`streamgrpo.lifecycle.stats`), several trainers
publishing into one adapter name, a writer that forges an identity (:mod:`~streamgrpo.lifecycle.writers`).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import TypeAlias

from streamgrpo.avro import records as R
from streamgrpo.lifecycle import lineage_check, published, writers
from streamgrpo.topics.dedup import RecentIds

AdapterEvent: TypeAlias = (R.AdapterPublished | R.AdapterPromoted | R.AdapterRolledBack | R.AdapterApproved
                           | R.AdapterRejected | R.AdapterVerdict)
LIFECYCLE_EVENTS = (R.AdapterPublished, R.AdapterPromoted, R.AdapterRolledBack, R.AdapterApproved,
                    R.AdapterRejected, R.AdapterVerdict)
log = logging.getLogger(__name__)


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
    published_at: datetime | None = None
    metrics: Mapping[str, float] = field(default_factory=dict)  # observability only
    #: What the trainer recorded (typed since v4; a pre-v4 event's metric keys and lineage stand in, read by
    #: :mod:`streamgrpo.lifecycle.published`): records of the lineage not trained, by reason; distinct samples of
    #: closed groups this version took off the trainer's queue (the records of its ``training-samples`` ranges
    #: less those never a group's sample: redelivered duplicates, non-samples; admission counts with it, since a
    #: duplicate counted as consumed would make the queue look shorter than it is); the trainer's
    #: ``max_staleness`` (None: not recorded); whether the version became the primary on publication (None: the
    #: publisher did not say, a pre-v4 event: the reader's ``canary_share`` decides).
    dropped: Mapping[str, int] = field(default_factory=dict)
    samples_dequeued: int = 0
    max_staleness: int | None = None
    auto_promote: bool | None = None

    @classmethod
    def of(cls, event: R.AdapterPublished) -> Announcement:
        return cls(event.adapter_name, event.version, event.uri, event.sha256, event.base_model,
                   event.parent_version, event.trainer_step, tuple(event.lineage), event.envelope.event_time,
                   dict(event.metrics), published.drops(event), published.samples_dequeued(event),
                   published.max_staleness(event), event.auto_promote)

    @property
    def samples(self) -> int:
        """TrainingSamples consumed since the parent (the sizes of its ``training-samples`` ranges)."""
        return published.lineage_records(self.lineage)

    @property
    def trained(self) -> int:
        """TrainingSamples trained since the parent (:func:`streamgrpo.lifecycle.published.samples_trained`)."""
        return published.trained(self.samples, self.dropped)


@dataclass(frozen=True)
class Decision:
    """One entry of a version's history: what happened, when, by whom, why, with which statistics."""

    kind: str  # published | promoted | superseded | rolled_back | rejected | approved | awaiting_approval |
    # restarted | retired | ignored
    at: datetime
    by: str
    reason: str = ""
    metrics: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Line:
    """The versions of one adapter name and their lifecycle."""

    primary: int = 0
    canary: int | None = None
    latest: int = 0
    rolled_back: frozenset[int] = frozenset()
    rejected: frozenset[int] = frozenset()
    awaiting: frozenset[int] = frozenset()
    retired: frozenset[int] = frozenset()
    announced: Mapping[int, Announcement] = field(default_factory=dict)
    history: Mapping[int, tuple[Decision, ...]] = field(default_factory=dict)
    test_since: datetime | None = None  # the running test's evidence starts here (None: no test)

    @property
    def discarded(self) -> frozenset[int]:
        """Versions that never serve again (rolled back or rejected)."""
        return self.rolled_back | self.rejected

    @property
    def candidates(self) -> list[int]:
        """The training line under test: versions above the primary still in the test, ascending."""
        out = self.discarded | self.awaiting | self.retired
        return sorted(v for v in self.announced if v > self.primary and v not in out)

    def serves(self, version: int) -> bool:
        """Whether a NEW group may start on ``version`` (never on a rolled-back or rejected one)."""
        return version not in self.discarded


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


@dataclass(frozen=True)
class RolledBack:
    """Versions were rolled back (or rejected); ``restored`` is the primary they fall back to."""

    adapter_name: str
    versions: frozenset[int]
    restored: int


@dataclass(frozen=True)
class Refused:
    """An event that changed nothing because the fold refused it (see the module docstring): an ``AdapterPublished``
    that does not follow its line (:mod:`~streamgrpo.lifecycle.lineage_check`) or whose facts are out of their
    domain, or a lifecycle action on a version never announced or by a writer that may not act
    (:mod:`~streamgrpo.lifecycle.writers`); ``reason`` says why, ``event_type`` which event it was. The fold's
    readers that own a dead-letter path write one per refused record (the streams follower)."""

    adapter_name: str
    version: int
    reason: str
    event_type: str = "AdapterPublished"


Change: TypeAlias = Announced | PrimaryChanged | RolledBack | Refused


def status(line: Line, version: int) -> R.AdapterStatus:
    """The lifecycle status of ``version`` (see the module docstring)."""
    S = R.AdapterStatus
    if version == line.primary:
        return S.PRIMARY
    if version in line.rejected:
        return S.REJECTED
    if version in line.rolled_back:
        return S.ROLLED_BACK
    if version in line.awaiting:
        return S.AWAITING_APPROVAL
    if version == line.canary:
        return S.CANARY
    if version in line.retired or version < line.primary:
        return S.RETIRED
    return S.CANDIDATE


def apply(state: RegistryState, event: R.Event, canary_share: float) -> tuple[RegistryState, list[Change]]:
    """Fold one event (other event types change nothing); returns the new state and what changed."""
    if not isinstance(event, LIFECYCLE_EVENTS):
        return state, []
    line = state.line(event.adapter_name)
    why = None if isinstance(event, R.AdapterPublished) else _action_refusal(line, event)
    if why is not None:
        kind = type(event).__name__
        log.warning("%s %s@v%d refused: %s", kind, event.adapter_name, event.version, why)
        return state, [Refused(event.adapter_name, event.version, why, kind)]
    new, changes, ended = _HANDLERS[type(event)](line, event, canary_share)
    if new == line:
        return state, changes  # nothing, or the Refused of an announcement that does not follow its line
    new = _settle(new, event.envelope.event_time, canary_share, ended)
    if new.primary != line.primary:
        changes.append(PrimaryChanged(event.adapter_name, new.primary))
    return RegistryState({**state.lines, event.adapter_name: new}), changes


def _action_refusal(line: Line, event: AdapterEvent) -> str | None:
    """Why a lifecycle action (not an announcement) may not act on ``line``, or None (see the module docstring)."""
    if isinstance(event, writers.ACTIONS):
        why = writers.refusal(event)
        if why is not None:
            return why
    kind = type(event).__name__
    if event.version not in line.announced:
        base = " (v0 is the base model: never published, promoted or rolled back)" if event.version == 0 else ""
        return f"{kind} names v{event.version}, which was never announced{base}"
    if isinstance(event, R.AdapterRolledBack):
        restored = event.restored_version
        if restored < 0 or (restored and restored not in line.announced):
            return f"{kind} of v{event.version} restores v{restored}, which was never announced"
    return None


def _settle(line: Line, at: datetime, canary_share: float, test_ended: bool) -> Line:
    """Derived fields after an event: the canary, and when the running test's evidence starts."""
    candidates = line.candidates
    since = None if test_ended else line.test_since
    if candidates and since is None:
        since = at
    if not candidates:
        since = None
    serving = [*candidates, *(v for v in line.awaiting if v > line.primary)]
    newest = line.announced[max(serving)] if serving else None
    tested = newest is not None and not published.promotes(newest.auto_promote, canary_share)
    return replace(line, canary=newest.version if tested and newest is not None else None, test_since=since)


def _note(line: Line, versions: Iterable[int], decision: Decision) -> Mapping[int, tuple[Decision, ...]]:
    history = dict(line.history)
    for v in versions:
        history[v] = (*history.get(v, ()), decision)
    return history


Outcome: TypeAlias = tuple[Line, list[Change], bool]  # (line, changes, the running test ended)


def _published(line: Line, event: R.AdapterPublished, canary_share: float) -> Outcome:
    v = event.version
    why = published.out_of_domain(event)
    if why is None and v in line.announced:
        why = lineage_check.reannounced(event, line.announced[v].sha256)
    elif why is None:
        why = lineage_check.refusal(event, line.announced, line.latest)
    if why is not None:
        log.warning("AdapterPublished %s@v%d refused: %s", event.adapter_name, v, why)
        return line, [Refused(event.adapter_name, v, why)], False
    if v in line.announced:  # a redelivery of the same announcement
        return line, [], False
    ann = Announcement.of(event)
    at = event.envelope.event_time
    new = replace(line, latest=max(line.latest, v), announced={**line.announced, v: ann},
                  history=_note(line, [v], Decision("published", at, event.envelope.producer.service,
                                                    f"trainer step {event.trainer_step}, parent "
                                                    f"v{event.parent_version or 0}", dict(event.metrics))))
    parent = event.parent_version or 0
    if parent in line.discarded and v not in line.discarded:
        reason = f"trained from v{parent}, which was rolled back"
        new = replace(new, rolled_back=new.rolled_back | {v},
                      history=_note(new, [v], Decision("rolled_back", at, "registry", reason)))
        return new, [Announced(ann), RolledBack(event.adapter_name, frozenset({v}), line.primary)], False
    if v not in line.discarded and v > line.primary and published.auto_promote(event, canary_share):
        new = replace(new, primary=v)
    return new, [Announced(ann)], False


def _promote(line: Line, version: int, decision: Decision) -> Outcome:
    if version in line.discarded or version == line.primary:
        why = "it was rolled back or rejected" if version in line.discarded else "it is already the primary"
        note = replace(decision, kind="ignored", reason=f"{decision.kind} ignored: {why} ({decision.reason})")
        return replace(line, history=_note(line, [version], note)), [], False
    superseded = Decision("superseded", decision.at, decision.by, f"replaced by v{version}")
    history = _note(replace(line, history=_note(line, [version], decision)), [line.primary], superseded)
    return replace(line, primary=version, awaiting=frozenset(v for v in line.awaiting if v > version),
                   history=history), [], True


def _promoted(line: Line, event: R.AdapterPromoted, _: float) -> Outcome:
    at = event.envelope.event_time
    return _promote(line, event.version, Decision("promoted", at, event.decided_by, event.reason, dict(event.metrics)))


def _approved(line: Line, event: R.AdapterApproved, _: float) -> Outcome:
    decision = Decision("approved", event.envelope.event_time, event.by, event.reason)
    if event.version not in line.awaiting:
        note = replace(decision, kind="ignored", reason=f"approval ignored: v{event.version} was not awaiting "
                       f"approval ({event.reason})")
        return replace(line, history=_note(line, [event.version], note)), [], False
    return _promote(line, event.version, decision)


def _roll_back(line: Line, adapter_name: str, version: int, restored: int, decision: Decision,
               rejected: bool) -> Outcome:
    """Restore ``restored`` (the nearest lower version still good, if it is not) and discard ``version`` and every
    published version above the restored one."""
    if restored in line.discarded or (restored and restored not in line.announced):
        restored = max((v for v in line.announced if v < restored and v not in line.discarded), default=0)
    if restored >= version:  # a nonsensical restore target: discard only the named version
        doomed = {version}
        restored = line.primary if line.primary != version else 0
    else:
        doomed = {version} | {v for v in line.announced if v > restored}
    doomed -= line.discarded
    if not doomed:  # already discarded (e.g. born rolled back): the event confirms it, in the history
        return replace(line, history=_note(line, [version], decision)), [], False
    others = doomed - {version}
    follow = Decision("rolled_back", decision.at, decision.by, f"with v{version}: {decision.reason}")
    history = _note(replace(line, history=_note(line, [version], decision)), sorted(others), follow)
    named = frozenset({version} & doomed)
    new = replace(line, primary=restored, history=history, awaiting=line.awaiting - doomed,
                  rolled_back=line.rolled_back | (others if rejected else doomed),
                  rejected=line.rejected | (named if rejected else frozenset()))
    return new, [RolledBack(adapter_name, frozenset(doomed), restored)], True


def _rolled_back(line: Line, event: R.AdapterRolledBack, _: float) -> Outcome:
    decision = Decision("rolled_back", event.envelope.event_time, event.decided_by, event.reason, dict(event.metrics))
    return _roll_back(line, event.adapter_name, event.version, event.restored_version, decision, rejected=False)


def _rejected(line: Line, event: R.AdapterRejected, _: float) -> Outcome:
    decision = Decision("rejected", event.envelope.event_time, event.by, event.reason)
    if event.version == line.primary:
        note = replace(decision, kind="ignored", reason=f"rejection ignored: v{event.version} is the primary "
                       f"(roll it back instead) ({event.reason})")
        return replace(line, history=_note(line, [event.version], note)), [], False
    return _roll_back(line, event.adapter_name, event.version, line.primary, decision, rejected=True)


def _verdict(line: Line, event: R.AdapterVerdict, _: float) -> Outcome:
    v, at = event.version, event.envelope.event_time
    decision = Decision("awaiting_approval" if event.action == "await_approval" else "restarted", at,
                        event.decided_by, event.reason, dict(event.metrics))
    if event.primary_version != line.primary or v not in line.candidates:
        note = replace(decision, kind="ignored", reason=f"verdict ignored: v{v} is no longer tested against "
                       f"v{event.primary_version} ({event.reason})")
        return replace(line, history=_note(line, [v], note)), [], False
    older = [c for c in line.candidates if c < v]
    retired = Decision("retired", at, event.decided_by, f"superseded by v{v} ({event.action})")
    history = _note(replace(line, history=_note(line, [v], decision)), older, retired)
    awaiting = line.awaiting | ({v} if event.action == "await_approval" else set())
    return replace(line, awaiting=frozenset(awaiting), retired=line.retired | frozenset(older),
                   history=history), [], True


_HANDLERS = {
    R.AdapterPublished: _published, R.AdapterPromoted: _promoted, R.AdapterApproved: _approved,
    R.AdapterRolledBack: _rolled_back, R.AdapterRejected: _rejected, R.AdapterVerdict: _verdict,
}


def ancestors(line: Line, version: int) -> list[int]:
    """``version``'s parent chain, nearest first, as announced (ends at 0, the base model, or at a version that
    was never announced)."""
    out: list[int] = []
    current = line.announced.get(version)
    while current is not None and current.parent_version and current.parent_version not in out:
        out.append(current.parent_version)
        current = line.announced.get(current.parent_version)
    if not out or out[-1] != 0:
        out.append(0)
    return out


class AdapterRegistry:
    """A :class:`RegistryState` that folds events in place (``fold_events(registry.apply)``); a redelivered
    lifecycle event (same event id) is dropped, so its decision is not recorded twice. :attr:`refused` counts the
    events the fold refused, by event type."""

    def __init__(self, canary_share: float = 0.0) -> None:
        self.canary_share = canary_share
        self.state = RegistryState()
        self.applied = RecentIds(100_000)  # ids of the lifecycle events folded
        self.refused: Counter[str] = Counter()

    def apply(self, event: R.Event) -> list[Change]:
        if not isinstance(event, LIFECYCLE_EVENTS) or self.applied.seen(event.event_id):
            return []
        self.state, changes = apply(self.state, event, self.canary_share)
        self.refused.update(c.event_type for c in changes if isinstance(c, Refused))
        return changes

    def line(self, adapter_name: str) -> Line:
        return self.state.line(adapter_name)

    def primary(self, adapter_name: str) -> int:
        """The serving version outside the canary share (0 = the base model)."""
        return self.state.line(adapter_name).primary

    def status(self, adapter_name: str, version: int) -> R.AdapterStatus:
        return status(self.state.line(adapter_name), version)
