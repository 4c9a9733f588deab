"""Bounds of one ``streamgrpo serve`` call, so that no caller can take the server's memory or threads.

- :class:`ServeLimits` (``serve --max-question-bytes``, ``--version-wait-s``): a question longer than
  ``max_question_bytes`` (UTF-8) is refused at once with an error saying the bound (:func:`check_question`); a call
  pinned to a version that is not announced within ``version_wait_s`` is refused (the wait holds no thread: the
  server awaits it on the event loop), and a worker thread waits at most as long for the version to load.
- :func:`fit_question`: a question whose planner prompt would exceed ``[rollout] max_prompt_tokens`` is cut (its
  start and its end are kept, joined by :data:`CUT_MARK`) so that the first planner prompt, with no history steps
  (what the loop falls back to), fits; the cut question is what the Task and the rollout record.

What is not covered: a bound on the model's time per turn (the turn budget ``max_turns`` and ``max_new_tokens``
bound it); a cut by meaning (the middle of a long question is dropped, whatever it says).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from streamgrpo.errors import StreamGRPOError

#: What replaces the middle of a question that was cut to fit the planner's prompt budget.
CUT_MARK = "\n[...]\n"
#: Tokens kept free for what the analysis of the question adds to the prompt beyond the rule analysis's estimate
#: (a model analyser's skills and tools line).
ANALYSIS_MARGIN_TOKENS = 48
#: Attempts of :func:`fit_question` to reach the budget (each re-counts the real prompt).
FIT_ATTEMPTS = 8


class QuestionTooLong(StreamGRPOError, ValueError):
    """A question beyond ``max_question_bytes``, or a prompt budget with no room for any question."""


@dataclass(frozen=True)
class ServeLimits:
    """Per-call bounds of ``streamgrpo serve`` (see the module docstring)."""

    max_question_bytes: int = 8192
    version_wait_s: float = 5.0

    def __post_init__(self) -> None:
        if self.max_question_bytes < 1 or not 0 <= self.version_wait_s <= 3600:
            raise ValueError(f"serve limits out of range: max_question_bytes {self.max_question_bytes} (>= 1), "
                             f"version_wait_s {self.version_wait_s} (0..3600)")


def check_question(question: str, limits: ServeLimits) -> None:
    """QuestionTooLong when ``question`` is longer than ``limits.max_question_bytes`` (UTF-8 bytes)."""
    size = len(question.encode("utf-8", errors="replace"))
    if size > limits.max_question_bytes:
        raise QuestionTooLong(f"the question is {size:,} bytes; this server accepts at most {limits.max_question_bytes:,} "
                              "(streamgrpo serve --max-question-bytes): shorten it or send the part that matters")


def prompt_tokens(question: str, ctx: Any) -> int:
    """Tokens of the largest first planner prompt ``question`` can get (no history steps, the next-step or the answer
    instruction, every worked example the prompt may show), plus :data:`ANALYSIS_MARGIN_TOKENS`."""
    from streamgrpo.rollout.roles import planner
    from streamgrpo.rollout.roles.analyser import rule_analysis
    from streamgrpo.rollout.roles.executor import tool_example

    tool_lines = [planner.tool_line(name, tool.spec.description, tool_example(tool)) for name, tool in ctx.tools.items()]
    analysis = rule_analysis(question, list(ctx.tools))
    examples = {ctx.example_key(analysis)} if ctx.planner_examples == "fixed" else set(planner.EXAMPLES)
    tokenizer = getattr(ctx.policy, "tokenizer", None)
    prefix = len(tokenizer.encode(ctx.response_prefix, add_special_tokens=False)) if ctx.response_prefix and \
        tokenizer is not None else 0
    longest = max(len(ctx.policy.chat_prompt(planner.build_messages(
        question, tool_lines, analysis, [], max_steps=0, clip=ctx.observation_clip, final=final, example=example)))
        for example in examples for final in (False, True))
    return longest + prefix + ANALYSIS_MARGIN_TOKENS


def _cut(question: str, keep_chars: int) -> str:
    head = keep_chars // 2
    return question[:head].rstrip() + CUT_MARK + question[len(question) - (keep_chars - head):].lstrip()


def fit_question(question: str, ctx: Any) -> tuple[str, bool]:
    """``(question, False)`` when its prompt fits ``ctx.max_prompt_tokens``, else ``(cut question, True)`` (start and
    end kept); QuestionTooLong when the prompt without a question already leaves no room."""
    question = question.strip()
    budget = int(ctx.max_prompt_tokens)
    used = prompt_tokens(question, ctx)
    if used <= budget:
        return question, False
    fixed = prompt_tokens(CUT_MARK.strip(), ctx)
    if fixed >= budget:
        raise QuestionTooLong(f"the planner prompt takes {fixed} tokens before any question; [rollout] "
                              f"max_prompt_tokens is {budget}: raise it")
    keep = len(question)
    for _ in range(FIT_ATTEMPTS):
        keep = max(0, min(keep - 1, int(keep * (budget - fixed) / max(1, used - fixed) * 0.95)))
        cut = _cut(question, keep)
        used = prompt_tokens(cut, ctx)
        if used <= budget:
            return cut, True
    return _cut(question, 0), True
