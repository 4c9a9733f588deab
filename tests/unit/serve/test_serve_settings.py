"""Issue 37, part 1: `streamgrpo serve`'s settings ([serve], the bearer token as a secret), its bounds on text
arguments, its token check, and where it serves from (serve.discovery.locate) with real run records, settings files
and processes; the broker probe is the one seam (`probe`), answered here without a broker."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import anyio
import pytest
from pydantic import SecretStr

from streamgrpo import runs
from streamgrpo.config import KafkaSettings, load
from streamgrpo.errors import ConfigError
from streamgrpo.serve.bounds import ArgumentTooLong, ServeLimits, check_argument, max_body_bytes
from streamgrpo.serve.config import ServeSettings
from streamgrpo.serve.discovery import locate
from streamgrpo.serve.server import StaticBearerToken

TOKEN = "a-long-enough-bearer-token-42"


@pytest.fixture(autouse=True)
def bare(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No STREAMGRPO_* settings but an empty home."""
    for key in list(os.environ):
        if key.startswith("STREAMGRPO_") and not key.startswith("STREAMGRPO_TEST_"):
            monkeypatch.delenv(key)
    home = tmp_path / "home"
    monkeypatch.setenv("STREAMGRPO_HOME", str(home))
    return home


def test_an_unknown_serve_key_is_an_error_naming_the_accepted_keys(tmp_path: Path) -> None:
    path = tmp_path / "s.toml"
    path.write_text('[serve]\nauth_tokn = "x"\n')
    with pytest.raises(ConfigError) as err:
        load(ServeSettings, "serve", path=path)
    assert "serve.auth_tokn" in str(err.value) and "the keys of [serve] are host, port, auth_token" in str(err.value)


def test_the_token_is_a_secret_from_the_environment_and_never_printed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STREAMGRPO_SERVE__AUTH_TOKEN", TOKEN)
    settings = load(ServeSettings, "serve")
    assert isinstance(settings.auth_token, SecretStr) and settings.auth_token.get_secret_value() == TOKEN
    assert TOKEN not in repr(settings) and TOKEN not in str(settings.model_dump())
    monkeypatch.setenv("STREAMGRPO_SERVE__AUTH_TOKEN", "short-secret")
    with pytest.raises(ConfigError) as err:
        load(ServeSettings, "serve")
    assert "at least 16 characters" in str(err.value) and "short-secret" not in str(err.value)


def test_the_defaults_bind_to_this_machine_without_a_token() -> None:
    settings = load(ServeSettings, "serve")
    assert (settings.host, settings.port, settings.auth_token) == ("127.0.0.1", 8765, None)
    assert settings.limits() == ServeLimits()


def test_the_bearer_check_lets_only_the_token_through_and_keeps_it_out_of_the_access_token() -> None:
    verifier = StaticBearerToken(SecretStr(TOKEN))

    async def check() -> list[object]:
        return [await verifier.verify_token(t) for t in (TOKEN, TOKEN[:-1], TOKEN + "x", "", TOKEN.upper(), "é")]

    ok, *refused = anyio.run(check)
    assert ok is not None and ok.client_id == "bearer" and TOKEN not in ok.model_dump_json()
    assert refused == [None] * 5


def test_text_arguments_are_bounded_and_the_body_limit_leaves_room_for_the_bounds() -> None:
    limits = ServeLimits(max_argument_bytes=64)
    check_argument("comment", "é" * 32, limits)  # 64 bytes
    with pytest.raises(ArgumentTooLong, match=r"`comment` is 66 bytes; this server accepts at most 64"):
        check_argument("comment", "é" * 33, limits)
    assert max_body_bytes(ServeLimits()) == 4 * 1024 * 1024  # the SDK's default: a 1 MB question gets our error
    assert max_body_bytes(ServeLimits(max_question_bytes=1_000_000)) > 6 * 1_000_000




def _run(home: Path, run_id: str, pid: int, *, bootstrap: str = "127.0.0.1:1", finished: bool = False,
         started: float | None = None) -> Path:
    from streamgrpo.cli.run import merge_run_defaults, to_toml

    run_dir = home / "runs" / run_id
    run_dir.mkdir(parents=True)
    (run_dir / "streamgrpo.toml").write_text(to_toml(merge_run_defaults({}, run_dir=run_dir, home=home)))
    runs.register(home, runs.RunRecord(run_id, bootstrap, f"{run_id}.", str(run_dir), pid,
                                       started or time.time(), finished_at=time.time() if finished else None))
    return run_dir


def test_alone_nothing_is_recorded_and_nothing_fails(bare: Path) -> None:
    where = locate(None, probe=lambda _: pytest.fail("no broker to probe"))
    assert where.kafka is None and where.run is None and where.adapter_store is None
    assert "no Kafka broker configured" in where.why_not_recorded and str(bare) in where.why_not_recorded
    assert locate(None, no_broker=True).why_not_recorded == "--no-broker"


def test_a_configured_broker_that_does_not_answer_is_not_an_error() -> None:
    where = locate(None, bootstrap="127.0.0.1:1", probe=lambda _: False)
    assert where.kafka is None and "the broker at 127.0.0.1:1 does not answer" in where.why_not_recorded


def test_an_unknown_run_is_an_error_naming_the_runs(bare: Path) -> None:
    with pytest.raises(ConfigError, match="no run 'nope'"):
        locate(None, "nope")


def test_the_latest_live_run_its_prefix_and_its_own_store(bare: Path, run_process: subprocess.Popen[bytes]) -> None:
    older = _run(bare, "20260101-100000", run_process.pid, bootstrap="127.0.0.1:9001", started=time.time() - 60)
    newest = _run(bare, "20260101-110000", run_process.pid, bootstrap="127.0.0.1:9002")
    probed: list[KafkaSettings] = []
    where = locate(None, probe=lambda k: probed.append(k) or True)
    assert where.run is not None and where.run.run_id == "20260101-110000"
    assert where.kafka is not None and (where.kafka.bootstrap, where.kafka.topic_prefix) == (
        "127.0.0.1:9002", "20260101-110000.")
    assert where.adapter_store == newest / "adapters" and where.config_path == str(newest / "streamgrpo.toml")
    assert where.why_not_recorded == "" and len(probed) == 1
    # --run picks another; a bootstrap naming a run's broker finds that run (its store), even without --run
    assert locate(None, "20260101-100000", probe=lambda _: True).adapter_store == older / "adapters"
    by_broker = locate(None, bootstrap="127.0.0.1:9001", probe=lambda _: True)
    assert by_broker.run is not None and by_broker.run.run_id == "20260101-100000"
    assert by_broker.kafka is not None and by_broker.kafka.topic_prefix == "20260101-100000."
    # the user's --config wins for [rollout]; the store is still the run's
    user = bare.parent / "mine.toml"
    user.write_text("[rollout]\nmax_new_tokens = 8\n")
    assert locate(str(user), probe=lambda _: True).config_path == str(user)


def test_a_finished_run_is_served_from_its_archive_and_store_unrecorded(bare: Path) -> None:
    run_dir = _run(bare, "20260101-090000", 1, finished=True)
    where = locate(None, "20260101-090000", probe=lambda _: pytest.fail("a finished run has no broker"))
    assert where.kafka is None and where.archive == run_dir / "archive"
    assert where.adapter_store == run_dir / "adapters" and "has finished" in where.why_not_recorded
    no_broker = locate(None, "20260101-090000", no_broker=True)
    assert no_broker.archive == run_dir / "archive" and no_broker.why_not_recorded == "--no-broker"
