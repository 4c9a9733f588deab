"""The synthesiser role: writes the final answer when the trajectory stops.

Modes (registry :data:`SYNTHESISERS`):

- ``passthrough`` (default for training on CPU): the planner's answer; when the turn budget ran
  out without one, the last successful tool output (clipped); else an empty answer;
- ``model``: a fixed text model writes a one-sentence answer from the question, the notes and the
  planner's draft answer; an empty reply falls back to ``passthrough``.

What is covered: the answer text. What is not: judging it (the judge service does).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from streamgrpo.rollout.policy.base import TextModel
from streamgrpo.rollout.roles.types import TurnRecord, pick_mode, prompt_hash, require_model

SYSTEM_TEMPLATE = """Answer the question in one short sentence using the notes. Write only the answer."""

USER_TEMPLATE = """Question: {question}
Notes:
{notes}
Draft answer: {draft}"""

PROMPT_HASH = prompt_hash(SYSTEM_TEMPLATE, USER_TEMPLATE)
ANSWER_LIMIT = 1000


def planner_answer(history: Sequence[TurnRecord]) -> str | None:
    """The planner's answer, if its last parsed step was one."""
    for record in reversed(history):
        if record.step is not None and record.step.is_final:
            return record.step.answer
    return None


def passthrough_answer(history: Sequence[TurnRecord]) -> str:
    """Planner's answer, else the last successful tool output, else ''."""
    answer = planner_answer(history)
    if answer is not None:
        return answer[:ANSWER_LIMIT]
    for record in reversed(history):
        obs = record.observation
        if obs is not None and obs.error is None and obs.output.strip():
            return obs.output.strip()[:ANSWER_LIMIT]
    return ""


class Synthesiser:
    """Base: ``answer(question, history)`` -> final answer text."""

    mode = "passthrough"
    prompt_hash = ""

    def answer(self, question: str, history: Sequence[TurnRecord]) -> str:
        return passthrough_answer(history)


class PassthroughSynthesiser(Synthesiser):
    """The planner's answer (or the last tool output)."""


@dataclass
class ModelSynthesiser(Synthesiser):
    """A fixed text model writes the answer from the notes."""

    model: TextModel
    max_tokens: int = 64
    mode = "model"
    prompt_hash = PROMPT_HASH

    def messages(self, question: str, history: Sequence[TurnRecord]) -> list[dict[str, str]]:
        notes = "\n".join(
            f"- {r.observation.tool}: {r.observation.summary(200)}" for r in history[-3:] if r.observation is not None
        ) or "- (none)"
        draft = planner_answer(history) or "(none)"
        return [{"role": "system", "content": SYSTEM_TEMPLATE},
                {"role": "user", "content": USER_TEMPLATE.format(question=question, notes=notes, draft=draft)}]

    def answer(self, question: str, history: Sequence[TurnRecord]) -> str:
        reply = self.model.complete(self.messages(question, history), max_tokens=self.max_tokens, temperature=0.0)
        text = reply.strip()
        return text[:ANSWER_LIMIT] if text else passthrough_answer(history)


def _passthrough(model: TextModel | None, **_: Any) -> Synthesiser:
    return PassthroughSynthesiser()


def _model(model: TextModel | None, **kw: Any) -> Synthesiser:
    model = require_model("synthesiser", model)
    return ModelSynthesiser(model, **kw)


#: mode -> factory(text_model, **options)
SYNTHESISERS: dict[str, Callable[..., Synthesiser]] = {"passthrough": _passthrough, "model": _model}


def build_synthesiser(mode: str, model: TextModel | None = None, **options: Any) -> Synthesiser:
    """The synthesiser for ``mode`` (see :data:`SYNTHESISERS`)."""
    return pick_mode("synthesiser", SYNTHESISERS, mode, model, **options)
