"""Pacing: the ONE home of the staleness rule -- how far behind the trainer a sample may be (pure).

The loop is paced by two shared ``[loop]`` settings, :class:`Pacing`: the trainer consumes
``samples_per_step`` samples per version and trains a sample at most ``max_staleness`` versions after
the version that sampled it. Everything derived from them lives here:

- **versions behind** (:func:`versions_behind`): the publications between a sample's behaviour version
  and the trainer's weights, counted along the weights' parent chain (after a rollback the primary's
  samples are fresh again); the difference of the version numbers where no chain is known or the
  behaviour version is not on it. It is the one meaning of "versions behind"; the trainer's drop rule,
  its staleness metric and the analysis views use it.
- **the drop rule** (:func:`drop_reason`): a sample of a discarded (rolled back or rejected) version is
  ``rolled_back``; one more than ``max_staleness`` versions behind is ``stale``; else it may train.
  :func:`first_fresh_version` is the same rule read the other way (the oldest version that still trains);
  :func:`versions_behind_sql` and :func:`drop_reason_sql` are both rules as SQL for the archive's views.
- **the control arm** (:func:`control_arm_trains`): a group the primary serves while a training line is under A/B
  test is the test's control; the line moves on every step and the primary does not, so its samples would reach
  the trainer stale. It is served and judged for the comparison, and gives the trainer samples only while they
  stay within the bound after one more publication; otherwise it closes with reason :data:`CONTROL_ARM`
  (``trains`` false, ``samples`` 0): closed without samples for admission and the queue, not a flat group.
- **the admission budget** (:func:`admit`, :attr:`Pacing.admission_budget`): the fan-out starts a group
  while ``pending + in_flight + group_size <= (1 + max_staleness) * samples_per_step``, so a group that closes
  in turn is trained at most ``max_staleness`` versions after it was sampled (one overtaken by a younger group,
  which closes after the step that makes it stale was formed, is dropped as stale: the budget assumes groups close
  in the order they start, see :mod:`streamgrpo.trainer.intake`); it always starts one while fewer than
  ``samples_per_step`` samples are queued (the trainer would starve otherwise) and never more than
  ``max_groups_in_flight`` groups at once. The A/B control arm's groups that are requested for the comparison
  only (:func:`control_arm_trains` false when they start; the fan-out records it in their requests'
  ``metadata[AB_ARM_KEY]``) give the trainer no samples, so they are not in the budget or the never-starve
  count: they are bounded by ``max_groups_in_flight`` alone, and a test does not take the training line's
  share of the budget. Such a group closes as the control arm even if its test is decided while it runs (the
  window reads the same record), so it never trains beyond the budget.
- **the intake capacity** (:attr:`Pacing.intake_capacity`): the budget plus one step of slack for what
  admission does not pace (replays, requests produced straight to ``rollout-requests``).
- **the queue** (:func:`pending_samples`, :func:`samples_dequeued`): samples produced by closed groups
  less those a published version took off the trainer's queue; records in a version's lineage that no
  group counted as a sample (redelivered duplicates, non-samples: :data:`NOT_QUEUED_DROPS`) are not
  dequeued samples.
- **the drop counts' keys** (:func:`drop_metrics`, :func:`drops_in`): how a trainer before contract v4
  carried its drops by reason and ``max_staleness`` in ``AdapterPublished.metrics``. Since v4 they are typed
  fields; :mod:`streamgrpo.lifecycle.published` reads those first and these keys only for older events.

What is not covered: where the numbers come from (the registry fold, the follower, the trainer's state)
and what a service does while admission says wait; those stay with their callers.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

#: Why the pacing rule refuses a sample.
DropReason = Literal["rolled_back", "stale"]
#: Trainer drop reasons of records in a lineage that no GroupClosed counted as a sample.
NOT_QUEUED_DROPS = ("duplicate", "not_a_sample")
#: The prefix of the trainer's drop counts in ``AdapterPublished.metrics`` (``dropped_<reason>``).
DROP_METRIC_PREFIX = "dropped_"
#: The key under which the trainer records its ``max_staleness`` in ``AdapterPublished.metrics``.
MAX_STALENESS_METRIC = "max_staleness"
#: ``GroupClosed.reason`` of a control-arm group whose samples would be stale: judged for the A/B test only.
CONTROL_ARM = "control_arm"
#: ``RolloutRequest.metadata`` key the fan-out sets (to :data:`CONTROL_ARM`) on a group it starts as the A/B
#: control arm, outside the admission budget: the fact every reader folds (admission, the window), not re-derived.
AB_ARM_KEY = "ab_arm"


@dataclass(frozen=True)
class Pacing:
    """The two shared ``[loop]`` settings that pace the loop."""

    max_staleness: int  # versions a sample may lag behind the trainer's weights and still train
    samples_per_step: int  # samples the trainer consumes per optimizer step (one version per step)

    def __post_init__(self) -> None:
        why = settings_error(self.max_staleness, self.samples_per_step)
        if why is not None:
            raise ValueError(why)

    @property
    def admission_budget(self) -> int:
        """Samples that may wait for the trainer or be in flight: ``(1 + max_staleness) * samples_per_step``."""
        return (1 + self.max_staleness) * self.samples_per_step

    @property
    def intake_capacity(self) -> int:
        """Records the trainer's intake holds at most: the admission budget plus one step."""
        return self.admission_budget + self.samples_per_step


def settings_error(max_staleness: int, samples_per_step: int) -> str | None:
    """Why the two settings are outside their domain (``max_staleness >= 0``, ``samples_per_step >= 1``), or None;
    :class:`Pacing` and the registry fold's check of an announcement's recorded ``max_staleness`` ask."""
    if max_staleness < 0 or samples_per_step < 1:
        return (f"pacing needs max_staleness >= 0 and samples_per_step >= 1 "
                f"(got {max_staleness}, {samples_per_step})")
    return None


def versions_behind(current: int, behaviour: int, chain: Sequence[int] | None = None) -> int:
    """Publications between ``behaviour`` and ``current`` along ``chain`` (``current``'s ancestors, nearest first),
    or ``current - behaviour`` when ``behaviour`` is not on it or no chain is known."""
    if behaviour == current:
        return 0
    if chain is not None and behaviour in chain:
        return list(chain).index(behaviour) + 1
    return current - behaviour


def drop_reason(behaviour: int, current: int, max_staleness: int, *, discarded: Collection[int] = (),
                chain: Sequence[int] | None = None) -> DropReason | None:
    """``rolled_back`` when ``behaviour`` is a discarded version, ``stale`` when it is more than ``max_staleness``
    versions behind ``current`` (:func:`versions_behind`), else None."""
    if behaviour in discarded:
        return "rolled_back"
    if versions_behind(current, behaviour, chain) > max_staleness:
        return "stale"
    return None


def control_arm_trains(behind: int, max_staleness: int) -> bool:
    """Whether a control-arm group (served by the primary, ``behind`` versions below the newest version of the line
    under test, :func:`versions_behind`) closing now may give the trainer samples: only while they would still be
    within ``max_staleness`` after one more publication (the trainer may publish while they travel). At the default
    ``max_staleness`` 1 a control group never trains while a test runs."""
    if behind < 0 or max_staleness < 0:
        raise ValueError(f"control_arm_trains needs behind >= 0 and max_staleness >= 0 (got {behind}, {max_staleness})")
    return behind + 1 <= max_staleness


def first_fresh_version(version: int, max_staleness: int) -> int:
    """The oldest behaviour version that trainer weights at ``version`` still train (by version numbers)."""
    return version - max_staleness


def versions_behind_sql(current: str, behaviour: str, depth: str) -> str:
    """:func:`versions_behind` as a SQL expression over SQL expressions; ``depth`` is ``behaviour``'s position on
    ``current``'s chain (1: the parent), NULL when it is not on it."""
    return (f"CASE WHEN {behaviour} = {current} THEN 0 WHEN {depth} IS NOT NULL THEN {depth} "
            f"ELSE {current} - {behaviour} END")


def drop_reason_sql(discarded: str, behind: str, max_staleness: str) -> str:
    """:func:`drop_reason` as a SQL CASE expression over SQL expressions (the analysis views read the archive with
    it): ``'rolled_back'`` when ``discarded`` holds, ``'stale'`` when ``behind`` exceeds ``max_staleness``, else
    NULL (also when ``max_staleness`` is NULL: an announcement that did not record it)."""
    return f"CASE WHEN {discarded} THEN 'rolled_back' WHEN {behind} > {max_staleness} THEN 'stale' END"


@dataclass(frozen=True)
class Backlog:
    """What admission looks at (folded from the log by the streams follower)."""

    groups_in_flight: int  # groups requested, not closed (the control arm's included)
    rollouts_in_flight: int  # the rollouts of those that may give the trainer samples
    pending_samples: int  # samples of closed groups not yet in a published adapter's lineage
    control_rollouts_in_flight: int = 0  # the A/B control arm's, judged for the comparison only: not budgeted


def admit(backlog: Backlog, group_size: int, pacing: Pacing, max_groups_in_flight: int) -> str | None:
    """Why a new group of ``group_size`` rollouts must wait, or None when it may start (see the module doc)."""
    if backlog.groups_in_flight >= max_groups_in_flight:
        return f"{backlog.groups_in_flight} groups in flight (max {max_groups_in_flight})"
    queued = backlog.pending_samples + backlog.rollouts_in_flight
    if queued < pacing.samples_per_step:
        return None  # the trainer needs more samples than are coming: never starve it
    budget = pacing.admission_budget
    if queued + group_size > budget:
        return (f"{backlog.pending_samples} samples waiting for the trainer and {backlog.rollouts_in_flight} "
                f"rollouts in flight; {group_size} more would exceed {budget} = (1 + max_staleness "
                f"{pacing.max_staleness}) x samples_per_step {pacing.samples_per_step}")
    return None


def pending_samples(produced: int, consumed: int) -> int:
    """Samples waiting for the trainer: produced by closed groups, not yet dequeued by a published version."""
    return max(0, produced - consumed)


def samples_dequeued(lineage_records: int, drops: Mapping[str, float]) -> int:
    """Distinct samples of closed groups a version took off the trainer's queue: the records of its
    ``training-samples`` lineage less those that were never a group's sample (:data:`NOT_QUEUED_DROPS`)."""
    extra = sum(drops.get(reason, 0.0) for reason in NOT_QUEUED_DROPS)
    return max(0, lineage_records - int(extra))


def drop_metrics(dropped: Mapping[str, int], max_staleness: int) -> dict[str, float]:
    """The trainer's drops by reason and its ``max_staleness`` as ``AdapterPublished.metrics`` entries."""
    return {**{f"{DROP_METRIC_PREFIX}{k}": float(v) for k, v in dropped.items()},
            MAX_STALENESS_METRIC: float(max_staleness)}


def drops_in(metrics: Mapping[str, float]) -> dict[str, float]:
    """Drop reason -> count, read back from ``AdapterPublished.metrics`` (:func:`drop_metrics`)."""
    return {k.removeprefix(DROP_METRIC_PREFIX): v for k, v in metrics.items() if k.startswith(DROP_METRIC_PREFIX)}
