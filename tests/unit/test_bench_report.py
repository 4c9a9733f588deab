"""bench/run_all.py writes BENCHMARKS.md as tables only: each section its command, machine, date and baseline.

Covered: rendering a small results list (scalars, a dict of dicts, a run's own table, a failed run), carrying the
hand-written Learning section over, and that the checked-in BENCHMARKS.md is exactly the render of
bench/results.json. Not covered: running a benchmark (`make bench`).
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def run_all() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_run_all", ROOT / "bench" / "run_all.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve their module's names through sys.modules
    spec.loader.exec_module(module)
    return module


def _results() -> list[dict[str, object]]:
    return [
        {"bench": "codec", "command": "python bench/bench_codec.py 2000", "date": "2026-01-02", "machine": "2-core CPU",
         "seconds": 9.0, "n": 2000, "event": "PlannerAction", "avro_bytes_per_event": 2601, "load_avg_1m": 7.5},
        {"bench": "ab", "command": "python bench/bench_ab.py --runs 10", "date": "2026-01-03", "machine": "2-core CPU",
         "seed": 1, "false_promotion_rate_max": 0.01,
         "scenarios": {"equal": {"p_canary": 0.3, "promoted_better": 0.01, "groups_p50": 91},
                       "better": {"p_canary": 0.5, "promoted_better": 0.99, "groups_p50": 37},
                       "worse": {"p_canary": 0.1, "promoted_better": 0.0, "groups_p50": 33}}},
        {"bench": "mcp", "command": "python bench/bench_mcp.py", "date": "2026-01-04", "machine": "2-core CPU",
         "calls": 200, "tool_call_ms": {"calculator": 0.04}, "table": "| call | median ms |\n|---|---|\n| x | 1.49 |",
         "notes": "Measured while the moon was full."},
        {"bench": "broker", "command": "python bench/bench_broker.py 20000", "date": "2026-01-05",
         "machine": "2-core CPU", "error": "Traceback: boom"},
    ]


def test_each_section_names_command_machine_date_and_baseline(run_all: ModuleType) -> None:
    text = run_all.render(_results())
    for r in _results():
        title = run_all.BENCHES[r["bench"]].title
        header = text.split(f"## {title}\n", 1)[1].splitlines()[0]
        assert f"`{r['command']}`" in header and str(r["machine"]) in header and str(r["date"]) in header
        assert "baseline: " + run_all.BENCHES[r["bench"]].baseline in header


def test_figures_are_tables_and_prose_or_run_noise_is_left_out(run_all: ModuleType) -> None:
    text = run_all.render(_results())
    assert "| avro_bytes_per_event | 2601 |" in text
    assert "Settings: n 2000, event PlannerAction" in text  # words and declared settings, not figures
    assert "| scenarios | p_canary | promoted_better | groups_p50 |" in text and "| better | 0.5 | 0.99 | 37 |" in text
    assert "| x | 1.49 |" in text and "Settings: calls 200" in text
    assert "moon" not in text and "load_avg" not in text and "seconds" not in text
    assert "**Failed in this run:**" in text and "Traceback: boom" in text


def test_the_learning_section_is_carried_over_or_a_placeholder(run_all: ModuleType) -> None:
    fresh = run_all.render(_results())
    assert fresh.rstrip().endswith("## Learning\n\n" + run_all.HAND_PLACEHOLDER)
    written = fresh.replace(run_all.HAND_PLACEHOLDER, "Held-out 0.085 -> 0.2 (`make learn`).\n\n| a | b |\n|---|---|")
    kept = run_all.hand_section(written)
    assert "Held-out 0.085 -> 0.2" in kept and "| a | b |" in kept
    assert run_all.render(_results(), kept) == written


def test_write_keeps_the_learning_section_of_the_file(run_all: ModuleType, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(run_all, "ROOT", tmp_path)
    (tmp_path / "BENCHMARKS.md").write_text("# old\n\n## Avro codec vs JSON\nold prose\n\n## Learning\n\nours\n")
    run_all.write(_results())
    text = (tmp_path / "BENCHMARKS.md").read_text()
    assert "old prose" not in text and text.rstrip().endswith("## Learning\n\nours")


def test_checked_in_benchmarks_md_is_the_render_of_results_json(run_all: ModuleType) -> None:
    results = json.loads((ROOT / "bench" / "results.json").read_text())
    current = (ROOT / "BENCHMARKS.md").read_text()
    assert run_all.render(results, run_all.hand_section(current)) == current, "run `python bench/run_all.py --render`"
    assert {r["bench"] for r in results} <= set(run_all.BENCHES)
    assert all(r.get("date") and r.get("machine") and r.get("command") for r in results)
    generated = current.split("\n## Learning", 1)[0]
    assert len(generated.splitlines()) <= 270, "BENCHMARKS.md should stay about one screen per benchmark"
