"""Sample assembly (pure): one TrainingSample per trained rollout, with EVERY planner turn.

A rollout's sample is *ready* when its group is closed and trains, the rollout has an advantage,
its RolloutCompleted said how many planner turns it took, and that many distinct turns arrived.
The sample's turns are sorted by turn number (duplicates were dropped on arrival); its advantage is
the rollout's trajectory advantage, given to every turn (Flow-GRPO). Its id is
``derived_id("sample", rollout_id)``: a re-emission after a crash carries the same id, so the
trainer de-duplicates by id. The sample carries its planner turns' sampling parameters (a rollout's
turns share its request's), so the trainer recomputes with them.

What is not covered: storing action payloads and the timing of emission (see ``window.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from streamgrpo.avro import records as R
from streamgrpo.streams import ids
from streamgrpo.streams.window_core import GroupState


@dataclass(frozen=True)
class StoredTurn:
    """The part of a PlannerAction a TrainingSample needs (kept in the actions table)."""

    turn: int
    prompt_token_ids: list[int]
    action_token_ids: list[int]
    behaviour_logprobs: list[float]
    adapter_name: str
    adapter_version: int
    sampling: R.SamplingParams | None = None

    @classmethod
    def from_action(cls, action: R.PlannerAction) -> StoredTurn:
        return cls(int(action.envelope.turn or 0), list(action.prompt_token_ids), list(action.action_token_ids),
                   list(action.behaviour_logprobs), action.adapter_name, int(action.adapter_version), action.sampling)

    def to_dict(self) -> dict[str, object]:
        return {"t": self.turn, "p": self.prompt_token_ids, "a": self.action_token_ids, "l": self.behaviour_logprobs,
                "n": self.adapter_name, "v": self.adapter_version,
                "s": None if self.sampling is None else self.sampling.to_avro()}

    @classmethod
    def from_dict(cls, d: Mapping[str, object]) -> StoredTurn:
        s = d.get("s")  # absent in entries stored before samples carried sampling parameters
        sampling = R.SamplingParams.from_avro(dict(s)) if isinstance(s, Mapping) else None
        return cls(int(d["t"]), list(d["p"]), list(d["a"]), list(d["l"]), str(d["n"]), int(d["v"]),  # type: ignore[call-overload,arg-type]
                   sampling)


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


def build_sample(state: GroupState, rollout_id: str, turns: list[StoredTurn]) -> R.TrainingSample:
    """The TrainingSample of ``rollout_id``; ``turns`` in any order, one per turn number."""
    if not turns:
        raise ValueError(f"rollout {rollout_id} has no planner turns; nothing to train on")
    ordered = sorted(turns, key=lambda t: t.turn)
    reward = state.rewards[rollout_id]
    return R.TrainingSample(
        envelope=R.Envelope.new("streams", event_id=ids.sample_id(rollout_id), task_id=state.task_id,
                                group_id=state.group_id, rollout_id=rollout_id),
        turns=[R.SampleTurn(t.turn, t.prompt_token_ids, t.action_token_ids, t.behaviour_logprobs) for t in ordered],
        advantage=state.advantages[rollout_id],
        reward=reward.score,
        group_mean=state.mean,
        group_std=state.std,
        group_size=state.size,
        estimator=state.estimator,
        adapter_name=ordered[0].adapter_name,
        behaviour_version=ordered[0].adapter_version,
        sampling=ordered[0].sampling,
    )
