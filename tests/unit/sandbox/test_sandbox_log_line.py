"""A sandbox start failure whose text carries control characters reaches the worker's ERROR log as ONE escaped,
bounded line (issue 24, finding 12): nothing can forge log lines or send terminal escapes to whoever tails the
log. Since issue 38 (finding 18) a program's own stderr is never a start failure: the failure here is bubblewrap's
own (a bind source whose name carries the escapes). Real bwrap, real jailed child interpreters."""

from __future__ import annotations

import dataclasses
import logging

import pytest

from streamgrpo.sandbox._sandbox_child import EXIT_UNSAFE
from streamgrpo.sandbox.config import SandboxSettings
from streamgrpo.sandbox.jail import plan_jail
from streamgrpo.sandbox.runner import run_sandboxed

FORGED = "\x1b]52;c;Zm9v\x07 forged line\x1b[2J" * 20
LIMITS = SandboxSettings(cpu_seconds=2, wall_seconds=20, memory_mb=256)


def _sandbox_records(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith("python sandbox:")]


def test_a_start_failure_with_escapes_in_its_text_is_one_escaped_bounded_log_line(caplog: pytest.LogCaptureFixture,
                                                                                  ) -> None:
    plan = plan_jail(LIMITS)
    plan = dataclasses.replace(plan, python_dirs=(*plan.python_dirs, "/nonexistent-streamgrpo" + FORGED))
    with caplog.at_level(logging.ERROR, logger="streamgrpo.sandbox.runner"):
        run = run_sandboxed("print('ran')", LIMITS, plan=plan)
    assert run.jail_error is not None and "forged line" in run.jail_error
    records = _sandbox_records(caplog)
    assert len(records) == 1
    message = records[0]
    assert "\n" not in message and "\r" not in message and "\x1b" not in message and "\x07" not in message
    assert len(message) <= 450 and "\\x1b" in message


def test_a_programs_forged_stderr_and_exit_121_log_nothing(caplog: pytest.LogCaptureFixture) -> None:
    code = f"import os, sys\nsys.stderr.write({FORGED!r})\nsys.stderr.flush()\nos._exit({EXIT_UNSAFE})\n"
    with caplog.at_level(logging.ERROR, logger="streamgrpo.sandbox.runner"):
        run = run_sandboxed(code, LIMITS)
    assert run.jail_error is None and run.returncode == EXIT_UNSAFE
    assert _sandbox_records(caplog) == []
