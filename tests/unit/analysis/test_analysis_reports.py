"""Views and canned reports on a synthetic archive: the SQL agrees with the Python figures and with hand counts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from support import figures
from support.history import build

from streamgrpo.analysis.cli import analyse
from streamgrpo.analysis.docs import render
from streamgrpo.analysis.reports import REPORTS, Result, run_report
from streamgrpo.analysis.views import VIEWS, connect
from streamgrpo.archive.store import ArchiveWriter
from streamgrpo.avro import records as R

PARAMS = {"adapter": "planner", "threshold": 0.5, "limit": 10, "version": 1}
DOCS = Path(__file__).resolve().parents[3] / "docs" / "analysis.md"


@pytest.fixture(scope="module")
def archive(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, figures.Log]:
    root = tmp_path_factory.mktemp("archive")
    log, rescored = build()
    main, ns = ArchiveWriter(root), ArchiveWriter(root, namespace="replay.rj.")
    main.add_all(log.records)
    ns.add_all(rescored)
    main.flush()
    ns.flush()
    by_topic: figures.Log = {}
    for e, p in log.records:
        by_topic.setdefault(p.topic, []).append((e, p.partition, p.offset))
    return root, by_topic


def report(root: Path, name: str) -> Result:
    con = connect(root)
    try:
        return run_report(con, name, PARAMS)
    finally:
        con.close()


def test_reward_by_version(archive: tuple[Path, figures.Log]) -> None:
    root, log = archive
    rows = {r["version"]: r for r in report(root, "reward-by-version").records()}
    want = figures.reward_by_version(log, "planner", 0.5)
    assert set(rows) == set(want) == {0, 1}
    for v, w in want.items():
        got = rows[v]
        assert (got["rollouts"], got["rewards"], got["eval_accuracy"]) == (w["rollouts"], w["rewards"], w["eval_accuracy"])
        assert got["reward_mean"] == pytest.approx(w["reward_mean"]) and got["success_rate"] == pytest.approx(w["success_rate"])
    assert (rows[0]["rollouts"], rows[0]["reward_mean"], rows[1]["success_rate"]) == (4, 0.75, 0.5)  # by hand
    assert rows[1]["samples_trained"] == 3 and rows[1]["published_at"] is not None


def test_tool_usage_turns_parse_failures(archive: tuple[Path, figures.Log]) -> None:
    root, log = archive
    tools = {(r["tool"], r["outcome"]): (r["calls"], r["rollouts"], r["tool_errors"])
             for r in report(root, "tool-usage").records()}
    assert tools == figures.tool_usage(log, "planner", 0.5)
    assert tools[("calculator", "failure")] == (2, 1, 1) and tools[("search", "success")] == (2, 1, 0)
    turns = {r["turns"]: (r["rollouts"], r["successes"], r["max_turns"]) for r in report(root, "turns").records()}
    assert turns == figures.turns(log, "planner", 0.5) == {1: (4, 3, 0), 2: (1, 0, 0), 3: (1, 1, 1)}
    parse = {r["adapter_version"]: (r["actions"], r["failed"], r["repaired"])
             for r in report(root, "parse-failures").records()}
    assert parse == figures.parse_failures(log, "planner") == {0: (7, 1, 1), 1: (2, 0, 0)}


def test_false_stops_and_answers_without_tools(archive: tuple[Path, figures.Log]) -> None:
    root, log = archive
    stops = {r["adapter_version"]: (r["stopped"], r["false_stops"]) for r in report(root, "false-stops").records()}
    assert stops == figures.false_stops(log, "planner", 0.5) == {0: (3, 1), 1: (1, 0)}
    rows = {r["adapter_version"]: (r["answered"], r["without_tools"]) for r in report(root, "no-tool-answers").records()}
    assert rows == figures.no_tool_answers(log, "planner", 0.5) == {0: (3, 1), 1: (1, 1)}


def test_judge_disagreement_staleness_slowest_groups(archive: tuple[Path, figures.Log]) -> None:
    root, log = archive
    (pair,) = report(root, "judge-disagreement").records()
    assert (pair["namespace_a"], pair["judge_a"], pair["namespace_b"], pair["judge_b"], pair["rollouts"]) == \
        ("", "math", "replay.rj.", "qa", 4)
    assert pair["mean_abs_diff"] == pytest.approx(0.25) and pair["success_agreement"] == pytest.approx(0.75)
    stale = {r["staleness"]: (r["trained"], r["dropped_stale"]) for r in report(root, "staleness").records()}
    assert stale == figures.staleness(log, "planner") == {0: (3, 0)}
    walls = figures.group_wall_s(log)
    rows = report(root, "slowest-groups").records()
    assert [r["group_id"] for r in rows] == sorted(walls, key=lambda g: -walls[g])
    assert [r["wall_s"] for r in rows] == pytest.approx(sorted(walls.values(), reverse=True)) == [19.0, 6.0]


def test_lineage_lists_exactly_what_trained_v1(archive: tuple[Path, figures.Log]) -> None:
    root, log = archive
    rows = report(root, "lineage").records()
    trained = {sid for sid, reason in figures.lineage(log, "planner")[1].items() if reason is None}
    assert {r["sample_id"] for r in rows} == trained and len(rows) == 3  # the dead-lettered one is not listed
    published = next(e for e, _, _ in log["adapter-events"] if isinstance(e, R.AdapterPublished))
    assert len(rows) == published.metrics["rollouts"]
    con = connect(root)
    try:
        reasons = con.execute("SELECT drop_reason, count(*) FROM sample_lineage GROUP BY 1 ORDER BY 1").fetchall()
        traj = con.execute("SELECT count(*), count(sample_id), count(trained_version) FROM trajectories").fetchall()
    finally:
        con.close()
    assert reasons == [("trainer_malformed", 1), (None, 3)]
    assert traj == [(6, 4, 3)]


def test_every_report_runs_and_every_view_column_is_documented(archive: tuple[Path, figures.Log],
                                                               tmp_path: Path) -> None:
    root, _ = archive
    for name, r in REPORTS.items():
        result = report(root, name)
        assert result.columns, name
        if r.plot is not None:
            r.plot(result, tmp_path / f"{name}.png")
            assert (tmp_path / f"{name}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    con = connect(root)
    try:
        for v in VIEWS:
            cols = [d[0] for d in con.execute(f"SELECT * FROM {v.name} LIMIT 0").description]
            assert cols == list(v.columns), v.name
    finally:
        con.close()
    assert DOCS.read_text() == render(), "docs/analysis.md is stale: python -m streamgrpo.analysis.docs > docs/analysis.md"


def test_cli_formats_plot_describe_and_shell(archive: tuple[Path, figures.Log], tmp_path: Path) -> None:
    root, _ = archive
    run = CliRunner().invoke
    out = run(analyse, ["--archive-dir", str(root), "--report", "turns", "--format", "json", "--plot",
                        str(tmp_path / "t.png")], obj={})
    assert out.exit_code == 0, out.output
    assert [json.loads(line)["turns"] for line in out.output.splitlines() if line.startswith("{")] == [1, 2, 3]
    assert (tmp_path / "t.png").exists()
    out = run(analyse, ["--archive-dir", str(root), "--format", "csv", "SELECT count(*) AS n FROM trajectory_steps"],
              obj={})
    assert out.exit_code == 0 and out.output.splitlines() == ["n", "9"], out.output
    out = run(analyse, ["--archive-dir", str(root), "--describe", "trajectories"], obj={})
    assert out.exit_code == 0 and "trained_version" in out.output and "Adapter version the sample trained" in out.output
    out = run(analyse, ["--archive-dir", str(root), "--report", "lineage"], obj={})
    assert out.exit_code != 0 and "needs --version" in str(out.exception or out.output)
    out = run(analyse, ["--archive-dir", str(root), "--shell"], obj={},
              input="SELECT count(*) AS n\nFROM rollouts;\n.report adapters\n.describe nope\n.quit\n")
    assert out.exit_code == 0, out.output
    assert "n\n-\n6" in out.output and "samples_trained" in out.output and "no view 'nope'" in out.output
