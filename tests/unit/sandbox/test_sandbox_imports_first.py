"""Every module of ``streamgrpo.sandbox`` imports as the first streamgrpo import of a fresh interpreter.

The sandbox sits below the agent's tools: ``rollout/tools/__init__.py`` imports the python tool, which imports
:mod:`streamgrpo.sandbox.runner`. A sandbox module that imported anything under ``streamgrpo.rollout.tools``
would run that ``__init__`` halfway through its own import and fail with "partially initialized module" --
a cycle that tests/unit/test_import_cycles.py cannot see (it has no edge to a package's ``__init__``).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SANDBOX = Path(__file__).resolve().parents[3] / "sandbox"
MODULES = sorted(p.stem for p in SANDBOX.glob("*.py") if p.stem != "__init__")


def test_the_sandbox_has_its_modules() -> None:
    assert {"jail", "runner", "seccomp", "_sandbox_child", "config", "errors"} <= set(MODULES)


@pytest.mark.parametrize("module", MODULES)
def test_a_sandbox_module_imports_first_in_a_fresh_interpreter(module: str) -> None:
    out = subprocess.run([sys.executable, "-c", f"import streamgrpo.sandbox.{module}"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
