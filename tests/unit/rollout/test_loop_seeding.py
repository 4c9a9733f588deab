"""``[rollout] sampling_seed``: the worker's planner draws are reproducible per trajectory (tiny in-process model).

The tiny model writes gibberish, but under the planner grammar at temperature 2 every reply is a valid
calculator call or answer of varying content and length, so trajectories of two turns differ from draw to
draw. A trajectory is compared by everything its PlannerActions record (action tokens and logprobs per turn).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pytest
from support.tiny_policy import build_tiny_model, build_tiny_tokenizer

from streamgrpo.avro import records as R
from streamgrpo.inference.local import LocalPolicy
from streamgrpo.rollout.loop import LoopContext, applied_sampling, run_group, run_groups
from streamgrpo.rollout.roles import planner
from streamgrpo.rollout.runtime import build_constraint
from streamgrpo.rollout.seeding import draw_seed
from streamgrpo.rollout.tools.calculator import Calculator

QUESTION = "What is 6*7?"
Trajectory = tuple[tuple[tuple[int, ...], tuple[float, ...]], ...]


@pytest.fixture(scope="module", params=["fast", "eager"])
def policy(request: pytest.FixtureRequest) -> Iterator[LocalPolicy]:
    """Both local engines (the eager one is slower: only where the engines' row seeding is what is tested)."""
    built = LocalPolicy.from_model(build_tiny_model(seed=2), build_tiny_tokenizer(), engine=request.param)
    yield built
    built.close()


@pytest.fixture(scope="module")
def fast() -> Iterator[LocalPolicy]:
    built = LocalPolicy.from_model(build_tiny_model(seed=2), build_tiny_tokenizer(), engine="fast")
    yield built
    built.close()


def group(size: int, *, task: str = "t", question: str = QUESTION, attempt: int | None = None,
          indexes: Sequence[int] | None = None) -> list[R.RolloutRequest]:
    """``size`` requests of one group (task id ``task``), unseeded sampling as the fan-out writes it."""
    meta = {} if attempt is None else {"attempt": str(attempt)}
    return [R.RolloutRequest(
        envelope=R.Envelope.new("test", task_id=task, group_id=f"{task}-g", rollout_id=f"{task}-r{i}"),
        question=question, source="test", rollout_index=i, group_size=size, adapter_name="planner",
        adapter_version=0, max_turns=2, sampling=R.SamplingParams(temperature=2.0, top_p=1.0, max_new_tokens=24),
        metadata=meta) for i in (indexes if indexes is not None else range(size))]


def context(policy: LocalPolicy, sampling_seed: int | None) -> LoopContext:
    ctx = LoopContext(policy=policy, tools={"calculator": Calculator()}, response_prefix='{"',
                      sampling_seed=sampling_seed)
    ctx.constraint = build_constraint("on", ctx)
    return ctx


def trajectories(policy: LocalPolicy, groups: Sequence[Sequence[R.RolloutRequest]], sampling_seed: int | None,
                 ) -> dict[tuple[str, int], Trajectory]:
    """(task id, sample index) -> the trajectory's recorded turns, after running ``groups`` in lockstep."""
    events: list[R.Event] = []
    run_groups(groups, context(policy, sampling_seed), events.append)
    index = {str(r.envelope.rollout_id): (str(r.envelope.task_id), r.rollout_index) for g in groups for r in g}
    turns: dict[tuple[str, int], list[tuple[int, tuple[int, ...], tuple[float, ...]]]] = {}
    for e in events:
        if isinstance(e, R.PlannerAction):
            turns.setdefault(index[str(e.envelope.rollout_id)], []).append(
                (int(e.envelope.turn or 0), tuple(e.action_token_ids), tuple(e.behaviour_logprobs)))
    return {key: tuple((ids, lps) for _, ids, lps in sorted(ts)) for key, ts in turns.items()}


def tokens(trajectory: Trajectory) -> list[tuple[int, ...]]:
    return [ids for ids, _ in trajectory]


def test_the_same_request_and_seed_give_the_same_trajectories(policy: LocalPolicy) -> None:
    first = trajectories(policy, [group(4)], sampling_seed=5)
    again = trajectories(policy, [group(4)], sampling_seed=5)
    assert first == again
    assert any(len(t) == 2 for t in first.values())  # some trajectory ran two turns: turn 2 is seeded too


def test_other_sample_indexes_and_other_seeds_draw_differently(fast: LocalPolicy) -> None:
    seeded = trajectories(fast, [group(4)], sampling_seed=5)
    assert len({tuple(tokens(t)) for t in seeded.values()}) == 4  # the samples share a prompt, not their draws
    other = trajectories(fast, [group(4)], sampling_seed=6)
    assert all(tokens(other[key]) != tokens(seeded[key]) for key in seeded)


def test_a_sample_draws_the_same_whatever_shares_its_batched_call(policy: LocalPolicy) -> None:
    """Row seeds follow the trajectory, not its row: sample 2 alone, in its group, or beside another group."""
    in_group = trajectories(policy, [group(4)], sampling_seed=5)
    alone = trajectories(policy, [group(4, indexes=[2])], sampling_seed=5)
    beside = trajectories(policy, [group(3, task="u", question="What is 9-4?"), group(4)], sampling_seed=5)
    for other in (alone, beside):  # the same tokens; logprobs equal up to the batch's float rounding
        assert tokens(other[("t", 2)]) == tokens(in_group[("t", 2)])
        for (_, lps), (_, ref) in zip(other[("t", 2)], in_group[("t", 2)], strict=True):
            assert lps == pytest.approx(ref, abs=1e-4)


def test_draws_follow_the_task_content_and_attempt_not_its_random_ids(fast: LocalPolicy) -> None:
    """`run` gives every task a random id: two runs pair on the task's content; a re-queued attempt draws anew."""
    run_a = trajectories(fast, [group(2, task="7f3a")], sampling_seed=5)
    run_b = trajectories(fast, [group(2, task="c41e")], sampling_seed=5)
    assert [run_a[("7f3a", i)] for i in range(2)] == [run_b[("c41e", i)] for i in range(2)]
    retry = trajectories(fast, [group(2, task="7f3a", attempt=1)], sampling_seed=5)
    assert all(tokens(retry[("7f3a", i)]) != tokens(run_a[("7f3a", i)]) for i in range(2))


def test_each_action_records_the_seed_it_drew_from_and_unset_changes_nothing(fast: LocalPolicy) -> None:
    events: list[R.Event] = []
    requests = group(2)
    run_group(requests, context(fast, 5), events.append)
    actions = [e for e in events if isinstance(e, R.PlannerAction)]
    by_id = {str(r.envelope.rollout_id): r for r in requests}
    assert actions and all(a.sampling.seed == draw_seed(5, by_id[str(a.envelope.rollout_id)], int(a.envelope.turn or 0),
                                                        planner.ROLE) for a in actions)
    assert applied_sampling(requests[0], context(fast, None), 1).seed is None  # unseeded: the request's own
