"""A sandbox start failure that quotes the program's own stderr reaches the worker's ERROR log as ONE escaped,
bounded line (issue 24, finding 12): the program cannot forge log lines or send terminal escapes to whoever tails
the log. Real jailed child interpreters."""

from __future__ import annotations

import logging

import pytest

from streamgrpo.sandbox._sandbox_child import EXIT_UNSAFE
from streamgrpo.sandbox.config import SandboxSettings
from streamgrpo.sandbox.runner import run_sandboxed

FORGED = "\n2026-01-01 ERROR streamgrpo.trainer: forged line\x1b]52;c;Zm9v\x07\r"


def test_a_programs_stderr_in_a_start_failure_is_one_escaped_bounded_log_line(caplog: pytest.LogCaptureFixture,
                                                                             ) -> None:
    code = f"import os, sys\nsys.stderr.write({FORGED!r} * 40)\nsys.stderr.flush()\nos._exit({EXIT_UNSAFE})\n"
    with caplog.at_level(logging.ERROR, logger="streamgrpo.sandbox.runner"):
        run = run_sandboxed(code, SandboxSettings(cpu_seconds=2, wall_seconds=20, memory_mb=256))
    assert run.jail_error is not None and "forged line" in run.jail_error  # the program's stderr was quoted
    records = [r for r in caplog.records if r.getMessage().startswith("python sandbox:")]
    assert len(records) == 1
    message = records[0].getMessage()
    assert "\n" not in message and "\r" not in message and "\x1b" not in message and "\x07" not in message
    assert len(message) <= 450 and "\\x1b" in message
