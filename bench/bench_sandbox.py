"""Python sandbox and calculator benchmark: the cost of the isolation per call, same run.

- ``jail``: one ``PythonSandbox`` call (bubblewrap jail, seccomp, limits, bootstrap) running
  ``print(2 + 2)``, wall time per call;
- ``bare_interpreter``: the baseline, a fresh ``python -I -c 'print(2 + 2)'`` subprocess of the same
  interpreter without any isolation (what a minimal "fresh process" sandbox costs);
- ``build``: building the tool (plan + the probe run that verifies every isolation), once per worker;
- ``calculator_helper`` vs ``calculator_in_process``: one ``347 * 29`` through the calculator's
  bounded helper process, and the same evaluation in-process (the price of the wall-clock bound).

Medians over ``--calls`` calls. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import time

from streamgrpo.rollout.tools.calculator import Calculator, calculate
from streamgrpo.rollout.tools.python_sandbox import PythonSandbox

CODE = "print(2 + 2)"


def _median_ms(fn, calls: int) -> float:
    times = []
    for _ in range(calls):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1000)
    return statistics.median(times)


def main(calls: int) -> dict[str, object]:
    t = time.perf_counter()
    tool = PythonSandbox()
    build_ms = (time.perf_counter() - t) * 1000
    assert tool.run({"code": CODE}).output.strip() == "4"
    python = tool.plan.python
    jail = _median_ms(lambda: tool.run({"code": CODE}), calls)
    bare = _median_ms(lambda: subprocess.run([python, "-I", "-c", CODE], capture_output=True, check=True), calls)
    calc = Calculator()
    calc.run({"expression": "1"})  # start the helper
    helper = _median_ms(lambda: calc.run({"expression": "347 * 29"}), calls * 10)
    local = _median_ms(lambda: calculate("347 * 29"), calls * 10)
    calc.bounded.close()
    return {
        "calls": calls, "sandbox_python": python, "build_ms": round(build_ms, 1),
        "jail_ms_per_call": round(jail, 1), "bare_interpreter_ms_per_call": round(bare, 1),
        "jail_overhead_ms_per_call": round(jail - bare, 1),
        "calculator_helper_ms_per_call": round(helper, 3), "calculator_in_process_ms_per_call": round(local, 3),
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=30)
    print(json.dumps(main(parser.parse_args().calls)))
