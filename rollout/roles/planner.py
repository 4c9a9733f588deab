"""The planner role: the ONLY trained role. Its prompt template lives here, with its version hash.

Each turn the planner sees the question, the query analysis, the tool list and the previous steps,
and replies with ONE JSON object: call one tool (``{"tool": ..., "input": ...}``) or answer
(``{"answer": ...}``). That choice is what GRPO trains. The prompt is kept short (the default
SmolLM2-135M has a 2k context): one line per tool, one compact example, and only the most recent
steps with clipped observations (:func:`build_messages` drops older steps to fit a token budget).

With ``[rollout] constrain`` on (the default for the local policy) the reply is sampled under the
planner grammar (:mod:`streamgrpo.models.grammar`, built from the registered tools), so it always
parses; :func:`parse` still repairs free replies (vLLM, ``constrain = "off"``).

What is covered: prompt building and parsing of the planner's output.
What is not covered: generation (the policy backend) and what happens after the decision (loop).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from streamgrpo.rollout.roles.types import NextStep, QueryAnalysis, ToolFirstStep, TurnRecord, prompt_hash
from streamgrpo.rollout.structured import Parsed, parse_into

#: The agent role of this module's actions (``PlannerAction.role``).
ROLE = "planner"

SYSTEM_TEMPLATE = """You plan the steps of a tool-using assistant. Reply with ONE JSON object only:
{schema}
Tools:
{tools}
Use a tool to get what you need, then answer with the tool's result.
Example:
Question: What is 6 times 7?
Step 1: {{"tool": "calculator", "input": "6*7"}}
Result: 42
Step 2: {{"answer": "42"}}"""

USER_TEMPLATE = """Question: {question}
{analysis}{history}{instruction}"""

#: The last line of the user message: on a normal turn, and on the last allowed turn (which must answer).
NEXT_INSTRUCTION = "Reply with the next JSON object."
FINAL_INSTRUCTION = "This is the last step: reply with the answer JSON object, using the results above."

STEP_TEMPLATE = "Step {turn}: {action}\nResult: {result}\n"

PROMPT_HASH = prompt_hash(SYSTEM_TEMPLATE, USER_TEMPLATE, STEP_TEMPLATE, NEXT_INSTRUCTION, FINAL_INSTRUCTION)

#: The system prompt's worked example (the calculator one, in SYSTEM_TEMPLATE).
_EXAMPLE_CALCULATOR = SYSTEM_TEMPLATE[SYSTEM_TEMPLATE.index("Example:"):]

#: ``[rollout] planner_examples = "analysis"``: the worked example follows the query analysis's first useful tool,
#: so a question the analysis sends to the archive shows an archive call instead of a calculator call, and one that
#: needs both shows both. The entities are invented (in no corpus, no task); the planner still chooses every step.
EXAMPLES: dict[str, str] = {
    "calculator": _EXAMPLE_CALCULATOR,
    "knowledge_search": """Example:
Question: According to the archive, what is the capital of the Kingdom of Velmora?
Step 1: {{"tool": "knowledge_search", "input": "capital of the Kingdom of Velmora"}}
Result: The Kingdom of Velmora was founded in the year 1234 by Ada Brennick. Its capital is Tolmere, a city with a population of 5678.
Step 2: {{"answer": "Tolmere"}}""",
    "calculator+knowledge_search": """Example:
Question: Compute 1000 + 234. Which kingdom was founded in that year according to the archive?
Step 1: {{"tool": "calculator", "input": "1000+234"}}
Result: 1234
Step 2: {{"tool": "knowledge_search", "input": "kingdom founded in the year 1234"}}
Result: The Kingdom of Velmora was founded in the year 1234 by Ada Brennick.
Step 3: {{"answer": "Velmora"}}""",
}

#: Prompt hash of each example choice (``calculator`` is :data:`PROMPT_HASH`: the fixed prompt's).
EXAMPLE_HASHES: dict[str, str] = {
    k: PROMPT_HASH if k == "calculator" else prompt_hash(SYSTEM_TEMPLATE.replace(_EXAMPLE_CALCULATOR, v),
                                                         USER_TEMPLATE, STEP_TEMPLATE, NEXT_INSTRUCTION,
                                                         FINAL_INSTRUCTION)
    for k, v in EXAMPLES.items()
}


def example_for(analysis: QueryAnalysis | None, mode: str = "fixed") -> str:
    """The key of :data:`EXAMPLES` the planner's prompt shows: always ``calculator`` in mode ``fixed``; in mode
    ``analysis`` the analysis's useful tools (archive and calculator together: the two-step example)."""
    tools = set(analysis.tools) if analysis is not None and mode == "analysis" else set()
    if "knowledge_search" in tools:
        return "calculator+knowledge_search" if "calculator" in tools else "knowledge_search"
    return "calculator"


def tool_line(name: str, description: str, example: str | None = None, limit: int = 70) -> str:
    """``- name: first clause of the description (e.g. <example>)``, clipped at a word boundary."""
    first = re.split(r"\. |\n| \(", description.strip(), maxsplit=1)[0].rstrip(".")
    if len(first) > limit:
        first = first[:limit].rsplit(" ", 1)[0]
    line = f"- {name}: {first}"
    return f"{line} (e.g. {example[:40]})" if example else line


def render_step(record: TurnRecord, clip: int) -> str:
    """One previous turn as the planner sees it."""
    if record.step is None:
        action = record.action_text.strip()[:80] or "(empty)"
        result = "invalid reply, answer with one JSON object"
    elif record.step.is_final:
        action, result = f'{{"answer": "{record.step.answer}"}}', "answered"
    else:
        action = f'{{"tool": "{record.step.tool}", "input": "{record.step.input[:80]}"}}'
        result = record.observation.summary(clip) if record.observation else "(no result)"
    return STEP_TEMPLATE.format(turn=record.turn, action=action, result=result)


def build_messages(
    question: str,
    tool_lines: Sequence[str],
    analysis: QueryAnalysis | None,
    history: Sequence[TurnRecord],
    *,
    max_steps: int = 3,
    clip: int = 160,
    final: bool = False,
    example: str = "calculator",
) -> list[dict[str, str]]:
    """Chat messages of the planner's state: system (format, tools, the ``example`` of :data:`EXAMPLES`) + user
    (question, steps, and the instruction: the next object, or on the ``final`` turn the answer)."""
    template = SYSTEM_TEMPLATE.replace(_EXAMPLE_CALCULATOR, EXAMPLES[example])
    system = template.format(schema=NextStep.SCHEMA, tools="\n".join(tool_lines))
    analysis_text = ""
    if analysis is not None and (analysis.tools or analysis.skills):
        parts = []
        if analysis.skills:
            parts.append("Skills: " + ", ".join(analysis.skills))
        if analysis.tools:
            parts.append("Useful tools: " + ", ".join(analysis.tools))
        analysis_text = "; ".join(parts) + "\n"
    steps = list(history)[-max_steps:] if max_steps > 0 else []
    history_text = "".join(render_step(r, clip) for r in steps)
    user = USER_TEMPLATE.format(question=question.strip(), analysis=analysis_text, history=history_text,
                                instruction=FINAL_INSTRUCTION if final else NEXT_INSTRUCTION)
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def parse(text: str, *, answer_in_call: bool = False) -> Parsed[NextStep]:
    """Parse the planner's output (strict, repaired, or FAILED; never raises). An object with a tool call AND
    an answer is the tool call (the answer was written before the tool's result), unless ``answer_in_call``."""
    return parse_into(text, NextStep if answer_in_call else ToolFirstStep)
