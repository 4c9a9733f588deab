"""The liveness heartbeat file: written when configured, rate-limited, never raising."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from streamgrpo import heartbeat
from streamgrpo.heartbeat import Heartbeat


def test_beat_writes_the_file_and_is_rate_limited(tmp_path: Path) -> None:
    hb = Heartbeat(tmp_path / "run" / "hb", min_interval_s=3600)
    assert hb.beat() is True  # creates the folder and the file
    assert f"pid={os.getpid()}" in (tmp_path / "run" / "hb").read_text()
    os.utime(hb.path, (0, 0))
    assert hb.beat() is False and os.path.getmtime(hb.path) == 0  # within the interval: not rewritten
    fast = Heartbeat(hb.path, min_interval_s=0)
    assert fast.beat() is True and os.path.getmtime(hb.path) > 0


def test_unwritable_path_warns_once_and_never_raises(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    hb = Heartbeat(blocker / "hb", min_interval_s=0)  # its folder would be a regular file
    with caplog.at_level(logging.WARNING, logger="streamgrpo.heartbeat"):
        assert [hb.beat() for _ in range(3)] == [False, False, False]
    assert len([r for r in caplog.records if "heartbeat" in r.getMessage()]) == 1


def test_the_configured_heartbeat_is_an_explicit_object(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(heartbeat.ENV, raising=False)
    off = Heartbeat.configured()
    assert off.path is None and off.beat() is False
    monkeypatch.setenv(heartbeat.ENV, str(tmp_path / "hb"))
    on = Heartbeat.configured()
    assert on.beat() is True and (tmp_path / "hb").exists() and off.beat() is False  # each object keeps its path


def test_legacy_module_beat_follows_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(heartbeat.ENV, raising=False)
    assert heartbeat.beat() is False
    first, second = tmp_path / "one", tmp_path / "two"
    monkeypatch.setenv(heartbeat.ENV, str(first))
    assert heartbeat.beat() is True and first.exists()
    monkeypatch.setenv(heartbeat.ENV, str(second))
    assert heartbeat.beat() is True and second.exists()
