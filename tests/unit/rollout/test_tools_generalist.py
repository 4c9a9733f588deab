from __future__ import annotations

from streamgrpo.inference.errors import BackendUnavailableError
from streamgrpo.rollout.tools.generalist import Generalist


def last_line_reverser(prompt: str) -> str:
    """A tiny deterministic 'model': answers with the question reversed."""
    question = prompt.split("Question: ", 1)[1].split("\nAnswer:", 1)[0]
    return f"  {question[::-1]}  "


def test_answers_through_generate_and_strips() -> None:
    seen: list[str] = []

    def generate(prompt: str) -> str:
        seen.append(prompt)
        return last_line_reverser(prompt)

    tool = Generalist(generate)
    result = tool.run({"question": "abc?"})
    assert result.error is None and result.output == "?cba"
    assert seen == [tool.prompt("abc?")] and "Question: abc?" in seen[0]


def test_failures_become_tool_errors() -> None:
    def down(prompt: str) -> str:
        raise BackendUnavailableError("endpoint http://vllm:8000 refused the connection")

    assert "generalist model failed: endpoint" in (Generalist(down).run({"question": "q"}).error or "")
    assert Generalist(lambda p: "   ").run({"question": "q"}).error == "the generalist model returned an empty answer"
    assert Generalist(last_line_reverser).run({"question": " "}).error == "empty question; ask a complete question"
    long = Generalist(last_line_reverser, max_question_chars=20).run({"question": "x" * 21})
    assert long.error == "question longer than 20 characters"


def test_output_is_bounded() -> None:
    result = Generalist(lambda p: "y" * 5000, max_output_chars=100).run({"question": "q"})
    assert result.truncated and len(result.output) == 100
