"""The generalist tool: ask a language model a self-contained question.

It wraps a ``generate: Callable[[str], str]`` (a prompt in, a completion out) supplied by whoever
builds the tools: the rollout worker wires the local policy, an executor model or an
OpenAI-compatible endpoint. The tool adds a short instruction, bounds the question's length, and
turns a failing or empty generation into a ToolResult error.

Not covered: multi-turn chat, streaming, retries (the ``generate`` callable owns those), and
whether the answer is true: it is a model's opinion, and the planner is told so.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from streamgrpo.errors import StreamGRPOError
from streamgrpo.rollout.tools.base import Param, Tool, ToolExample, ToolResult, ToolSpec

PROMPT = (
    "Answer the question below accurately and concisely. If you are not sure, say so.\n\n"
    "Question: {question}\nAnswer:"
)


class Generalist(Tool):
    """``{"question": "What is the capital of France?"}`` -> the model's answer."""

    def __init__(self, generate: Callable[[str], str], *, max_question_chars: int = 2000,
                 max_output_chars: int = 2000) -> None:
        super().__init__(max_output_chars=max_output_chars)
        self.generate = generate
        self.max_question_chars = max_question_chars
        self.spec = ToolSpec(
            name="generalist",
            description="Asks a general-purpose language model a self-contained question and returns its answer. "
            "Good for common knowledge and explanations; it can be wrong and cannot compute reliably.",
            params=(Param("question", "string", "A complete question that makes sense on its own."),),
            limits=f"questions up to {max_question_chars} characters; answers are unverified.",
            examples=(ToolExample({"question": "Who wrote Don Quixote?"}, "Miguel de Cervantes."),),
        )

    def prompt(self, question: str) -> str:
        """The exact text sent to ``generate``."""
        return PROMPT.format(question=question.strip())

    def _call(self, args: dict[str, Any]) -> ToolResult:
        question = args["question"]
        if not question.strip():
            return ToolResult(output="", error="empty question; ask a complete question")
        if len(question) > self.max_question_chars:
            return ToolResult(output="", error=f"question longer than {self.max_question_chars} characters")
        try:
            answer = self.generate(self.prompt(question))
        except StreamGRPOError as exc:  # PolicyError, BackendUnavailableError...: the backend failed
            return ToolResult(output="", error=f"the generalist model failed: {exc}")
        if not isinstance(answer, str) or not answer.strip():
            return ToolResult(output="", error="the generalist model returned an empty answer")
        return ToolResult(output=answer.strip())
