"""bench/run_all.py writes BENCHMARKS.md as tables only: each section its command, machine, date and baseline.

Covered: rendering a small results list (scalars, a dict of dicts, a run's own table, a failed run), a benchmark's
headline rows in BENCHMARKS.md with its full section on docs/benchmarks/<name>.md, carrying the hand-written
Learning section over, and that the checked-in BENCHMARKS.md and detail pages are exactly the render of
bench/results.json: under 250 lines, every table well-formed, every relative link resolving. Not covered: running
a benchmark (`make bench`).
"""

from __future__ import annotations

import importlib.util
import json
import re
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
    ab = run_all.render_detail(_results()[1])  # the whole dict of dicts on the A/B test's page
    assert "| scenarios | p_canary | promoted_better | groups_p50 |" in ab and "| better | 0.5 | 0.99 | 37 |" in ab
    assert "| x | 1.49 |" in text and "Settings: calls 200" in text
    assert "moon" not in text and "load_avg" not in text and "seconds" not in text
    assert "**Failed in this run:**" in text and "Traceback: boom" in text


def test_benchmarks_md_shows_the_headline_rows_and_links_the_full_section(run_all: ModuleType) -> None:
    """A bench with ``rows``: only those rows of its table (or, a pivot the other way round, those columns), the
    rest on its detail page, linked from the header; ``rows=()`` leaves its tables and their prose out."""
    step = {"bench": "trainer_step", "command": "python bench/bench_trainer_step.py", "date": "2026-01-06",
            "machine": "2-core CPU", "steps": 3,
            "table": "| | before | now |\n|---|---|---|\n| s per step (median) | 24.6 | 15.2 |\n"
                     "| step-1 grad norm | 0.23 | 0.24 |\n| peak RSS MB | 8114 | 5667 |"}
    math = {"bench": "math_agreement", "command": "python bench/bench_math_agreement.py", "date": "2026-01-07",
            "machine": "2-core CPU", "v1_right": 72,
            "table": "Rows where any column differs:\n\n| kind | answer |\n|---|---|\n| table | `3 \\| 4` |"}
    failed = {"bench": "rollout", "command": "python bench/bench_rollout.py", "date": "2026-01-08",
              "machine": "2-core CPU", "error": "Traceback: out of memory"}
    results = [*_results(), step, math, failed]
    text = run_all.render(results)
    pages = run_all.details(results)
    assert set(pages) == {f"docs/benchmarks/{name}.md" for name in ("ab", "trainer_step", "math_agreement")}
    for name in ("ab", "trainer_step", "math_agreement"):
        header = text.split(f"## {run_all.BENCHES[name].title}\n", 1)[1].splitlines()[0]
        assert header.endswith(f" · full tables: [docs/benchmarks/{name}.md](docs/benchmarks/{name}.md)"), header
    assert "| s per step (median) | 24.6 | 15.2 |" in text and "| peak RSS MB | 8114 | 5667 |" in text
    assert "grad norm" not in text and "| step-1 grad norm | 0.23 | 0.24 |" in pages["docs/benchmarks/trainer_step.md"]
    assert "| scenarios | promoted_better |\n|---|---|\n| equal | 0.01 |\n| better | 0.99 |" in text  # columns cut
    assert "groups_p50" not in text and "p_canary" not in text
    assert "Rows where any column differs" not in text and "`3 \\| 4`" not in text and "v1_right 72" in text
    assert "Rows where any column differs:\n\n| kind | answer |" in pages["docs/benchmarks/math_agreement.md"]
    rollout = text.split(f"## {run_all.BENCHES['rollout'].title}\n", 1)[1]
    assert "full tables" not in rollout.splitlines()[0] and "out of memory" in rollout  # failed: no page, no link
    assert "docs/benchmarks/rollout.md" not in pages
    page = pages["docs/benchmarks/trainer_step.md"]
    assert page.startswith(run_all.DETAIL_MARK + "\n# " + run_all.BENCHES["trainer_step"].title + "\n")
    assert "`python bench/bench_trainer_step.py` · 2-core CPU · 2026-01-06 · baseline: fp32_before" in page


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
    (tmp_path / "docs" / "benchmarks").mkdir(parents=True)
    (tmp_path / "docs" / "benchmarks" / "gone.md").write_text(run_all.DETAIL_MARK + "\n# a bench no longer kept\n")
    (tmp_path / "docs" / "benchmarks" / "notes.md").write_text("# written by hand\n")
    run_all.write(_results())
    text = (tmp_path / "BENCHMARKS.md").read_text()
    assert "old prose" not in text and text.rstrip().endswith("## Learning\n\nours")
    pages = sorted(p.name for p in (tmp_path / "docs" / "benchmarks").iterdir())
    assert pages == ["ab.md", "notes.md"]  # the stale generated page is removed, a hand-written one kept
    assert (tmp_path / "docs" / "benchmarks" / "ab.md").read_text() == run_all.render_detail(_results()[1])


def test_checked_in_benchmarks_md_is_the_render_of_results_json(run_all: ModuleType) -> None:
    results = json.loads((ROOT / "bench" / "results.json").read_text())
    current = (ROOT / "BENCHMARKS.md").read_text()
    assert run_all.render(results, run_all.hand_section(current)) == current, "run `python bench/run_all.py --render`"
    assert {r["bench"] for r in results} <= set(run_all.BENCHES)
    assert all(r.get("date") and r.get("machine") and r.get("command") for r in results)
    pages = run_all.details(results)
    for rel, text in pages.items():
        assert (ROOT / rel).read_text() == text, f"{rel}: run `python bench/run_all.py --render`"
    generated = {p.relative_to(ROOT).as_posix() for p in (ROOT / run_all.DETAIL_DIR).glob("*.md")
                 if p.read_text().startswith(run_all.DETAIL_MARK)}
    assert generated == set(pages), "stale pages: run `python bench/run_all.py --render`"
    assert len(current.split("\n## Learning", 1)[0].splitlines()) <= 200, "the generated part: cut with Bench.rows"
    assert len(current.splitlines()) < 250, "BENCHMARKS.md stays under 250 lines (the Learning section included)"


def _tables(text: str) -> list[list[str]]:
    return [block.splitlines() for block in re.findall(r"(?:^\|.*\n?)+", text, flags=re.M)]


def test_the_checked_in_pages_render_their_tables_and_links() -> None:
    """Every table has as many cells in each row as in its header (GitHub shows a table only then); every
    relative link of BENCHMARKS.md and the detail pages names a file that exists."""
    files = [ROOT / "BENCHMARKS.md", *sorted((ROOT / "docs" / "benchmarks").glob("*.md"))]
    assert len(files) > 1
    for path in files:
        text = path.read_text()
        for table in _tables(text):
            widths = {len(re.split(r"(?<!\\)\|", line.strip())) for line in table}
            assert len(widths) == 1, f"{path.name}: a table with rows of different widths: {table[0]}"
        for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", text):
            assert (path.parent / target).exists(), f"{path.name} links {target}, which does not exist"
