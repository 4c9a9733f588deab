"""The `streamgrpo trainer` command and TrainerConfig: complete --help, layering, validation."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from streamgrpo.config import load
from streamgrpo.errors import ConfigError
from streamgrpo.trainer.cli import trainer
from streamgrpo.trainer.config import TrainerConfig


def test_help_documents_every_config_field():
    result = CliRunner().invoke(trainer, ["--help"], terminal_width=200)
    assert result.exit_code == 0
    for name, info in TrainerConfig.model_fields.items():
        if name in TrainerConfig.SHARED_FIELDS:  # [loop] settings: no trainer-only override
            assert f"--{name.replace('_', '-')}" not in result.output and name in result.output
            continue
        assert f"--{name.replace('_', '-')}" in result.output
        assert info.description and info.description.split()[0] in result.output


def test_layering_env_toml_and_options(tmp_path):
    toml = tmp_path / "s.toml"
    toml.write_text('[loop]\nsamples_per_step = 3\n[trainer]\nlora_rank = 4\nloss = "gspo"\n')
    cfg = load(TrainerConfig, "trainer", path=toml, environ={"STREAMGRPO_LOOP__SAMPLES_PER_STEP": "5"},
               overrides={"loss": "grpo", "lr": None})
    assert (cfg.lora_rank, cfg.loss, cfg.samples_per_step, cfg.lr) == (4, "grpo", 5, TrainerConfig().lr)
    assert cfg.group_id == "trainer.planner.default"


@pytest.mark.parametrize("bad", [{"loss": "ppo"}, {"kl_estimator": "k9"}, {"lr_schedule": "step"},
                                 {"normalisation": "sum"}, {"samples_per_step": 0}, {"typo_field": 1}])
def test_bad_settings_fail_with_the_field_name(bad):
    with pytest.raises(ConfigError, match=next(iter(bad))):
        load(TrainerConfig, "trainer", environ={}, overrides=bad)


def test_cli_rejects_bad_option_before_loading_anything():
    result = CliRunner().invoke(trainer, ["--loss", "nope", "--bootstrap", "127.0.0.1:1"], obj={})
    assert result.exit_code != 0
    assert "loss" in str(result.exception)


def test_raft_warm_start_phase_then_the_configured_loss():
    from streamgrpo.trainer.config import TrainerConfig

    cfg = TrainerConfig(base_model="unused", loss="grpo", raft_warmup_steps=2)
    assert [cfg.objective_at(s) for s in range(4)] == ["raft", "raft", "grpo", "grpo"]
    assert TrainerConfig(base_model="unused").objective_at(0) == "grpo"
