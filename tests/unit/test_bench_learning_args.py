"""bench/bench_learning.py's setting overrides: `--set SECTION.FIELD=VALUE` becomes the env variable the config reads."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from streamgrpo import config
from streamgrpo.rollout.config import RolloutConfig
from streamgrpo.trainer.config import TrainerConfig


def _bench():
    path = Path(__file__).resolve().parents[2] / "bench" / "bench_learning.py"
    spec = importlib.util.spec_from_file_location("bench_learning_under_test", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_a_set_setting_reaches_the_config_the_run_reads():
    env = _bench().setting_env({"rollout.planner_examples": "analysis", "trainer.lr": "5e-5"})
    assert env == {"STREAMGRPO_ROLLOUT__PLANNER_EXAMPLES": "analysis", "STREAMGRPO_TRAINER__LR": "5e-5"}
    assert config.load(RolloutConfig, "rollout", environ=env).planner_examples == "analysis"
    assert config.load(TrainerConfig, "trainer", environ=env).lr == 5e-5


@pytest.mark.parametrize("key", ["rollout", ".planner_examples", "rollout."])
def test_a_malformed_setting_is_refused_with_the_form_to_write(key):
    with pytest.raises(ValueError, match="SECTION.FIELD=VALUE"):
        _bench().setting_env({key: "x"})


def test_run_i_seeds_the_trainer_and_the_rollout_sampling_with_i_and_set_may_override_the_sampling_seed():
    bench = _bench()
    env = bench.run_env(3, {"rollout.planner_examples": "analysis"})
    assert config.load(RolloutConfig, "rollout", environ=env).sampling_seed == 3
    assert config.load(TrainerConfig, "trainer", environ=env).seed == 3
    override = bench.run_env(3, {"rollout.sampling_seed": "7"})
    assert config.load(RolloutConfig, "rollout", environ=override).sampling_seed == 7


def _summary(seed: int) -> dict[str, object]:
    acc = {"accuracy": 0.1, "ci_low": 0.0, "ci_high": 0.2}
    return {"seed": seed, "heldout_base": acc, "heldout_last": {**acc, "version": 3}, "heldout_gain": 0.0,
            "heldout_change": None, "reward_table": "| v1 |"}


def test_tasks_reaches_the_run_command_and_the_result_records_the_task_set(tmp_path):
    """`--tasks NAME` becomes `streamgrpo run --tasks NAME`; without it the command leaves run's default, and the
    result says which task set that default is."""
    bench = _bench()
    cmd = bench.run_command(tmp_path, 60, tasks="builtin:train-wide")
    assert cmd[cmd.index("run"):] == ["run", "--duration", "60", "--home", str(tmp_path), "--tasks", "builtin:train-wide"]
    assert "--tasks" not in bench.run_command(tmp_path, 60) and "--no-final-eval" in bench.run_command(tmp_path, 60, False)
    assert bench.aggregate([_summary(0)], 60, None, "builtin:train-wide")["tasks"] == "builtin:train-wide"
    assert bench.aggregate([_summary(0)], 60)["tasks"] == "builtin:train"


def test_an_unknown_task_set_is_refused_before_any_run():
    from streamgrpo.tasks.datasets import DatasetError

    bench = _bench()
    bench.check_tasks("builtin:train-wide")
    with pytest.raises(DatasetError, match="builtin:train-wide"):
        bench.check_tasks("builtin:train_wide")


@pytest.mark.parametrize("mode", [[], ["--aggregate", "0=report"], ["--plot-reports", "out.png", "report"]])
def test_a_set_without_a_value_is_refused_in_every_mode(mode, monkeypatch, capsys):
    """`--set` is parsed once for the run, `--aggregate` and `--plot-reports`: a malformed one stops each before
    any work, with the form to write."""
    bench = _bench()
    monkeypatch.setattr(sys, "argv", ["bench_learning.py", "--set", "trainer.lr", *mode])
    with pytest.raises(SystemExit) as exit_info:
        bench.cli()
    assert exit_info.value.code == 2
    assert "--set trainer.lr: write SECTION.FIELD=VALUE" in capsys.readouterr().err
