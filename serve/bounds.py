"""Bounds of one ``streamgrpo serve`` call, so that no caller can take the server's memory or threads.

- :class:`ServeLimits` (``[serve]`` settings; ``serve --max-question-bytes``, ``--version-wait-s``): a question
  longer than ``max_question_bytes`` (UTF-8) is refused at once with an error saying the bound
  (:func:`check_question`), and so is any other text argument longer than ``max_argument_bytes`` (version, rollout
  id, comment: :func:`check_argument`; a feedback token, which the server signs, at most
  :data:`~streamgrpo.serve.tokens.MAX_TOKEN_BYTES` or ``max_argument_bytes`` if larger); both checks run on the server's event loop before the call
  takes a thread. A call pinned to a version that is not announced within ``version_wait_s`` is refused (the wait
  holds no thread: the server awaits it on the event loop), and a worker thread waits at most as long for the
  version to load. At most ``max_concurrent_solves`` solves hold a thread at once (the server's own limiter; the
  others wait on the event loop), and ``adapters`` / ``feedback`` run on a limiter of their own, so that solves
  never keep them waiting.
- :func:`fit_question`: a question whose planner prompt would exceed ``[rollout] max_prompt_tokens`` is cut (its
  start and its end are kept, joined by :data:`CUT_MARK`) so that the first planner prompt, with no history steps
  (what the loop falls back to), fits; the cut question is what the Task and the rollout record.

What is not covered: a bound on the model's time per turn (the turn budget ``max_turns`` and ``max_new_tokens``
bound it); a cut by meaning (the middle of a long question is dropped, whatever it says); the size of one raw
message before it is parsed (over HTTP the SDK refuses a body over its ``max_request_body_size``, set to
:func:`max_body_bytes`, with 413; over stdio the client that started the process is trusted with its own pipe).
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


class ArgumentTooLong(StreamGRPOError, ValueError):
    """A text argument (other than the question) beyond ``max_argument_bytes``."""


@dataclass(frozen=True)
class ServeLimits:
    """Per-call bounds of ``streamgrpo serve`` (see the module docstring)."""

    max_question_bytes: int = 8192
    version_wait_s: float = 5.0
    max_argument_bytes: int = 2048
    max_concurrent_solves: int = 8

    def __post_init__(self) -> None:
        if self.max_question_bytes < 1 or not 0 <= self.version_wait_s <= 3600 or self.max_argument_bytes < 1 \
                or self.max_concurrent_solves < 1:
            raise ValueError(f"serve limits out of range: max_question_bytes {self.max_question_bytes} (>= 1), "
                             f"version_wait_s {self.version_wait_s} (0..3600), max_argument_bytes "
                             f"{self.max_argument_bytes} (>= 1), max_concurrent_solves {self.max_concurrent_solves} "
                             "(>= 1)")


def max_body_bytes(limits: ServeLimits) -> int:
    """The largest HTTP request body the server reads: room for a question and four other arguments at their bounds,
    each JSON-escaped at worst (6 bytes a byte: ``\\u0000``), plus the envelope; never below 4 MiB (the SDK's
    default), so that a question over the bound still gets this server's own error rather than a bare 413."""
    return max(4 * 1024 * 1024, 6 * (limits.max_question_bytes + 4 * limits.max_argument_bytes) + 64 * 1024)


def check_argument(name: str, value: str | None, limits: ServeLimits) -> None:
    """ArgumentTooLong when the text argument ``name`` is longer than ``limits.max_argument_bytes`` (UTF-8)."""
    size = len((value or "").encode("utf-8", errors="replace"))
    if size > limits.max_argument_bytes:
        raise ArgumentTooLong(f"`{name}` is {size:,} bytes; this server accepts at most {limits.max_argument_bytes:,} "
                              "for it ([serve] max_argument_bytes)")


def check_question(question: str, limits: ServeLimits) -> None:
    """QuestionTooLong when ``question`` is longer than ``limits.max_question_bytes`` (UTF-8 bytes)."""
    size = len(question.encode("utf-8", errors="replace"))
    if size > limits.max_question_bytes:
        raise QuestionTooLong(f"the question is {size:,} bytes; this server accepts at most {limits.max_question_bytes:,} "
                              "(streamgrpo serve --max-question-bytes, [serve] max_question_bytes): shorten it or send the part "
                              "that matters")


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
