"""`streamgrpo run` writes one TOML for its children: every service loads it, and they share one store."""

from __future__ import annotations

from pathlib import Path

from streamgrpo import config
from streamgrpo.cli.run import RunSettings, _write_config
from streamgrpo.judge.config import JudgeSettings
from streamgrpo.rollout.config import RolloutConfig
from streamgrpo.streams.config import StreamsSettings
from streamgrpo.trainer.config import TrainerConfig


def run_settings(home: Path, config_path: str | None = None) -> RunSettings:
    return RunSettings(60, 2, home, "builtin:train", 4, None, None, config_path)


def test_every_service_loads_the_run_config_and_shares_the_store(tmp_path: Path) -> None:
    run_dir = tmp_path / "home" / "runs" / "r1"
    run_dir.mkdir(parents=True)
    path = _write_config(run_settings(tmp_path / "home"), run_dir)
    load = {m: config.load(m, s, path=path, environ={}) for m, s in (
        (TrainerConfig, "trainer"), (RolloutConfig, "rollout"), (StreamsSettings, "streams"), (JudgeSettings, "judge"))}
    trainer, rollout, streams = load[TrainerConfig], load[RolloutConfig], load[StreamsSettings]
    assert trainer.adapter_store == rollout.adapter_store == run_dir / "adapters"
    assert trainer.model_cache == rollout.model_cache == tmp_path / "home" / "models"
    assert (streams.data_dir, streams.archive_dir) == (run_dir / "streams", run_dir / "archive")
    assert trainer.run_name == "r1" and streams.max_groups_in_flight == 2 * rollout.concurrency


def test_the_users_loop_settings_win(tmp_path: Path) -> None:
    user = tmp_path / "user.toml"
    user.write_text('[loop]\nmodel_cache = "/srv/models"\nmax_turns = 6\n')
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    path = _write_config(run_settings(tmp_path, str(user)), run_dir)
    rollout = config.load(RolloutConfig, "rollout", path=path, environ={})
    assert rollout.model_cache == Path("/srv/models") and rollout.max_turns == 6
    assert rollout.adapter_store == run_dir / "adapters"


def test_admission_follows_the_concurrency_the_workers_will_run_env_included(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    environ = {"STREAMGRPO_ROLLOUT__CONCURRENCY": "3"}
    path = _write_config(run_settings(tmp_path), run_dir, environ=environ)
    rollout = config.load(RolloutConfig, "rollout", path=path, environ=environ)
    streams = config.load(StreamsSettings, "streams", path=path, environ=environ)
    assert rollout.concurrency == 3 and streams.max_groups_in_flight == 2 * 3


def test_the_run_records_the_archive_its_services_write(tmp_path: Path) -> None:
    """`status`, `tail`, `analyse` and `adapters` --run read a finished run's archive where its services wrote it:
    the run's default, a user's own [streams] archive_dir, or the environment's (they looked in <run dir>/archive)."""
    from streamgrpo import runs
    from streamgrpo.cli.run import archive_dir

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    assert archive_dir(_write_config(run_settings(tmp_path), run_dir), environ={}) == run_dir / "archive"
    user = tmp_path / "user.toml"
    user.write_text(f'[streams]\narchive_dir = "{tmp_path / "mine"}"\n')
    path = _write_config(run_settings(tmp_path, str(user)), run_dir)
    assert archive_dir(path, environ={}) == tmp_path / "mine"
    env = {"STREAMGRPO_STREAMS__ARCHIVE_DIR": str(tmp_path / "env")}
    assert archive_dir(path, environ=env) == tmp_path / "env"
    record = runs.RunRecord("r", "127.0.0.1:1", "", str(run_dir), 1, 0.0, archive_dir=str(tmp_path / "mine"))
    assert record.archive == tmp_path / "mine"
    assert runs.RunRecord("r", "127.0.0.1:1", "", str(run_dir), 1, 0.0).archive == run_dir / "archive"  # older records
