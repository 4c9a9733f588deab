"""Executing a demonstration: the planner's replies are GIVEN (``RolloutRequest.demonstration.steps``), everything
else is the ordinary loop -- the real executor, tools, verifier and synthesiser, the same events.

Per turn, :func:`given_step` turns the step's text into the planner's action exactly as a sampled reply is
recorded: the state prompt's token ids (with the forced response prefix), the step's text after that prefix as
``action_text``, its token ids under the policy's tokenizer as ``action_token_ids``, and ``behaviour_logprobs``
of 0.0 each (the log-probability of a forced token: the behaviour policy of a demonstration is the demonstrator,
who gives that token with probability 1). The tokens are checked against the planner grammar of that turn
(the mask the trainer replays); a step the grammar refuses ends the rollout as ERROR with the reason, and so do
a step that does not parse, a tool call that fails (:func:`tool_problem`) and steps that run out without an
answer (:func:`unanswered`). The judge dead-letters every demonstration that did not end ANSWERED and correct
(``demonstration_failed`` / ``demonstration_wrong``), so a broken demonstration never trains.

What is covered: the given planner turns. What is not covered: sampling (none happens), training (a
demonstration's sample is trained by likelihood: :mod:`streamgrpo.trainer.losses.base`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from streamgrpo.avro import records as R
from streamgrpo.inference.base import Generation
from streamgrpo.rollout.roles.types import Observation
from streamgrpo.rollout.structured import Parsed

if TYPE_CHECKING:
    from streamgrpo.models.grammar import TokenGrammar

#: ``PlannerAction.engine`` of a given (not sampled) planner turn.
ENGINE = "demonstration"


def source_of(request: R.RolloutRequest) -> str | None:
    """The ``demo_source`` every event of ``request``'s rollout carries: its demonstration's source, or None."""
    return request.demonstration.source if request.demonstration is not None else None


def step_count(request: R.RolloutRequest) -> int:
    return len(request.demonstration.steps) if request.demonstration is not None else 0


def given_step(request: R.RolloutRequest, turn: int, prompt_ids: list[int], *, prefix: str, tokenizer: Any,
               grammar: TokenGrammar | None) -> Generation | str:
    """The planner's reply of ``turn`` as the demonstration gives it, or why it cannot be given (an error text).
    ``prefix``: the response prefix forced before every reply; ``tokenizer``: the policy's; ``grammar``: the planner
    grammar of ``request``'s replies (None: unconstrained)."""
    demo = request.demonstration
    if demo is None or not 1 <= turn <= len(demo.steps):
        return f"demonstration has no step {turn} (it gives {step_count(request)})"
    if turn > request.max_turns:
        return f"demonstration step {turn} is beyond the rollout's max_turns {request.max_turns}"
    if tokenizer is None:
        return "demonstrations need a policy with a tokenizer (policy 'local'): their token ids are the trained data"
    text = demo.steps[turn - 1]
    if not text.startswith(prefix):
        return f"demonstration step {turn} does not start with the planner's response prefix {prefix!r}: {text[:80]!r}"
    action = text[len(prefix):]
    token_ids = list(tokenizer.encode(action, add_special_tokens=False))
    if grammar is not None:
        try:
            grammar.replay(token_ids, turn)
        except ValueError as exc:
            return (f"demonstration step {turn} {text[:160]!r} is refused by the planner grammar (its tools, or an "
                    f"answer at the last turn): {exc}")
    return Generation(prompt_token_ids=prompt_ids, text=action, token_ids=token_ids, logprobs=[0.0] * len(token_ids),
                      adapter_name=request.adapter_name, adapter_version=request.adapter_version, latency_ms=0,
                      engine=ENGINE)


def parse_problem(parsed: Parsed[object], turn: int) -> str | None:
    """Why a given step cannot stand as the planner's reply (it must parse strictly), or None."""
    if parsed.status is not R.ParseStatus.STRICT or parsed.value is None:
        return f"demonstration step {turn} does not parse as a planner reply ({parsed.status.value}): {parsed.error}"
    return None


def tool_problem(observation: Observation, turn: int) -> str:
    return f"demonstration step {turn}: the {observation.tool} call failed: {observation.error}"


def unanswered(request: R.RolloutRequest) -> str:
    return f"demonstration ended after its {step_count(request)} step(s) without an answer"
