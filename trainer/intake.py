"""The trainer's intake: records polled and not yet taken into a step, taken oldest behaviour version first.

Admission (:func:`streamgrpo.lifecycle.pacing.admit`) bounds staleness by assuming the trainer consumes
samples in the order their groups closed. ``training-samples`` has several partitions, and a consumer
hands out one partition's fetched records before the next's, so read as polled, a group closed early
on one partition could wait behind groups closed later on the others, train two versions after the one
that sampled it and be dropped as stale (seen: 1 group in 11 on a loaded machine). The trainer
therefore polls everything already fetched (up to :func:`capacity`) before it chooses, and
:meth:`Intake.take` hands out the partition head with the lowest ``(behaviour_version, timestamp)``.

Within a partition records are taken in offset order, so what an adapter trained on stays one
contiguous range per partition (its lineage) and :meth:`Intake.held` is where the consumer's commit
must stop: records polled but still held here are read again after a restart, never skipped.
Offset order has one cost: a group admitted later at a newer version can close first on the same
partition and sit ahead of an older group (seen: 8 of 64 samples stale). Before a step that publishes,
:meth:`Intake.take_through_older` hands out every record up to the last held sample that the next
version would make too stale, so the step takes it now and grows past ``samples_per_step`` instead.
What is not covered: an older group that closes after the step has been formed.
Pure bookkeeping: no Kafka.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

from streamgrpo.avro import records as R
from streamgrpo.lifecycle.pacing import Pacing
from streamgrpo.topics.received import Received


def capacity(samples_per_step: int, max_staleness: int) -> int:
    """How many records the intake holds at most: :attr:`~streamgrpo.lifecycle.pacing.Pacing.intake_capacity`
    (the admission budget, all that admission lets wait for the trainer, plus one step of slack for what it does
    not pace: replays, tasks produced straight to ``rollout-requests``)."""
    return Pacing(max_staleness, samples_per_step).intake_capacity


def order_key(received: Received) -> tuple[int, int, int]:
    """Records that are not samples first (they are dropped at once), then the oldest behaviour version, then the
    oldest record."""
    event = received.event
    if not isinstance(event, R.TrainingSample):
        return (0, 0, received.timestamp_ms)
    return (1, event.behaviour_version, received.timestamp_ms)


class Intake:
    """Per-partition FIFO queues of polled records (see the module doc)."""

    def __init__(self) -> None:
        self.queues: dict[tuple[str, int], deque[Received]] = {}

    def __len__(self) -> int:
        return sum(len(q) for q in self.queues.values())

    def extend(self, records: Iterable[Received]) -> None:
        for r in records:
            self.queues.setdefault((r.topic, r.partition), deque()).append(r)

    def take(self) -> Received | None:
        """The head with the lowest :func:`order_key` (ties: the lower partition), or None when empty."""
        heads = [(order_key(q[0]), tp) for tp, q in self.queues.items() if q]
        if not heads:
            return None
        _, tp = min(heads)
        queue = self.queues[tp]
        out = queue.popleft()
        if not queue:
            del self.queues[tp]
        return out

    def take_through_older(self, version: int) -> list[Received]:
        """Every record up to and including the last held sample of a behaviour version below ``version``, per
        partition in offset order (empty when none is held): what a step must take so that no held sample waits
        behind newer ones on its partition until it is too stale to train."""
        out: list[Received] = []
        if version <= 0:  # no version is below it (a replay's unbounded staleness lands here)
            return out
        for tp in sorted(self.queues):
            queue = self.queues[tp]
            last = max((i for i, r in enumerate(queue)
                        if isinstance(r.event, R.TrainingSample) and r.event.behaviour_version < version), default=-1)
            out.extend(queue.popleft() for _ in range(last + 1))
            if not queue:
                del self.queues[tp]
        return out

    def held(self) -> dict[tuple[str, int], int]:
        """(topic, partition) -> the first offset still held: a commit must not pass it."""
        return {tp: q[0].offset for tp, q in self.queues.items() if q}
