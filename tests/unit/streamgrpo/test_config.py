from __future__ import annotations

import pytest

from streamgrpo import config
from streamgrpo.config import BrokerSettings, KafkaSettings
from streamgrpo.errors import ConfigError
from streamgrpo.log import redact, register_secret


def test_layers_defaults_toml_env_cli(tmp_path) -> None:
    toml = tmp_path / "s.toml"
    toml.write_text('[kafka]\nbootstrap = "toml:1"\nclient_id = "from-toml"\ntopic_prefix = "p."\n')
    env = {"STREAMGRPO_KAFKA__BOOTSTRAP": "env:2", "STREAMGRPO_KAFKA__CLIENT_ID": "from-env"}
    k = config.load(KafkaSettings, "kafka", path=toml, environ=env, overrides={"client_id": "from-cli", "bootstrap": None})
    assert k.bootstrap == "env:2"  # env beats TOML; a None CLI value does not override
    assert k.client_id == "from-cli"
    assert k.topic_prefix == "p."
    assert k.security_protocol == "PLAINTEXT"  # default


def test_short_alias_env() -> None:
    k = config.load(KafkaSettings, "kafka", environ={"STREAMGRPO_BOOTSTRAP": "h:9"})
    assert k.bootstrap == "h:9"


def test_unknown_key_and_bad_value_name_the_setting(tmp_path) -> None:
    toml = tmp_path / "s.toml"
    toml.write_text("[broker]\nprot = 1\n")
    with pytest.raises(ConfigError, match=r"broker\.prot"):
        config.load(BrokerSettings, "broker", path=toml, environ={})
    with pytest.raises(ConfigError, match=r"broker\.port"):
        config.load(BrokerSettings, "broker", environ={"STREAMGRPO_BROKER__PORT": "70000"})


def test_missing_or_invalid_toml_is_a_config_error(tmp_path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        config.load(KafkaSettings, "kafka", path=tmp_path / "nope.toml", environ={})
    bad = tmp_path / "bad.toml"
    bad.write_text("[kafka\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        config.load(KafkaSettings, "kafka", path=bad, environ={})


def test_secrets_are_not_printed() -> None:
    k = config.load(KafkaSettings, "kafka", environ={"STREAMGRPO_KAFKA__SASL_PASSWORD": "hunter2-secret"})
    assert "hunter2-secret" not in repr(k) and "hunter2-secret" not in str(k.model_dump())
    register_secret("hunter2-secret")
    assert redact("password=hunter2-secret") == "password=**********"


class _Inner(config.StrictModel):
    api_key: str | None = None
    model: str = "m"


class _Outer(config.StrictModel):
    name: str = "n"
    llm: _Inner = _Inner()


def test_nested_env_keys_deep_merge_over_toml(tmp_path) -> None:
    toml = tmp_path / "s.toml"
    toml.write_text('[judge]\nname = "t"\n[judge.llm]\nmodel = "from-toml"\n')
    out = config.load(_Outer, "judge", path=toml, environ={"STREAMGRPO_JUDGE__LLM__API_KEY": "k"})
    assert out.llm.api_key == "k" and out.llm.model == "from-toml" and out.name == "t"


def test_shared_loop_settings_reach_every_service_from_one_section(tmp_path) -> None:
    from streamgrpo.streams.config import StreamsSettings
    from streamgrpo.trainer.config import TrainerConfig

    toml = tmp_path / "s.toml"
    toml.write_text("[loop]\nmax_staleness = 3\nsamples_per_step = 12\n[trainer]\nlr = 0.001\n")
    trainer = config.load(TrainerConfig, "trainer", path=toml, environ={})
    streams = config.load(StreamsSettings, "streams", path=toml, environ={"STREAMGRPO_LOOP__MAX_TURNS": "2"})
    assert (trainer.max_staleness, trainer.samples_per_step, trainer.lr) == (3, 12, 0.001)
    assert (streams.max_staleness, streams.samples_per_step, streams.max_turns) == (3, 12, 2)
    # one default, defined once
    assert TrainerConfig().max_staleness == StreamsSettings().max_staleness == config.LoopSettings().max_staleness


@pytest.mark.parametrize("where", ["toml", "env"])
def test_a_shared_setting_in_a_service_section_is_an_error(tmp_path, where) -> None:
    from streamgrpo.trainer.config import TrainerConfig

    toml = tmp_path / "s.toml"
    toml.write_text("[trainer]\nmax_staleness = 3\n" if where == "toml" else "[trainer]\n")
    env = {"STREAMGRPO_TRAINER__SAMPLES_PER_STEP": "4"} if where == "env" else {}
    with pytest.raises(ConfigError, match=r"\[loop\]"):
        config.load(TrainerConfig, "trainer", path=toml, environ=env)
