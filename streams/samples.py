"""Sample assembly (pure): one TrainingSample per trained rollout, with EVERY planner turn.

A rollout's sample is *ready* when its group is closed and trains, the rollout has an advantage,
its RolloutCompleted said how many planner turns it took, and that many distinct turns arrived.
The sample's turns are built from the PlannerActions themselves (the window keeps each as the event
it received), sorted by turn number (duplicates were dropped on arrival): on the streams side a
planner turn has two shapes only, the event and the training row (:class:`~streamgrpo.avro.records.SampleTurn`
inside the TrainingSample). Its advantage is the rollout's trajectory advantage, given to every turn
(Flow-GRPO). Its id is ``ids.sample_id(rollout_id)``: a re-emission after a crash carries the same
id, so the trainer de-duplicates by id. The sample carries its planner turns'
sampling parameters (a rollout's turns share its request's), so the trainer recomputes with them.

What is not covered: storing action payloads and the timing of emission (see ``window.py``).
"""

from __future__ import annotations

from collections.abc import Callable

from streamgrpo.avro import ids
from streamgrpo.avro import records as R
from streamgrpo.streams.window_core import GroupState


def action_key(rollout_id: str, turn: int) -> str:
    """Key of one stored planner turn in the actions table."""
    return f"{rollout_id}/{turn}"


def ready_rollouts(state: GroupState, has_turn: Callable[[str, int], bool]) -> list[str]:
    """Rollouts whose sample can be emitted now, in a stable order.

    ``has_turn(rollout_id, turn)`` says whether that planner turn arrived; turns are 1-based, so a
    rollout of T turns is complete when turns 1..T all arrived.
    """
    if not (state.closed and state.trains):
        return []
    out = []
    for rollout in sorted(state.advantages):
        if rollout in state.emitted or rollout not in state.turns_expected:
            continue
        if all(has_turn(rollout, t) for t in range(1, state.turns_expected[rollout] + 1)):
            out.append(rollout)
    return out


def sample_turn(action: R.PlannerAction) -> R.SampleTurn:
    """The training row of one planner turn."""
    return R.SampleTurn(int(action.envelope.turn or 0), list(action.prompt_token_ids), list(action.action_token_ids),
                        list(action.behaviour_logprobs))


def build_sample(state: GroupState, rollout_id: str, actions: list[R.PlannerAction]) -> R.TrainingSample:
    """The TrainingSample of ``rollout_id``; ``actions`` (its PlannerActions) in any order, one per turn number."""
    if not actions:
        raise ValueError(f"rollout {rollout_id} has no planner turns; nothing to train on")
    ordered = sorted(actions, key=lambda a: int(a.envelope.turn or 0))
    reward = state.rewards[rollout_id]
    return R.TrainingSample(
        envelope=R.Envelope.new("streams", event_id=ids.sample_id(rollout_id), task_id=state.task_id,
                                group_id=state.group_id, rollout_id=rollout_id),
        turns=[sample_turn(a) for a in ordered],
        advantage=state.advantages[rollout_id],
        reward=reward.score,
        group_mean=state.mean,
        group_std=state.std,
        group_size=state.size,
        estimator=state.estimator,
        adapter_name=ordered[0].adapter_name,
        behaviour_version=ordered[0].adapter_version,
        sampling=ordered[0].sampling,
        demo_source=state.demo_source,
    )
