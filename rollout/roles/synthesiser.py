"""The synthesiser role: writes the final answer when the trajectory stops.

Modes (registry :data:`SYNTHESISERS`):

- ``passthrough`` (default for training on CPU): the planner's answer, or an empty answer when it
  never answered. (It used to hand in the last successful tool output when the turn budget ran out; a
  trained planner learned to exploit that by never answering, so that fallback is gone: with the
  default ``answer_at_last_turn`` the planner always answers at the last turn);
- ``model``: a fixed text model writes a one-sentence answer from the question, the notes and the
  planner's draft answer; an empty reply falls back to ``passthrough``.

What is covered: the answer text. What is not: judging it (the judge service does).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from streamgrpo.inference.base import TextModel
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
    """The planner's answer, else ''."""
    answer = planner_answer(history)
    return answer[:ANSWER_LIMIT] if answer is not None else ""


class Synthesiser:
    """Base: ``answer(question, history)`` -> final answer text."""

    mode = "passthrough"
    prompt_hash = ""

    def answer(self, question: str, history: Sequence[TurnRecord]) -> str:
        return passthrough_answer(history)


class PassthroughSynthesiser(Synthesiser):
    """The planner's answer (or '' when it never answered)."""


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
