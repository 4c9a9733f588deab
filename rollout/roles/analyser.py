"""Query analysis (step 0 of a trajectory): which skills and tools the question needs.

Done ONCE per group (all N rollouts of a group share the question, so they share the analysis),
before the first planner turn. Decision: the analysis is NOT trained and NOT a PlannerAction. It
is produced by the fixed role model (the base planner model with the adapter disabled) or by a
rule, and it becomes part of the planner's state prompt ("Skills: ...; Useful tools: ..."), so its
effect is recorded in every PlannerAction's prompt token ids. Training only the "next step"
decisions keeps the credit assignment on the choice GRPO trains here (which tool, or answer now).

Modes (registry :data:`ANALYSERS`):

- ``rule`` (default for training on CPU): keyword cues per skill mapped to the enabled tools;
- ``model``: a fixed text model replies ``{"skills": [...], "tools": [...]}``; unknown tool names
  are dropped; an unparseable reply falls back to the rule (``mode="model-fallback"``).

What is covered: the analysis value. What is not: any training signal for it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from streamgrpo.inference.base import TextModel
from streamgrpo.rollout.roles.types import QueryAnalysis, pick_mode, prompt_hash, require_model
from streamgrpo.rollout.structured import parse_into

SYSTEM_TEMPLATE = """List the skills and tools a question needs. Reply with ONE JSON object only:
{schema}
Tools: {tools}"""

USER_TEMPLATE = "Question: {question}"

PROMPT_HASH = prompt_hash(SYSTEM_TEMPLATE, USER_TEMPLATE)

#: skill -> (cue regex, tools that serve it in order of preference)
SKILL_CUES: dict[str, tuple[str, tuple[str, ...]]] = {
    "arithmetic": (r"\d|calculat|squared|cubed|sum|product|plus|minus|times|divid|percent|how many|total",
                   ("calculator", "python")),
    "facts": (r"\bwho\b|\bwhat\b|\bwhen\b|\bwhere\b|\bwhich\b|year|event|histor|capital|born|invent|discover|founded",
              ("knowledge_search", "wikipedia", "generalist")),
    "programming": (r"\bcode\b|program|python|function|algorithm|list of|sort|prime", ("python",)),
}


def rule_analysis(question: str, tools: Sequence[str]) -> QueryAnalysis:
    """Keyword cues -> skills -> the enabled tools that serve them."""
    text = question.lower()
    skills: list[str] = []
    chosen: list[str] = []
    for skill, (cue, preferred) in SKILL_CUES.items():
        if re.search(cue, text):
            skills.append(skill)
            for name in preferred:
                if name in tools and name not in chosen:
                    chosen.append(name)
                    break
    return QueryAnalysis(tuple(skills), tuple(chosen), mode="rule")


class Analyser:
    """Base: ``analyse(question, tools)`` -> :class:`QueryAnalysis`."""

    mode = "rule"
    prompt_hash = ""

    def analyse(self, question: str, tools: Sequence[str]) -> QueryAnalysis:
        return rule_analysis(question, tools)


class RuleAnalyser(Analyser):
    """Keyword cues only; no model call."""


@dataclass
class ModelAnalyser(Analyser):
    """The fixed role model analyses the question."""

    model: TextModel
    max_tokens: int = 48
    mode = "model"
    prompt_hash = PROMPT_HASH

    def analyse(self, question: str, tools: Sequence[str]) -> QueryAnalysis:
        messages = [
            {"role": "system", "content": SYSTEM_TEMPLATE.format(schema=QueryAnalysis.SCHEMA, tools=", ".join(tools))},
            {"role": "user", "content": USER_TEMPLATE.format(question=question)},
        ]
        parsed = parse_into(self.model.complete(messages, max_tokens=self.max_tokens, temperature=0.0), QueryAnalysis)
        if parsed.value is None:
            return replace(rule_analysis(question, tools), mode="model-fallback")
        known = tuple(t for t in parsed.value.tools if t in tools)
        return replace(parsed.value, tools=known)


def _rule(model: TextModel | None, **_: Any) -> Analyser:
    return RuleAnalyser()


def _model(model: TextModel | None, **kw: Any) -> Analyser:
    model = require_model("analysis", model)
    return ModelAnalyser(model, **kw)


#: mode -> factory(text_model, **options)
ANALYSERS: dict[str, Callable[..., Analyser]] = {"rule": _rule, "model": _model}


def build_analyser(mode: str, model: TextModel | None = None, **options: Any) -> Analyser:
    """The analyser for ``mode`` (see :data:`ANALYSERS`)."""
    return pick_mode("analysis", ANALYSERS, mode, model, **options)
