"""The trainer's intake: oldest behaviour version first across partitions, offset order within one."""

from __future__ import annotations

import asyncio

from streamgrpo.avro import records as R
from streamgrpo.topics.received import Received
from streamgrpo.trainer.config import TrainerConfig
from streamgrpo.trainer.intake import Intake, capacity
from streamgrpo.trainer.loop import TrainerState, collect


def rec(partition: int, offset: int, version: int | None, ts: int) -> Received:
    if version is None:  # a record that is not a sample
        event: R.Event = R.Task(envelope=R.Envelope.new("t", event_id=f"x{partition}-{offset}"), question="q",
                                source="math", group_size=1)
    else:
        event = R.TrainingSample(
            envelope=R.Envelope.new("t", event_id=f"s{partition}-{offset}", group_id=f"g{partition}"),
            turns=[R.SampleTurn(turn=0, prompt_token_ids=[1], action_token_ids=[2], behaviour_logprobs=[-1.0])],
            advantage=0.0, reward=0.0, group_mean=0.0, group_std=0.0, group_size=1, estimator="grpo",
            adapter_name="planner", behaviour_version=version)
    return Received(event, "training-samples", partition, offset, None, b"", ts)


def drain(intake: Intake) -> list[tuple[int, int]]:
    out = []
    while (r := intake.take()) is not None:
        out.append((r.partition, r.offset))
    return out


def test_the_oldest_version_is_taken_first_whichever_partition_was_polled_first():
    intake = Intake()
    # polled as a consumer hands them out: partition 0 drained first although its group closed later
    intake.extend([rec(0, 10, 3, 500), rec(0, 11, 3, 501), rec(2, 4, 2, 100), rec(2, 5, 2, 101), rec(1, 7, 2, 300)])
    assert drain(intake) == [(2, 4), (2, 5), (1, 7), (0, 10), (0, 11)]
    assert len(intake) == 0 and intake.held() == {}


def test_a_partition_is_taken_in_offset_order_even_when_a_later_offset_is_older():
    intake = Intake()
    intake.extend([rec(0, 1, 5, 100), rec(0, 2, 1, 200), rec(1, 0, 3, 150)])
    # (0, 2) holds the oldest version but sits behind (0, 1): lineages stay contiguous per partition
    assert drain(intake) == [(1, 0), (0, 1), (0, 2)]


def test_records_that_are_not_samples_go_first_and_held_is_each_partitions_first_untaken_offset():
    intake = Intake()
    intake.extend([rec(0, 3, 0, 100), rec(1, 8, None, 900), rec(1, 9, 0, 50), rec(0, 4, 0, 110)])
    first = intake.take()
    assert first is not None and (first.partition, first.offset) == (1, 8)
    assert intake.held() == {("training-samples", 0): 3, ("training-samples", 1): 9}
    assert intake.take().offset == 9  # version tie: the older record
    assert intake.held() == {("training-samples", 0): 3}
    assert len(intake) == 2


def test_capacity_is_the_admission_budget_plus_one_step():
    assert capacity(8, 1) == 24
    assert capacity(4, 0) == 8


def test_take_through_older_hands_out_each_partition_up_to_its_last_sample_below_the_version():
    intake = Intake()
    # partition 1: a v4 group closed first and sits ahead of a v3 group (admitted earlier, closed later)
    intake.extend([rec(1, 16, 4, 100), rec(1, 17, 4, 101), rec(1, 24, 3, 120), rec(1, 25, 3, 121),
                   rec(1, 32, 5, 200), rec(0, 8, 4, 150), rec(2, 0, 2, 90), rec(2, 1, 5, 210)])
    taken = [(r.partition, r.offset) for r in intake.take_through_older(4)]
    assert taken == [(1, 16), (1, 17), (1, 24), (1, 25), (2, 0)]  # the v4 records ahead of v3 come along
    assert intake.held() == {("training-samples", 0): 8, ("training-samples", 1): 32, ("training-samples", 2): 1}
    assert intake.take_through_older(4) == []
    assert intake.take_through_older(0) == [] and len(intake) == 3


class SlowEndSource:
    """Every record in the first poll, then empty polls that take longer than the trainer's idle_exit_s."""

    def __init__(self, records: list[Received]) -> None:
        self.records = records

    async def poll(self, max_records: int = 100, timeout_ms: int = 500) -> list[Received]:
        out, self.records = self.records[:max_records], self.records[max_records:]
        if not out:
            await asyncio.sleep(0.01)
        return out

    async def commit(self, held=None) -> None: ...

    async def dead_letter(self, received: Received, reason_code: str, reason: str) -> None: ...

    def assignment(self) -> set[str]:
        return {"assigned"}


def test_a_step_held_in_the_intake_is_trained_even_when_the_source_then_goes_idle():
    """Idle means nothing to train: with a step's worth held, an empty poll past idle_exit_s must not end the
    trainer (a replay polls everything at once and uses idle_exit_s=0.001)."""
    cfg = TrainerConfig(base_model="unused", samples_per_step=2, max_staleness=1, idle_exit_s=0.001,
                        poll_timeout_ms=1)
    state = TrainerState(model=None, optimizer=None, scheduler=None)  # type: ignore[arg-type]
    source = SlowEndSource([rec(0, i, 0, 100 + i) for i in range(5)])
    steps = []
    while (step := asyncio.run(collect(source, state, cfg))) is not None:
        steps.append([s.envelope.event_id for s in step])
    assert steps == [["s0-0", "s0-1"], ["s0-2", "s0-3"]]  # the fifth sample waits for a sixth
    assert len(state.intake) == 1
