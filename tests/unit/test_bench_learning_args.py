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
