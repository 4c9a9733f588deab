"""The verifier role: after each turn, stop (enough to answer) or continue.

Modes (registry :data:`VERIFIERS`, recorded in ``Verdict.verifier_mode``):

- ``rule`` (default for training on CPU): stop exactly when the planner answered;
- ``model``: when the planner answered, stop; when it called a tool, a fixed text model reads the
  question and the observations and replies ``{"stop": ..., "reason": ...}``; an unparseable reply
  falls back to the rule (recorded as ``model-fallback``).

A planner output that did not parse always continues (the next prompt shows the planner its error).

What is covered: the stop/continue decision. What is not: the turn budget (the loop enforces
``max_turns``) and the final answer (synthesiser).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from streamgrpo.inference.base import TextModel
from streamgrpo.rollout.roles.types import TurnRecord, Verification, pick_mode, prompt_hash, require_model
from streamgrpo.rollout.structured import parse_into

SYSTEM_TEMPLATE = """You check if the notes are enough to answer the question. Reply with ONE JSON object only:
{schema}"""

USER_TEMPLATE = """Question: {question}
Notes:
{notes}
Reply with the JSON object."""

PROMPT_HASH = prompt_hash(SYSTEM_TEMPLATE, USER_TEMPLATE)


@dataclass(frozen=True)
class VerdictDecision:
    """``stop`` or continue, why, and which mode decided."""

    stop: bool
    analysis: str
    mode: str
    prompt_hash: str = ""


def rule_decision(record: TurnRecord) -> VerdictDecision:
    """Stop when the planner answered; continue otherwise."""
    if record.step is None:
        return VerdictDecision(False, f"planner output did not parse: {record.parse_error or 'unknown'}", "rule")
    if record.step.is_final:
        return VerdictDecision(True, "planner answered", "rule")
    obs = record.observation
    what = f"{record.step.tool} returned an error" if obs and obs.error else f"{record.step.tool} returned a result"
    return VerdictDecision(False, f"{what}; planner has not answered yet", "rule")


class Verifier:
    """Base: ``decide(question, history)`` on the last record of ``history``."""

    mode = "rule"
    prompt_hash = ""

    def decide(self, question: str, history: Sequence[TurnRecord]) -> VerdictDecision:
        return rule_decision(history[-1])


class RuleVerifier(Verifier):
    """Stop exactly when the planner answers."""


@dataclass
class ModelVerifier(Verifier):
    """A fixed text model judges whether the observations so far suffice."""

    model: TextModel
    max_tokens: int = 48
    mode = "model"
    prompt_hash = PROMPT_HASH

    def messages(self, question: str, history: Sequence[TurnRecord]) -> list[dict[str, str]]:
        notes = "\n".join(
            f"- {r.step.tool}({r.step.input[:60]}): {r.observation.summary(200)}"
            for r in history[-3:] if r.step is not None and r.observation is not None
        ) or "- (none)"
        return [{"role": "system", "content": SYSTEM_TEMPLATE.format(schema=Verification.SCHEMA)},
                {"role": "user", "content": USER_TEMPLATE.format(question=question, notes=notes)}]

    def decide(self, question: str, history: Sequence[TurnRecord]) -> VerdictDecision:
        last = history[-1]
        if last.step is None or last.step.is_final:
            rule = rule_decision(last)
            return VerdictDecision(rule.stop, rule.analysis, self.mode, self.prompt_hash)
        reply = self.model.complete(self.messages(question, history), max_tokens=self.max_tokens, temperature=0.0)
        parsed = parse_into(reply, Verification)
        if parsed.value is None:
            rule = rule_decision(last)
            return VerdictDecision(rule.stop, f"{rule.analysis} (verifier reply unparseable)", "model-fallback",
                                   self.prompt_hash)
        return VerdictDecision(parsed.value.stop, parsed.value.reason or "-", self.mode, self.prompt_hash)


def _rule(model: TextModel | None, **_: Any) -> Verifier:
    return RuleVerifier()


def _model(model: TextModel | None, **kw: Any) -> Verifier:
    model = require_model("verifier", model)
    return ModelVerifier(model, **kw)


#: mode -> factory(text_model, **options)
VERIFIERS: dict[str, Callable[..., Verifier]] = {"rule": _rule, "model": _model}


def build_verifier(mode: str, model: TextModel | None = None, **options: Any) -> Verifier:
    """The verifier for ``mode`` (see :data:`VERIFIERS`)."""
    return pick_mode("verifier", VERIFIERS, mode, model, **options)
