"""The executor role: turns the planner's step into a concrete tool command, then runs the tool.

Modes (registry :data:`EXECUTORS`, chosen by ``RolloutConfig.executor_mode``, recorded in
``ToolObservation.executor_mode``):

- ``passthrough`` (default for training on CPU): the planner's input goes straight to the tool
  (:func:`~streamgrpo.rollout.tools.base.coerce_args` maps plain text to the tool's first parameter);
- ``model``: a fixed :class:`~streamgrpo.inference.base.TextModel` rewrites the planner's input
  into the exact tool input (``{"input": ...}``); if its output does not parse, the planner's input
  is used and the mode is recorded as ``model-fallback``.

What is covered: command building, one tool call per step, bounded outputs (the tool bounds them).
What is not covered: sandboxing (the python tool runs code in a separate process; never here) and
retries of failed tool calls (the error is observed by the planner, which may try again).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from streamgrpo.inference.base import TextModel
from streamgrpo.rollout.roles.types import (
    NextStep,
    Observation,
    ToolCommand,
    pick_mode,
    prompt_hash,
    require_model,
)
from streamgrpo.rollout.structured import parse_into
from streamgrpo.rollout.tools.base import Tool, coerce_args

SYSTEM_TEMPLATE = """You write the exact input for a tool. Reply with ONE JSON object only: {schema}
Tool {name}: {description}
Example: {example}"""

USER_TEMPLATE = """Question: {question}
Step: {goal}
Reply with the JSON object."""

PROMPT_HASH = prompt_hash(SYSTEM_TEMPLATE, USER_TEMPLATE)


def tool_example(tool: Tool) -> str | None:
    """The first example's first argument value, as text (what a planner would write)."""
    if not tool.spec.examples:
        return None
    args = dict(tool.spec.examples[0].args)
    if len(args) == 1:
        return str(next(iter(args.values())))
    return json.dumps(args, ensure_ascii=False)


def run_tool(tool: Tool, command: str, mode: str, hash_: str) -> Observation:
    """Run ``tool`` on ``command`` (text or a JSON object) and record what came back."""
    result = tool.run(coerce_args(tool.spec, command))
    return Observation(
        tool=tool.name, command=command, output=result.output, error=result.error,
        truncated=result.truncated, duration_ms=result.duration_ms, executor_mode=mode, prompt_hash=hash_,
    )


def unknown_tool(name: str, command: str, available: list[str], mode: str) -> Observation:
    """The observation of a step that named a tool that does not exist (the planner sees the error)."""
    return Observation(
        tool=name or "?", command=command, output="", executor_mode=mode,
        error=f"unknown tool {name!r}; available tools: {', '.join(available)}",
    )


class Executor:
    """Base: ``execute(question, step, tool)`` -> :class:`Observation`."""

    mode = "passthrough"
    prompt_hash = ""

    def execute(self, question: str, step: NextStep, tool: Tool) -> Observation:
        return run_tool(tool, step.input, self.mode, self.prompt_hash)


class PassthroughExecutor(Executor):
    """The planner's input goes to the tool as is."""


@dataclass
class ModelExecutor(Executor):
    """A fixed text model writes the tool input from the planner's step."""

    model: TextModel
    max_tokens: int = 64
    mode = "model"
    prompt_hash = PROMPT_HASH

    def messages(self, question: str, step: NextStep, tool: Tool) -> list[dict[str, str]]:
        example = tool_example(tool)
        system = SYSTEM_TEMPLATE.format(
            schema=ToolCommand.SCHEMA, name=tool.name, description=tool.spec.description.split("\n")[0][:160],
            example=json.dumps({"input": example}) if example else ToolCommand.SCHEMA,
        )
        return [{"role": "system", "content": system},
                {"role": "user", "content": USER_TEMPLATE.format(question=question, goal=step.input)}]

    def execute(self, question: str, step: NextStep, tool: Tool) -> Observation:
        reply = self.model.complete(self.messages(question, step, tool), max_tokens=self.max_tokens, temperature=0.0)
        parsed = parse_into(reply, ToolCommand)
        if parsed.value is None:
            return run_tool(tool, step.input, "model-fallback", self.prompt_hash)
        return run_tool(tool, parsed.value.input, self.mode, self.prompt_hash)


def _passthrough(model: TextModel | None, **_: Any) -> Executor:
    return PassthroughExecutor()


def _model(model: TextModel | None, **kw: Any) -> Executor:
    model = require_model("executor", model)
    return ModelExecutor(model, **kw)


#: mode -> factory(text_model, **options)
EXECUTORS: dict[str, Callable[..., Executor]] = {"passthrough": _passthrough, "model": _model}


def build_executor(mode: str, model: TextModel | None = None, **options: Any) -> Executor:
    """The executor for ``mode`` (see :data:`EXECUTORS`)."""
    return pick_mode("executor", EXECUTORS, mode, model, **options)
