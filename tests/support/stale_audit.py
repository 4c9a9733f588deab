"""Which samples the trainer dropped as stale, and whether any of them it should have trained (pure).

A sample of behaviour version x goes stale at the step that publishes x + max_staleness + 1; that step is formed
after x + max_staleness was published. A group closed before that publication was on ``training-samples`` while
the step was formed: the trainer must take it into the step (:meth:`~streamgrpo.trainer.intake.Intake.
take_through_older`), and admission (:func:`~streamgrpo.lifecycle.pacing.admit`) counted it in its budget. The one
documented way a group still goes stale is closing after that publication, overtaken by a younger group whose
samples completed the step (trainer/intake.py, "What is not covered"). :func:`stale_groups` tells the two apart
from the events alone, so an end-to-end test can hold the loop to the rule instead of to a share of stale samples
(one overtaken group is 11 % of a 9-group run).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from streamgrpo.avro import records as R


@dataclass
class StaleAudit:
    stale: dict[str, int] = field(default_factory=dict)  # group id -> its samples dropped as stale
    early: list[str] = field(default_factory=list)  # stale groups that closed before the publication they had to beat

    @property
    def samples(self) -> int:
        return sum(self.stale.values())


def stale_groups(samples: Mapping[tuple[int, int], R.TrainingSample],
                 publications: Iterable[tuple[int, R.AdapterPublished]],
                 closed_at: Mapping[str, int]) -> StaleAudit:
    """``samples``: (partition, offset) -> the record of ``training-samples``; ``publications``: (timestamp ms,
    event) of every AdapterPublished in log order; ``closed_at``: group id -> timestamp ms of its GroupClosed. A
    version's lineage was taken by the weights of the version before it (no rollbacks: the test runs none)."""
    audit, published, must_beat = StaleAudit(), {}, {}
    for at, event in publications:
        published[event.version] = at
        bound = event.max_staleness if event.max_staleness is not None else 1
        for span in event.lineage:
            for offset in range(span.start, span.end + 1):  # inclusive, as the trainer writes it
                sample = samples.get((span.partition, offset))
                if sample is not None and event.version - 1 - sample.behaviour_version > bound:
                    group = sample.envelope.group_id or ""
                    audit.stale[group] = audit.stale.get(group, 0) + 1
                    must_beat[group] = sample.behaviour_version + bound
    audit.early = sorted(g for g, v in must_beat.items()
                         if v in published and g in closed_at and closed_at[g] < published[v])
    return audit
