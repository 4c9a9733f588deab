"""What an ``AdapterPublished`` says about pacing and promotion, for every contract version (pure).

Since contract v4 the trainer records its facts about a version as typed fields of ``AdapterPublished``:
``drops`` (records of the lineage not trained, by reason), ``samples_dequeued``, ``max_staleness`` and
``auto_promote`` (the version becomes the primary on publication). Writers before v4 had no such fields:
they put the drops and ``max_staleness`` into ``metrics`` (``dropped_<reason>``, ``max_staleness``,
:func:`streamgrpo.lifecycle.pacing.drop_metrics`), and every reader decided promotion by its own
``canary_share``. This module is the ONE place that reads both: a typed field wins; where it is null (bytes
of a v1-v3 writer, or an archived row from before v4) the old metric key, the lineage or the reader's
setting stands in, exactly as readers computed it before v4.

:func:`typed_fields` is the writer's half: the fields the trainer fills in. ``metrics`` is observability
only; for one release (v4) the trainer still writes the old keys beside the typed fields (:data:`LEGACY_KEYS`)
so that a v3 reader still running during an upgrade (which cannot see the new fields) admits and analyses as
before. v4 readers never read those keys from an event whose typed fields are set.

:func:`out_of_domain` says why an announcement's facts cannot be true (issue 38, finding 2: one forged
``samples_dequeued = -10**12`` made admission wait for a trillion samples, for ever and after every restart): a
negative ``samples_dequeued``, ``max_staleness``, drop count or trainer step, more samples dequeued than the records of
its ``training-samples`` lineage (the trainer's count is those records less the ones never queued), a lineage range
that ends before it starts, and pre-v4 keys (``dropped_<reason>``, ``max_staleness``) that are not finite numbers >= 0.
The registry fold refuses such an announcement (:mod:`streamgrpo.lifecycle.registry`), so no reader counts it.

What is not covered: a writer that fills some typed fields and not others is read field by field (each null
field falls back on its own); there is no check that a v4 writer's legacy keys agree with its typed fields; values
inside the domain but false (a plausible forged count) are not detectable from the event alone.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Protocol, TypedDict

from streamgrpo.avro import records as R
from streamgrpo.lifecycle import pacing
from streamgrpo.topics import catalog

#: Until which release the trainer also writes the pre-v4 metric keys (readers of v4 do not need them).
LEGACY_KEYS = "v4"


class Published(Protocol):
    """What the readers need of an AdapterPublished (the event, or the registry's announcement of it)."""

    @property
    def lineage(self) -> Sequence[R.OffsetRange]: ...
    @property
    def metrics(self) -> Mapping[str, float]: ...
    @property
    def drops(self) -> Mapping[str, int] | None: ...
    @property
    def samples_dequeued(self) -> int | None: ...
    @property
    def max_staleness(self) -> int | None: ...
    @property
    def auto_promote(self) -> bool | None: ...


def lineage_records(lineage: Sequence[R.OffsetRange]) -> int:
    """TrainingSample records in a lineage (the sizes of its ``training-samples`` ranges)."""
    return sum(r.end - r.start + 1 for r in lineage if r.topic.endswith(catalog.TRAINING_SAMPLES))


def drops(event: Published) -> dict[str, int]:
    """Records not trained, by reason: the typed ``drops``, else the ``dropped_<reason>`` metrics (pre-v4)."""
    if event.drops is not None:
        return dict(event.drops)
    return {reason: int(n) for reason, n in pacing.drops_in(event.metrics).items()}


def samples_dequeued(event: Published) -> int:
    """Distinct samples of closed groups the version took off the trainer's queue: the typed field, else
    :func:`streamgrpo.lifecycle.pacing.samples_dequeued` of the lineage and :func:`drops` (pre-v4)."""
    if event.samples_dequeued is not None:
        return event.samples_dequeued
    return pacing.samples_dequeued(lineage_records(event.lineage), drops(event))


def samples_trained(event: Published) -> int:
    """The ONE definition of the TrainingSamples a version trained: the records of its ``training-samples`` lineage
    less those it did not train (:func:`drops`, every reason: stale, duplicate, ...). Read by the registry fold
    (``adapters list``), the run's progress line, report and ``status``; the archive's SQL view counts the same
    rows (``sample_lineage`` rows without a ``drop_reason``)."""
    return trained(lineage_records(event.lineage), drops(event))


def trained(records: int, dropped: Mapping[str, int]) -> int:
    """Of ``records`` in a lineage, those trained: less every drop (:func:`samples_trained`'s rule)."""
    return max(0, records - sum(dropped.values()))


def max_staleness(event: Published) -> int | None:
    """The trainer's ``max_staleness`` at publication: the typed field, else the metric (pre-v4), else None."""
    if event.max_staleness is not None:
        return event.max_staleness
    legacy = event.metrics.get(pacing.MAX_STALENESS_METRIC)
    return None if legacy is None else int(legacy)


def out_of_domain(event: R.AdapterPublished) -> str | None:
    """Why the facts ``event`` records are outside their domain (see the module docstring), or None."""
    if event.trainer_step < 0:
        return f"trainer_step {event.trainer_step} is negative"
    broken = [r for r in event.lineage if r.start < 0 or r.end < r.start]
    if broken:
        return f"lineage range {broken[0].topic}[{broken[0].partition}] {broken[0].start}..{broken[0].end} is not a range"
    legacy = {k: v for k, v in event.metrics.items()
              if k == pacing.MAX_STALENESS_METRIC or k.startswith(pacing.DROP_METRIC_PREFIX)}
    bad = next((k for k, v in legacy.items() if not math.isfinite(v) or v < 0), None)
    if bad is not None:
        return f"metric {bad} = {legacy[bad]} is not a count (a finite number >= 0)"
    negative = next((reason for reason, n in drops(event).items() if n < 0), None)
    if negative is not None:
        return f"drops[{negative}] = {drops(event)[negative]} is negative"
    staleness = max_staleness(event)
    invalid = None if staleness is None else pacing.settings_error(staleness, 1)
    if invalid is not None:
        return f"max_staleness {staleness} is negative ({invalid})"
    dequeued, records = samples_dequeued(event), lineage_records(event.lineage)
    if dequeued < 0:
        return f"samples_dequeued {dequeued} is negative"
    if dequeued > records:
        return f"samples_dequeued {dequeued} exceeds the {records} records of its lineage"
    return None


def auto_promote(event: Published, canary_share: float) -> bool:
    """Whether the version becomes the primary on publication (:func:`promotes`)."""
    return promotes(event.auto_promote, canary_share)


def promotes(recorded: bool | None, canary_share: float) -> bool:
    """A version's auto-promote decision: the publisher's ``recorded`` one, else (pre-v4) the reader's
    ``canary_share`` decides as it did before v4 (0: no A/B test, promote at once). A version that does not
    promote itself is tested against the primary: while it is the newest serving one, it is the canary."""
    if recorded is not None:
        return recorded
    return canary_share <= 0


def max_staleness_sql(typed: str, metrics: str) -> str:
    """:func:`max_staleness` as a SQL expression over an archived ``adapter_published`` row: the ``max_staleness``
    column ``typed``, else the pre-v4 metric key of the ``metrics`` map column (NULL when neither is set)."""
    return f"coalesce(CAST({typed} AS DOUBLE), {metrics}['{pacing.MAX_STALENESS_METRIC}'])"


class TypedFacts(TypedDict):
    """The typed fields a v4 writer sets (keyword arguments of ``AdapterPublished`` and of the store's manifest)."""

    drops: dict[str, int]
    samples_dequeued: int
    max_staleness: int
    auto_promote: bool


def typed_fields(dropped: Mapping[str, int], lineage: Sequence[R.OffsetRange], max_staleness: int,
                 canary_share: float) -> TypedFacts:
    """The typed fields of the announcement of a version trained on ``lineage`` after dropping ``dropped``."""
    counts = {reason: int(n) for reason, n in dropped.items() if n}
    return TypedFacts(drops=counts, samples_dequeued=pacing.samples_dequeued(lineage_records(lineage), counts),
                      max_staleness=int(max_staleness), auto_promote=canary_share <= 0)
