"""Imported first by benchmarks that use the test suite's helpers: puts ``tests/`` on ``sys.path``
(``support.streams``, ``support.samples``)."""

from __future__ import annotations

import sys
from pathlib import Path

TESTS = str(Path(__file__).resolve().parents[1] / "tests")
if TESTS not in sys.path:
    sys.path.insert(0, TESTS)
