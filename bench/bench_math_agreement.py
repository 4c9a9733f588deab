"""Agreement of the math judge before (v1: own LaTeX converter + probe points) and after (v2: math-verify)
on the judge's case table (tests/unit/judge/test_judge_cases.py: the 47 cases, the hostile inputs and
the documented overrides), with math-verify alone (its defaults: ``verify(parse("$truth$"),
parse(answer))``) as a third column. v1 is read from git at ``V1_COMMIT`` (the last commit that had it).
Also times one check of each implementation (median over the table, warm). Prints one JSON line.
"""

from __future__ import annotations

import importlib.util
import json
import statistics
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
V1_COMMIT = "55f9357"


def _load_v1() -> types.ModuleType:
    """judge/scorers/{mathparse,math}.py at V1_COMMIT, imported as a private module pair."""
    tmp = Path(tempfile.mkdtemp(prefix="math_v1_"))
    for name in ("mathparse", "math"):
        src = subprocess.run(["git", "show", f"{V1_COMMIT}:judge/scorers/{name}.py"], cwd=ROOT, check=True,
                             capture_output=True, text=True).stdout
        src = src.replace("streamgrpo.judge.scorers.mathparse", "math_v1_parse")
        (tmp / f"math_v1_{'parse' if name == 'mathparse' else 'judge'}.py").write_text(src)
    sys.path.insert(0, str(tmp))
    return importlib.import_module("math_v1_judge")


def _cases() -> list[tuple[str, str, bool | None, str]]:
    spec = importlib.util.spec_from_file_location("cases", ROOT / "tests/unit/judge/test_judge_cases.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    rows = [(a, t, e, "table") for a, t, e in mod.MATH_CASES]
    for fn, kind in ((mod.test_math_hostile_inputs_are_refused_or_bounded, "hostile"),
                     (mod.test_math_more_hostile_inputs_are_bounded, "hostile+")):
        rows += [(h, "7", False, kind) for h in fn.pytestmark[0].args[1]]
    rows += [(a, t, e, "override") for a, t, e in mod.test_math_documented_overrides.pytestmark[0].args[1]]
    return rows


def _mv_alone(answer: str, truth: str) -> bool:
    from math_verify import parse, verify

    return bool(verify(parse(f"${truth}$"), parse(answer)))


def _short(text: str) -> str:
    text = text if len(text) <= 28 else text[:25] + "..."
    return "`" + text.replace("|", "\\|").replace("`", "'") + "`"


def main() -> dict[str, object]:
    from streamgrpo.judge.scorers.math import math_equal

    v1 = _load_v1()
    rows, t_v1, t_v2 = [], [], []
    for answer, truth, expected, kind in _cases():
        t = time.perf_counter()
        old = bool(v1.math_equal(answer, [truth]))
        t_v1.append(time.perf_counter() - t)
        t = time.perf_counter()
        new = bool(math_equal(answer, [truth]))
        t_v2.append(time.perf_counter() - t)
        alone = _mv_alone(answer, truth) if kind in ("table", "override") else None  # hostile: unbounded
        rows.append((answer, truth, expected, kind, old, alone, new))
    n = len(rows)
    lines = ["| kind | answer | truth | expected | v1 | math-verify alone | v2 |", "|---|---|---|---|---|---|---|"]
    for a, t, e, k, old, alone, new in rows:
        if not (old == new == e and alone in (None, e)):
            lines.append(f"| {k} | {_short(a)} | {_short(t)} | {e} | {old} | {alone} | {new} |")
    table = [r for r in rows if r[3] == "table"]
    return {
        "bench": "math_agreement",
        "cases": n,
        "v1_agrees_with_v2": sum(r[4] == r[6] for r in rows),
        "v1_right": sum(r[4] == r[2] for r in rows),
        "v2_right": sum(r[6] == r[2] for r in rows),
        "table47_v1_right": sum(r[4] == r[2] for r in table),
        "table47_v2_right": sum(r[6] == r[2] for r in table),
        "table47_math_verify_alone_right": sum(r[5] == r[2] for r in table),
        "median_check_ms_v1": statistics.median(t_v1) * 1e3,
        "median_check_ms_v2": statistics.median(t_v2) * 1e3,
        "table": "Rows where any column differs from `expected` (all others agree):\n\n" + "\n".join(lines),
    }


if __name__ == "__main__":
    print(json.dumps(main()))
