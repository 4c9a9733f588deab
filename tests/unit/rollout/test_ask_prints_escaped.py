"""``streamgrpo ask`` prints model and tool text with terminal control sequences escaped (issue 24, finding 12):
a tool output carrying OSC 52 (set the clipboard), a CSI colour or a carriage return reaches the terminal as
visible text, never as a sequence it would act on. Real Avro events through the printer ``ask`` uses."""

from __future__ import annotations

import dataclasses

import pytest

from streamgrpo.avro import records as R
from streamgrpo.rollout.cli import _StepPrinter

OSC52 = "\x1b]52;c;cm0gLXJmIH4K\x07"


def test_tool_output_and_answer_escapes_are_printed_escaped(capsys: pytest.CaptureFixture[str]) -> None:
    from fixtures.sample_events import sample_events

    events = sample_events()
    obs = next(e for e in events if isinstance(e, R.ToolObservation))
    done = next(e for e in events if isinstance(e, R.RolloutCompleted))
    printer = _StepPrinter(f"what is 2+2?{OSC52}")
    printer(dataclasses.replace(obs, output=f"4{OSC52}\x1b[31mred\rover", command=f"print(4){OSC52}"))
    printer(dataclasses.replace(done, final_answer=f"4{OSC52}\u202eevil\u2028forged\u2029line", error=None))
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out and "\r" not in out and "\u202e" not in out
    assert "\u2028" not in out and "\u2029" not in out and "\\u2028forged\\u2029line" in out  # no line breaks
    assert out.count("\\x1b]52;c;cm0gLXJmIH4K\\x07") == 4  # question, command, output, answer: shown, not run
    assert "\\x1b[31mred over" in out and "\\u202eevil" in out  # the observe line folds whitespace (CR too)
