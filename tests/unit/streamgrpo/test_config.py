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


def test_an_unknown_toml_section_is_an_error_naming_the_valid_ones(tmp_path) -> None:
    toml = tmp_path / "s.toml"
    toml.write_text('[kafka]\nbootstrap = "h:1"\n[trainr]\nlr = 0.1\n')
    with pytest.raises(ConfigError, match=r"unknown section\(s\) \[trainr\]; the sections are \[kafka\], \[broker\]"):
        config.load(KafkaSettings, "kafka", path=toml, environ={})


@pytest.mark.parametrize("name", ["STREAMGRPO_TRAINR__LR", "STREAMGRPO_TRAINER_LR", "STREAMGRPO_BOOTSTRAPS",
                                  "STREAMGRPO_TOOLS__MAX_OUTPUT_CHARS"])
def test_a_misspelt_environment_variable_is_an_error_naming_the_valid_forms(name) -> None:
    with pytest.raises(ConfigError, match=rf"unknown environment variable\(s\) {name}:.*TRAINER.*STREAMGRPO_HOME"):
        config.load(KafkaSettings, "kafka", environ={name: "1"})


def test_known_names_and_the_test_harness_prefix_pass() -> None:
    env = {"STREAMGRPO_CONFIG": "", "STREAMGRPO_LOG_LEVEL": "INFO", "STREAMGRPO_HEARTBEAT_FILE": "/tmp/x",
           "STREAMGRPO_SUPERVISOR_PID": "1",
           "STREAMGRPO_HOME": "/tmp/h", "STREAMGRPO_TEST_BOOTSTRAP": "h:1", "STREAMGRPO_JUDGE__LLM__API_KEY": "k",
           "OTHER": "x"}
    assert config.load(KafkaSettings, "kafka", environ=env).bootstrap is None


def test_one_home_variable_places_every_default_path(tmp_path) -> None:
    from streamgrpo.rollout.config import RolloutConfig
    from streamgrpo.streams.config import StreamsSettings
    from streamgrpo.trainer.config import TrainerConfig

    env = {"STREAMGRPO_HOME": str(tmp_path)}
    trainer = config.load(TrainerConfig, "trainer", environ=env)
    rollout = config.load(RolloutConfig, "rollout", environ=env)
    streams = config.load(StreamsSettings, "streams", environ=env)
    broker = config.load(BrokerSettings, "broker", environ=env)
    assert trainer.adapter_store == rollout.adapter_store == tmp_path / "adapters"
    assert trainer.model_cache == rollout.model_cache == tmp_path / "models"
    assert (streams.data_dir, streams.archive_dir, broker.home) == (tmp_path / "streams", tmp_path / "archive", tmp_path)
    # an explicit path beats the home; and the broker home is the shared one, not a broker setting
    pinned = config.load(TrainerConfig, "trainer", environ={**env, "STREAMGRPO_LOOP__ADAPTER_STORE": "/srv/a"})
    assert pinned.adapter_store.as_posix() == "/srv/a" and pinned.model_cache == tmp_path / "models"
    with pytest.raises(ConfigError, match=r"broker\.home: shared"):
        config.load(BrokerSettings, "broker", environ={"STREAMGRPO_BROKER__HOME": str(tmp_path)})


def test_paths_and_turns_are_one_setting_for_every_service(tmp_path) -> None:
    from streamgrpo.rollout.config import RolloutConfig
    from streamgrpo.streams.config import StreamsSettings
    from streamgrpo.trainer.config import TrainerConfig

    toml = tmp_path / "s.toml"
    toml.write_text('[loop]\nmax_turns = 6\ncanary_share = 0.25\nadapter_name = "p2"\n')
    rollout = config.load(RolloutConfig, "rollout", path=toml, environ={})
    streams = config.load(StreamsSettings, "streams", path=toml, environ={})
    trainer = config.load(TrainerConfig, "trainer", path=toml, environ={})
    assert (rollout.max_turns, rollout.canary_share, rollout.adapter_name) == (6, 0.25, "p2")
    assert (streams.max_turns, streams.canary_share, streams.adapter_name, trainer.adapter_name) == (6, 0.25, "p2", "p2")
    for model, section, key in ((RolloutConfig, "rollout", "adapter_store"), (RolloutConfig, "rollout", "max_turns"),
                                (TrainerConfig, "trainer", "model_cache"), (StreamsSettings, "streams", "canary_share")):
        toml.write_text(f"[{section}]\n{key} = 1\n")
        with pytest.raises(ConfigError, match=rf"{section}\.{key}: shared by several services"):
            config.load(model, section, path=toml, environ={})
    toml.write_text("[loop]\nmax_staleness = -1\n")
    with pytest.raises(ConfigError, match=r"loop\.max_staleness"):
        config.load(TrainerConfig, "trainer", path=toml, environ={})


@pytest.mark.parametrize(
    ("content", "fragment"),
    [(bytes(range(256)) * 4, "not UTF-8"),  # issue 24, finding 12: a raw UnicodeDecodeError
     (b"x = " + b"[" * 5000 + b"]" * 5000, "nested too deep"),  # a raw RecursionError
     (b"x = " + b"{a = " * 5000 + b"1" + b"}" * 5000, "nested too deep")],
    ids=["binary", "deep-arrays", "deep-tables"],
)
def test_a_binary_or_deeply_nested_toml_is_a_config_error(tmp_path, content: bytes, fragment: str) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_bytes(content)
    with pytest.raises(ConfigError, match=fragment):
        config.load(KafkaSettings, "kafka", path=bad, environ={})


@pytest.mark.parametrize("env", [{"STREAMGRPO_HOME": ""}, {"STREAMGRPO_HOME": "  "}, {"STREAMGRPO_LOOP__HOME": ""}])
def test_an_empty_home_is_an_error_not_the_current_directory(env: dict[str, str]) -> None:
    # issue 24, finding 12: STREAMGRPO_HOME= put the store in the current directory
    with pytest.raises(ConfigError, match="loop.home: .*empty"):
        config.load(config.LoopSettings, "loop", environ=env)
