"""The in-loop evaluator takes only CPU time the loop leaves unused (``[evaluator] idle``, SCHED_IDLE by default).

Each case runs in a fresh interpreter: an unprivileged process cannot leave SCHED_IDLE, nor raise its niceness back.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

PROBE = """
import json, logging, os, sys
logging.basicConfig(level=logging.INFO, stream=sys.stderr)
from streamgrpo.evaluation.service import EvaluatorSettings, lower_priority
settings = EvaluatorSettings(**json.loads(sys.argv[1]))
applied = lower_priority(settings)
print(json.dumps({"applied": applied, "policy": os.sched_getscheduler(0), "nice": os.nice(0)}))
"""


def probe(settings: dict[str, object]) -> dict[str, object]:
    done = subprocess.run([sys.executable, "-c", PROBE, json.dumps(settings)], capture_output=True, text=True,
                          timeout=60, check=True)
    return dict(json.loads(done.stdout))


@pytest.mark.skipif(not hasattr(os, "SCHED_IDLE"), reason="SCHED_IDLE is Linux's")
def test_the_default_evaluator_runs_under_sched_idle() -> None:
    base = os.nice(0)
    got = probe({})
    assert got["policy"] == os.SCHED_IDLE, got
    assert got["nice"] == min(19, base + 10)
    assert str(got["applied"]).startswith("SCHED_IDLE")


def test_idle_false_keeps_the_normal_policy_at_its_niceness() -> None:
    base = os.nice(0)
    got = probe({"idle": False, "nice": 5})
    assert got["policy"] == os.sched_getscheduler(0)
    assert got["nice"] == min(19, base + 5)
    assert got["applied"] == f"nice {min(19, base + 5)}"
