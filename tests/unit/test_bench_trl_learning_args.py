"""bench/bench_trl_learning.py refuses to start without the `bench` extra, and says how to install it."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest


def _bench():
    path = Path(__file__).resolve().parents[2] / "bench" / "bench_trl_learning.py"
    spec = importlib.util.spec_from_file_location("bench_trl_learning_under_test", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("absent", [("trl",), ("datasets",), ("trl", "datasets")])
def test_a_missing_bench_extra_stops_before_any_work_with_the_install_command(absent, monkeypatch, capsys, tmp_path):
    bench = _bench()
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name in absent else real(name, *a))
    monkeypatch.setattr(bench.subprocess, "run", lambda *a, **k: pytest.fail("a phase started"))
    with pytest.raises(SystemExit) as exit_info:
        bench.main(["--budget-s", "1", "--workdir", str(tmp_path / "work")])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert f"{' and '.join(absent)} not installed: run `pip install -e '.[bench]'`" in err
    assert not (tmp_path / "work").exists()


def test_the_notes_name_the_judge_builtin_tasks_are_routed_to():
    assert _bench()._judge() == "correct"
